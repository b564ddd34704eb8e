"""Host-side sinks for the few scalars each epoch returns: JSONL file and progress bar."""

from __future__ import annotations

import json
import math
import os
import sys
import time


def to_python(metrics: dict) -> dict:
    """Device scalars -> plain floats/ints, NaN -> None (valid JSON)."""
    out = {}
    for key, value in metrics.items():
        value = value.item() if hasattr(value, "item") else value
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = value
    return out


class JsonlSink:
    """Appends one JSON object per epoch to `<run_dir>/metrics.jsonl`, flushed each time."""

    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    def write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _fmt_time(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressBar:
    """A one-line bar on stderr: env steps, steps/s, latest eval return, ETA.

    On a terminal it redraws in place; otherwise it prints one line per update.
    """

    def __init__(self, total_steps: int, enabled: bool = True, stream=None):
        self.total = total_steps
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.perf_counter()

    def update(self, steps: int, sps: float, eval_return: float | None, train_seconds: float) -> None:
        if not self.enabled:
            return
        frac = min(1.0, steps / max(1, self.total))
        width = 24
        filled = int(frac * width)
        bar = "#" * filled + "-" * (width - filled)
        rate = steps / train_seconds if train_seconds > 0 else 0.0
        eta = (self.total - steps) / rate if rate > 0 else float("nan")
        ev = "-" if eval_return is None else f"{eval_return:.1f}"
        line = (f"[{bar}] {100 * frac:3.0f}% {steps:,}/{self.total:,} steps | {sps:,.0f} steps/s | "
                f"eval {ev} | ETA {_fmt_time(eta) if math.isfinite(eta) else '?'}")
        if self.tty:
            self.stream.write("\r" + line)
            if steps >= self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
