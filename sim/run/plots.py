"""The learning curve of a run: `<run_dir>/curve.png` from its metrics.jsonl."""

from __future__ import annotations

import json
import os


def read_metrics(path: str) -> list[dict]:
    """The records of a metrics.jsonl file (a torn last line, from a killed run, is skipped)."""
    records = []
    with open(path) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def plot_curve(metrics_path: str, out_path: str) -> str:
    """Eval return (mean +- std) and training steps/s against env steps, one panel each; PNG."""
    import matplotlib

    matplotlib.use("Agg")  # headless: never needs a display
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    evals = [r for r in records if r.get("eval/episode_return") is not None]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    if evals:
        x = [r["env_steps"] for r in evals]
        mean = [r["eval/episode_return"] for r in evals]
        std = [r.get("eval/episode_return_std") or 0.0 for r in evals]
        top.plot(x, mean, marker="o", markersize=3, color="C0")
        top.fill_between(x, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], color="C0",
                         alpha=0.2, linewidth=0)
    top.set_ylabel("eval return")
    top.grid(alpha=0.3)
    bottom.plot([r["env_steps"] for r in records], [r.get("sps") for r in records], marker="o", markersize=3,
                color="C1")
    bottom.set_ylabel("steps/s")
    bottom.set_xlabel("env steps")
    bottom.grid(alpha=0.3)
    title = os.path.basename(os.path.dirname(os.path.abspath(metrics_path)))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return out_path
