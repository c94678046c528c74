from tests.interop.conftest import kbroker, kbroker_factory, pytest_runtest_makereport  # noqa: F401
