"""One writer per run directory: a lock held for the whole run (fresh or resumed).

The lock is `fcntl.flock` on `<run_dir>/.lock`, which the kernel releases when its holder
exits, however it exits (kill -9 and out-of-memory kills included): a lock file left by a
dead process never blocks. The file says who holds it (pid, host, start time, command), so
a second run on the same directory is refused in one line that names the holder. On Linux,
flock on NFS takes a lock the server sees, so runs on two hosts sharing a directory exclude
each other too; a filesystem without locks is said once and not locked.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time

from sim.run import disk

NAME = ".lock"


class RunDirBusy(Exception):
    """Another process holds the run directory: printed as one line, exit code 2."""


class RunLock:
    """Holds `<run_dir>/.lock` from `acquire()` to `release()` (or the process's end)."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.path = os.path.join(run_dir, NAME)
        self.fd: int | None = None

    def acquire(self, log=print) -> "RunLock":
        """Takes the lock or raises RunDirBusy naming its holder; creates the directory."""
        if self.fd is not None:
            return self
        with disk.writing(self.path):
            os.makedirs(self.run_dir, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)  # ENOLCK, EOPNOTSUPP: this filesystem cannot lock
                log(f"warning: {self.run_dir} is on a filesystem without file locks ({err.strerror}): a second run "
                    f"started on it would not be refused")
                return self
            holder = _read_holder(fd)
            os.close(fd)
            raise RunDirBusy(f"--run-dir: {self.run_dir} is in use by another run ({describe(holder)}); wait for it "
                             f"to end or stop it, or choose another --run-dir") from None
        self.fd = fd
        return self

    def sign(self) -> None:
        """Writes who holds the lock into it, for a refused second run to name. Apart from
        `acquire`, so a run that is refused for another reason leaves the file untouched."""
        if self.fd is None:
            return
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                  "command": " ".join(sys.argv)}
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, (json.dumps(holder) + "\n").encode(), 0)
        except OSError:
            pass  # the lock holds without the note (a full disk is reported by the run's own writes)

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd = None


def _read_holder(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}


def describe(holder: dict) -> str:
    if not holder.get("pid"):
        return "its holder did not say who it is"
    since = f", since {holder['started']}" if holder.get("started") else ""
    return f"pid {holder['pid']} on host {holder.get('host', '?')}{since}"
