"""What the compiled programs need against what the device can give, checked before any runs.

Every program of a run (init, prefill, epoch, evaluate) is compiled from shapes before one of
them executes. XLA's `memory_analysis()` of each gives its arguments, outputs (the bytes of
outputs aliased to donated arguments are counted once) and temporaries, per device. The
training state lives through the whole run, so the peak is the largest program's footprint.
On a CPU host all XLA devices share the host's RAM, so their footprints add up.

Messages name the run's quantities (`num_envs`, `batch_size`, ...) through `name`, which the
harness gives: it knows them as flags.
"""

from __future__ import annotations

import dataclasses
import os

GIB = 1024**3
HEADROOM = 0.9  # share of a device's memory the run may plan for; the rest is left to XLA and the runtime


def size(nbytes: float) -> str:
    """Bytes for a person: KiB below a MiB, MiB below a GiB, else GiB."""
    if nbytes < 2**20:
        return f"{nbytes / 2**10:,.1f} KiB"
    return f"{nbytes / 2**20:,.1f} MiB" if nbytes < GIB else f"{nbytes / GIB:,.2f} GiB"


class ResourceError(Exception):
    """The run does not fit (or ran out of) memory: printed as one line, exit code 2."""


class TooLarge(ValueError):
    """A size of the run (`quantity`) that cannot fit, and the largest value that does."""

    def __init__(self, message: str, quantity: str, fits: int):
        super().__init__(message)
        self.quantity, self.fits = quantity, fits


def host_available() -> int | None:
    """Host memory available to a new allocation (Linux MemAvailable: free + reclaimable cache)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def device_limit(device) -> tuple[int, str]:
    """(bytes, description) one device can hold: its memory limit, or on a CPU the host's
    available RAM."""
    stats = None
    try:
        stats = device.memory_stats()
    except Exception:  # CPU backends may not implement it
        pass
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), "device memory"
    return host_available() or 0, "device memory (host RAM available)"


@dataclasses.dataclass(frozen=True)
class Part:
    """A share of a program's footprint and the run's sizes that scale it, as (quantity, current value)."""

    what: str
    nbytes: int
    sizes: tuple[tuple[str, int], ...]


def footprint(compiled) -> tuple[int, int, int]:
    """(arguments, outputs not aliased to an argument, temporaries) bytes of one device's program."""
    m = compiled.memory_analysis()
    if m is None:
        return 0, 0, 0
    return (int(m.argument_size_in_bytes), int(m.output_size_in_bytes - m.alias_size_in_bytes),
            int(m.temp_size_in_bytes))


def check(programs: dict, state_parts: list[Part], work_sizes: dict[str, tuple], devices_sharing: int,
          device, named=str) -> tuple[int, int, str]:
    """Raises ResourceError naming the sizes to lower if the largest program does not fit.

    programs: name -> compiled program. state_parts: the training state's big pieces (they are
    part of every program's arguments or outputs). work_sizes: program name -> the sizes that
    scale its temporaries. devices_sharing: devices whose footprints share `device`'s memory
    (all local devices on a CPU host, else 1). named: a quantity as the message names it (the
    harness gives its flag). Returns (the planned peak bytes per device, the device's limit,
    what that limit is).
    """
    limit_total, what = device_limit(device)
    limit = int(limit_total * HEADROOM) // devices_sharing
    state_bytes = sum(p.nbytes for p in state_parts)
    worst, worst_name, worst_work = -1, "", 0
    for name, compiled in programs.items():
        arguments, outputs, temps = footprint(compiled)
        total = arguments + outputs + temps
        if total > worst:
            worst, worst_name, worst_work = total, name, max(0, total - state_bytes)
    if not limit_total or worst <= limit:
        return worst, limit_total, what
    parts = [*state_parts, Part(f"the {worst_name} program's working memory", worst_work, work_sizes.get(worst_name, ()))]
    parts = sorted((p for p in parts if p.sizes), key=lambda p: -p.nbytes)
    share = f" per device x {devices_sharing} devices" if devices_sharing > 1 else ""
    head = (f"the run needs {worst / GIB:,.2f} GiB{share} (its {worst_name} program) and {what} gives "
            f"{limit / GIB:,.2f} GiB ({HEADROOM:.0%} of {limit_total / GIB:,.2f} GiB{share and ' shared'})")
    if not parts:
        raise ResourceError(head)
    big = parts[0]
    excess = worst - limit
    keep = (big.nbytes - excess) / big.nbytes if big.nbytes else 0.0
    quantity, value = big.sizes[0]
    fits = int(value * keep)
    if fits >= 100:  # two significant digits, rounded down: a value that fits, not one on the edge
        scale = 10 ** (len(str(fits)) - 2)
        fits = fits // scale * scale
    suggestion = f"about {fits:,} fits" if fits >= 1 else "even 1 does not fit alone"
    others = " or ".join(named(q) for q, _ in big.sizes[1:])
    rest = "; ".join(f"{p.what}: {p.nbytes / GIB:,.2f} GiB ({named(p.sizes[0][0])})" for p in parts[1:] if p.nbytes >= GIB // 10)
    raise ResourceError(f"{head}: {big.what} takes {big.nbytes / GIB:,.2f} GiB; lower {named(quantity)} ({value:,} now; "
                        f"{suggestion}){', or ' + others if others else ''}" + (f"; also {rest}" if rest else ""))


def out_of_memory(err: BaseException, during: str | None, sizes: tuple[str, ...], name=str) -> ResourceError | None:
    """A run-time RESOURCE_EXHAUSTED error as one line naming the `sizes` that scale the run
    (None for any other error)."""
    text = str(err)
    if "RESOURCE_EXHAUSTED" not in text:
        return None
    detail = text.split("RESOURCE_EXHAUSTED:", 1)[-1].strip().splitlines()[0][:200]
    names = [name(q) for q in sizes]
    return ResourceError(f"out of memory while {during or 'starting'} ({detail}); lower {', '.join(names[:-1])} or "
                         f"{names[-1]}")
