"""What every step of one training call shares, passed as one value: the run's config and
directory, where it logs, and what watches over the call (the stall watchdog, the stop-signal
handler, the run directory's lock)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from sim.run.config import Config


@dataclasses.dataclass(frozen=True)
class Call:
    """One training call's context. `main_process`: this process logs and writes the run's files
    (process 0 of a multi-process run; `lock` is None in the others)."""

    cfg: Config
    run_dir: str
    log: Callable
    watchdog: Any  # sim/run/watchdog.py: Watchdog
    stopper: Any  # sim/run/signals.py: Stopper
    lock: Any  # sim/run/lock.py: RunLock, or None
    main_process: bool
