"""Train an agent on an environment in one compiled, donated, on-device program.

    python train.py --env humanoid --num-envs 4096
    python train.py --help          # every flag, with the chosen env's tuned defaults
    python train.py --resume runs/<run>                  # continue from its newest checkpoint
    python train.py --play runs/<run> --video out.mp4    # evaluate its policy, film an episode
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import signal
import sys
import time

from sim.run.config import AGENTS, Config, ConfigError, defaults_for

DESCRIPTION = __doc__.strip().splitlines()[0]


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


def parse_config(argv: list[str]) -> Config:
    """Parses flags on top of the tuned defaults of the chosen --env and --agent."""
    import tyro

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--env", default=None)
    pre.add_argument("--agent", default=None)
    pre.add_argument("--resume", default=None)
    pre.add_argument("--play", default=None)
    pre.add_argument("--run-dir", default=None)
    known, _ = pre.parse_known_args(argv)
    if known.agent is not None and known.agent not in AGENTS:
        raise UsageError(f"--agent: unknown agent {known.agent!r}; valid agents: {', '.join(AGENTS)}")
    source = known.resume or known.play
    if source:
        # A resumed or played run starts from its own saved config; flags given override it.
        from sim.run.checkpoint import CheckpointError, load_run_config

        flag = "--resume" if known.resume else "--play"
        if known.resume and known.run_dir and os.path.abspath(known.run_dir) != os.path.abspath(known.resume):
            raise UsageError("--run-dir: a resumed run continues in its own directory (the --resume one)")
        try:
            default = Config(**load_run_config(source))
        except CheckpointError as err:
            raise UsageError(f"{flag}: {err}") from None
    else:
        default = defaults_for(known.env or "cartpole", known.agent or "ppo")
    # tyro reports parse errors in a multi-line box; keep its first two lines as one.
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            cfg = tyro.cli(Config, args=argv, default=default, description=DESCRIPTION)
    except SystemExit as exit_:
        text = captured.getvalue()
        if exit_.code in (0, None):
            sys.stderr.write(text)
            raise
        lines = [line.strip(" \u2502\u256d\u256e\u2570\u256f\u2500") for line in text.splitlines()]
        lines = [line for line in lines if line]
        head = lines[1] if len(lines) > 1 and lines[1].startswith(lines[0]) else ": ".join(lines[:2])
        raise UsageError(f"{head} (see --help)") from None
    sys.stderr.write(captured.getvalue())
    try:
        return cfg.validate()
    except ConfigError as err:
        raise UsageError(str(err)) from None


def default_run_dir(cfg: Config) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{cfg.env}__{cfg.agent}__{cfg.seed}__{stamp}")


class Diverged(Exception):
    """Training produced NaN or Inf: printed as one line, exit code DIVERGED."""


DIVERGED = 3  # exit code of a run stopped at its first non-finite epoch


def train(cfg: Config, run_dir: str | None = None, log=print, stop_after: int | None = None) -> dict:
    """Runs a whole training; returns the last metrics record. Writes config.json,
    metrics.jsonl, checkpoints/ and curve.png under the run directory.

    cfg.resume: continue that run directory from its newest checkpoint (appending to its
    metrics.jsonl). stop_after: stop after this many epochs of this call, as Ctrl-C does
    (evaluate, checkpoint, return); for time-sliced jobs and tests."""
    import jax

    from sim.run.watchdog import Watchdog

    # In a multi-process run every process trains; only process 0 logs and writes files.
    main_process = jax.process_index() == 0
    if not main_process:
        log = _quiet
    run_dir = cfg.resume or run_dir or cfg.run_dir or default_run_dir(cfg)
    resume_from = _resume_point(cfg, run_dir, main_process)
    on_cpu = jax.devices()[0].platform == "cpu"
    watchdog = Watchdog(log, cfg.stall_timeout if on_cpu else 0.0,
                        os.path.join(run_dir, "stacks.txt") if main_process else None)
    try:
        return _train(cfg, run_dir, resume_from, watchdog, log, stop_after, main_process)
    except Exception as err:
        from sim.core.memory import out_of_memory

        oom = out_of_memory(err, watchdog.last, cfg)
        if oom is None:
            raise
        raise oom from None
    finally:
        watchdog.close()


def _train(cfg: Config, run_dir: str, resume_from: str | None, watchdog, log, stop_after, main_process) -> dict:
    import jax
    import numpy as np

    from sim.run import checkpoint
    from sim.core.engine import Engine
    from sim.run.metrics import JsonlSink, ProgressBar, WandbSink, to_python
    from sim.run.plots import plot_curve

    start = time.perf_counter()
    with watchdog.stage("building the envs and the agent"):
        engine = Engine(cfg)  # config errors surface here, before anything is written
    log(f"built the envs and the agent in {time.perf_counter() - start:.1f}s")
    derived = {"steps_per_iteration": cfg.steps_per_iteration, "iterations_per_epoch": cfg.iterations_per_epoch,
               "num_epochs": cfg.num_epochs, "steps_per_epoch": cfg.steps_per_epoch}
    run_config = dict(dataclasses.asdict(cfg), run_dir=run_dir, derived=derived)
    key = jax.random.PRNGKey(cfg.seed)
    init_key, eval_key = jax.random.split(key)
    # Compile every program from shapes and check their memory before any of them runs.
    t0 = time.perf_counter()
    programs = _compile(engine, init_key, eval_key, fresh=not resume_from, watchdog=watchdog, log=log)
    compile_s = time.perf_counter() - t0
    if main_process:
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "config.json"), "w") as f:
            json.dump(run_config, f, indent=2)
    sink = JsonlSink(os.path.join(run_dir, "metrics.jsonl")) if main_process else None
    t0 = time.perf_counter()
    with watchdog.stage("restoring the checkpoint" if resume_from else "building the initial state"):
        if resume_from:
            state, resumed = checkpoint.resume_state(engine, resume_from, init_key, log)
        else:
            resumed = None
            state = programs["init"](init_key)
            if "prefill" in programs:
                state = programs["prefill"](state)
        jax.block_until_ready(state)
    log(f"{'restored the checkpoint' if resume_from else 'built the initial state'} in {time.perf_counter() - t0:.1f}s")
    epoch, evaluate = programs["epoch"], programs["evaluate"]
    total_steps = cfg.prefill_steps + cfg.num_epochs * cfg.steps_per_epoch
    log(f"{cfg.env} ({engine.env.unwrapped.name}, {cfg.backend or 'default backend'}) / {cfg.agent}: "
        f"{cfg.num_envs} envs on {engine.num_devices} {jax.devices()[0].platform} device(s), "
        f"{cfg.num_epochs} epochs x {cfg.steps_per_epoch:,} env steps; "
        f"compiled in {compile_s:.1f}s; run dir {run_dir}")

    # Where this call starts: epoch 0, or the resumed checkpoint's epoch and counters.
    done_epochs = resumed["epoch"] if resumed else 0
    steps_done = resumed["env_steps"] if resumed else cfg.prefill_steps
    train_seconds = resumed["extra"].get("train_s", 0.0) if resumed else 0.0
    wall_before = resumed["extra"].get("wall_s", 0.0) if resumed else 0.0
    # Epochs until the env-step budget is spent: cfg.num_epochs for a fresh run, and for a
    # resumed one whose --total-steps was raised, more epochs of the (new) epoch length.
    end_epoch = done_epochs + max(0, -(-(total_steps - steps_done) // cfg.steps_per_epoch))
    if resumed and sink:
        sink.truncate(done_epochs)  # drop lines of epochs past the checkpoint (a killed run's)
        log(f"resuming {run_dir} from {resume_from}: epoch {done_epochs}/{end_epoch}, "
            f"{steps_done:,} env steps")
    save_buffer = cfg.checkpoint_buffer == "on" or (cfg.checkpoint_buffer == "auto"
                                                     and checkpoint.buffer_fits(state, run_dir))
    if jax.process_count() > 1:  # every process must gather the same leaves: process 0 decides
        from jax.experimental import multihost_utils

        save_buffer = bool(multihost_utils.broadcast_one_to_all(np.asarray(save_buffer)))
    # Every process joins a save (it gathers the shards across hosts); process 0 writes.
    checkpointing = cfg.checkpoint_every >= 0
    if checkpointing and not save_buffer and cfg.is_off_policy:
        log(f"checkpoints leave out the {checkpoint.buffer_bytes(state) / 2**20:,.0f} MiB replay buffer "
            f"(--checkpoint-buffer {cfg.checkpoint_buffer})")
    checkpoint_config = checkpoint.config_dict(cfg)
    saved_path = resume_from

    stop = {"requested": False}

    def on_sigint(signum, frame):
        if stop["requested"]:
            raise KeyboardInterrupt
        stop["requested"] = True
        log("interrupt: finishing the current epoch (Ctrl-C again to abort)")

    previous_handler = signal.signal(signal.SIGINT, on_sigint)
    bar = ProgressBar(total_steps, enabled=cfg.progress and main_process)
    eval_return = None
    record: dict = {}
    # Only with --wandb is wandb imported; it logs from here, between epochs, from process 0.
    wandb_sink = WandbSink(cfg, run_dir, run_config, log) if cfg.wandb and jax.process_index() == 0 else None
    exit_code = 1
    try:
        slowest = None  # seconds of the slowest epoch so far: what the next one is expected to take
        for index in range(done_epochs, end_epoch):
            t0 = time.perf_counter()
            with watchdog.stage(f"epoch {index + 1}", expected=slowest and 3 * slowest + 30):
                state, metrics = epoch(state)
                metrics = to_python(jax.device_get(metrics))
            epoch_s = time.perf_counter() - t0
            slowest = max(slowest or 0.0, epoch_s)
            _check_finite(metrics, index + 1, cfg, run_dir, saved_path)  # before anything is written
            train_seconds += epoch_s
            last = (index == end_epoch - 1 or stop["requested"]
                    or (stop_after is not None and index + 1 - done_epochs >= stop_after))
            record = {"epoch": index + 1, "env_steps": steps_done + (index + 1 - done_epochs) * cfg.steps_per_epoch,
                      "sps": cfg.steps_per_epoch / epoch_s, "train_s": train_seconds,
                      "perf/compile_s": compile_s, **metrics}
            if last or (cfg.eval_every and (index + 1) % cfg.eval_every == 0):
                # A key per epoch number, not a split chain: the same whatever epochs were
                # evaluated before, so a resumed run evaluates as an uninterrupted one.
                this_key = jax.random.fold_in(eval_key, index + 1)
                t1 = time.perf_counter()
                with watchdog.stage(f"evaluating epoch {index + 1}"):
                    record.update(to_python(jax.device_get(evaluate(state, this_key))))
                record["perf/eval_s"] = time.perf_counter() - t1
                eval_return = record["eval/episode_return"]
            record["wall_s"] = wall_before + time.perf_counter() - start
            # Metrics first, then the checkpoint: a run killed in between resumes from the
            # previous checkpoint and drops this line, so the two never disagree.
            if sink:
                sink.write(record)
            if wandb_sink:
                wandb_sink.write(record)
            bar.update(record["env_steps"], record["sps"], eval_return, train_seconds)
            periodic = cfg.checkpoint_every > 0 and (index + 1) % cfg.checkpoint_every == 0
            if checkpointing and (last or periodic):
                t1 = time.perf_counter()
                with watchdog.stage(f"writing the checkpoint of epoch {index + 1}"):
                    saved_path = checkpoint.save(run_dir, state, epoch=index + 1, env_steps=record["env_steps"],
                                                 config=checkpoint_config, include_buffer=save_buffer,
                                                 extra={"train_s": train_seconds, "wall_s": record["wall_s"]})
                if last:
                    log(f"checkpoint of epoch {index + 1} written to {saved_path} "
                        f"in {time.perf_counter() - t1:.2f}s")
            if last:
                break
        exit_code = 0
    finally:
        signal.signal(signal.SIGINT, previous_handler)
        if wandb_sink:
            wandb_sink.close(exit_code)
    if done_epochs >= end_epoch:
        log(f"nothing to train: {run_dir} already has {steps_done:,} env steps of --total-steps "
            f"{cfg.total_steps:,} (raise it to train longer)")
    elif record and record["epoch"] < end_epoch and saved_path:
        log(f"stopped after epoch {record['epoch']}/{end_epoch}; continue with: "
            f"python train.py --resume {run_dir}")
    if sink and os.path.exists(sink.path):
        plot_curve(sink.path, os.path.join(run_dir, "curve.png"))
    log(f"done: {record.get('env_steps', 0):,} env steps, {train_seconds:.1f}s training "
        f"({record.get('env_steps', 0) / max(train_seconds, 1e-9):,.0f} steps/s), compile {compile_s:.1f}s, "
        f"final eval return {eval_return if eval_return is None else round(eval_return, 2)}")
    return record


def _compile(engine, init_key, eval_key, fresh: bool, watchdog, log) -> dict:
    """Every program of the run, compiled from the state's shapes (nothing executes), then the
    memory check of all of them together; raises memory.ResourceError if they cannot fit."""
    import jax

    from sim.run import compile_cache
    from sim.core import memory

    template = engine.template(init_key)
    lowerings = {"init": lambda: engine.init.lower(init_key)} if fresh else {}
    if fresh and engine.cfg.is_off_policy and engine.cfg.prefill_iterations:
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
    peak, limit, what = memory.check(programs, parts, work, sharing, device)
    log(f"memory: {memory.size(peak)} per device at the peak, of {memory.size(limit)} of {what}"
        + (f" shared by {sharing} devices" if sharing > 1 else ""))
    return programs


def _check_finite(metrics: dict, epoch: int, cfg: Config, run_dir: str, saved_path: str | None) -> None:
    """Pops the epoch's non-finite flags from `metrics`; raises Diverged at the first one."""
    from sim.core.engine import NONFINITE

    flags = {k[len(NONFINITE):]: metrics.pop(k) for k in [k for k in metrics if k.startswith(NONFINITE)]}
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
RUN_FILES = ("config.json", "metrics.jsonl", "curve.png", "stacks.txt", "wandb_run.json", "wandb", "checkpoints")


def _resume_point(cfg: Config, run_dir: str, main_process: bool = True) -> str | None:
    """The checkpoint a run continues from (--resume), or None for a fresh run. A fresh run
    into a directory holding an earlier run is refused, unless --overwrite removes that run."""
    from sim.run import checkpoint

    if cfg.resume:
        path = checkpoint.latest(run_dir)
        if path is None:
            raise checkpoint.CheckpointError(f"--resume: {run_dir} has no checkpoint to resume from")
        return path
    earlier = [name for name in RUN_FILES if os.path.exists(os.path.join(run_dir, name))]
    if earlier and not cfg.overwrite:
        raise checkpoint.CheckpointError(
            f"--run-dir: {run_dir} holds an earlier run ({', '.join(earlier)}); continue it with "
            f"--resume {run_dir}, or start over in it with --overwrite")
    if earlier and main_process:
        import shutil

        for name in earlier:
            path = os.path.join(run_dir, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_config(argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from sim.run.checkpoint import CheckpointError
    from sim.run.config import ConfigError
    from sim.core.memory import ResourceError
    from sim.run.video import VideoError

    try:
        from sim.run import compile_cache
        from sim.core import parallel

        parallel.initialize(cfg)  # joins a multi-process run; before anything touches a device
        compile_cache.enable(cfg.compile_cache)
        if cfg.play:
            from sim.run.play import play

            play(cfg, cfg.play)
        else:
            train(cfg)
    except (CheckpointError, VideoError, ConfigError, ResourceError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Diverged as err:
        print(f"error: {err}", file=sys.stderr)
        return DIVERGED
    return 0


if __name__ == "__main__":
    sys.exit(main())
