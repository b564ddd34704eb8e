"""What the disk refuses: a run's writes that fail for lack of space or an I/O error become one
line and exit code `DISK_ERROR`, with nothing half-written left behind; and the space a run's
checkpoints will take, checked against the free space before it trains (as `sim/core/memory.py`
checks device memory).

Every file a run writes appears whole or not at all: `write_atomic` writes beside the target
and renames; an append (`append_line`) that fails is cut back to where it began.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil

from sim.core.memory import size

DISK_ERROR = 5  # exit code of a run stopped by a write the disk refused

# errno -> what it means for the user. Out of space (the device or a quota), a file over the
# size limit, an I/O error (a failing disk, a lost network filesystem), a read-only filesystem,
# a directory the user may not write.
REFUSALS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
            errno.EFBIG: "file too large for this filesystem", errno.EIO: "I/O error",
            errno.EROFS: "read-only filesystem", errno.EACCES: "permission denied", errno.EPERM: "permission denied"}


class DiskError(Exception):
    """A write the disk refused (no space, quota, I/O error): printed as one line, exit code
    DISK_ERROR."""


def free_bytes(path: str) -> int:
    """Free bytes for an unprivileged writer on the filesystem that holds `path` (or, when it
    does not exist yet, its nearest existing parent)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


def refusal(err: BaseException) -> str | None:
    """What a failed write means (`REFUSALS`), or None when the error is not the disk's."""
    return REFUSALS.get(getattr(err, "errno", None))


def error(err: BaseException, path: str, need: int | None = None) -> DiskError:
    """The one-line DiskError of `err` while writing `path` (`need`: bytes the write takes)."""
    what = refusal(err) or (getattr(err, "strerror", None) or str(err))
    needs = f"needs {size(need)}, " if need else ""
    return DiskError(f"{what} writing {path} ({needs}{size(free_bytes(path))} free)")


@contextlib.contextmanager
def writing(path: str, need: int | None = None, cleanup=()):
    """Turns a disk's refusal inside the block into a DiskError naming `path`; removes the
    `cleanup` paths (files or folders the block was writing) on any failure."""
    try:
        yield
    except BaseException as err:
        for leftover in cleanup:
            if os.path.isdir(leftover):
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(leftover)
        if isinstance(err, OSError) and refusal(err):
            raise error(err, path, need) from None
        raise


def write_atomic(path: str, data: str | bytes) -> None:
    """Writes `path` whole or not at all: beside it, then renamed over it."""
    raw = data.encode() if isinstance(data, str) else data
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with writing(path, len(raw), cleanup=(tmp,)):
        os.makedirs(directory, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)


def append_line(path: str, line: str) -> None:
    """Appends one line to `path`; a write the disk refuses part way is cut back, so the file
    never ends in a torn line."""
    raw = line.encode()
    with writing(path, len(raw)):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            start = os.fstat(fd).st_size
            try:
                written = os.write(fd, raw)
                if written != len(raw):  # a short write: the disk filled up part way
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except OSError:
                os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)


def check_fits(run_dir: str, checkpoint_bytes: int, keep: int, existing: int, buffer_bytes: int = 0) -> None:
    """Raises DiskSpaceError unless the run's checkpoints fit in the free space of `run_dir`:
    `keep` kept at a time plus the one being written, each `checkpoint_bytes` (of which
    `buffer_bytes` replay buffer), minus the `existing` ones of a resumed run that rotate out."""
    needed = max(0, keep + 1 - existing) * checkpoint_bytes
    free = free_bytes(run_dir)
    if needed <= free:
        return
    each = f"{size(checkpoint_bytes)} each" + (f", {size(buffer_bytes)} of it the replay buffer" if buffer_bytes
                                                 else "")
    lower = "--keep-checkpoints 1, " if keep > 1 else ""
    buffer = "--checkpoint-buffer off or a smaller --max-replay-size, " if buffer_bytes else ""
    raise DiskSpaceError(f"--run-dir: the run's checkpoints need {size(needed)} ({keep} kept + 1 being written, "
                         f"{each}) and {run_dir} has {size(free)} free; free some space, or use {lower}{buffer}"
                         f"--checkpoint-every -1 (no checkpoints) or a --run-dir on another disk")


class DiskSpaceError(Exception):
    """The run's checkpoints cannot fit in the free space: told before it trains, one line,
    exit code 2."""
