"""A training run around the compiled programs: claim the run directory, start or resume the
state (`launch.py`), open its sinks (`sinks.py`), run the epochs (evaluations, PBT steps,
checkpoints, divergence checks, stop signals), end the run (`report.py`). `train.py` is its
command line."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Optional

import jax

from sim.core.memory import out_of_memory
from sim.core.metrics import NONFINITE
from sim.core.state import read_steps
from sim.run.config import Config, flag_of
from sim.run.disk import DiskError
from sim.run.divergence import DIVERGED, Diverged  # noqa: F401  (the exit code and error of train.py)
from sim.run.context import Call
from sim.run.launch import Run, default_run_dir, resume_point, start, total_steps
from sim.run.lock import RunLock
from sim.run.metrics import to_python
from sim.run.report import finish
from sim.run.signals import EPOCH, Stopped, Stopper, sync_requested
from sim.run.sinks import Sinks
from sim.run.watchdog import Watchdog


def train(cfg: Config, run_dir: str | None = None, log=print, stop_after: int | None = None) -> dict:
    """Runs a whole training; returns the last metrics record. Writes config.json,
    metrics.jsonl, checkpoints/ and curve.png under the run directory, which it holds locked
    (`sim/run/lock.py`) from start to end.

    cfg.run.resume: continue that run directory from its newest good checkpoint (appending to
    its metrics.jsonl). stop_after: stop after this many epochs of this call (evaluate,
    checkpoint, return); for time-sliced jobs and tests. SIGINT, SIGTERM and SIGUSR1 stop the
    run with a checkpoint and raise signals.Stopped (`sim/run/signals.py`)."""
    cfg = cfg.validate()
    # In a multi-process run every process trains; only process 0 logs and writes files.
    main_process = jax.process_index() == 0
    if not main_process:
        log = _quiet
    run_dir = cfg.run.resume or run_dir or cfg.run.run_dir or default_run_dir(cfg)
    lock = RunLock(run_dir) if main_process else None
    try:
        if lock and os.path.isdir(run_dir):
            lock.acquire(log)  # before anything in it is read, replaced or continued
        resume_from = resume_point(cfg, run_dir)
        if lock:
            lock.sign()
        on_cpu = jax.devices()[0].platform == "cpu"
        watchdog = Watchdog(log, cfg.run.stall_timeout if on_cpu else 0.0,
                            os.path.join(run_dir, "stacks.txt") if main_process else None)
        with Stopper(log, cfg.checkpoints.stop_grace, f"python train.py --resume {run_dir}") as stopper:
            stopper.checkpoint = resume_from
            try:
                return _train(Call(cfg, run_dir, log, watchdog, stopper, lock, main_process), resume_from, stop_after)
            except Exception as err:
                oom = out_of_memory(err, watchdog.last, ("num_envs", "num_eval_envs", *cfg.loop.work_sizes), flag_of)
                if oom is None:
                    raise
                raise oom from None
            finally:
                watchdog.close()
    finally:
        if lock:
            lock.release()


def _train(call: Call, resume_from: str | None, stop_after) -> dict:
    """The named steps of a training call: start (or resume) the state, open the run
    directory's sinks, run the epochs, end the run."""
    cfg = call.cfg
    run, state, resumed = start(call, resume_from)
    exit_code = 1
    try:
        run = dataclasses.replace(run, sinks=Sinks.open(run, resumed is not None, total_steps(cfg)))
        try:
            record = epochs(run, state, stop_after)
            exit_code = 0
        finally:
            run.sinks.close(exit_code)
        record = finish(run, record)
    except DiskError as err:
        raise DiskError(f"{err}; {run.checkpoints.last_good()}") from None
    stopper = call.stopper
    if stopper.requested and record and record["epoch"] < run.at.end_epoch:
        saved = run.checkpoints.path
        kept = (f"checkpoint {saved}; continue with: python train.py --resume {run.run_dir}" if saved
                else "no checkpoint (--checkpoint-every -1)")
        raise Stopped(f"stopped by {stopper.requested} after epoch {record['epoch']}/{run.at.end_epoch}: {kept}")
    return record


def epochs(run: Run, state, stop_after: Optional[int]) -> dict:
    """Runs epochs until the budget is spent, a stop signal or `stop_after`; returns the last
    record. A stop signal skips the evaluation (time it may not have) and writes a checkpoint."""
    at, checkpoints = run.at, run.checkpoints
    record: dict = {}
    # Seconds the next epoch is expected to take: the slowest so far (a resumed run's first
    # epoch: the mean of the epochs before it).
    slowest = at.train_s / at.done_epochs if at.done_epochs else None
    for index in range(at.done_epochs, at.end_epoch):
        if record and sync_requested(run.stopper.requested):  # a signal after the last epoch's checks
            if checkpoints.epoch != record["epoch"] and checkpoints.enabled:
                checkpoints.save(state, record, at.train_s, last=True)
            break
        t0 = time.perf_counter()
        state, record = run_epoch(run, state, index, expected=slowest)
        slowest = max(slowest or 0.0, time.perf_counter() - t0)
        signalled = sync_requested(run.stopper.requested) is not None
        last = (index == at.end_epoch - 1 or signalled
                or (stop_after is not None and index + 1 - at.done_epochs >= stop_after))
        state = _between_epochs(run, state, record, index, signalled, last)
        # Metrics first, then the checkpoint: a run killed in between resumes from the
        # previous checkpoint and drops this line, so the two never disagree.
        run.sinks.write(run, record)
        run.sinks.bar.update(record["env_steps"], record["sps"], at.eval_return, at.train_s)
        if checkpoints.enabled and (last or checkpoints.due(index, at.train_s)):
            checkpoints.save(state, record, at.train_s, last)
        if last:
            break
    return record


def _between_epochs(run: Run, state, record: dict, index: int, signalled: bool, last: bool):
    """After epoch `index + 1`: its evaluation where due, and the PBT step where due."""
    # A PBT step is due by the epoch alone (not by where this call stops), so a resumed run
    # steps where an uninterrupted one does; a stop signal skips it with the evaluation.
    step = run.pbt is not None and not signalled and run.pbt.due(index + 1, index == run.at.end_epoch - 1)
    every = run.cfg.eval_every
    if not signalled and (last or (every and (index + 1) % every == 0) or (step and run.pbt.needs_eval)):
        evaluate(run, state, record)
    if run.pbt is not None:
        run.pbt.observe(record)
        record.update(run.pbt.values(state))  # the values each member trained with this epoch
        if step:
            state = run.pbt.step(state, record, run.divergence)
    record["wall_s"] = run.at.wall_before + time.perf_counter() - run.started
    return state


def run_epoch(run: Run, state, index: int, expected):
    """One call of the compiled epoch program; the epoch's record."""
    t0 = time.perf_counter()
    with (run.watchdog.stage(f"epoch {index + 1}", expected=expected and 3 * expected + 30),
          run.stopper.phase(EPOCH, expected, epoch=index + 1)):
        if run.engine.env.spares:  # spare start states for the envs that used theirs in the epoch before
            fresh = run.programs["starts"](run.engine.starts_key(run.eval_key, index + 1))  # a key per epoch
            state = run.programs["renew"](state, fresh)
        state, metrics = run.programs["epoch"](state)
        metrics = jax.device_get(metrics)
        env_steps = read_steps(metrics.pop("env_steps"))
        flags = metrics.pop(NONFINITE)  # they never reach metrics.jsonl
        metrics = to_python(metrics)
    epoch_s = time.perf_counter() - t0
    run.divergence.check(flags, index + 1, run.checkpoints.path)  # before anything is written
    run.at.train_s += epoch_s
    record = {"epoch": index + 1, "env_steps": env_steps,
              "sps": run.cfg.steps_per_epoch / epoch_s, "train_s": run.at.train_s, "perf/compile_s": run.compile_s,
              **metrics}
    return state, record


def evaluate(run: Run, state, record: dict) -> None:
    """The epoch's deterministic evaluation (every member's), into its record."""
    this_key = run.engine.eval_key(run.eval_key, record["epoch"])
    t0 = time.perf_counter()
    with run.watchdog.stage(f"evaluating epoch {record['epoch']}"):
        record.update(to_python(jax.device_get(run.programs["evaluate"](state, this_key))))
    record["perf/eval_s"] = time.perf_counter() - t0
    returns = record["eval/episode_return"]
    if run.population:  # the bar shows the mean over the members still training
        returns = [r for k, r in enumerate(returns) if k not in run.divergence.members and r is not None]
        returns = sum(returns) / len(returns) if returns else None
    run.at.eval_return = returns


def _quiet(*args, **kwargs) -> None:
    """The log of processes other than 0 in a multi-process run."""
