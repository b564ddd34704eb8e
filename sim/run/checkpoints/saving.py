"""A training run's checkpoints: what they hold (the replay buffer or not) and whether they fit
on disk, when the next one is due, writing one, and the newest one written."""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Optional

import jax
import numpy as np
from jax.experimental import multihost_utils

from sim.core.memory import size
from sim.run.checkpoints import checkpoint
from sim.run import disk
from sim.run.context import Call
from sim.run.signals import SAVING

# Share of the training time that the default checkpoints may take (--checkpoint-every unset).
CHECKPOINT_SHARE = 0.01
ASSUMED_WRITE_RATE = 200e6  # bytes/s of a checkpoint write before the run has timed one


class Checkpoints:
    """The checkpoints of one training call. `plan` decides what they hold; `due` says whether
    an epoch ends with one; `save` writes one and keeps the newest's path, epoch and timings
    (shared with the run's stop-signal handler, which needs them to decide in time)."""

    def __init__(self, cfg, run_dir: str, leave_out: frozenset, nbytes: int, stopper, watchdog, log: Callable,
                 holds: Optional[str] = None):
        self.cfg, self.run_dir, self.stopper, self.watchdog, self.log = cfg, run_dir, stopper, watchdog, log
        self.leave_out = leave_out  # leaf paths the checkpoints do not hold (a replay ring left out)
        self.holds = holds  # the big part of the loop's state they hold, if any (e.g. "replay buffer")
        self.nbytes = nbytes  # of one checkpoint, as the run writes them
        self.path: Optional[str] = None  # the newest checkpoint (None: none yet)
        self.epoch = 0  # its epoch
        self.seconds = 0.0  # spent writing checkpoints, the whole run's
        self.last_s: Optional[float] = None  # the last write's (None: none written in this call)
        self._said_spacing = False

    @property
    def enabled(self) -> bool:
        return self.cfg.checkpoints.checkpoint_every != -1

    @classmethod
    def plan(cls, call: Call, template, droppable: frozenset, what: Optional[str],
             episodes: frozenset = frozenset()) -> "Checkpoints":
        """What a checkpoint holds (the part of the loop's state at the paths `droppable`, named
        `what`, where --checkpoint-buffer auto finds room for it; the envs' states and their
        episodes' part of the loop's, at the paths `episodes`, unless --checkpoint-envs off) and
        its size; raises disk.DiskSpaceError, before anything trains or is written, when the
        checkpoints the run keeps cannot fit in the free space of its directory."""
        cfg, run_dir, log = call.cfg, call.run_dir, call.log
        keep = cfg.checkpoints.keep_checkpoints
        episodes = episodes if cfg.checkpoints.checkpoint_envs == "off" else frozenset()
        with_envs = bool(droppable & episodes)  # the loop's droppable part goes with the envs (a replay ring)
        droppable = droppable - episodes
        save_buffer = cfg.checkpoints.checkpoint_buffer == "on" or (cfg.checkpoints.checkpoint_buffer == "auto" and checkpoint.droppable_fits(
            template, droppable, run_dir, keep))
        nbytes = checkpoint.state_bytes(template, (frozenset() if save_buffer else droppable) | episodes)
        big = checkpoint.droppable_bytes(template, droppable)
        problem = ""
        if call.main_process and cfg.checkpoints.checkpoint_every != -1:
            try:
                disk.check_fits(run_dir, nbytes, keep, len(checkpoint.list_checkpoints(run_dir)),
                                big if save_buffer else 0)
            except disk.DiskSpaceError as err:
                problem = str(err)
        if jax.process_count() > 1:  # every process must gather the same leaves and stop alike: process 0 decides

            save_buffer, fits = (bool(v) for v in multihost_utils.broadcast_one_to_all(
                np.asarray([save_buffer, not problem])))
            if not fits and not problem:
                problem = "--run-dir: the run's checkpoints cannot fit in the free space of process 0's run dir"
        if problem:
            raise disk.DiskSpaceError(problem)
        if cfg.checkpoints.checkpoint_every != -1 and not save_buffer and droppable:
            why = (f": it does not fit {keep + 1} times in the free disk space, or in half the host memory"
                   if cfg.checkpoints.checkpoint_buffer == "auto" else "")
            log(f"checkpoints leave out the {disk.size(big)} {what} (--checkpoint-buffer {cfg.checkpoints.checkpoint_buffer}{why})")
        if cfg.checkpoints.checkpoint_every != -1 and episodes:
            ring = f" and the {what}" if with_envs else ""
            log(f"checkpoints leave out the envs' states{ring} ({disk.size(checkpoint.droppable_bytes(template, episodes))}, "
                f"--checkpoint-envs off): {disk.size(nbytes)} each; a resume starts every env on a new episode")
        return cls(cfg, run_dir, (frozenset() if save_buffer else droppable) | episodes, nbytes, call.stopper,
                   call.watchdog, log, holds=what if droppable and save_buffer else None)

    def resumed(self, path: Optional[str], epoch: int, seconds: float) -> None:
        """The checkpoint this call continues from (None: a fresh run)."""
        self.path = self.stopper.checkpoint = path
        self.epoch, self.seconds = epoch, seconds

    def due(self, index: int, train_s: float) -> bool:
        """Whether epoch `index + 1` ends with a periodic checkpoint: every --checkpoint-every N
        epochs; by default after every epoch while all checkpoints so far and this one (as long
        as the last one took) stay within CHECKPOINT_SHARE of the training time."""
        every = self.cfg.checkpoints.checkpoint_every
        if every is not None:
            return every > 0 and (index + 1) % every == 0

        due = self._due_by_time(index, train_s)
        if jax.process_count() > 1:  # each process times its own epochs: process 0 decides for all

            due = bool(multihost_utils.broadcast_one_to_all(np.asarray(due)))
        return due

    def _due_by_time(self, index: int, train_s: float) -> bool:
        """The default cadence, by this process's timings; says once when it spaces them out."""
        estimate = self.last_s if self.last_s is not None else self.nbytes / ASSUMED_WRITE_RATE
        if self.seconds + estimate <= CHECKPOINT_SHARE * train_s:
            return True
        if not self._said_spacing:
            self._said_spacing = True
            epoch_s = train_s / (index + 1)
            spacing = math.ceil(estimate / (CHECKPOINT_SHARE * epoch_s))
            buffer = f" with the {self.holds}" if self.holds else ""
            self.log(f"checkpoints: about {estimate:.2f}s each ({size(self.nbytes)}{buffer}) against "
                     f"{epoch_s:.2f}s epochs, so one about every {spacing} epochs (and at the end) keeps them under "
                     f"{CHECKPOINT_SHARE:.0%} of the training time; --checkpoint-every N chooses")
        return False

    def save(self, state: Any, record: dict, train_s: float, last: bool) -> None:
        """Writes the checkpoint of the epoch `record` ends."""
        t0 = time.perf_counter()
        with self.watchdog.stage(f"writing the checkpoint of epoch {record['epoch']}"), self.stopper.phase(SAVING):
            self.path = checkpoint.save(
                self.run_dir, state, epoch=record["epoch"], env_steps=record["env_steps"],
                config=checkpoint.config_dict(self.cfg), leave_out=self.leave_out,
                keep=self.cfg.checkpoints.keep_checkpoints,
                extra={"train_s": train_s, "wall_s": record["wall_s"],
                       "checkpoint_s": self.seconds + (time.perf_counter() - t0)})
            self.stopper.checkpoint, self.epoch = self.path, record["epoch"]
        self.last_s = self.stopper.save_s = time.perf_counter() - t0
        self.seconds += self.last_s
        if last:
            self.log(f"checkpoint of epoch {record['epoch']} written to {self.path} in {self.last_s:.2f}s")

    def last_good(self) -> str:
        """What is left of the run when a write fails."""
        if not self.path:
            return "no checkpoint of the run was written"
        return (f"the last good checkpoint, {self.path}, is intact: once the disk takes the writes, continue with: "
                f"python train.py --resume {self.run_dir}")
