"""Only the optional C extension lives here; everything else is in pyproject.toml.

``kbroker.protocol._speedups`` (the per-record walk of produced batches, issue 17) is built when a C
compiler is present and skipped otherwise (``optional=True``): kbroker then runs the same walk in
Python (kbroker/protocol/record_format.py), slower but identical. In a source checkout build it in
place with ``python setup.py build_ext --inplace`` (``make setup`` does, through ``pip install -e .``).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kbroker.protocol._speedups", ["kbroker/protocol/_speedups.c"], optional=True)])
