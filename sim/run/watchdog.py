"""A run never sits silent: named stages, reports on slow ones, an abort on a stalled one.

The run harness wraps each start-up stage (building envs, compiling each program, initial
state) and each epoch, evaluation and checkpoint in `watchdog.stage(name, expected)`. A
thread wakes every few seconds and looks at the stage in progress:
- past its expected time (or, with none known, past one minute, then two, four, ...) it
  logs how long the stage has run, how many cores the process keeps busy and the Python
  frame the main thread waits in;
- on a CPU backend, a stage during which the process used no CPU for `stall_timeout`
  seconds is stalled (a working XLA CPU program keeps a core busy: a deadlocked one sleeps):
  the watchdog writes every thread's Python stack to `stacks_path`, logs one line and ends
  the process with exit code `STALLED`. Checkpoints already written stay intact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import os
import sys
import threading
import time

STALLED = 4  # exit code of a run the watchdog ended
BUSY = 0.02  # below this many cores busy, the process counts as idle


@dataclasses.dataclass
class _Stage:
    name: str
    started: float
    expected: float | None
    next_report: float
    cpu: float  # process CPU seconds at the last sample
    sampled: float  # wall time of that sample
    busy_since: float  # last wall time the process was seen using CPU
    cores: float = 0.0  # cores busy between the last two samples


class Watchdog:
    def __init__(self, log, stall_timeout: float = 0.0, stacks_path: str | None = None, poll: float = 5.0,
                 on_stall=None):
        self.log = log
        self.stall_timeout = stall_timeout
        self.stacks_path = stacks_path
        self.poll = poll
        self.on_stall = on_stall or (lambda: os._exit(STALLED))
        self.current: _Stage | None = None
        self.last: str | None = None
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fusedrl-watchdog", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    @contextlib.contextmanager
    def stage(self, name: str, expected: float | None = None):
        """Watches the body as stage `name`; `expected`: seconds it should take (None: unknown)."""
        now, cpu = time.monotonic(), time.process_time()
        self.last = name  # kept after the stage, to say what a failure interrupted
        self.current = _Stage(name, now, expected, expected if expected else 60.0, cpu, now, now)
        try:
            yield
        finally:
            self.current = None

    def _loop(self) -> None:
        while not self._stop.wait(self.poll):
            self.check()

    def check(self, now: float | None = None, cpu: float | None = None) -> None:
        """One look at the stage in progress (the thread's; tests call it with fake clocks)."""
        stage = self.current
        if stage is None:
            return
        now = time.monotonic() if now is None else now
        cpu = time.process_time() if cpu is None else cpu
        if now > stage.sampled:
            stage.cores = (cpu - stage.cpu) / (now - stage.sampled)
            if stage.cores >= BUSY:
                stage.busy_since = now
            stage.cpu, stage.sampled = cpu, now
        elapsed, idle = now - stage.started, now - stage.busy_since
        if self.stall_timeout and idle >= self.stall_timeout:
            self._stalled(stage, idle)
        elif elapsed >= stage.next_report:
            stage.next_report = 2 * elapsed
            expected = f" (expected about {stage.expected:.0f}s)" if stage.expected else ""
            self.log(f"{stage.name}: still running after {elapsed:.0f}s{expected}, {stage.cores:.1f} cores busy, "
                     f"waiting in {self.waiting_in()}")

    def waiting_in(self) -> str:
        """The innermost Python frame of the main thread, as `function (file:line)`."""
        frame = sys._current_frames().get(self._main)
        if frame is None:
            return "?"
        return f"{frame.f_code.co_name} ({os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno})"

    def _stalled(self, stage: _Stage, idle: float) -> None:
        where = self.waiting_in()
        dumped = ""
        if self.stacks_path:
            try:
                os.makedirs(os.path.dirname(self.stacks_path) or ".", exist_ok=True)
                with open(self.stacks_path, "w") as f:
                    faulthandler.dump_traceback(f, all_threads=True)
                dumped = f"; Python stacks in {self.stacks_path}"
            except OSError:
                pass
        sys.stdout.flush()
        print(f"error: stalled: {stage.name} used no CPU for {idle:.0f}s (waiting in {where}){dumped}; "
              f"ending the run (exit code {STALLED}); checkpoints written so far are kept", file=sys.stderr, flush=True)
        self._stop.set()
        self.on_stall()
