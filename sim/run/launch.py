"""The start of a training call: the run directory claimed (a fresh run into one holding an
earlier run refused), the envs, agent and loop built and what the agent reads from outside
its program (a teacher run) checked, every program compiled and checked to fit in memory, the
checkpoints checked to fit on disk; only then an earlier run the command line replaces
removed, config.json written, and the training state made or restored: a `Run` and its
state."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from sim.core import memory, pbt as core_pbt
from sim.core.state import read_steps
from sim.run.checkpoints import checkpoint, resume
from sim.run import compile_cache, disk
from sim.run.populations import pbt, population
from sim.run.policy import teacher
from sim.run.build import build_engine
from sim.run.config import Config, flag_of
from sim.run.context import Call
from sim.run.divergence import Divergence
from sim.run.plots import read_metrics
from sim.run.checkpoints.saving import Checkpoints
from sim.run.signals import SAVING

# What a run writes into its directory: what --overwrite removes, and all it removes.
RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", "curve.png", "stacks.txt", "wandb_run.json", "wandb",
             "tensorboard", "checkpoints")


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
    checkpoints: Checkpoints
    divergence: Divergence
    pbt: Any = None  # sim/run/populations/pbt.py: Pbt, the run's PBT steps (--pbt)
    sinks: Any = None  # sim/run/sinks.py: Sinks, opened once the state is there

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
        done = resumed["epoch"] if resumed else 0
        extra = resumed["extra"] if resumed else {}
        steps = read_steps(state.env_steps)
        end = done + max(0, -(-(total_steps(cfg) - steps) // cfg.steps_per_epoch))
        return cls(done, end, steps, extra.get("train_s", 0.0), extra.get("wall_s", 0.0))


def total_steps(cfg: Config) -> int:
    """The env steps a run takes in all, its prefill's included."""
    return cfg.prefill_steps + cfg.num_epochs * cfg.steps_per_epoch


def default_run_dir(cfg: Config) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{cfg.name}__{stamp}")


def start(call: Call, resume_from):
    """Builds the envs and the agent, compiles every program, checks that the checkpoints fit
    on disk, writes config.json and makes (or restores) the training state: (run, state,
    the resumed checkpoint's meta or None)."""
    cfg, run_dir, watchdog, log = call.cfg, call.run_dir, call.watchdog, call.log
    begin = time.perf_counter()
    with watchdog.stage("building the envs and the agent"):
        engine = build_engine(cfg, teacher.source(cfg))  # config errors surface here, before anything is written
        if cfg.agent_def.teacher:  # the teacher run, loaded and checked before compiling
            teacher.check(cfg.agent_config.teacher, engine.spec, cfg.env, run_dir,
                          other_env=cfg.agent_config.teacher_other_env)
    log(f"built the envs and {cfg.agent_def.name} in {time.perf_counter() - begin:.1f}s")
    init_key, eval_key = population.keys(cfg)  # each member's, as its single run makes them
    template = engine.template(init_key)
    if resume_from:
        with watchdog.stage("checking the checkpoint against this config"):
            resume.check_resume(cfg, run_dir, template, engine.droppable_paths(template))  # told before compiling
    t0 = time.perf_counter()
    programs = compile_programs(engine, init_key, template, eval_key, fresh=not resume_from, watchdog=watchdog,
                                log=log, pbt_plan=pbt.plan(cfg) if cfg.pbt.enabled else None)
    compile_s = time.perf_counter() - t0
    checkpoints = Checkpoints.plan(call, template, engine.droppable_paths(template), engine.loop.droppable,
                                   engine.episode_paths(template))
    if call.main_process:
        write_config(call, engine)
    state, resumed, resume_from = initial_state(call, engine, programs, init_key, resume_from)
    at = Position.of(cfg, resumed, state)
    checkpoints.resumed(resume_from, at.done_epochs, resumed["extra"].get("checkpoint_s", 0.0) if resumed else 0.0)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    records = read_metrics(metrics) if resumed and engine.members > 1 and os.path.exists(metrics) else []
    divergence = (Divergence.resumed(cfg, engine.members, run_dir, log, records, at.done_epochs) if records
                  else Divergence(cfg, engine.members, run_dir, log))
    steps = None
    if cfg.pbt.enabled:
        steps = (pbt.Pbt.resumed(cfg, programs["pbt"], log, records, at.done_epochs) if resumed
                 else pbt.Pbt(cfg, programs["pbt"], log))
    run = Run(cfg, run_dir, engine, programs, compile_s, watchdog, log, call.main_process, begin, eval_key,
              call.stopper, at, checkpoints, divergence, steps)
    log(describe(run))
    return run, state, resumed


def initial_state(call: Call, engine, programs: dict, init_key, resume_from):
    """(state, the resumed checkpoint's meta or None, its path): a fresh state (prefilled) or
    the newest good checkpoint's."""
    cfg, run_dir, watchdog, log = call.cfg, call.run_dir, call.watchdog, call.log
    t0 = time.perf_counter()
    what = "restoring the checkpoint" if resume_from else "building the initial state"
    with watchdog.stage(what):
        if resume_from:
            state, resumed, resume_from = resume.resume_state(engine, cfg, run_dir, init_key, log)
        else:
            state, resumed = programs["init"](init_key, programs["starts"](init_key)), None
            if "prefill" in programs:
                state = programs["prefill"](state)
        jax.block_until_ready(state)
    log(f"{what.replace('restoring', 'restored').replace('building', 'built')} in {time.perf_counter() - t0:.1f}s")
    return state, resumed, resume_from


def compile_programs(engine, init_key, template, eval_key, fresh: bool, watchdog, log, pbt_plan=None) -> dict:
    """Every program of the run, compiled from the state's shapes `template` (`engine.template`;
    nothing executes), then the memory check of all of them together; raises
    memory.ResourceError if they cannot fit. `pbt_plan`: the population's PBT step too."""
    starts = engine.template(init_key, engine.starts)  # the envs' start states, as `starts` returns them
    lowerings = {"starts": lambda: engine.starts.lower(init_key)}
    if fresh:
        lowerings["init"] = lambda: engine.init_from.lower(init_key, starts)
    lowerings["renew"] = lambda: engine.renew.lower(template, starts)
    if fresh and engine.loop.prefill_iterations:
        lowerings["prefill"] = lambda: engine.prefill.lower(template)
    lowerings["epoch"] = lambda: engine.epoch.lower(template)
    lowerings["evaluate"] = lambda: engine.evaluate.lower(template, eval_key)
    if pbt_plan is not None:
        fitness = jax.ShapeDtypeStruct((engine.members,), jnp.float32)
        key = jax.eval_shape(lambda: jax.random.PRNGKey(0))
        lowerings["pbt"] = lambda: core_pbt.make_program(engine, pbt_plan).lower(template, fitness, key)
    programs = _compile_side_by_side(lowerings, watchdog, log)
    parts, work = engine.memory_parts(template)
    device = jax.local_devices()[0]
    sharing = len(jax.local_devices()) if device.platform == "cpu" else 1
    peak, limit, what = memory.check(programs, parts, work, sharing, device, named=flag_of)
    log(f"memory: {memory.size(peak)} per device at the peak, of {memory.size(limit)} of {what}"
        + (f" shared by {sharing} devices" if sharing > 1 else ""))
    return programs


def _compile_side_by_side(lowerings: dict, watchdog, log) -> dict:
    """{name: compiled program} of `lowerings` ({name: () -> jax Lowered}): traced in this thread
    one after the other, the epoch program first, and each compiled in a thread of its own as
    soon as it is traced, so the others' tracing runs beside the epoch's compile. XLA compiles
    with Python's lock released, mostly on one core, and a run's programs each hold the whole
    physics (a TPU took 106, 164 and 54 s for Go1's init, epoch and evaluate programs one after
    the other): side by side, the longest sets the wait, and the epoch's is the longest."""
    main = "epoch" if "epoch" in lowerings else next(iter(lowerings))
    order = [main, *(name for name in lowerings if name != main)]

    def compile_one(lowered, traced_s):
        t0 = time.perf_counter()
        with compile_cache.watch() as cache:  # counts this thread's compilations
            program = lowered.compile()
        return program, traced_s + time.perf_counter() - t0, cache

    futures = {}
    with ThreadPoolExecutor(len(order)) as pool:
        for name in order:
            t0 = time.perf_counter()
            with watchdog.stage(f"tracing the {name} program"):
                lowered = lowerings[name]()
            futures[name] = pool.submit(compile_one, lowered, time.perf_counter() - t0)
        names = ", ".join(lowerings)
        with watchdog.stage(f"compiling the {names} program{'s' if len(lowerings) > 1 else ''}"):
            done = {name: futures[name].result() for name in order}
    programs = {}
    for name in lowerings:
        programs[name], took, cache = done[name]
        log(f"compiled the {name} program in {took:.1f}s ({compile_cache.describe(cache)})")
    return programs


def write_config(call: Call, engine) -> None:
    """config.json: the run's config and what follows from it (sizes, devices, members)."""
    cfg, run_dir, stopper, lock, log = call.cfg, call.run_dir, call.stopper, call.lock, call.log
    derived = {"steps_per_iteration": cfg.steps_per_iteration, "iterations_per_epoch": cfg.iterations_per_epoch,
               "num_epochs": cfg.num_epochs, "steps_per_epoch": cfg.steps_per_epoch,
               "devices": engine.num_devices}
    if engine.members > 1:
        derived["population"] = [{"member": m.index, "seed": m.seed, "config": m.config, "sweep": dict(m.swept)}
                                 for m in population.members(cfg)]
    if lock.fd is None:  # the run dir did not exist when the run began: claim it now, then look again
        lock.acquire(log)
        resume_point(cfg, run_dir)
        lock.sign()
    with stopper.phase(SAVING):
        clear_earlier(cfg, run_dir, log)  # every check has passed: what --overwrite replaces goes now
        disk.write_atomic(os.path.join(run_dir, "config.json"),
                          json.dumps(dict(cfg.to_dict(), run_dir=run_dir, derived=derived), indent=2))


def describe(run: Run) -> str:
    """The run's line: env, agent, members, envs, devices, epochs, compile time, run dir."""
    cfg, engine = run.cfg, run.engine
    members = ""
    if engine.members > 1:
        where = ""
        if engine.num_devices > 1:
            where = ", whole members spread over the devices" if engine.spread else ", each split over the devices"
        seeds = cfg.population.num_seeds
        members = f"{engine.members} members ({seeds} seeds x {engine.members // seeds} configurations{where}) x "
    return (f"{cfg.env} ({engine.env.unwrapped.name}, {cfg.backend or 'default backend'}) / {cfg.agent_def.name}: "
            f"{members}{cfg.num_envs} envs on {engine.num_devices} {jax.devices()[0].platform} device(s), "
            f"{epochs(run.at)} x {cfg.steps_per_epoch:,} env steps; "
            f"compiled in {run.compile_s:.1f}s; run dir {run.run_dir}")


def epochs(at: Position) -> str:
    """The epochs a call trains: "6 epochs" (a fresh run), "epochs 5 to 7" (a resumed one)."""
    if not at.done_epochs:
        return f"{at.end_epoch} epochs"
    if at.done_epochs >= at.end_epoch:
        return f"no epochs (all {at.end_epoch} done)"
    if at.end_epoch == at.done_epochs + 1:
        return f"epoch {at.end_epoch}"
    return f"epochs {at.done_epochs + 1} to {at.end_epoch}"


def resume_point(cfg: Config, run_dir: str) -> str | None:
    """The newest checkpoint a run continues from (--resume), or None for a fresh run. A fresh
    run into a directory holding an earlier run is refused, unless --overwrite or
    --resume-if-exists (which found no checkpoint in it) lets it replace that run; nothing is
    removed here: `clear_earlier` removes it once everything else is checked."""
    if cfg.run.resume:
        path = checkpoint.latest(run_dir)
        if path is None:
            raise checkpoint.CheckpointError(f"--resume: {run_dir} has no checkpoint to resume from")
        return path
    earlier = earlier_run(run_dir)
    if earlier and not (cfg.run.overwrite or cfg.run.resume_if_exists):
        raise checkpoint.CheckpointError(
            f"--run-dir: {run_dir} holds an earlier run ({', '.join(earlier)}); continue it with "
            f"--resume {run_dir}, or start over in it with --overwrite")
    return None


def earlier_run(run_dir: str) -> list[str]:
    """The files of an earlier run in `run_dir` (`RUN_FILES` that exist)."""
    return [name for name in RUN_FILES if os.path.exists(os.path.join(run_dir, name))]


def clear_earlier(cfg: Config, run_dir: str, log=print) -> None:
    """Removes the earlier run a fresh run replaces (--overwrite, or --resume-if-exists where it
    found no checkpoint): its `RUN_FILES` only. Called once every value of the command line is
    checked, every program compiled and fitted, just before config.json is written."""
    earlier = [] if cfg.run.resume else earlier_run(run_dir)
    if not earlier:
        return
    if not cfg.run.overwrite:
        log(f"--resume-if-exists: {run_dir} holds no checkpoint: starting the run there, replacing what a run "
            f"that wrote none left ({', '.join(earlier)})")
    for name in earlier:
        path = os.path.join(run_dir, name)
        with disk.writing(path):
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
