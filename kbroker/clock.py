"""The wall clock, defined once: `wall_clock_ms()` and the `Clock` type every layer injects.

Every component that needs the time takes a `Clock` (a callable returning epoch milliseconds), so
state machines run on a fake clock in tests; this module is the default they fall back to. It sits
below every layer (protocol/, log/ and metadata/ may import it) and imports only the standard
library: no asyncio, nothing from kbroker.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    """Milliseconds since the epoch (Kafka's `Time.SYSTEM.milliseconds()`)."""
    return int(time.time() * 1000)
