"""spark-submit entry points of the built-in jobs (`kbroker spark submit pipeline|clickstream|backfill`).

Each file is a script spark-submit runs as `__main__`; it only calls the job's `main()`. Must not
import kbroker.net, kbroker.log, kbroker.api or kbroker.replica.
"""
