"""Our PBT inside one program against Ray Tune's PopulationBasedTraining with train.py as its
trainable: the same task, members, ranges, budget and cores.

    RAY_PYTHON -m benchmarks.pbt_vs_ray --python .venv/bin/python [--values 1e-5,...,1e-1]
        [--total-steps 20000] [--epochs 10] [--seed 0] [--out benchmarks/results/pbt_vs_ray_1core]

Ray runs in its own environment (`python -m venv ray && ray/bin/pip install 'ray[tune]'`;
run this script with that Python from the repository root, pinned with taskset to the cores
both sides get). Each Ray trial is one member: one epoch of training per Ray iteration, as
`train.py` in this project's environment (`--python`), resuming the trial's run directory
with a budget one epoch larger and the trial's current learning rate (a resume takes the
command line's hyper-parameters). A Ray checkpoint is that run directory; exploiting copies
the parent's. Ray's scheduler: truncation at the quarter (`quantile_fraction` 0.25),
perturbation factors 0.8 and 1.25, resampling with probability 0.25 log-uniformly over the
learning rates' range, every iteration (`perturbation_interval` 1), synchronous. Ours: the
same members as `--sweep learning-rate=...` with `--pbt --pbt-every 1` (its defaults: the same
quarter, factors and resampling).

Figures per side: wall seconds of the whole experiment, the best and median final evaluation
over the members, and how many steps each member trained. `<out>.json` and `<out>.md`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VALUES = "1e-5,3.7e-5,1.4e-4,5.2e-4,1.9e-3,7.2e-3,2.7e-2,1e-1"


def sizes(python: str, flags: list[str]) -> dict:
    """The run's prefill steps and steps per epoch, as train.py's config resolves them."""
    code = ("import json, sys, train; c = train.parse_config(sys.argv[1:]); "
            "print(json.dumps({'prefill': c.prefill_steps, 'epoch': c.steps_per_epoch, 'epochs': c.num_epochs}))")
    out = subprocess.run([python, "-c", code, *flags], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def base_flags(args) -> list[str]:
    return ["--env", args.env, "--agent", args.agent, "--total-steps", str(args.total_steps), "--epochs",
            str(args.epochs), "--seed", str(args.seed), "--devices", "1", "--num-eval-envs", "16", "--no-progress"]


def ours(args) -> dict:
    run_dir = tempfile.mkdtemp(prefix="pbt_ours_")
    cmd = [args.python, "train.py", *base_flags(args), "--sweep", f"learning-rate={args.values}", "--pbt",
           "--pbt-every", "1", "--checkpoint-every", "-1", "--run-dir", run_dir, "--overwrite"]
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
    wall = time.perf_counter() - t0
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    last = max(r["epoch"] for r in records)
    finals = [r["eval/episode_return"] for r in records if r["epoch"] == last]
    return {"wall_s": wall, "finals": finals, "steps": [r["env_steps"] for r in records if r["epoch"] == last],
            "command": " ".join(cmd[1:])}


def ray_side(args) -> dict:
    import ray
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    values = [float(v) for v in args.values.split(",")]
    size = sizes(args.python, base_flags(args))
    flags = base_flags(args)

    def trainable(config):
        run_dir = tempfile.mkdtemp(prefix="pbt_ray_")
        epoch = 0
        checkpoint = tune.get_checkpoint()
        if checkpoint:
            with checkpoint.as_directory() as saved:
                shutil.copytree(saved, run_dir, dirs_exist_ok=True)
            epoch = json.load(open(os.path.join(run_dir, "ray_epoch.json")))["epoch"]
        while epoch < size["epochs"]:
            epoch += 1
            budget = ["--total-steps", str(size["prefill"] + epoch * size["epoch"]), "--epochs", str(epoch)]
            where = ["--resume", run_dir] if epoch > 1 else ["--run-dir", run_dir, "--overwrite"]
            cmd = [args.python, "train.py", *flags, *budget, *where, "--learning-rate", repr(config["learning_rate"]),
                   "--checkpoint-every", "1"]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr[-2000:])
            records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
            with open(os.path.join(run_dir, "ray_epoch.json"), "w") as f:
                json.dump({"epoch": epoch}, f)
            last = records[-1]
            tune.report({"eval_return": last["eval/episode_return"], "env_steps": last["env_steps"]},
                        checkpoint=tune.Checkpoint.from_directory(run_dir))

    scheduler = PopulationBasedTraining(
        time_attr="training_iteration", metric="eval_return", mode="max", perturbation_interval=1,
        hyperparam_mutations={"learning_rate": tune.loguniform(min(values), max(values))},
        quantile_fraction=0.25, resample_probability=0.25, perturbation_factors=(1.25, 0.8), synch=True)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    storage = tempfile.mkdtemp(prefix="pbt_ray_storage_")
    t0 = time.perf_counter()
    tuner = tune.Tuner(tune.with_resources(trainable, {"cpu": 1}),
                       param_space={"learning_rate": tune.grid_search(values)},
                       tune_config=tune.TuneConfig(scheduler=scheduler, num_samples=1),
                       run_config=tune.RunConfig(storage_path=storage, stop={"training_iteration": size["epochs"]},
                                                 verbose=0))
    results = tuner.fit()
    wall = time.perf_counter() - t0
    ray.shutdown()
    finals = [r.metrics.get("eval_return") for r in results]
    steps = [r.metrics.get("env_steps") for r in results]
    return {"wall_s": wall, "finals": finals, "steps": steps, "ray": ray.__version__}


def describe(side: dict) -> dict:
    finite = [v for v in side["finals"] if v is not None and math.isfinite(v)]
    return dict(side, best=max(finite), median=statistics.median(finite))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", required=True, help="this project's Python (its .venv)")
    p.add_argument("--env", default="pendulum")
    p.add_argument("--agent", default="sac")
    p.add_argument("--values", default=VALUES, help="the members' starting learning rates")
    p.add_argument("--total-steps", type=int, default=20_000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "pbt_vs_ray"))
    args = p.parse_args(argv)
    result = {"config": vars(args), "ours": describe(ours(args)), "ray": describe(ray_side(args))}
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=1)
    rows = ["| side | wall s | best final | median final | env steps per member |", "| --- | --- | --- | --- | --- |"]
    for name, label in (("ours", "--pbt, one program"), ("ray", f"Ray Tune {result['ray']['ray']} PBT, train.py")):
        s = result[name]
        rows.append(f"| {label} | {s['wall_s']:.0f} | {s['best']:.1f} | {s['median']:.1f} | {max(s['steps']):,} |")
    text = "\n".join(rows)
    with open(args.out + ".md", "w") as f:
        f.write(f"<!-- benchmarks/pbt_vs_ray.py {' '.join(argv or sys.argv[1:])}; {time.strftime('%Y-%m-%d')} -->\n"
                f"{text}\n")
    print(text)


if __name__ == "__main__":
    main()
