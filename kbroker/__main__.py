"""`python -m kbroker` is the same as the `kbroker` console script."""

from kbroker.cli import main

raise SystemExit(main())
