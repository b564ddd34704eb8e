"""The checkpoints' settings (`--checkpoint-every`, `--keep-checkpoints`, `--stop-grace`,
`--checkpoint-buffer`, `--checkpoint-envs`): each field's docstring is its `--help` text, its name its flag."""

from __future__ import annotations

import dataclasses
from typing import Literal, Optional

from sim.core.contract import ConfigError


@dataclasses.dataclass(frozen=True)
class Checkpointing:
    """Checkpoints: when they are written, how many are kept, what they hold."""

    checkpoint_every: Optional[int] = None
    """Write a checkpoint every N epochs into <run-dir>/checkpoints, and always at the end and on a stop signal (0: only then; -1: never; default: after every epoch while checkpoints take under 1% of the training time, less often where they would take more, e.g. with a large replay buffer, which the run says)."""
    keep_checkpoints: int = 2
    """Complete checkpoints kept (the newest; older ones are removed once a newer one is whole). A resume whose newest checkpoint is corrupt falls back to the one before, so keep at least 2 to survive that."""
    stop_grace: float = 20.0
    """Seconds a run gives itself after SIGTERM, SIGUSR1 or Ctrl-C: it finishes the epoch in progress when that and a checkpoint fit in them, else it stops at once with its last checkpoint. Keep it below what the scheduler leaves before SIGKILL (SLURM's KillWait and Kubernetes' terminationGracePeriodSeconds: 30 s by default; T with SLURM's --signal=USR1@T)."""
    checkpoint_buffer: Literal["auto", "on", "off"] = "auto"
    """Replay agents: keep the replay buffer in checkpoints (auto: when it fits in half the free disk and host memory; without it a resume refills it with random actions)."""
    checkpoint_envs: Literal["on", "off"] = "on"
    """Keep every env's state in checkpoints (off: leave them out, with what the agent keeps per episode, e.g. recurrent states, and a replay buffer; a resume starts every env on a new episode, so it is not bitwise identical to an uninterrupted run; a robot's checkpoint at 8,192 envs shrinks from hundreds of MiB to its networks' few)."""

    def validate(self) -> None:
        if self.checkpoint_every is not None and self.checkpoint_every < -1:
            raise ConfigError("checkpoint-every", f"must be >= -1, got {self.checkpoint_every}")
        if self.keep_checkpoints < 1:
            raise ConfigError("keep-checkpoints", f"must be a positive integer, got {self.keep_checkpoints}")
        if not self.stop_grace >= 0:
            raise ConfigError("stop-grace", f"must be >= 0 seconds, got {self.stop_grace}")

    @property
    def enabled(self) -> bool:
        return self.checkpoint_every != -1
