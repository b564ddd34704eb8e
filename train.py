"""Train an agent on an environment in one compiled, donated, on-device program.

    python train.py --env humanoid --num-envs 4096
    python train.py --help          # every flag, with the chosen env's tuned defaults
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

from sim.config import AGENTS, Config, ConfigError, defaults_for

DESCRIPTION = __doc__.strip().splitlines()[0]


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


def parse_config(argv: list[str]) -> Config:
    """Parses flags on top of the tuned defaults of the chosen --env and --agent."""
    import tyro

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--env", default="cartpole")
    pre.add_argument("--agent", default="ppo")
    known, _ = pre.parse_known_args(argv)
    if known.agent not in AGENTS:
        raise UsageError(f"--agent: unknown agent {known.agent!r}; valid agents: {', '.join(AGENTS)}")
    default = defaults_for(known.env, known.agent)
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


def train(cfg: Config, run_dir: str | None = None, log=print) -> dict:
    """Runs a whole training; returns the last metrics record. Writes config.json and
    metrics.jsonl under the run directory."""
    import jax

    from sim.engine import Engine
    from sim.metrics import JsonlSink, ProgressBar, to_python

    run_dir = run_dir or cfg.run_dir or default_run_dir(cfg)
    os.makedirs(run_dir, exist_ok=True)
    derived = {"steps_per_iteration": cfg.steps_per_iteration, "iterations_per_epoch": cfg.iterations_per_epoch,
               "num_epochs": cfg.num_epochs, "steps_per_epoch": cfg.steps_per_epoch}
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(dict(dataclasses.asdict(cfg), run_dir=run_dir, derived=derived), f, indent=2)
    sink = JsonlSink(os.path.join(run_dir, "metrics.jsonl"))

    engine = Engine(cfg)
    key = jax.random.PRNGKey(cfg.seed)
    init_key, eval_key = jax.random.split(key)
    start = time.perf_counter()
    state = engine.init(init_key)
    if cfg.is_off_policy and cfg.prefill_iterations:
        state = engine.prefill(state)
    # Compile once, ahead of time, so compile time is reported apart and the loop can
    # never trigger a second compilation.
    epoch = engine.epoch.lower(state).compile()
    evaluate = engine.evaluate.lower(state, eval_key).compile()
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - start
    total_steps = cfg.prefill_steps + cfg.num_epochs * cfg.steps_per_epoch
    log(f"{cfg.env} ({engine.env.unwrapped.name}, {cfg.backend or 'default backend'}) / {cfg.agent}: "
        f"{cfg.num_envs} envs, {cfg.num_epochs} epochs x {cfg.steps_per_epoch:,} env steps; "
        f"compiled in {compile_s:.1f}s; run dir {run_dir}")

    stop = {"requested": False}

    def on_sigint(signum, frame):
        if stop["requested"]:
            raise KeyboardInterrupt
        stop["requested"] = True
        log("interrupt: finishing the current epoch (Ctrl-C again to abort)")

    previous_handler = signal.signal(signal.SIGINT, on_sigint)
    bar = ProgressBar(total_steps, enabled=cfg.progress)
    train_seconds = 0.0
    eval_return = None
    record: dict = {}
    try:
        for index in range(cfg.num_epochs):
            t0 = time.perf_counter()
            state, metrics = epoch(state)
            metrics = to_python(jax.device_get(metrics))
            epoch_s = time.perf_counter() - t0
            train_seconds += epoch_s
            last = index == cfg.num_epochs - 1 or stop["requested"]
            record = {"epoch": index + 1, "env_steps": cfg.prefill_steps + (index + 1) * cfg.steps_per_epoch,
                      "sps": cfg.steps_per_epoch / epoch_s, "train_s": train_seconds,
                      "perf/compile_s": compile_s, **metrics}
            if last or (cfg.eval_every and (index + 1) % cfg.eval_every == 0):
                eval_key, this_key = jax.random.split(eval_key)
                t1 = time.perf_counter()
                record.update(to_python(jax.device_get(evaluate(state, this_key))))
                record["perf/eval_s"] = time.perf_counter() - t1
                eval_return = record["eval/episode_return"]
            record["wall_s"] = time.perf_counter() - start
            sink.write(record)
            bar.update(record["env_steps"], record["sps"], eval_return, train_seconds)
            if stop["requested"]:
                break
    finally:
        signal.signal(signal.SIGINT, previous_handler)
    log(f"done: {record.get('env_steps', 0):,} env steps, {train_seconds:.1f}s training "
        f"({record.get('env_steps', 0) / max(train_seconds, 1e-9):,.0f} steps/s), compile {compile_s:.1f}s, "
        f"final eval return {eval_return if eval_return is None else round(eval_return, 2)}")
    return record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_config(argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
