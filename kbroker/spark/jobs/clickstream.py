"""spark-submit entry point of the `clickstream` job: `kbroker spark submit clickstream --help`."""

from kbroker.spark.clickstream import main

if __name__ == "__main__":
    raise SystemExit(main())
