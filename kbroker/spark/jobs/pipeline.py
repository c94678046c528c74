"""spark-submit entry point of the `pipeline` job: `kbroker spark submit pipeline --help`."""

from kbroker.spark.pipeline import main

if __name__ == "__main__":
    raise SystemExit(main())
