"""The robustness gap: PPO trained with domain randomisation and observation noise, with and
without the privileged critic, and without randomisation at all, each evaluated on the nominal
physics and on held-out extremes.

    .venv/bin/python benchmarks/sim2real.py [--env CheetahRun] [--total-steps 3000000]
        [--randomize friction=0.5:1.5 mass=0.5:1.5] [--obs-noise 0.05]
        [--settings friction=0.25 friction=2 mass=0.3 mass=1.8 friction=0.25,mass=1.8]
        [--repeats 1 | --seeds 0 1] [--cpus 0] [--out benchmarks/results/sim2real_1core]

Arms (one `train.py` run each, seed r for repeat r, the same env steps and PPO config; the
env's published config scaled to this CPU as `benchmarks/wallclock.py` scales it: 128 envs,
batch 64):
- `privileged`: `--randomize ... --obs-noise ... --privileged-critic`;
- `symmetric`: `--randomize ... --obs-noise ...` (the critic reads what the policy reads);
- `nominal`: neither (trained and evaluated on clean observations).
Then `train.py play RUN --robustness SETTINGS`: the return on the nominal physics and under
each setting (factors of the nominal values; the defaults lie outside the training ranges).
Figures: `<out>.json` and `<out>.md` (a row per arm and seed, a column per setting).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks.common import ROOT, write_table  # noqa: E402

SETTINGS = ("friction=0.25", "friction=2", "mass=0.3", "mass=1.8", "friction=0.25,mass=1.8")
ARMS = ("privileged", "symmetric", "nominal")


def arm_flags(args, arm: str) -> list[str]:
    if arm == "nominal":
        return []
    flags = ["--randomize", *args.randomize, "--obs-noise", str(args.obs_noise)]
    return flags + (["--privileged-critic"] if arm == "privileged" else [])


def _run(cmd: list[str], args) -> str:
    if args.cpus:
        cmd = ["taskset", "-c", args.cpus] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return proc.stdout


def returns(text: str) -> dict:
    """{setting: mean return} from `play --robustness`'s table."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("physics"))
    out = {}
    for line in lines[start + 1:]:
        match = re.match(r"(\S+)\s+(-?[\d.]+(?:e[+-]?\d+)?|nan) \+-", line)
        if match:
            out[match.group(1)] = float(match.group(2))
    return out


def one(args, arm: str, seed: int) -> dict:
    run_dir = tempfile.mkdtemp(prefix=f"sim2real_{arm}_")
    train = [sys.executable, "train.py", "--env", args.env, "--agent", "ppo", "--total-steps", str(args.total_steps),
             "--epochs", str(args.epochs), "--seed", str(seed), "--devices", "1", "--num-eval-envs",
             str(args.eval_envs), "--no-progress", "--run-dir", run_dir, "--overwrite", *shlex.split(args.scale),
             *arm_flags(args, arm)]
    t0 = time.perf_counter()
    _run(train, args)
    train_s = time.perf_counter() - t0
    play = [sys.executable, "train.py", "play", run_dir, "--robustness", *args.settings]
    result = returns(_run(play, args))
    return {"arm": arm, "seed": seed, "returns": result, "wall_s": train_s,
            "command": " ".join(train[train.index("train.py"):]), "play": " ".join(play[play.index("train.py"):])}


def table(result: dict) -> str:
    """A row per run (arm, seed), then per arm the mean over its seeds where it has several:
    the return on the nominal physics and under each setting, the settings' mean and worst."""
    import numpy as np

    settings = ["nominal", *result["config"]["settings"]]
    rows = ["| arm | seed | " + " | ".join(settings) + " | held-out mean | worst |",
            "| --- | --- |" + " --- |" * (len(settings) + 2)]

    def row(arm, seed, values):
        cells = ["-" if v is None else f"{v:.1f}" for v in values]
        held = [v for v in values[1:] if v is not None]
        mean = f"{np.mean(held):.1f}" if held else "-"
        return f"| {arm} | {seed} | " + " | ".join(cells) + f" | {mean} | {min(held):.1f} |" if held else \
            f"| {arm} | {seed} | " + " | ".join(cells) + " | - | - |"

    runs = sorted(result["runs"], key=lambda r: (r["arm"] not in ARMS, ARMS.index(r["arm"]) if r["arm"] in ARMS
                                                   else 0, r["seed"]))
    for r in runs:
        rows.append(row(r["arm"], r["seed"], [r["returns"].get(s) for s in settings]))
    for arm in dict.fromkeys(r["arm"] for r in runs):
        mine = [r for r in runs if r["arm"] == arm]
        if len(mine) > 1:
            values = [np.mean([r["returns"][s] for r in mine]) if all(s in r["returns"] for r in mine) else None
                      for s in settings]
            rows.append(row(f"**{arm}**", f"mean of {len(mine)}", values))
    return "\n".join(rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="CheetahRun")
    p.add_argument("--total-steps", type=int, default=3_000_000)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--eval-envs", type=int, default=16)
    p.add_argument("--randomize", nargs="+", default=["friction=0.5:1.5", "mass=0.5:1.5"])
    p.add_argument("--obs-noise", type=float, default=0.05)
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), help="--robustness settings (held-out physics)")
    p.add_argument("--scale", default="--num-envs 128 --batch-size 64",
                   help="train.py flags that size the runs, one string (--scale='--num-envs 64')")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--repeats", type=int, default=1, help="seeds 0 .. REPEATS-1")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="these seeds instead of --repeats'")
    p.add_argument("--cpus", default=None, help="taskset core list for every process")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "sim2real_1core"))
    args = p.parse_args(argv)
    result = {"config": vars(args), "runs": []}
    if os.path.exists(args.out + ".json"):  # resumable: finished (arm, seed) pairs are kept
        result["runs"] = json.load(open(args.out + ".json"))["runs"]
    done = {(r["arm"], r["seed"]) for r in result["runs"]}
    for seed in args.seeds if args.seeds is not None else range(args.repeats):
        for arm in args.arms.split(","):
            if (arm, seed) in done:
                continue
            result["runs"].append(one(args, arm, seed))
            with open(args.out + ".json", "w") as f:
                json.dump(result, f, indent=1)
            print(table(result), flush=True)
    text = table(result)
    write_table(args.out, " ".join(["benchmarks/sim2real.py", *(argv if argv is not None else sys.argv[1:])]), text)
    print(text)


if __name__ == "__main__":
    main()
