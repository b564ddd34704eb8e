"""The run's check for NaN and Inf after each epoch: one run stops at its first non-finite
epoch (`Diverged`, exit code DIVERGED); a population's members diverge alone."""

from __future__ import annotations

from typing import Callable, Optional

from sim.run.populations import population

DIVERGED = 3  # exit code of a run stopped at its first non-finite epoch


class Diverged(Exception):
    """Training produced NaN or Inf: printed as one line, exit code DIVERGED."""


class Divergence:
    """One run stops at its first non-finite epoch (Diverged). A population's members diverge
    alone (no traffic between them): each one that turns NaN or Inf is reported once and left
    out of the statistics while the others train on; Diverged is raised when none is left."""

    def __init__(self, cfg, size: int, run_dir: str, log: Callable):
        self.cfg, self.size, self.run_dir, self.log = cfg, size, run_dir, log
        self.members: dict = {}  # population: member -> epoch it diverged in

    @classmethod
    def resumed(cls, cfg, size: int, run_dir: str, log: Callable, records: list[dict],
                done_epochs: int) -> "Divergence":
        """A resumed population's: the members whose latest line up to `done_epochs` says they
        diverged (a PBT step may have replaced one since)."""
        divergence = cls(cfg, size, run_dir, log)
        latest = {r["member"]: r for r in records if "member" in r and r.get("epoch", 0) <= done_epochs}
        divergence.members = {m: r["diverged"] for m, r in latest.items() if r.get("diverged")}
        return divergence

    def check(self, flags: dict, epoch: int, saved_path: Optional[str]) -> None:
        """`flags`: each quantity's first non-finite iteration (-1: never), per member ([M])
        for a population."""
        if self.size > 1:
            self._check_members(flags, epoch, saved_path)
        else:
            check_finite(flags, epoch, self.cfg, self.run_dir, saved_path)

    def _check_members(self, flags: dict, epoch: int, saved_path: Optional[str]) -> None:
        for m in population.members(self.cfg):
            hits = [(first[m.index], order, name) for order, (name, first) in enumerate(flags.items())
                    if first[m.index] >= 0]
            if not hits or m.index in self.members:
                continue
            first, _, name = min(hits)
            self.members[m.index] = epoch
            self.log(f"member {m.index} (seed {m.seed}, {m.label}) diverged: {name} became NaN or Inf in epoch "
                     f"{epoch} (iteration {first + 1}); it is left out of the statistics, the other members train on")
        if len(self.members) == self.size:
            then = (f"its last checkpoint is {saved_path}" if saved_path else "no checkpoint was written")
            raise Diverged(f"diverged: every member of the population became NaN or Inf by epoch {epoch}; {then}; "
                           f"start again with a lower --learning-rate or --reward-scaling")


def check_finite(flags: dict, epoch: int, cfg, run_dir: str, saved_path: str | None) -> None:
    """Raises Diverged at the epoch's first non-finite quantity (`flags`: each quantity's first
    non-finite iteration, -1: never)."""
    hits = [(first, order, name) for order, (name, first) in enumerate(flags.items()) if first >= 0]
    if not hits:
        return
    first, _, name = min(hits)
    what = f"{name} became NaN or Inf in epoch {epoch} (iteration {first + 1} of {cfg.iterations_per_epoch})"
    if saved_path:
        then = (f"the run stopped without saving it; its last good checkpoint is {saved_path}: continue from it with "
                f"python train.py --resume {run_dir} (with a lower --learning-rate or --reward-scaling)")
    else:
        then = ("the run stopped before its first checkpoint; start again with a lower --learning-rate or "
                "--reward-scaling")
    raise Diverged(f"diverged: {what}; {then}")
