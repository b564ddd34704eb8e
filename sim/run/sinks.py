"""Where a run's epoch records go: metrics.jsonl (process 0), the progress bar, W&B and
TensorBoard (one run, or one per member of a population, all in one group)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from sim.run.populations import population
from sim.run.disk import DiskError
from sim.run.metrics import JsonlSink, ProgressBar, TensorboardSink, WandbSink

# Keys of a member's line that say who it is; its W&B and TensorBoard runs get the rest.
MEMBER_KEYS = ("member", "seed", "config", "sweep", "diverged")


@dataclasses.dataclass
class Sinks:
    jsonl: Any  # JsonlSink, or None off process 0
    bar: ProgressBar
    runs: list  # WandbSink and TensorboardSink: one run's, or one of each per member

    @classmethod
    def open(cls, run, resumed: bool, total_steps: int) -> "Sinks":
        cfg = run.cfg
        jsonl = JsonlSink(os.path.join(run.run_dir, "metrics.jsonl")) if run.main_process else None
        if resumed and jsonl:
            jsonl.truncate(run.at.done_epochs)  # drop lines of epochs past the checkpoint (a killed run's)
            run.log(f"resuming {run.run_dir} from {run.checkpoints.path}: epoch {run.at.done_epochs}/"
                    f"{run.at.end_epoch}, {run.at.steps_done:,} env steps")
        bar = ProgressBar(total_steps, enabled=cfg.run.progress and run.main_process)
        runs = []
        if run.main_process and cfg.logging.wandb:
            runs += member_wandb_sinks(run) if run.population else [
                WandbSink(cfg, run.run_dir, dict(cfg.to_dict(), run_dir=run.run_dir), run.log)]
        if run.main_process and cfg.logging.tensorboard:
            board = os.path.join(run.run_dir, "tensorboard")
            folders = [os.path.join(board, f"member_{m.index}") for m in population.members(cfg)] if run.population \
                else [board]
            try:
                for folder in folders:
                    runs.append(TensorboardSink(folder))
            except DiskError:  # (a folder the disk refuses: the runs opened so far are closed first)
                for sink in runs:
                    sink.close(1)
                raise
        return cls(jsonl, bar, runs)

    def write(self, run, record: dict) -> None:
        """The epoch's lines: one run's record; or a population's, one line per member (its
        index, seed and swept values) and one per configuration (the mean over its seeds, and
        the spread of its eval return), with each member's record sent to its own runs."""
        if not run.population:
            for sink in (self.jsonl, *self.runs):
                if sink:
                    sink.write(record)
            return
        diverged = run.divergence.members
        members = population.member_records(run.cfg, record)
        for member in members:
            if member["member"] in diverged:
                member["diverged"] = diverged[member["member"]]
        # Under --pbt members leave their starting configuration: no per-configuration lines.
        configs = [] if run.cfg.pbt.enabled else population.config_records(run.cfg, members, diverged)
        if self.jsonl:
            for line in members + configs:
                self.jsonl.write(line)
        for sink, member in zip(self.runs, members * (len(self.runs) // max(len(members), 1))):
            sink.write({k: v for k, v in member.items() if k not in MEMBER_KEYS})

    def close(self, exit_code: int) -> None:
        for sink in self.runs:
            sink.close(exit_code)


def member_wandb_sinks(run) -> list:
    """One W&B run per member, all in one group (--wandb-group, else the run directory's name),
    each with its own seed and swept values in its config: W&B's grouping shows the spread."""
    cfg = run.cfg
    group = cfg.logging.wandb_group or os.path.basename(os.path.normpath(run.run_dir))
    sinks = []
    for m in population.members(cfg):
        config = dict(population.member_config(cfg, m).to_dict(), run_dir=run.run_dir, member=m.index,
                      population=group, sweep={population.flag(k): v for k, v in m.swept})
        sinks.append(WandbSink(cfg, run.run_dir, config, run.log, member=m.index, group=group))
    return sinks
