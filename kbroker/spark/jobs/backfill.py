"""spark-submit entry point of the `backfill` job: `kbroker spark submit backfill --help`."""

from kbroker.spark.backfill import main

if __name__ == "__main__":
    raise SystemExit(main())
