"""Return against training wall-clock: FastTD3, FastSAC, SAC and PPO on the same tasks, one
run each, for the same minutes of training on the same cores.

    .venv/bin/python benchmarks/wallclock.py [--tasks CheetahRun,WalkerWalk,CartpoleSwingup,humanoid]
        (a task TASK:BACKEND runs every method on that backend)
        [--methods fasttd3,fastsac,sac,ppo] [--minutes 15] [--eval-seconds 60] [--max-envs 128]
        [--cpus 0] [--out benchmarks/results/wallclock_1core] [--plot-only]

Each method starts from its own published config for the task (what `train.py --env T
--agent M` resolves to) and is scaled to the machine one way, the same for every method:
where the config asks for more than `--max-envs` parallel envs, the envs, the batch size, the
replay ring and its warm-up are all divided by the same factor (so each method keeps its
samples per env step, gradient steps per iteration, ring rows per env, networks, unroll
length and learning rates); a config at or under the cap is run as published. `--max-envs 0`
runs every config as published (a GPU). Every run evaluates on 16 envs and writes no
checkpoint.

Per (task, method): a probe run (one short epoch) measures training steps/s; the run proper
is then cut into epochs of about `--eval-seconds` of training (one evaluation each) and stopped once
its training seconds (`train_s`: the epochs' own time, without compiling or evaluating)
pass `--minutes`. `--cpus` pins every process to those cores (`taskset`) and gives it one
XLA device. Figures: `<out>.json` (every run's config, probe and curve: train_s, env steps,
eval return), `<out>.md` (the table: the latest evaluation at 5, 10, 15 and 30 minutes within --minutes, env
steps reached, steps/s) and `<out>_<task>.png` (one plot per task). A run already in the
JSON is kept, so an interrupted benchmark picks up where it stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks.common import ROOT, save_figure, write_table  # noqa: E402

TASKS = ("CheetahRun", "WalkerWalk", "CartpoleSwingup", "humanoid")
METHODS = ("fasttd3", "fastsac", "sac", "ppo")
EVAL_ENVS = 16
MARKS = (5, 10, 15, 30)  # minutes the table reads (those within --minutes)


def resolved(task: str, method: str) -> dict:
    """train.py's resolved config for the pair (its own defaults, nothing given but a task's
    backend: TASK:BACKEND)."""
    env, _, backend = task.partition(":")
    out = subprocess.run([sys.executable, "train.py", "--env", env, "--agent", method, "--print-config",
                          *(["--backend", backend] if backend else [])],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    return json.loads(out)


def scaled(config: dict, max_envs: int) -> dict:
    """The flags that scale a published config to `max_envs` parallel envs (see the module doc)."""
    envs = config["num_envs"]
    if not max_envs or envs <= max_envs:
        return {}
    factor = envs // max_envs
    if factor * max_envs != envs:
        raise SystemExit(f"{envs} envs do not divide by --max-envs {max_envs}")
    flags = {"num_envs": max_envs, "batch_size": max(1, config["batch_size"] // factor)}
    for name in ("max_replay_size", "min_replay_size"):
        if name in config:
            flags[name] = max(max_envs, config[name] // factor)
    return flags


def iteration_steps(config: dict, flags: dict) -> int:
    """Env steps of one training iteration (unroll: batch x minibatches x unroll; differentiable: envs x
    horizon; a generation: envs x episode length; replay: one step of every env)."""
    c = {**config, **flags}
    if "unroll_length" in c:
        return c["batch_size"] * c["num_minibatches"] * c["unroll_length"]
    if "horizon_length" in c:  # differentiable: an unroll of every env
        return c["num_envs"] * c["horizon_length"]
    if "population_size" in c:  # a generation: an episode of every env
        return c["num_envs"] * c["episode_length"]
    return c["num_envs"]


def command(task: str, method: str, flags: dict, run_dir: str, cpus: str | None) -> list[str]:
    env, _, backend = task.partition(":")
    cmd = [sys.executable, "train.py", "--env", env, *(["--backend", backend] if backend else []), "--agent", method,
           "--devices", "1", "--num-eval-envs",
           str(EVAL_ENVS), "--checkpoint-every", "-1", "--no-progress", "--run-dir", run_dir, "--overwrite"]
    for name, value in flags.items():
        cmd += ["--" + name.replace("_", "-"), str(value)]
    return (["taskset", "-c", cpus] if cpus else []) + cmd


def records(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            if line.endswith("\n"):
                out.append(json.loads(line))
    return out


def probe(task, method, config, flags, cpus) -> dict:
    """Training steps/s of one short epoch (replay: 24 iterations; the others: 2)."""
    it = iteration_steps(config, flags)
    on_policy = any(name in config for name in ("unroll_length", "horizon_length", "population_size"))
    steps = it * (2 if on_policy else 24) + flags.get("min_replay_size", config.get("min_replay_size", 0))
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = command(task, method, {**flags, "total_steps": steps, "epochs": 1}, run_dir, cpus)
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            raise SystemExit(f"probe failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
        (rec,) = records(run_dir)
    return {"sps": rec["sps"], "compile_s": rec["perf/compile_s"], "iteration_steps": it}


def run(task, method, config, flags, seconds: float, cpus, eval_seconds: float = 60.0) -> dict:
    """The run proper, stopped once train_s passes `seconds`; its curve and how it ended."""
    p = probe(task, method, config, flags, cpus)
    per_epoch = max(1, round(p["sps"] * eval_seconds / p["iteration_steps"])) * p["iteration_steps"]
    epochs = math.ceil(seconds / eval_seconds * 1.6) + 1  # room for a run faster than its probe
    run_dir = tempfile.mkdtemp(prefix=f"wallclock_{task}_{method}_")
    cmd = command(task, method, {**flags, "total_steps": per_epoch * epochs, "epochs": epochs}, run_dir, cpus)
    print("+", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stopped = False
    while proc.poll() is None:
        time.sleep(2.0)
        recs = records(run_dir)
        if recs and recs[-1]["train_s"] >= seconds:
            proc.kill()
            stopped = True
    stderr = proc.stderr.read()
    recs = records(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    if not stopped and proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {' '.join(cmd)}\n{stderr[-3000:]}")
    curve = [(r["train_s"], r["env_steps"], r.get("eval/episode_return")) for r in recs]
    return {"flags": flags, "probe": p, "epoch_steps": per_epoch, "curve": curve, "wall_s": time.perf_counter() - t0,
            "compile_s": recs[0]["perf/compile_s"] if recs else None, "command": " ".join(cmd[cmd.index("train.py"):])}


def at_minute(curve, minute: float):
    """(latest eval return, env steps) at or before `minute` of training; (None, None) before the first."""
    seen = [(ret, steps) for t, steps, ret in curve if t <= minute * 60.0 + 1e-9 and ret is not None]
    return seen[-1] if seen else (None, None)


def table(results: dict, tasks, methods, minutes: float) -> str:
    marks = [m for m in MARKS if m <= minutes] or [minutes]
    head = ["task", "method", "envs", *(f"return at {m} min" for m in marks), "env steps at the end", "steps/s"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for task in tasks:
        for method in methods:
            r = results.get(f"{task}/{method}")
            if r is None:
                continue
            returns = [at_minute(r["curve"], m)[0] for m in marks]
            end = [c for c in r["curve"] if c[0] <= minutes * 60.0 + 1e-9] or r["curve"][:1]
            envs = r["flags"].get("num_envs", r["config"]["num_envs"])
            last_t, last_steps = (end[-1][0], end[-1][1]) if end else (0.0, 0)
            rows.append("| " + " | ".join([task, method, str(envs), *("-" if x is None else f"{x:.1f}" for x in returns),
                                           f"{last_steps:,}", f"{last_steps / max(last_t, 1e-9):,.0f}"]) + " |")
    return "\n".join(rows)


def plot(results: dict, task: str, methods, path: str, minutes: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method in methods:
        r = results.get(f"{task}/{method}")
        if r is None:
            continue
        points = [(t / 60.0, ret) for t, _, ret in r["curve"] if ret is not None]
        if points:
            ax.plot(*zip(*points), marker="o", markersize=3, label=method)
    ax.set_xlim(0, minutes * 1.05)
    ax.set_xlabel("training minutes (compile and evaluation excluded)")
    ax.set_ylabel("eval episode return")
    ax.set_title(task)
    ax.legend()
    save_figure(fig, path)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--minutes", type=float, default=15.0, help="training minutes per run")
    p.add_argument("--eval-seconds", type=float, default=60.0, help="training seconds between evaluations")
    p.add_argument("--max-envs", type=int, default=128, help="parallel envs a config is scaled down to (0: as published)")
    p.add_argument("--cpus", default=None, help="taskset core list for every process, e.g. 0 (default: not pinned)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "wallclock"))
    p.add_argument("--plot-only", action="store_true", help="redraw the table and plots from <out>.json")
    args = p.parse_args(argv)
    tasks, methods = args.tasks.split(","), args.methods.split(",")
    if args.cpus and not shutil.which("taskset"):
        raise SystemExit("--cpus needs taskset (util-linux)")
    path = args.out + ".json"
    results = json.load(open(path)) if os.path.exists(path) else {}
    if not args.plot_only:
        for task in tasks:
            for method in methods:
                key = f"{task}/{method}"
                if key in results:
                    continue
                config = resolved(task, method)
                results[key] = {"config": config, **run(task, method, config, scaled(config, args.max_envs),
                                                        args.minutes * 60.0, args.cpus, args.eval_seconds)}
                with open(path + ".tmp", "w") as f:
                    json.dump(results, f, indent=1)
                os.replace(path + ".tmp", path)
                print(table(results, [task], [method], args.minutes), flush=True)
    text = table(results, tasks, methods, args.minutes)
    write_table(args.out, f"benchmarks/wallclock.py --minutes {args.minutes:g} --max-envs {args.max_envs} "
                          f"--cpus {args.cpus}", text)
    for task in tasks:
        plot(results, task, methods, f"{args.out}_{task.replace(':', '_')}.png", args.minutes)
    print(text)


if __name__ == "__main__":
    main()
