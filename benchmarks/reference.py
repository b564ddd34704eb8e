"""Reference runs: each task's fixed command rerun over several seeds, ours against a
published (or recorded) return, and a drift check that fails when a change lowers learning.

    .venv/bin/python benchmarks/reference.py [--tasks cartpole pendulum ...] [--seeds 3] [--record]
    .venv/bin/python benchmarks/reference.py --check [--extra "TRAIN.PY FLAGS"]

A task is one `train.py` command run as one program of `--seeds` members (`--num-seeds`); its
figures are every seed's final evaluation return, their mean and its 95% bootstrap interval
(`sim/run/stats.py`, as a population's summary computes its intervals), beside the task's reference and where that comes from. The
seeds' curves go to `benchmarks/results/reference/<task>.json` and the table of every task's
last record to `table.md` beside them.

`--record` writes the band of each task run (`benchmarks/results/reference/bands.json`): the
seeds' mean and standard deviation and a floor, the mean less the larger of two standard
deviations of a seed and a tenth of the mean's size (a change that only moves the random
numbers draws new seeds: their mean falls below that floor rarely). `--check` reruns the
tasks marked for it (small: about a minute on a 2-core CPU) and exits with status 1 when a
task's mean is below its floor, saying by how much; tests/test_reference.py runs it.
`--extra` adds flags to every run (`--extra "--learning-rate 1e-9"` shows the check failing).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks.common import ROOT, member_curves, run_process, write_table  # noqa: E402
from sim.run.stats import bootstrap_ci  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results", "reference")
BANDS = os.path.join(RESULTS, "bands.json")

# name -> (train.py flags, checked in CI, reference return, where the reference comes from)
TASKS = {
    "cartpole": (["--env", "cartpole", "--agent", "ppo", "--total-steps", "262144", "--epochs", "4"], True, 475.0,
                 "Gymnasium's CartPole-v1 reward threshold (its episodes end at 500)"),
    "pendulum": (["--env", "pendulum", "--agent", "sac", "--total-steps", "12288", "--epochs", "3"], True, -200.0,
                 "a swung-up, balanced pendulum: Gymnasium's Pendulum-v1 is called solved near -200 (its returns are at most 0)"),
    "CartpoleBalance": (["--env", "CartpoleBalance", "--agent", "ppo", "--num-envs", "256", "--batch-size", "256",
                         "--num-minibatches", "8", "--total-steps", "1228800", "--epochs", "4"], False, 993.5,
                        "Playground's own pipeline (its env, Brax's PPO) with this config, measured on this "
                        "CPU before this script (982 in another run); not rerun here"),
}


def run_task(name: str, seeds: int, extra: list[str], work: str) -> dict:
    """One task's program of `seeds` members: their final returns and curves."""
    flags, _, _, _ = TASKS[name]
    run_dir = os.path.join(work, name)
    cmd = [sys.executable, "train.py", *flags, "--num-seeds", str(seeds), "--seed", "0", "--run-dir", run_dir,
           "--no-progress", "--compile-cache", "off", *extra]
    print(f"[{name}] {shlex.join(cmd[1:])}", flush=True)
    wall, _ = run_process(cmd, timeout=6 * 3600)
    curves = member_curves(run_dir)
    finals = [curve[-1][1] for _, curve in sorted(curves.items())]
    mean, ci = statistics.fmean(finals), bootstrap_ci(finals, "mean")
    print(f"[{name}] final {', '.join(f'{x:.1f}' for x in finals)}: mean {mean:.1f} ({ci[0]:.1f} to {ci[1]:.1f}) "
          f"({wall:.0f} s)", flush=True)
    return {"flags": flags + extra, "seeds": seeds, "final": finals, "mean": mean, "ci95": list(ci), "wall_s": wall,
            "curves": {str(m): c for m, c in curves.items()}, "date": time.strftime("%Y-%m-%d")}


def band(result: dict) -> dict:
    """The recorded band of a task's result: its mean, its seeds' spread and the floor."""
    std = statistics.stdev(result["final"]) if len(result["final"]) > 1 else 0.0
    floor = result["mean"] - max(2.0 * std, 0.1 * abs(result["mean"]))
    return {"mean": result["mean"], "std": std, "seeds": result["seeds"], "floor": floor, "date": result["date"],
            "flags": result["flags"]}


def check(results: dict, bands: dict) -> list[str]:
    """One line per task below its recorded floor (empty: no drift)."""
    low = []
    for name, r in results.items():
        b = bands[name]
        if r["mean"] < b["floor"]:
            low.append(f"{name}: mean final return {r['mean']:.1f} is {b['floor'] - r['mean']:.1f} below the recorded "
                       f"floor {b['floor']:.1f} (recorded {b['mean']:.1f}, seed std {b['std']:.1f}, {b['seeds']} seeds, "
                       f"{b['date']})")
    return low


def table(results: dict) -> str:
    rows = ["| task | command | seeds' final returns | mean (95% bootstrap interval) | reference | of reference |",
            "| --- | --- | --- | --- | ---: | --- |"]
    for name, r in results.items():
        _, _, ref, source = TASKS[name]
        rows.append(f"| {name} | `train.py {' '.join(r['flags'])}` | {', '.join(f'{x:.1f}' for x in r['final'])} | "
                    f"{r['mean']:.1f} ({r['ci95'][0]:.1f} to {r['ci95'][1]:.1f}) | {ref:g} ({source}) | "
                    f"{r['mean'] - ref:+.1f} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", choices=tuple(TASKS), default=None,
                   help="the tasks to run (default: all; with --check, those checked in CI)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--record", action="store_true", help="write the tasks' bands to " + os.path.relpath(BANDS, ROOT))
    p.add_argument("--check", action="store_true", help="exit 1 where a task's mean is below its recorded floor")
    p.add_argument("--extra", default="", help="train.py flags added to every run")
    a = p.parse_args(argv)
    names = a.tasks or [n for n, t in TASKS.items() if t[1] or not a.check]
    bands = json.load(open(BANDS)) if os.path.exists(BANDS) else {}
    if a.check:
        missing = [n for n in names if n not in bands]
        if missing:
            raise SystemExit(f"--check: no recorded band for {', '.join(missing)}: run with --record first")
    results = {}
    with tempfile.TemporaryDirectory(prefix="reference_") as work:
        for name in names:
            results[name] = run_task(name, a.seeds, shlex.split(a.extra), work)
    print(table(results))
    if a.record:
        os.makedirs(RESULTS, exist_ok=True)
        for name, r in results.items():
            with open(os.path.join(RESULTS, f"{name}.json"), "w") as f:
                json.dump(r, f, indent=1)
        json.dump({**bands, **{n: band(r) for n, r in results.items()}}, open(BANDS, "w"), indent=1)
        stored = {n: json.load(open(os.path.join(RESULTS, f"{n}.json"))) for n in TASKS
                  if os.path.exists(os.path.join(RESULTS, f"{n}.json"))}
        write_table(os.path.join(RESULTS, "table"), "benchmarks/reference.py --record (each task's last record)",
                    table(stored))
        print(f"recorded {', '.join(results)} in {os.path.relpath(BANDS, ROOT)} and table.md")
    if a.check:
        low = check(results, bands)
        for line in low:
            print(f"drift: {line}")
        if low:
            raise SystemExit(1)
        print("no drift: every task at or above its recorded floor")


if __name__ == "__main__":
    main()
