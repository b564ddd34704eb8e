"""A population in one program against its members as separate processes, side by side.

    .venv/bin/python benchmarks/population.py [--quick] [--out benchmarks/results/population_2core.md]
        [--purejaxrl DIR --purejaxrl-python PYTHON]

1. One program vs one process per member: each job's N seeds as `train.py ... --num-seeds N`
   against the same N single runs (`--seed 0..N-1`) one after the other, each a fresh process
   (they share one compile cache, so all but the first reuse its programs; the population
   gets its own, empty one). Wall-clock of the whole processes, imports to exit.
2. Cost per member: the default cartpole job as populations of 1, 4, 16 and 64 members.
3. Against PureJaxRL (with --purejaxrl: a checkout of its repository, and a Python that has
   its dependencies): its `jax.jit(jax.vmap(make_train(config)))` over 8 seeds with the config
   of its `ppo.py` (CartPole-v1, 4 envs x 128 steps, 4 epochs x 4 minibatches, lr 2.5e-4
   annealed, 500k steps per seed, 64x64 tanh networks), timed from process start, against our
   population with the same settings. A small driver of ours imports its `make_train`; none
   of its code is copied here.

Both sides run on this machine, one process at a time, nothing else running.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import common  # noqa: E402

TRAIN = [sys.executable, os.path.join(ROOT, "train.py"), "--no-progress"]

JOBS = [  # (label, flags, seeds)
    ("cartpole PPO (default job)", ["--env", "cartpole"], 8),
    ("pendulum SAC (default job)", ["--env", "pendulum", "--agent", "sac"], 4),
    ("ant PPO positional, 64 envs", ["--env", "ant", "--backend", "positional", "--num-envs", "64",
                                     "--batch-size", "64", "--num-minibatches", "4", "--total-steps", "40960",
                                     "--epochs", "4", "--eval-every", "0", "--num-eval-envs", "16"], 4),
]
# PureJaxRL's ppo.py CartPole config in our flags (whole-trajectory minibatches: 1 trajectory of
# 128 steps each, where PureJaxRL shuffles single steps into minibatches of 128).
PUREJAXRL_FLAGS = ["--env", "cartpole", "--num-envs", "4", "--unroll-length", "128", "--batch-size", "1",
                   "--num-minibatches", "4", "--num-updates-per-batch", "4", "--learning-rate", "2.5e-4",
                   "--anneal-lr", "--max-grad-norm", "0.5", "--entropy-cost", "0.01", "--discounting", "0.99",
                   "--gae-lambda", "0.95", "--clipping-epsilon", "0.2", "--value-loss-coef", "0.5",
                   "--clip-value-loss", "--normalize-advantage", "--activation", "tanh",
                   "--policy-hidden-sizes", "64", "64", "--value-hidden-sizes", "64", "64",
                   "--no-normalize-observations", "--reward-scaling", "1", "--episode-length", "500",
                   "--total-steps", "500000", "--eval-every", "0"]

PUREJAXRL_DRIVER = r"""
import time
START = time.perf_counter()
import json, sys, types
sys.path.insert(0, sys.argv[1])
for name in ("brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training", "navix"):
    try:
        __import__(name)
    except Exception:  # CartPole needs neither; its wrappers module imports both
        module = sys.modules[name] = types.ModuleType(name)
        module.EpisodeWrapper = module.AutoResetWrapper = None
import jax, numpy as np
from ppo import make_train
seeds = int(sys.argv[2])
config = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": 4,
          "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
          "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1",
          "ANNEAL_LR": True, "DEBUG": False}
keys = jax.random.split(jax.random.PRNGKey(30), seeds)
t0 = time.perf_counter()
compiled = jax.jit(jax.vmap(make_train(config))).lower(keys).compile()
t1 = time.perf_counter()
out = jax.block_until_ready(compiled(keys))
t2 = time.perf_counter()
returns = np.asarray(out["metrics"]["returned_episode_returns"])  # [seeds, updates, steps, envs]
ended = np.asarray(out["metrics"]["returned_episode"]).astype(bool)
last = max(1, returns.shape[1] // 100)  # the last 1% of updates
final = [float(r[-last:][d[-last:]].mean()) for r, d in zip(returns, ended)]
print("RESULT " + json.dumps({"compile_s": t1 - t0, "train_s": t2 - t1, "in_process_s": t2 - START,
                              "final": final}))
"""


def train(flags: list[str], run_dir: str, cache: str, env: dict) -> float:
    """Wall seconds of one train.py process, imports to exit, writing `run_dir`."""
    return common.run_process(TRAIN + flags + ["--run-dir", run_dir, "--compile-cache", cache], env)[0]


def run_facts(run_dir: str) -> dict:
    """Final eval return(s), training and compile seconds of a finished run directory."""
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    last = records[-1]
    train_returns = [r.get("train/episode_return") for r in records
                     if r["epoch"] == last["epoch"] and ("member" in r or "config" not in r)]
    return {"finals": [m["eval_return"] for m in summary["members"]], "train_s": last["train_s"],
            "compile_s": last["perf/compile_s"], "train_returns": train_returns}


def mean(values) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


def one_program_vs_processes(flags, seeds, work, env) -> dict:
    cache_seq, cache_pop = os.path.join(work, "cache_seq"), os.path.join(work, "cache_pop")
    walls, finals = [], []
    for seed in range(seeds):
        run_dir = os.path.join(work, f"seed{seed}")
        walls.append(train(flags + ["--seed", str(seed)], run_dir, cache_seq, env))
        finals += run_facts(run_dir)["finals"]
    pop_dir = os.path.join(work, "population")
    pop_wall = train(flags + ["--num-seeds", str(seeds)], pop_dir, cache_pop, env)
    pop = run_facts(pop_dir)
    config = json.load(open(os.path.join(pop_dir, "config.json")))
    return {"seeds": seeds, "separate_walls": walls, "separate_s": sum(walls), "separate_final": mean(finals),
            "population_s": pop_wall, "population_train_s": pop["train_s"], "population_compile_s": pop["compile_s"],
            "population_final": mean(pop["finals"]), "population_devices": config.get("devices"),
            "speedup": sum(walls) / pop_wall}


def cost_per_member(sizes, work, env) -> list[dict]:
    rows = []
    for size in sizes:
        run_dir = os.path.join(work, f"members{size}")
        wall = train(["--env", "cartpole", "--num-seeds", str(size)], run_dir, os.path.join(work, f"cache{size}"), env)
        facts = run_facts(run_dir)
        rows.append({"members": size, "wall_s": wall, "train_s": facts["train_s"], "compile_s": facts["compile_s"],
                     "wall_per_member_s": wall / size, "train_per_member_s": facts["train_s"] / size,
                     "final": mean(facts["finals"])})
        print(f"  {size} members: {rows[-1]}", flush=True)
    return rows


def against_purejaxrl(directory, python, seeds, work, env) -> dict:
    driver = os.path.join(work, "purejaxrl_driver.py")
    with open(driver, "w") as f:
        f.write(PUREJAXRL_DRIVER)
    out = {}
    wall, text = common.run_process([python, driver, os.path.join(directory, "purejaxrl"), str(seeds)], env)
    theirs = common.read_result(text)
    out["purejaxrl"] = dict(theirs, wall_s=wall, final_mean=mean(theirs["final"]))
    run_dir = os.path.join(work, "ours_purejaxrl_config")
    wall = train(PUREJAXRL_FLAGS + ["--num-seeds", str(seeds)], run_dir, os.path.join(work, "cache_pjx"), env)
    facts = run_facts(run_dir)
    out["ours"] = {"wall_s": wall, "train_s": facts["train_s"], "compile_s": facts["compile_s"],
                   "final_eval_mean": mean(facts["finals"]), "final_train_return_mean": mean(facts["train_returns"])}
    return out


def report(results: dict) -> str:
    lines = ["## One program vs one process per member (wall-clock of whole processes)", "",
             "| job | seeds | separate processes | one program | speed-up | final eval (separate / population) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for label, r in results["jobs"].items():
        lines.append(f"| {label} | {r['seeds']} | {r['separate_s']:.1f} s ({', '.join(f'{w:.1f}' for w in r['separate_walls'])}) "
                     f"| {r['population_s']:.1f} s (compile {r['population_compile_s']:.1f}, train "
                     f"{r['population_train_s']:.1f}) | {r['speedup']:.2f}x | {r['separate_final']:.1f} / "
                     f"{r['population_final']:.1f} |")
    lines += ["", "## Cost per member: the default cartpole job (500k env steps per member)", "",
              "| members | process wall | compile | training | wall per member | training per member | mean final eval |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results["members"]:
        lines.append(f"| {r['members']} | {r['wall_s']:.1f} s | {r['compile_s']:.1f} s | {r['train_s']:.1f} s | "
                     f"{r['wall_per_member_s']:.2f} s | {r['train_per_member_s']:.2f} s | {r['final']:.1f} |")
    if "purejaxrl" in results:
        p, o = results["purejaxrl"]["purejaxrl"], results["purejaxrl"]["ours"]
        lines += ["", "## Against PureJaxRL's vmap(make_train), 8 seeds of CartPole-v1, its ppo.py config", "",
                  "| side | process wall | compile | training | final return |", "| --- | --- | --- | --- | --- |",
                  f"| PureJaxRL | {p['wall_s']:.1f} s | {p['compile_s']:.1f} s | {p['train_s']:.1f} s | "
                  f"{p['final_mean']:.1f} (training episodes, last 1% of updates) |",
                  f"| ours | {o['wall_s']:.1f} s | {o['compile_s']:.1f} s | {o['train_s']:.1f} s | "
                  f"{o['final_eval_mean']:.1f} (deterministic eval, 128 episodes); "
                  f"{o['final_train_return_mean']:.1f} (training episodes, last epoch) |"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="cartpole and SAC jobs only; populations up to 16")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "population_2core.md"))
    parser.add_argument("--purejaxrl", help="a checkout of PureJaxRL's repository")
    parser.add_argument("--purejaxrl-python", default=sys.executable, help="a Python with PureJaxRL's dependencies")
    args = parser.parse_args(argv)
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    work = tempfile.mkdtemp(prefix="population_bench_")
    results: dict = {"jobs": {}, "members": []}
    try:
        for label, flags, seeds in JOBS[:2] if args.quick else JOBS:
            print(f"{label}: {seeds} seeds", flush=True)
            job_dir = os.path.join(work, label.split()[0] + label.split()[1])
            os.makedirs(job_dir)
            results["jobs"][label] = one_program_vs_processes(flags, seeds, job_dir, env)
            print(f"  {results['jobs'][label]}", flush=True)
        print("cost per member (cartpole)", flush=True)
        results["members"] = cost_per_member([1, 4, 16] if args.quick else [1, 4, 16, 64], work, env)
        if args.purejaxrl:
            print("against PureJaxRL", flush=True)
            results["purejaxrl"] = against_purejaxrl(args.purejaxrl, args.purejaxrl_python, 8, work, env)
            print(f"  {results['purejaxrl']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(results)
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(f"<!-- {' '.join(sys.argv)}; {time.strftime('%Y-%m-%d')}; {os.cpu_count()} CPU cores -->\n" + text)
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
