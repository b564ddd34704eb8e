"""Return against env steps and against training seconds, ours against Brax's PPO, from the
files the runs left: our runs' `metrics.jsonl` (train.py) and the logs of Brax's runs
(`ppo_ablation.py --arms peer`, which prints each evaluation as it comes).

    .venv/bin/python benchmarks/learning_curves.py --ours A/metrics.jsonl B/metrics.jsonl \
        --peer brax_seed0.log [--marks 3932160,9830400,19660800] --out benchmarks/results/NAME

Writes `<out>.md` (each seed's evaluation return at the marks, the mean per side, and the
training seconds each side took to reach the last mark) and `<out>.png` (two panels: return
against env steps, and against training seconds).

Training seconds leave compiling out on both sides, and keep the evaluations in: ours are
`train_s` (the epochs' own time) plus every evaluation's `perf/eval_s` up to that point; Brax's
are the time between its evaluations as its log stamps them, counted from the end of its first
epoch, plus one steady epoch (its second) for the first, whose stamp also holds the training
program's compile.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks.common import save_figure, write_table  # noqa: E402

PEER_LINE = re.compile(r"brax: ([\d,]+) env steps, eval return (-?[\d.]+) \((\d+) s\)")


def ours_curve(path: str) -> list[tuple[int, float, float]]:
    """(env steps, evaluation return, training seconds) of every evaluation in a metrics.jsonl."""
    out, evals = [], 0.0
    with open(path) as f:
        try:
            rows = [json.loads(line) for line in f if line.strip()]
        except ValueError:
            rows = []
        for row in rows:
            if row.get("eval/episode_return") is None or row.get("train_s") is None:
                continue
            evals += row.get("perf/eval_s") or 0.0
            out.append((int(row["env_steps"]), float(row["eval/episode_return"]), row["train_s"] + evals))
    if not out:
        raise SystemExit(f"{path}: no evaluation rows (a train.py metrics.jsonl?)")
    return out


def peer_curve(path: str) -> list[tuple[int, float, float]]:
    """The same from a log of Brax's run: the evaluation at step 0 is left out (no training yet)."""
    with open(path) as f:
        stamps = [(int(m[1].replace(",", "")), float(m[2]), float(m[3])) for m in PEER_LINE.finditer(f.read())]
    stamps = [s for s in stamps if s[0] > 0]
    if len(stamps) < 2:
        raise SystemExit(f"{path}: fewer than two evaluations after training (a ppo_ablation peer log?)")
    first, steady = stamps[0][2], stamps[1][2] - stamps[0][2]
    return [(step, ret, t - first + steady) for step, ret, t in stamps]


def at(curve, step: int):
    """The evaluation at `step` (None when the run has none there)."""
    return next((ret for s, ret, _ in curve if s == step), None)


def seconds_to(curve, step: int):
    return next((t for s, _, t in curve if s == step), None)


def table(sides: dict, marks: list[int]) -> str:
    head = "| side | seed file | " + " | ".join(f"{m / 1e6:.2f}M" for m in marks) + " | training s to the last |"
    rows = [head, "| --- | --- | " + " | ".join("---:" for _ in marks) + " | ---: |"]
    fmt = lambda x: "" if x is None else f"{x:,.1f}"  # noqa: E731
    for side, curves in sides.items():
        for name, curve in curves.items():
            rows.append(f"| {side} | {name} | " + " | ".join(fmt(at(curve, m)) for m in marks)
                        + f" | {fmt(seconds_to(curve, marks[-1]))} |")
        means = []
        for m in marks:
            values = [at(c, m) for c in curves.values() if at(c, m) is not None]
            means.append(f"**{statistics.fmean(values):,.1f}** ({len(values)})" if values else "")
        rows.append(f"| {side} | mean (seeds) | " + " | ".join(means) + " | |")
    return "\n".join(rows)


def plot(sides: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for (side, curves), color in zip(sides.items(), ("tab:blue", "tab:orange", "tab:green")):
        for i, (name, curve) in enumerate(curves.items()):
            steps, rets, secs = zip(*curve)
            label = side if i == 0 else None
            left.plot([s / 1e6 for s in steps], rets, color=color, alpha=0.8, label=label)
            right.plot(secs, rets, color=color, alpha=0.8, label=label)
    left.set_xlabel("env steps (M)")
    right.set_xlabel("training seconds (evaluations in, compiling out)")
    for ax in (left, right):
        ax.set_ylabel("evaluation return")
        ax.grid(alpha=0.3)
        ax.legend()
    save_figure(fig, path)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ours", nargs="+", required=True, help="our runs' metrics.jsonl, one per seed")
    p.add_argument("--peer", nargs="*", default=[], help="logs of Brax's runs, one per seed")
    p.add_argument("--marks", default="3932160,9830400,19660800", help="env steps the table reads")
    p.add_argument("--out", required=True, help="<out>.md and <out>.png")
    a = p.parse_args(argv)
    marks = [int(x) for x in a.marks.split(",") if x]
    sides = {"ours": {os.path.basename(x): ours_curve(x) for x in a.ours}}
    if a.peer:
        sides["Brax's PPO"] = {os.path.basename(x): peer_curve(x) for x in a.peer}
    text = table(sides, marks)
    print(text)
    command = " ".join(["benchmarks/learning_curves.py", *(argv if argv is not None else sys.argv[1:])])
    write_table(a.out, command, text)
    plot(sides, a.out + ".png")
    print(f"wrote {a.out}.md and {a.out}.png")


if __name__ == "__main__":
    main()
