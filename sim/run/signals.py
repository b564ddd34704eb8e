"""How a run stops on a signal: SIGINT (Ctrl-C), SIGTERM (what SLURM, Kubernetes and spot
reclaims send before SIGKILL) and SIGUSR1 (SLURM's `--signal`) all ask it to stop with a
checkpoint, then exit with code `STOPPED`, which tells a scheduler to requeue the job.

An epoch is one compiled call that cannot be cut part way, and Python runs a signal handler
only between bytecodes, i.e. after that call returns. So the signal's number reaches a helper
thread at once (`signal.set_wakeup_fd`), which decides by what the run is doing:
- training an epoch that will end within `grace` seconds (its expected length, from the
  epochs before it) with time to write the checkpoint: let it end, then checkpoint and stop;
- training an epoch that will not, with a checkpoint of the run to fall back to: stop at
  once, keeping that checkpoint (the epoch's progress is lost; nothing is written);
- writing a checkpoint: let it finish (a second signal too), then stop;
- starting up (building, compiling, restoring): nothing to save, stop at once;
- evaluating or logging a finished epoch: checkpoint it, then stop.
A second signal stops at once, except while a checkpoint is being written. An epoch with no
earlier checkpoint to fall back to is let end, whatever its length, unless a second signal
comes. Stopping at once is `os._exit(STOPPED)` from the helper thread after one line that
says what is kept and how to continue.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

import jax
import numpy as np
from jax.experimental import multihost_utils

STOPPED = 75  # exit code of a run stopped by a signal, resumable (sysexits' EX_TEMPFAIL: try again later)
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)

STARTING, EPOCH, SAVING, BETWEEN = "starting up", "epoch", "saving", "between epochs"


class Stopped(Exception):
    """The run stopped on a signal after writing its checkpoint: exit code STOPPED."""


class Stopper:
    """Catches SIGNALS while the run lives (`with Stopper(...)`); the trainer marks what it
    does with `phase(...)` and reads `requested` between epochs.

    resume_hint: the command that continues the run (`python train.py --resume DIR`).
    """

    def __init__(self, log, grace: float, resume_hint: str, exit_=os._exit):
        self.log = log
        self.grace = grace
        self.resume_hint = resume_hint
        self.exit = exit_
        self.requested: str | None = None  # name of the first signal
        self.count = 0
        self.checkpoint: str | None = None  # the newest complete checkpoint of the run
        self.epoch = 0  # the epoch in progress (1-based), or the last one finished
        self.save_s = 0.0  # seconds the last checkpoint took
        self._phase, self._since, self._expected = STARTING, time.monotonic(), None
        self._lock = threading.Lock()
        self._previous: dict = {}
        self._wakeup = None
        self._thread = None

    # ---- installing ----
    def __enter__(self) -> "Stopper":
        if threading.current_thread() is not threading.main_thread():
            return self  # signals are the main thread's: a run in another thread keeps their defaults
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._pipe = (read, write)
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, lambda *_: None)  # the helper thread acts
        self._wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._listen, name="fusedrl-signals", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            return
        signal.set_wakeup_fd(self._wakeup)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        os.write(self._pipe[1], b"\0")  # wakes the helper to end it
        self._thread.join(timeout=5)
        for fd in self._pipe:
            os.close(fd)

    # ---- what the run is doing ----
    @contextlib.contextmanager
    def phase(self, name: str, expected: float | None = None, epoch: int | None = None):
        """Marks the body as phase `name` (EPOCH or SAVING); `expected`: seconds it should take.
        After an epoch the run is BETWEEN epochs (start-up is over); after anything else, back
        in the phase it was in."""
        with self._lock:  # never while the helper is deciding to stop at once
            before = self._phase
            self._phase, self._since, self._expected = name, time.monotonic(), expected
            if epoch is not None:
                self.epoch = epoch
        try:
            yield
        finally:
            with self._lock:
                self._phase = BETWEEN if name == EPOCH else before

    # ---- the helper thread ----
    def _listen(self) -> None:
        while True:
            try:
                data = os.read(self._pipe[0], 64)
            except OSError:
                return
            for number in data:
                if number == 0:
                    return
                self.receive(number)

    def receive(self, number: int) -> None:
        """One signal's decision (the helper thread's; tests call it directly)."""
        name = signal.Signals(number).name
        with self._lock:
            self.count += 1
            first = self.count == 1
            if first:
                self.requested = name
            phase = self._phase
            if phase == SAVING:
                self.log(f"{name}: writing the checkpoint of epoch {self.epoch}; stopping as soon as it is complete")
            elif phase == STARTING:
                self._stop_now(name, "while starting up")
            elif phase == EPOCH and first:
                left = None if self._expected is None else self._expected - (time.monotonic() - self._since)
                if self.checkpoint is None:
                    self.log(f"{name}: finishing epoch {self.epoch}, then writing a checkpoint (no earlier one to "
                             f"fall back to; another signal stops at once, losing the run)")
                elif left is not None and left + self.save_s <= self.grace:
                    self.log(f"{name}: finishing epoch {self.epoch} (about {max(left, 0):.0f}s left), then writing a "
                             f"checkpoint (another signal stops at once)")
                else:
                    about = "" if left is None else f" (about {max(left, 0):.0f}s left, past the {self.grace:.0f}s of --stop-grace)"
                    self._stop_now(name, f"in epoch {self.epoch}{about}")
            elif phase == EPOCH or not first:
                self._stop_now(name, f"in epoch {self.epoch}" if phase == EPOCH else f"after epoch {self.epoch}")
            else:
                self.log(f"{name}: writing a checkpoint of epoch {self.epoch}, then stopping (another signal stops "
                         f"at once)")

    def _stop_now(self, name: str, where: str) -> None:
        if self.checkpoint:
            kept = f"its last checkpoint, {self.checkpoint}, is kept; continue with: {self.resume_hint}"
        else:
            kept = "no checkpoint of it was written; start it again"
        self.log(f"stopped by {name} {where}: {kept}")
        sys.stdout.flush()
        sys.stderr.flush()
        self.exit(STOPPED)


def sync_requested(requested: str | None) -> str | None:
    """In a multi-process run, a stop any process was asked for is every process's (they must
    stop after the same epoch); one host collective per epoch. Unchanged in one process."""
    if jax.process_count() == 1:
        return requested
    names = [None, *(s.name for s in SIGNALS)]
    mine = np.int32(names.index(requested))
    everyone = np.asarray(multihost_utils.process_allgather(mine))
    return names[int(everyone.max())] if everyone.max() > 0 else None
