"""Population-based training inside the program against the same population without it, and
the cost of its step.

    .venv/bin/python benchmarks/pbt.py [--env pendulum] [--agent sac] [--values 1e-5,...,1e-1]
        [--total-steps 20000] [--epochs 10] [--repeats 3] [--threshold -250] [--cpus 0]
        [--cost-members 8,64] [--only experiment|cost] [--out benchmarks/results/pbt_1core]

Experiment: the members are one seed of each learning rate of `--values` (default 8, log-spaced
from 1e-5 to 1e-1: a grid that mostly fails). Run A trains them as a fixed grid
(`--sweep learning-rate=...`); run B is the same command with `--pbt --pbt-every 1` (fitness:
the evaluation after each epoch; the learning rate explored log-uniformly over the grid's
range). Both take the same env steps in one program each, on the same cores. Repeat r uses
`--seed r`. Per run: the best and the median final evaluation over the members, the env steps
at which a member first evaluates at `--threshold` or better, and training seconds.

Cost: the PBT step's seconds per call (best of 5, one member's fitness NaN so that the
diverged member's envs and ring are copied too) against one epoch of the same population, at
each of `--cost-members` members of a small SAC config (8 envs, a 16,384-row ring).

Figures: `<out>.json` and `<out>.md`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks.common import ROOT, write_table  # noqa: E402

VALUES = "1e-5,3.7e-5,1.4e-4,5.2e-4,1.9e-3,7.2e-3,2.7e-2,1e-1"


def run(args, pbt: bool, seed: int) -> dict:
    """One population run (train.py in its own process): its members' final returns and when
    the first one reached the threshold."""
    run_dir = tempfile.mkdtemp(prefix="pbt_bench_")
    cmd = [sys.executable, "train.py", "--env", args.env, "--agent", args.agent, "--sweep",
           f"learning-rate={args.values}", "--total-steps", str(args.total_steps), "--epochs", str(args.epochs),
           "--seed", str(seed), "--devices", "1", "--num-eval-envs", "16", "--checkpoint-every", "-1",
           "--no-progress", "--run-dir", run_dir, "--overwrite"]
    if pbt:
        cmd += ["--pbt", "--pbt-every", "1"]
    if args.cpus:
        cmd = ["taskset", "-c", args.cpus] + cmd
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    members = [r for r in records if "member" in r]
    finals = [r["eval/episode_return"] for r in members if r["epoch"] == max(m["epoch"] for m in members)]
    reached = [r["env_steps"] for r in members if (r.get("eval/episode_return") or -1e30) >= args.threshold]
    return {"pbt": pbt, "seed": seed, "best": max(finals), "median": statistics.median(finals), "finals": finals,
            "steps_to_threshold": min(reached) if reached else None,
            "train_s": max(r["train_s"] for r in members), "wall_s": wall,
            "command": " ".join(cmd[cmd.index("train.py"):])}


def cost(members: int) -> dict:
    """Seconds of one PBT step against one epoch, a population of `members` small SAC runs."""
    import jax
    import jax.numpy as jnp

    from benchmarks import common
    from sim.core import pbt
    from sim.run.populations import population
    from sim.run.build import build_engine
    from sim.run.config import defaults_for

    cfg = defaults_for("pendulum", "sac").replace(
        num_seeds=members, num_envs=8, batch_size=64, max_replay_size=1 << 14, min_replay_size=256,
        total_steps=256 + 8 * 64, epochs=1, num_eval_envs=4, devices=1, progress=False)
    engine = build_engine(cfg)
    state = engine.prefill(engine.init(population.keys(cfg)[0]))
    epoch = engine.epoch.lower(state).compile()
    epoch_s, state = common.best_epoch(epoch, state, 3)
    plan = pbt.Plan(explore=(pbt.Explore("learning_rate", 1e-5, 1e-1, log=True),))
    fitness = jnp.arange(members, dtype=jnp.float32).at[1].set(jnp.nan)
    step = pbt.make_program(engine, plan).lower(state, fitness, jax.random.PRNGKey(0)).compile()
    best = float("inf")
    for k in range(5):
        (state, _), seconds = common.timed(step, state, fitness, jax.random.PRNGKey(k))
        best = min(best, seconds)
    return {"members": members, "step_s": best, "epoch_s": epoch_s, "ratio": best / epoch_s,
            "iterations_per_epoch": cfg.iterations_per_epoch}


def table(results: dict) -> str:
    lines = []
    runs = results.get("runs", [])
    if runs:
        lines += ["| run | seed | best final | median final | env steps to threshold | training s |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for r in runs:
            steps = "never" if r["steps_to_threshold"] is None else f"{r['steps_to_threshold']:,}"
            lines.append(f"| {'PBT' if r['pbt'] else 'fixed grid'} | {r['seed']} | {r['best']:.1f} | "
                         f"{r['median']:.1f} | {steps} | {r['train_s']:.0f} |")
        for pbt in (False, True):
            mine = [r for r in runs if r["pbt"] == pbt]
            if mine:
                lines.append(f"| {'PBT' if pbt else 'fixed grid'}: mean over {len(mine)} | | "
                             f"{statistics.mean(r['best'] for r in mine):.1f} | "
                             f"{statistics.mean(r['median'] for r in mine):.1f} | "
                             f"{sum(r['steps_to_threshold'] is not None for r in mine)}/{len(mine)} reached | |")
    costs = results.get("cost", [])
    if costs:
        lines += ["", "| members | PBT step s | epoch s | step / epoch |", "| --- | --- | --- | --- |"]
        lines += [f"| {c['members']} | {c['step_s']:.4f} | {c['epoch_s']:.3f} | {c['ratio']:.3f} |" for c in costs]
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="pendulum")
    p.add_argument("--agent", default="sac")
    p.add_argument("--values", default=VALUES, help="the members' learning rates")
    p.add_argument("--total-steps", type=int, default=20_000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threshold", type=float, default=-250.0)
    p.add_argument("--cpus", default=None, help="taskset core list for the runs, e.g. 0")
    p.add_argument("--cost-members", default="8,64")
    p.add_argument("--only", choices=("experiment", "cost"), default=None)
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "pbt"))
    args = p.parse_args(argv)
    results: dict = {"config": vars(args)}
    if args.only != "cost":
        results["runs"] = []
        for seed in range(args.repeats):
            for pbt in (False, True):
                results["runs"].append(run(args, pbt, seed))
                print(table({"runs": results["runs"][-1:]}).splitlines()[-1], flush=True)
    if args.only != "experiment":
        results["cost"] = [cost(int(m)) for m in args.cost_members.split(",")]
    with open(args.out + ".json", "w") as f:
        json.dump(results, f, indent=1)
    text = table(results)
    write_table(args.out, " ".join(["benchmarks/pbt.py", *(argv or sys.argv[1:])]), text)
    print(text)


if __name__ == "__main__":
    main()
