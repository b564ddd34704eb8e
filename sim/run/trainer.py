"""A training run around the compiled programs: start or resume the state, open the run
directory's sinks, run the epochs (evaluations, checkpoints, divergence checks, Ctrl-C), end
the run. `train.py` is its command line."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Any, Callable, Optional

from sim.core.memory import size
from sim.run.config import Config, build_engine, flag_of


def default_run_dir(cfg: Config) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{cfg.name}__{stamp}")


class Diverged(Exception):
    """Training produced NaN or Inf: printed as one line, exit code DIVERGED."""


DIVERGED = 3  # exit code of a run stopped at its first non-finite epoch


def train(cfg: Config, run_dir: str | None = None, log=print, stop_after: int | None = None) -> dict:
    """Runs a whole training; returns the last metrics record. Writes config.json,
    metrics.jsonl, checkpoints/ and curve.png under the run directory, which it holds locked
    (`sim/run/lock.py`) from start to end.

    cfg.resume: continue that run directory from its newest good checkpoint (appending to its
    metrics.jsonl). stop_after: stop after this many epochs of this call (evaluate, checkpoint,
    return); for time-sliced jobs and tests. SIGINT, SIGTERM and SIGUSR1 stop the run with a
    checkpoint and raise signals.Stopped (`sim/run/signals.py`)."""
    import jax

    from sim.run.lock import RunLock
    from sim.run.signals import Stopper
    from sim.run.watchdog import Watchdog

    # In a multi-process run every process trains; only process 0 logs and writes files.
    main_process = jax.process_index() == 0
    if not main_process:
        log = _quiet
    run_dir = cfg.resume or run_dir or cfg.run_dir or default_run_dir(cfg)
    lock = RunLock(run_dir) if main_process else None
    try:
        if lock and os.path.isdir(run_dir):
            lock.acquire(log)  # before anything in it is read, replaced or continued
        resume_from = _resume_point(cfg, run_dir, main_process, log)
        if lock:
            lock.sign()
        on_cpu = jax.devices()[0].platform == "cpu"
        watchdog = Watchdog(log, cfg.stall_timeout if on_cpu else 0.0,
                            os.path.join(run_dir, "stacks.txt") if main_process else None)
        with Stopper(log, cfg.stop_grace, f"python train.py --resume {run_dir}") as stopper:
            stopper.checkpoint = resume_from
            try:
                return _train(cfg, run_dir, resume_from, watchdog, stopper, lock, log, stop_after, main_process)
            except Exception as err:
                from sim.core.memory import out_of_memory

                oom = out_of_memory(err, watchdog.last, ("num_envs", "num_eval_envs", *cfg.loop.work_sizes), flag_of)
                if oom is None:
                    raise
                raise oom from None
            finally:
                watchdog.close()
    finally:
        if lock:
            lock.release()


@dataclasses.dataclass
class Run:
    """One training call: what it built, where it writes, and where it stands."""

    cfg: Config
    run_dir: str
    engine: Any
    programs: dict
    compile_s: float
    resume_from: Optional[str]
    watchdog: Any
    log: Callable
    main_process: bool
    started: float  # time.perf_counter() at the start of the call
    eval_key: Any  # [M, 2] for a population: each member's
    done_epochs: int = 0  # epochs before this call (a resumed run's)
    end_epoch: int = 0
    steps_done: int = 0  # env steps before this call's first epoch, as the state counted them
    train_s: float = 0.0
    wall_before: float = 0.0
    saved_path: Optional[str] = None
    resumed: Optional[dict] = None  # the checkpoint's meta, when resuming
    eval_return: Optional[float] = None
    save_buffer: bool = True
    stopper: Any = None  # signals.Stopper: what a stop signal asked for
    checkpoint_bytes: int = 0  # of one checkpoint, as the run writes them
    checkpoint_s: float = 0.0  # seconds spent writing checkpoints, the whole run's
    save_s: Optional[float] = None  # seconds the last checkpoint took (None: none written yet)
    saved_epoch: int = 0  # the epoch of the newest checkpoint
    said_spacing: bool = False  # whether the run said that the default spaces its checkpoints out
    sink: Any = None
    wandb_sink: Any = None
    bar: Any = None
    diverged: dict = dataclasses.field(default_factory=dict)  # population: member -> epoch it diverged in
    member_sinks: list = dataclasses.field(default_factory=list)  # population: one W&B run per member

    @property
    def population(self) -> bool:
        return self.engine.members > 1


def _train(cfg: Config, run_dir: str, resume_from: str | None, watchdog, stopper, lock, log, stop_after,
           main_process) -> dict:
    """The named steps of a training call: start (or resume) the state, open the run
    directory's sinks, run the epochs, end the run."""
    from sim.run.disk import DiskError
    from sim.run.signals import Stopped

    run, state = _start(cfg, run_dir, resume_from, watchdog, stopper, lock, log, main_process)
    _open_sinks(run, state)
    exit_code = 1
    try:
        try:
            record = _epoch_loop(run, state, stop_after)
            exit_code = 0
        finally:
            for sink in [run.wandb_sink, *run.member_sinks]:
                if sink:
                    sink.close(exit_code)
        record = _finish(run, record)
    except DiskError as err:
        raise DiskError(f"{err}; {_last_good(run)}") from None
    if stopper.requested and record and record["epoch"] < run.end_epoch:
        kept = (f"checkpoint {run.saved_path}; continue with: python train.py --resume {run.run_dir}" if run.saved_path
                else "no checkpoint (--checkpoint-every -1)")
        raise Stopped(f"stopped by {stopper.requested} after epoch {record['epoch']}/{run.end_epoch}: {kept}")
    return record


def _last_good(run: Run) -> str:
    if not run.saved_path:
        return "no checkpoint of the run was written"
    return (f"the last good checkpoint, {run.saved_path}, is intact: free some space and continue with: "
            f"python train.py --resume {run.run_dir}")


def _start(cfg: Config, run_dir: str, resume_from, watchdog, stopper, lock, log, main_process):
    """Builds the envs and the agent, compiles every program, checks that the checkpoints fit
    on disk, writes config.json and makes (or restores) the training state."""
    import jax

    from sim.run import checkpoint, disk, population
    from sim.run.signals import SAVING

    start = time.perf_counter()
    with watchdog.stage("building the envs and the agent"):
        engine = build_engine(cfg)  # config errors surface here, before anything is written
    log(f"built the envs and {cfg.agent_def.name} in {time.perf_counter() - start:.1f}s")
    init_key, eval_key = population.keys(cfg)  # each member's, as its single run makes them
    t0 = time.perf_counter()
    programs, template = _compile(engine, init_key, eval_key, fresh=not resume_from, watchdog=watchdog, log=log)
    run = Run(cfg, run_dir, engine, programs, time.perf_counter() - t0, resume_from, watchdog, log, main_process,
              start, eval_key, stopper=stopper)
    _plan_checkpoints(run, template)
    if main_process:
        derived = {"steps_per_iteration": cfg.steps_per_iteration, "iterations_per_epoch": cfg.iterations_per_epoch,
                   "num_epochs": cfg.num_epochs, "steps_per_epoch": cfg.steps_per_epoch,
                   "devices": engine.num_devices}
        if engine.members > 1:
            derived["population"] = [{"member": m.index, "seed": m.seed, "config": m.config, "sweep": dict(m.swept)}
                                     for m in population.members(cfg)]
        if lock.fd is None:  # the run dir did not exist when the run began: claim it now, then look again
            lock.acquire(log)
            _resume_point(cfg, run_dir, main_process, log)
            lock.sign()
        with stopper.phase(SAVING):
            disk.write_atomic(os.path.join(run_dir, "config.json"),
                              json.dumps(dict(cfg.to_dict(), run_dir=run_dir, derived=derived), indent=2))
    t0 = time.perf_counter()
    what = "restoring the checkpoint" if resume_from else "building the initial state"
    with watchdog.stage(what):
        if resume_from:
            state, run.resumed, run.resume_from = checkpoint.resume_state(engine, cfg, run_dir, init_key, log)
        else:
            state, run.resumed = programs["init"](init_key), None
            if "prefill" in programs:
                state = programs["prefill"](state)
        jax.block_until_ready(state)
    log(f"{what.replace('restoring', 'restored').replace('building', 'built')} in {time.perf_counter() - t0:.1f}s")
    members = ""
    if engine.members > 1:
        where = ""
        if engine.num_devices > 1:
            where = ", whole members spread over the devices" if engine.spread else ", each split over the devices"
        members = (f"{engine.members} members ({cfg.num_seeds} seeds x {engine.members // cfg.num_seeds} "
                   f"configurations{where}) x ")
    log(f"{cfg.env} ({engine.env.unwrapped.name}, {cfg.backend or 'default backend'}) / {cfg.agent_def.name}: "
        f"{members}{cfg.num_envs} envs on {engine.num_devices} {jax.devices()[0].platform} device(s), "
        f"{cfg.num_epochs} epochs x {cfg.steps_per_epoch:,} env steps; "
        f"compiled in {run.compile_s:.1f}s; run dir {run_dir}")
    return run, state


def _plan_checkpoints(run: Run, template) -> None:
    """What a checkpoint holds (the replay buffer, where --checkpoint-buffer auto finds room
    for it) and its size; raises disk.DiskSpaceError, before anything trains or is written,
    when the checkpoints the run keeps cannot fit in the free space of its directory."""
    import jax
    import numpy as np

    from sim.run import checkpoint, disk

    cfg = run.cfg
    keep = cfg.keep_checkpoints
    save_buffer = cfg.checkpoint_buffer == "on" or (cfg.checkpoint_buffer == "auto"
                                                     and checkpoint.buffer_fits(template, run.run_dir, keep))
    nbytes = checkpoint.state_bytes(template, save_buffer)
    problem = ""
    if run.main_process and cfg.checkpoint_every != -1:
        try:
            disk.check_fits(run.run_dir, nbytes, keep, len(checkpoint.list_checkpoints(run.run_dir)),
                            checkpoint.buffer_bytes(template) if save_buffer else 0)
        except disk.DiskSpaceError as err:
            problem = str(err)
    if jax.process_count() > 1:  # every process must gather the same leaves and stop alike: process 0 decides
        from jax.experimental import multihost_utils

        save_buffer, fits = (bool(v) for v in multihost_utils.broadcast_one_to_all(
            np.asarray([save_buffer, not problem])))
        if not fits and not problem:
            problem = "--run-dir: the run's checkpoints cannot fit in the free space of process 0's run dir"
    if problem:
        raise disk.DiskSpaceError(problem)
    run.save_buffer, run.checkpoint_bytes = save_buffer, nbytes
    if cfg.checkpoint_every != -1 and not save_buffer and cfg.loop.keeps_buffer:
        why = (f": it does not fit {keep + 1} times in the free disk space, or in half the host memory"
               if cfg.checkpoint_buffer == "auto" else "")
        run.log(f"checkpoints leave out the {disk.size(checkpoint.buffer_bytes(template))} replay buffer "
                f"(--checkpoint-buffer {cfg.checkpoint_buffer}{why})")


def _open_sinks(run: Run, state) -> None:
    """Where this call starts (epoch, env steps as the state counts them), what checkpoints
    keep, and the metrics file, progress bar and W&B run."""
    from sim.core.state import read_steps
    from sim.run.metrics import JsonlSink, ProgressBar, WandbSink

    cfg, resumed = run.cfg, run.resumed
    run.done_epochs = resumed["epoch"] if resumed else 0
    run.steps_done = read_steps(state.env_steps)
    run.train_s = resumed["extra"].get("train_s", 0.0) if resumed else 0.0
    run.wall_before = resumed["extra"].get("wall_s", 0.0) if resumed else 0.0
    run.checkpoint_s = resumed["extra"].get("checkpoint_s", 0.0) if resumed else 0.0
    run.saved_epoch = run.done_epochs
    # Epochs until the env-step budget is spent: cfg.num_epochs for a fresh run, and for a
    # resumed one whose --total-steps was raised, more epochs of the (new) epoch length.
    total_steps = cfg.prefill_steps + cfg.num_epochs * cfg.steps_per_epoch
    run.end_epoch = run.done_epochs + max(0, -(-(total_steps - run.steps_done) // cfg.steps_per_epoch))
    run.sink = JsonlSink(os.path.join(run.run_dir, "metrics.jsonl")) if run.main_process else None
    if resumed and run.sink:
        run.sink.truncate(run.done_epochs)  # drop lines of epochs past the checkpoint (a killed run's)
        run.log(f"resuming {run.run_dir} from {run.resume_from}: epoch {run.done_epochs}/{run.end_epoch}, "
                f"{run.steps_done:,} env steps")
    if resumed and run.population:
        run.diverged = _diverged_members(run.run_dir)
    run.saved_path = run.stopper.checkpoint = run.resume_from
    run.bar = ProgressBar(total_steps, enabled=cfg.progress and run.main_process)
    # Only with --wandb is wandb imported; it logs from here, between epochs, from process 0.
    if cfg.wandb and run.main_process and run.population:
        run.member_sinks = _member_wandb_sinks(run)
    elif cfg.wandb and run.main_process:
        run.wandb_sink = WandbSink(cfg, run.run_dir, dict(cfg.to_dict(), run_dir=run.run_dir), run.log)


def _epoch_loop(run: Run, state, stop_after: Optional[int]) -> dict:
    """Runs epochs until the budget is spent, a stop signal or `stop_after`; returns the last
    record. A stop signal skips the evaluation (time it may not have) and writes a checkpoint."""
    from sim.run.signals import sync_requested

    record: dict = {}
    # Seconds the next epoch is expected to take: the slowest so far (a resumed run's first
    # epoch: the mean of the epochs before it).
    slowest = run.train_s / run.done_epochs if run.done_epochs else None
    for index in range(run.done_epochs, run.end_epoch):
        if record and sync_requested(run.stopper.requested):  # a signal after the last epoch's checks
            if run.saved_epoch != record["epoch"] and run.cfg.checkpoint_every != -1:
                _save(run, state, record, last=True)
            break
        t0 = time.perf_counter()
        state, record = _run_epoch(run, state, index, expected=slowest)
        slowest = max(slowest or 0.0, time.perf_counter() - t0)
        signalled = sync_requested(run.stopper.requested) is not None
        last = (index == run.end_epoch - 1 or signalled
                or (stop_after is not None and index + 1 - run.done_epochs >= stop_after))
        if not signalled and (last or (run.cfg.eval_every and (index + 1) % run.cfg.eval_every == 0)):
            _evaluate(run, state, record)
        record["wall_s"] = run.wall_before + time.perf_counter() - run.started
        # Metrics first, then the checkpoint: a run killed in between resumes from the
        # previous checkpoint and drops this line, so the two never disagree.
        _write_metrics(run, record)
        run.bar.update(record["env_steps"], record["sps"], run.eval_return, run.train_s)
        if run.cfg.checkpoint_every != -1 and (last or _checkpoint_due(run, index)):
            _save(run, state, record, last)
        if last:
            break
    return record


# Share of the training time that the default checkpoints may take (--checkpoint-every unset).
CHECKPOINT_SHARE = 0.01
ASSUMED_WRITE_RATE = 200e6  # bytes/s of a checkpoint write before the run has timed one


def _checkpoint_due(run: Run, index: int) -> bool:
    """Whether epoch `index + 1` ends with a periodic checkpoint: every --checkpoint-every N
    epochs; by default after every epoch while all checkpoints so far and this one (as long
    as the last one took) stay within CHECKPOINT_SHARE of the training time."""
    every = run.cfg.checkpoint_every
    if every is not None:
        return every > 0 and (index + 1) % every == 0
    import jax

    due = _due_by_time(run, index)
    if jax.process_count() > 1:  # each process times its own epochs: process 0 decides for all
        import numpy as np
        from jax.experimental import multihost_utils

        due = bool(multihost_utils.broadcast_one_to_all(np.asarray(due)))
    return due


def _due_by_time(run: Run, index: int) -> bool:
    """The default cadence, by this process's timings; says once when it spaces them out."""
    estimate = run.save_s if run.save_s is not None else run.checkpoint_bytes / ASSUMED_WRITE_RATE
    if run.checkpoint_s + estimate <= CHECKPOINT_SHARE * run.train_s:
        return True
    if not run.said_spacing:
        run.said_spacing = True
        epoch_s = run.train_s / (index + 1)
        spacing = math.ceil(estimate / (CHECKPOINT_SHARE * epoch_s))
        buffer = " with the replay buffer" if run.cfg.loop.keeps_buffer and run.save_buffer else ""
        run.log(f"checkpoints: about {estimate:.2f}s each ({size(run.checkpoint_bytes)}{buffer}) against "
                f"{epoch_s:.2f}s epochs, so one about every {spacing} epochs (and at the end) keeps them under "
                f"{CHECKPOINT_SHARE:.0%} of the training time; --checkpoint-every N chooses")
    return False


def _run_epoch(run: Run, state, index: int, expected):
    """One call of the compiled epoch program; the epoch's record."""
    import jax

    from sim.core.metrics import NONFINITE
    from sim.core.state import read_steps
    from sim.run.metrics import to_python
    from sim.run.signals import EPOCH

    t0 = time.perf_counter()
    with (run.watchdog.stage(f"epoch {index + 1}", expected=expected and 3 * expected + 30),
          run.stopper.phase(EPOCH, expected, epoch=index + 1)):
        state, metrics = run.programs["epoch"](state)
        metrics = jax.device_get(metrics)
        env_steps = read_steps(metrics.pop("env_steps"))
        flags = metrics.pop(NONFINITE)  # they never reach metrics.jsonl
        metrics = to_python(metrics)
    epoch_s = time.perf_counter() - t0
    if run.population:
        _check_members_finite(run, flags, index + 1)
    else:
        _check_finite(flags, index + 1, run.cfg, run.run_dir, run.saved_path)  # before anything is written
    run.train_s += epoch_s
    record = {"epoch": index + 1, "env_steps": env_steps,
              "sps": run.cfg.steps_per_epoch / epoch_s, "train_s": run.train_s, "perf/compile_s": run.compile_s,
              **metrics}
    return state, record


def _write_metrics(run: Run, record: dict) -> None:
    """The epoch's lines: one run's record; or a population's, one line per member (its index,
    seed and swept values) and one per configuration (the mean over its seeds, and the spread
    of its eval return), with each member's record sent to its own W&B run."""
    from sim.run import population

    if not run.population:
        for sink in (run.sink, run.wandb_sink):
            if sink:
                sink.write(record)
        return
    members = population.member_records(run.cfg, record)
    for member in members:
        if member["member"] in run.diverged:
            member["diverged"] = run.diverged[member["member"]]
    configs = population.config_records(run.cfg, members, run.diverged)
    if run.sink:
        for line in members + configs:
            run.sink.write(line)
    for sink, member in zip(run.member_sinks, members):
        sink.write({k: v for k, v in member.items() if k not in ("member", "seed", "config", "sweep", "diverged")})


def _member_wandb_sinks(run: Run) -> list:
    """One W&B run per member, all in one group (--wandb-group, else the run directory's name),
    each with its own seed and swept values in its config: W&B's grouping shows the spread."""
    from sim.run import population
    from sim.run.metrics import WandbSink

    cfg = run.cfg
    group = cfg.wandb_group or os.path.basename(os.path.normpath(run.run_dir))
    sinks = []
    for m in population.members(cfg):
        config = dict(population.member_config(cfg, m).to_dict(), run_dir=run.run_dir, member=m.index,
                      population=group, sweep={population.flag(k): v for k, v in m.swept})
        sinks.append(WandbSink(cfg, run.run_dir, config, run.log, member=m.index, group=group))
    return sinks


def _diverged_members(run_dir: str) -> dict:
    """member -> epoch of divergence, from a resumed population's metrics.jsonl."""
    from sim.run.plots import read_metrics

    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return {}
    return {r["member"]: r["diverged"] for r in read_metrics(path) if "member" in r and r.get("diverged")}


def _check_members_finite(run: Run, flags: dict, epoch: int) -> None:
    """A population's members diverge alone (no traffic between them): each one that turns
    NaN or Inf is reported once and left out of the statistics while the others train on;
    raises Diverged when none is left. `flags`: each quantity's first non-finite iteration
    per member ([M], -1: never)."""
    from sim.run import population

    for m in population.members(run.cfg):
        hits = [(first[m.index], order, name) for order, (name, first) in enumerate(flags.items())
                if first[m.index] >= 0]
        if not hits or m.index in run.diverged:
            continue
        first, _, name = min(hits)
        run.diverged[m.index] = epoch
        run.log(f"member {m.index} (seed {m.seed}, {m.label}) diverged: {name} became NaN or Inf in epoch {epoch} "
                f"(iteration {first + 1}); it is left out of the statistics, the other members train on")
    if len(run.diverged) == run.engine.members:
        then = (f"its last checkpoint is {run.saved_path}" if run.saved_path else "no checkpoint was written")
        raise Diverged(f"diverged: every member of the population became NaN or Inf by epoch {epoch}; {then}; "
                       f"start again with a lower --learning-rate or --reward-scaling")


def _evaluate(run: Run, state, record: dict) -> None:
    import jax

    from sim.run.metrics import to_python

    this_key = run.engine.eval_key(run.eval_key, record["epoch"])
    t0 = time.perf_counter()
    with run.watchdog.stage(f"evaluating epoch {record['epoch']}"):
        record.update(to_python(jax.device_get(run.programs["evaluate"](state, this_key))))
    record["perf/eval_s"] = time.perf_counter() - t0
    run.eval_return = record["eval/episode_return"]
    if run.population:  # the bar shows the mean over the members still training
        returns = [r for k, r in enumerate(run.eval_return) if k not in run.diverged and r is not None]
        run.eval_return = sum(returns) / len(returns) if returns else None


def _save(run: Run, state, record: dict, last: bool) -> None:
    from sim.run import checkpoint
    from sim.run.signals import SAVING

    t0 = time.perf_counter()
    with run.watchdog.stage(f"writing the checkpoint of epoch {record['epoch']}"), run.stopper.phase(SAVING):
        run.saved_path = checkpoint.save(
            run.run_dir, state, epoch=record["epoch"], env_steps=record["env_steps"],
            config=checkpoint.config_dict(run.cfg), include_buffer=run.save_buffer, keep=run.cfg.keep_checkpoints,
            extra={"train_s": run.train_s, "wall_s": record["wall_s"],
                   "checkpoint_s": run.checkpoint_s + (time.perf_counter() - t0)})
        run.stopper.checkpoint, run.saved_epoch = run.saved_path, record["epoch"]
    run.save_s = run.stopper.save_s = time.perf_counter() - t0
    run.checkpoint_s += run.save_s
    if last:
        run.log(f"checkpoint of epoch {record['epoch']} written to {run.saved_path} in {run.save_s:.2f}s")


def _finish(run: Run, record: dict) -> dict:
    """The end of the run: what to do next, the learning curve, the summary line."""
    from sim.run.plots import plot_curve

    cfg = run.cfg
    if run.done_epochs >= run.end_epoch:
        run.log(f"nothing to train: {run.run_dir} already has {run.steps_done:,} env steps of --total-steps "
                f"{cfg.total_steps:,} (raise it to train longer)")
    elif record and record["epoch"] < run.end_epoch and run.saved_path and not run.stopper.requested:
        run.log(f"stopped after epoch {record['epoch']}/{run.end_epoch}; continue with: "
                f"python train.py --resume {run.run_dir}")
    if run.sink and os.path.exists(run.sink.path):
        plot_curve(run.sink.path, os.path.join(run.run_dir, "curve.png"))
        _summarize(run)
    steps = record.get("env_steps", 0)
    final = run.eval_return if run.eval_return is None else round(run.eval_return, 2)
    rate = steps / max(run.train_s, 1e-9)
    if run.population:
        run.log(f"done: {steps:,} env steps per member, {run.train_s:.1f}s training ({rate:,.0f} steps/s per member, "
                f"{rate * run.engine.members:,.0f} in all), compile {run.compile_s:.1f}s, final eval return {final} "
                f"(mean over members)")
    else:
        run.log(f"done: {steps:,} env steps, {run.train_s:.1f}s training ({rate:,.0f} steps/s), "
                f"compile {run.compile_s:.1f}s, final eval return {final}")
    return record


def _summarize(run: Run) -> None:
    """summary.json: every member's final evaluation and, per configuration, its statistics over
    the seeds, ranked; a population's ranked table is printed."""
    from sim.run import population
    from sim.run.plots import read_metrics

    from sim.run import disk

    summary = population.summary(run.cfg, read_metrics(run.sink.path))
    disk.write_atomic(os.path.join(run.run_dir, "summary.json"), json.dumps(summary, indent=2))
    if run.population:
        run.log(f"final evaluation per configuration, ranked by IQM over seeds ({run.run_dir}/summary.json):\n"
                + population.table(summary))


def _compile(engine, init_key, eval_key, fresh: bool, watchdog, log) -> dict:
    """Every program of the run, compiled from the state's shapes (nothing executes), then the
    memory check of all of them together; raises memory.ResourceError if they cannot fit."""
    import jax

    from sim.run import compile_cache
    from sim.core import memory

    template = engine.template(init_key)
    lowerings = {"init": lambda: engine.init.lower(init_key)} if fresh else {}
    if fresh and engine.loop.prefill is not None and engine.cfg.prefill_iterations:
        lowerings["prefill"] = lambda: engine.prefill.lower(template)
    lowerings["epoch"] = lambda: engine.epoch.lower(template)
    lowerings["evaluate"] = lambda: engine.evaluate.lower(template, eval_key)
    programs = {}
    for name, lower in lowerings.items():
        t0 = time.perf_counter()
        with watchdog.stage(f"compiling the {name} program"), compile_cache.watch() as cache:
            programs[name] = lower().compile()
        log(f"compiled the {name} program in {time.perf_counter() - t0:.1f}s ({compile_cache.describe(cache)})")
    parts, work = engine.memory_parts(template)
    device = jax.local_devices()[0]
    sharing = len(jax.local_devices()) if device.platform == "cpu" else 1
    peak, limit, what = memory.check(programs, parts, work, sharing, device, named=flag_of)
    log(f"memory: {memory.size(peak)} per device at the peak, of {memory.size(limit)} of {what}"
        + (f" shared by {sharing} devices" if sharing > 1 else ""))
    return programs, template


def _check_finite(flags: dict, epoch: int, cfg: Config, run_dir: str, saved_path: str | None) -> None:
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


def _quiet(*args, **kwargs) -> None:
    """The log of processes other than 0 in a multi-process run."""


# What a run writes into its directory: what --overwrite removes, and all it removes.
RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", "curve.png", "stacks.txt", "wandb_run.json", "wandb",
             "checkpoints")


def _resume_point(cfg: Config, run_dir: str, main_process: bool = True, log=print) -> str | None:
    """The newest checkpoint a run continues from (--resume), or None for a fresh run. A fresh
    run into a directory holding an earlier run is refused, unless --overwrite removes that
    run, or --resume-if-exists found no checkpoint in it (that run's files are replaced)."""
    from sim.run import checkpoint

    if cfg.resume:
        path = checkpoint.latest(run_dir)
        if path is None:
            raise checkpoint.CheckpointError(f"--resume: {run_dir} has no checkpoint to resume from")
        return path
    earlier = [name for name in RUN_FILES if os.path.exists(os.path.join(run_dir, name))]
    if earlier and not (cfg.overwrite or cfg.resume_if_exists):
        raise checkpoint.CheckpointError(
            f"--run-dir: {run_dir} holds an earlier run ({', '.join(earlier)}); continue it with "
            f"--resume {run_dir}, or start over in it with --overwrite")
    if earlier and main_process:
        import shutil

        if not cfg.overwrite:
            log(f"--resume-if-exists: {run_dir} holds no checkpoint: starting the run there, replacing what a run "
                f"that wrote none left ({', '.join(earlier)})")
        for name in earlier:
            path = os.path.join(run_dir, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    return None
