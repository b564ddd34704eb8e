"""A training run around the compiled programs: start or resume the state, open the run
directory's sinks, run the epochs (evaluations, checkpoints, divergence checks, Ctrl-C), end
the run. `train.py` is its command line."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Callable, Optional

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


def _train(cfg: Config, run_dir: str, resume_from: str | None, watchdog, stopper, lock, log, stop_after,
           main_process) -> dict:
    """The named steps of a training call: start (or resume) the state, open the run
    directory's sinks, run the epochs, end the run."""
    from sim.run.disk import DiskError
    from sim.run.signals import Stopped

    run, state, resumed = _start(cfg, run_dir, resume_from, watchdog, stopper, lock, log, main_process)
    run = dataclasses.replace(run, sinks=Sinks.open(run, resumed is not None))
    exit_code = 1
    try:
        try:
            record = _epoch_loop(run, state, stop_after)
            exit_code = 0
        finally:
            run.sinks.close(exit_code)
        record = _finish(run, record)
    except DiskError as err:
        raise DiskError(f"{err}; {run.checkpoints.last_good()}") from None
    if stopper.requested and record and record["epoch"] < run.at.end_epoch:
        saved = run.checkpoints.path
        kept = (f"checkpoint {saved}; continue with: python train.py --resume {run.run_dir}" if saved
                else "no checkpoint (--checkpoint-every -1)")
        raise Stopped(f"stopped by {stopper.requested} after epoch {record['epoch']}/{run.at.end_epoch}: {kept}")
    return record


@dataclasses.dataclass(frozen=True)
class Run:
    """One training call: what it built and where it writes (fixed for the call), with its
    moving parts: where it stands, its checkpoints, its members' divergence, its sinks."""

    cfg: Config
    run_dir: str
    engine: Any
    programs: dict
    compile_s: float
    watchdog: Any
    log: Callable
    main_process: bool
    started: float  # time.perf_counter() at the start of the call
    eval_key: Any  # [M, 2] for a population: each member's
    stopper: Any  # signals.Stopper: what a stop signal asked for
    at: "Position"
    checkpoints: Any  # saving.Checkpoints
    divergence: "Divergence"
    pbt: Any = None  # sim/run/pbt.py: Pbt, the run's PBT steps (--pbt)
    sinks: Optional["Sinks"] = None  # opened once the state is there

    @property
    def population(self) -> bool:
        return self.engine.members > 1


@dataclasses.dataclass
class Position:
    """Where a training call stands: epochs and env steps before it, the epoch it ends at, the
    training and wall seconds so far, the latest evaluation return (a population's: the mean
    over the members still training)."""

    done_epochs: int  # epochs before this call (a resumed run's)
    end_epoch: int
    steps_done: int  # env steps before this call's first epoch, as the state counted them
    train_s: float
    wall_before: float
    eval_return: Optional[float] = None

    @classmethod
    def of(cls, cfg: Config, resumed: Optional[dict], state) -> "Position":
        """A fresh run's start, or a resumed one's: its epochs until the env-step budget is
        spent are cfg.num_epochs for a fresh run, and for a resumed one whose --total-steps
        was raised, more epochs of the (new) epoch length."""
        from sim.core.state import read_steps

        done = resumed["epoch"] if resumed else 0
        extra = resumed["extra"] if resumed else {}
        steps = read_steps(state.env_steps)
        end = done + max(0, -(-(total_steps(cfg) - steps) // cfg.steps_per_epoch))
        return cls(done, end, steps, extra.get("train_s", 0.0), extra.get("wall_s", 0.0))


def total_steps(cfg: Config) -> int:
    """The env steps a run takes in all, its prefill's included."""
    return cfg.prefill_steps + cfg.num_epochs * cfg.steps_per_epoch


def _start(cfg: Config, run_dir: str, resume_from, watchdog, stopper, lock, log, main_process):
    """Builds the envs and the agent, compiles every program, checks that the checkpoints fit
    on disk, writes config.json and makes (or restores) the training state."""
    import jax

    from sim.run import checkpoint, pbt, population
    from sim.run.saving import Checkpoints

    start = time.perf_counter()
    with watchdog.stage("building the envs and the agent"):
        engine = build_engine(cfg)  # config errors surface here, before anything is written
    log(f"built the envs and {cfg.agent_def.name} in {time.perf_counter() - start:.1f}s")
    init_key, eval_key = population.keys(cfg)  # each member's, as its single run makes them
    template = engine.template(init_key)
    if resume_from:
        with watchdog.stage("checking the checkpoint against this config"):
            checkpoint.check_resume(cfg, run_dir, template)  # a wrong command line: told before compiling
    t0 = time.perf_counter()
    programs = _compile(engine, init_key, template, eval_key, fresh=not resume_from, watchdog=watchdog, log=log,
                        pbt_plan=pbt.plan(cfg) if cfg.pbt else None)
    compile_s = time.perf_counter() - t0
    checkpoints = Checkpoints.plan(cfg, run_dir, template, engine.droppable_paths(template), engine.loop.droppable,
                                   main_process, stopper, watchdog, log)
    if main_process:
        _write_config(cfg, run_dir, engine, stopper, lock, log)
    t0 = time.perf_counter()
    what = "restoring the checkpoint" if resume_from else "building the initial state"
    with watchdog.stage(what):
        if resume_from:
            state, resumed, resume_from = checkpoint.resume_state(engine, cfg, run_dir, init_key, log)
        else:
            state, resumed = programs["init"](init_key), None
            if "prefill" in programs:
                state = programs["prefill"](state)
        jax.block_until_ready(state)
    log(f"{what.replace('restoring', 'restored').replace('building', 'built')} in {time.perf_counter() - t0:.1f}s")
    at = Position.of(cfg, resumed, state)
    checkpoints.resumed(resume_from, at.done_epochs, resumed["extra"].get("checkpoint_s", 0.0) if resumed else 0.0)
    divergence = Divergence(cfg, engine.members, run_dir, log)
    records = _records(run_dir) if resumed and engine.members > 1 else []
    if records:
        divergence.members = _diverged_members(records, at.done_epochs)
    steps = None
    if cfg.pbt:
        steps = (pbt.Pbt.resumed(cfg, programs["pbt"], log, records, at.done_epochs) if resumed
                 else pbt.Pbt(cfg, programs["pbt"], log))
    run = Run(cfg, run_dir, engine, programs, compile_s, watchdog, log, main_process, start, eval_key, stopper,
              at, checkpoints, divergence, steps)
    log(_describe(run))
    return run, state, resumed


def _write_config(cfg: Config, run_dir: str, engine, stopper, lock, log) -> None:
    """config.json: the run's config and what follows from it (sizes, devices, members)."""
    from sim.run import disk, population
    from sim.run.signals import SAVING

    derived = {"steps_per_iteration": cfg.steps_per_iteration, "iterations_per_epoch": cfg.iterations_per_epoch,
               "num_epochs": cfg.num_epochs, "steps_per_epoch": cfg.steps_per_epoch,
               "devices": engine.num_devices}
    if engine.members > 1:
        derived["population"] = [{"member": m.index, "seed": m.seed, "config": m.config, "sweep": dict(m.swept)}
                                 for m in population.members(cfg)]
    if lock.fd is None:  # the run dir did not exist when the run began: claim it now, then look again
        lock.acquire(log)
        _resume_point(cfg, run_dir, True, log)
        lock.sign()
    with stopper.phase(SAVING):
        disk.write_atomic(os.path.join(run_dir, "config.json"),
                          json.dumps(dict(cfg.to_dict(), run_dir=run_dir, derived=derived), indent=2))


def _describe(run: Run) -> str:
    """The run's line: env, agent, members, envs, devices, epochs, compile time, run dir."""
    import jax

    cfg, engine = run.cfg, run.engine
    members = ""
    if engine.members > 1:
        where = ""
        if engine.num_devices > 1:
            where = ", whole members spread over the devices" if engine.spread else ", each split over the devices"
        members = (f"{engine.members} members ({cfg.num_seeds} seeds x {engine.members // cfg.num_seeds} "
                   f"configurations{where}) x ")
    return (f"{cfg.env} ({engine.env.unwrapped.name}, {cfg.backend or 'default backend'}) / {cfg.agent_def.name}: "
            f"{members}{cfg.num_envs} envs on {engine.num_devices} {jax.devices()[0].platform} device(s), "
            f"{cfg.num_epochs} epochs x {cfg.steps_per_epoch:,} env steps; "
            f"compiled in {run.compile_s:.1f}s; run dir {run.run_dir}")


@dataclasses.dataclass
class Sinks:
    """Where epochs' records go: metrics.jsonl (process 0), the progress bar, and W&B (one run,
    or one per member of a population)."""

    jsonl: Any
    bar: Any
    wandb: list  # WandbSink: one, or one per member

    @classmethod
    def open(cls, run: Run, resumed: bool) -> "Sinks":
        from sim.run.metrics import JsonlSink, ProgressBar, WandbSink

        cfg = run.cfg
        jsonl = JsonlSink(os.path.join(run.run_dir, "metrics.jsonl")) if run.main_process else None
        if resumed and jsonl:
            jsonl.truncate(run.at.done_epochs)  # drop lines of epochs past the checkpoint (a killed run's)
            run.log(f"resuming {run.run_dir} from {run.checkpoints.path}: epoch {run.at.done_epochs}/"
                    f"{run.at.end_epoch}, {run.at.steps_done:,} env steps")
        bar = ProgressBar(total_steps(cfg), enabled=cfg.progress and run.main_process)
        # Only with --wandb is wandb imported; it logs from here, between epochs, from process 0.
        wandb = []
        if cfg.wandb and run.main_process and run.population:
            wandb = _member_wandb_sinks(run)
        elif cfg.wandb and run.main_process:
            wandb = [WandbSink(cfg, run.run_dir, dict(cfg.to_dict(), run_dir=run.run_dir), run.log)]
        return cls(jsonl, bar, wandb)

    def write(self, run: Run, record: dict) -> None:
        """The epoch's lines: one run's record; or a population's, one line per member (its
        index, seed and swept values) and one per configuration (the mean over its seeds, and
        the spread of its eval return), with each member's record sent to its own W&B run."""
        from sim.run import population

        if not run.population:
            for sink in (self.jsonl, *self.wandb):
                if sink:
                    sink.write(record)
            return
        diverged = run.divergence.members
        members = population.member_records(run.cfg, record)
        for member in members:
            if member["member"] in diverged:
                member["diverged"] = diverged[member["member"]]
        # Under --pbt members leave their starting configuration: no per-configuration lines.
        configs = [] if run.cfg.pbt else population.config_records(run.cfg, members, diverged)
        if self.jsonl:
            for line in members + configs:
                self.jsonl.write(line)
        for sink, member in zip(self.wandb, members):
            sink.write({k: v for k, v in member.items() if k not in ("member", "seed", "config", "sweep", "diverged")})

    def close(self, exit_code: int) -> None:
        for sink in self.wandb:
            sink.close(exit_code)


def _epoch_loop(run: Run, state, stop_after: Optional[int]) -> dict:
    """Runs epochs until the budget is spent, a stop signal or `stop_after`; returns the last
    record. A stop signal skips the evaluation (time it may not have) and writes a checkpoint."""
    from sim.run.signals import sync_requested

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
        state, record = _run_epoch(run, state, index, expected=slowest)
        slowest = max(slowest or 0.0, time.perf_counter() - t0)
        signalled = sync_requested(run.stopper.requested) is not None
        last = (index == at.end_epoch - 1 or signalled
                or (stop_after is not None and index + 1 - at.done_epochs >= stop_after))
        # A PBT step is due by the epoch alone (not by where this call stops), so a resumed run
        # steps where an uninterrupted one does; a stop signal skips it with the evaluation.
        step = run.pbt is not None and not signalled and run.pbt.due(index + 1, index == at.end_epoch - 1)
        if not signalled and (last or (run.cfg.eval_every and (index + 1) % run.cfg.eval_every == 0)
                              or (step and run.pbt.needs_eval)):
            _evaluate(run, state, record)
        if run.pbt is not None:
            run.pbt.observe(record)
            record.update(run.pbt.values(state))  # the values each member trained with this epoch
            if step:
                state = run.pbt.step(state, record, run.divergence)
        record["wall_s"] = at.wall_before + time.perf_counter() - run.started
        # Metrics first, then the checkpoint: a run killed in between resumes from the
        # previous checkpoint and drops this line, so the two never disagree.
        run.sinks.write(run, record)
        run.sinks.bar.update(record["env_steps"], record["sps"], at.eval_return, at.train_s)
        if checkpoints.enabled and (last or checkpoints.due(index, at.train_s)):
            checkpoints.save(state, record, at.train_s, last)
        if last:
            break
    return record


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
    run.divergence.check(flags, index + 1, run.checkpoints.path)  # before anything is written
    run.at.train_s += epoch_s
    record = {"epoch": index + 1, "env_steps": env_steps,
              "sps": run.cfg.steps_per_epoch / epoch_s, "train_s": run.at.train_s, "perf/compile_s": run.compile_s,
              **metrics}
    return state, record


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


def _records(run_dir: str) -> list[dict]:
    """A resumed run's metrics.jsonl records ([] where it has none)."""
    from sim.run.plots import read_metrics

    path = os.path.join(run_dir, "metrics.jsonl")
    return read_metrics(path) if os.path.exists(path) else []


def _diverged_members(records: list[dict], done_epochs: int) -> dict:
    """member -> epoch of divergence of the members whose latest line up to `done_epochs`
    says they diverged (a PBT step may have replaced one since)."""
    latest = {r["member"]: r for r in records if "member" in r and r.get("epoch", 0) <= done_epochs}
    return {m: r["diverged"] for m, r in latest.items() if r.get("diverged")}


class Divergence:
    """The run's check for NaN and Inf after each epoch. One run stops at its first non-finite
    epoch (Diverged). A population's members diverge alone (no traffic between them): each
    one that turns NaN or Inf is reported once and left out of the statistics while the
    others train on; Diverged is raised when none is left."""

    def __init__(self, cfg: Config, size: int, run_dir: str, log: Callable):
        self.cfg, self.size, self.run_dir, self.log = cfg, size, run_dir, log
        self.members: dict = {}  # population: member -> epoch it diverged in

    def check(self, flags: dict, epoch: int, saved_path: Optional[str]) -> None:
        """`flags`: each quantity's first non-finite iteration (-1: never), per member ([M])
        for a population."""
        if self.size > 1:
            self._check_members(flags, epoch, saved_path)
        else:
            _check_finite(flags, epoch, self.cfg, self.run_dir, saved_path)

    def _check_members(self, flags: dict, epoch: int, saved_path: Optional[str]) -> None:
        from sim.run import population

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


def _evaluate(run: Run, state, record: dict) -> None:
    import jax

    from sim.run.metrics import to_python

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


def _finish(run: Run, record: dict) -> dict:
    """The end of the run: what to do next, the learning curve, the summary line."""
    from sim.run.plots import plot_curve

    cfg, at = run.cfg, run.at
    if at.done_epochs >= at.end_epoch:
        run.log(f"nothing to train: {run.run_dir} already has {at.steps_done:,} env steps of --total-steps "
                f"{cfg.total_steps:,} (raise it to train longer)")
    elif record and record["epoch"] < at.end_epoch and run.checkpoints.path and not run.stopper.requested:
        run.log(f"stopped after epoch {record['epoch']}/{at.end_epoch}; continue with: "
                f"python train.py --resume {run.run_dir}")
    jsonl = run.sinks.jsonl
    if jsonl and os.path.exists(jsonl.path):
        plot_curve(jsonl.path, os.path.join(run.run_dir, "curve.png"))
        _summarize(run)
    steps = record.get("env_steps", 0)
    final = at.eval_return if at.eval_return is None else round(at.eval_return, 2)
    rate = steps / max(at.train_s, 1e-9)
    if run.population:
        run.log(f"done: {steps:,} env steps per member, {at.train_s:.1f}s training ({rate:,.0f} steps/s per member, "
                f"{rate * run.engine.members:,.0f} in all), compile {run.compile_s:.1f}s, final eval return {final} "
                f"(mean over members)")
    else:
        run.log(f"done: {steps:,} env steps, {at.train_s:.1f}s training ({rate:,.0f} steps/s), "
                f"compile {run.compile_s:.1f}s, final eval return {final}")
    return record


def _summarize(run: Run) -> None:
    """summary.json: every member's final evaluation and, per configuration, its statistics over
    the seeds, ranked; a population's ranked table is printed."""
    from sim.run import disk, pbt, population
    from sim.run.plots import read_metrics

    records = read_metrics(run.sinks.jsonl.path)
    summary = population.summary(run.cfg, records)
    if run.cfg.pbt:
        summary, text = pbt.summarize(run.cfg, summary, records)
        run.log(f"final evaluation per member, ranked (PBT; {run.run_dir}/summary.json):\n{text}")
    elif run.population:
        run.log(f"final evaluation per configuration, ranked by IQM over seeds ({run.run_dir}/summary.json):\n"
                + population.table(summary))
    disk.write_atomic(os.path.join(run.run_dir, "summary.json"), json.dumps(summary, indent=2))


def _compile(engine, init_key, template, eval_key, fresh: bool, watchdog, log, pbt_plan=None) -> dict:
    """Every program of the run, compiled from the state's shapes `template` (`engine.template`;
    nothing executes), then the memory check of all of them together; raises
    memory.ResourceError if they cannot fit. `pbt_plan`: the population's PBT step too."""
    import jax
    import jax.numpy as jnp

    from sim.core import pbt

    from sim.run import compile_cache
    from sim.core import memory

    lowerings = {"init": lambda: engine.init.lower(init_key)} if fresh else {}
    if fresh and engine.loop.prefill_iterations:
        lowerings["prefill"] = lambda: engine.prefill.lower(template)
    lowerings["epoch"] = lambda: engine.epoch.lower(template)
    lowerings["evaluate"] = lambda: engine.evaluate.lower(template, eval_key)
    if pbt_plan is not None:
        fitness = jax.ShapeDtypeStruct((engine.members,), jnp.float32)
        key = jax.eval_shape(lambda: jax.random.PRNGKey(0))
        lowerings["pbt"] = lambda: pbt.make_program(engine, pbt_plan).lower(template, fitness, key)
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
    return programs


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
