"""The learning curve of a run: `<run_dir>/curve.png` from its metrics.jsonl."""

from __future__ import annotations

import io
import json
import os

from sim.run import disk
from sim.run.populations import population
from sim.run.populations.pbt import schedule


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


def _plot_configurations(ax, evals: list[dict]) -> None:
    """Per configuration of a population: the mean eval return over its seeds and the 95%
    bootstrap interval of that mean."""
    by_config: dict[int, list[dict]] = {}
    for r in evals:
        by_config.setdefault(r["config"], []).append(r)
    for c, rows in sorted(by_config.items()):
        x = [r["env_steps"] for r in rows]
        mean = [r["eval/episode_return"] for r in rows]
        low = [r.get("seeds/eval_return_ci_low", m) for r, m in zip(rows, mean)]
        high = [r.get("seeds/eval_return_ci_high", m) for r, m in zip(rows, mean)]
        label = ", ".join(f"{k.replace('_', '-')}={v:g}" for k, v in rows[0]["sweep"].items()) or "base"
        ax.plot(x, mean, marker="o", markersize=3, color=f"C{c % 10}", label=f"{label} ({rows[-1]['seeds']} seeds)")
        ax.fill_between(x, low, high, color=f"C{c % 10}", alpha=0.2, linewidth=0)
    ax.legend(fontsize=8)


def _plot_pbt(top, middle, records: list[dict]) -> list[dict]:
    """A PBT run: every member's eval return (thin) and that of the best member's line of
    ancestors (bold) on `top`; that line's hyper-parameter schedule on `middle`. Returns the
    records of member 0 (for the steps/s panel)."""
    members = [r for r in records if "member" in r]
    last: dict[int, float] = {}
    for m in sorted({r["member"] for r in members}):
        mine = [r for r in members if r["member"] == m and r.get("eval/episode_return") is not None]
        top.plot([r["env_steps"] for r in mine], [r["eval/episode_return"] for r in mine], color="0.6", linewidth=0.8)
        if mine:
            last[m] = mine[-1]["eval/episode_return"]
    best = max(last, key=lambda m: last[m]) if last else 0
    line = schedule(members, best)
    at = {(r["epoch"], r["member"]): r for r in members}
    chain = [at[(e["epoch"], e["member"])] for e in line]
    scored = [r for r in chain if r.get("eval/episode_return") is not None]
    top.plot([r["env_steps"] for r in scored], [r["eval/episode_return"] for r in scored], color="C0", marker="o",
             markersize=3, label=f"best member {best} and its ancestors")
    top.legend(fontsize=8)
    for i, name in enumerate(line[0]["hp"] if line else ()):
        values = [e["hp"][name] for e in line]
        middle.step([r["env_steps"] for r in chain], values, where="post", color=f"C{i + 1}",
                    label=name.replace("_", "-"))
        if min(values) > 0:
            middle.set_yscale("log")
    middle.set_ylabel(f"member {best}'s schedule")
    middle.legend(fontsize=8)
    middle.grid(alpha=0.3)
    return [r for r in members if r["member"] == 0]


def plot_curve(metrics_path: str, out_path: str) -> str:
    """Eval return (mean +- std over episodes; a population: each configuration's mean over its
    seeds with the 95% bootstrap interval of that mean; under --pbt: every member's, and the
    best member's line of ancestors with its hyper-parameter schedule in a panel of its own)
    and training steps/s against env steps, one panel each; PNG."""
    import matplotlib  # imported here: 0.7 s of start-up (measured) that only the run's end needs

    matplotlib.use("Agg")  # headless: never needs a display
    import matplotlib.pyplot as plt  # imported after choosing the backend

    records = read_metrics(metrics_path)
    if any("member" in r and any(k.startswith("hp/") for k in r) for r in records):
        fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(7, 8), sharex=True)
        records = _plot_pbt(top, middle, records)
        return _finish(fig, top, bottom, records, metrics_path, out_path)
    configs = [r for r in records if population.is_config_line(r)]
    if configs:  # a population: one line per configuration, its seeds' aggregate
        records = configs
    evals = [r for r in records if r.get("eval/episode_return") is not None]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    if configs:
        _plot_configurations(top, evals)
    elif evals:
        x = [r["env_steps"] for r in evals]
        mean = [r["eval/episode_return"] for r in evals]
        std = [r.get("eval/episode_return_std") or 0.0 for r in evals]
        top.plot(x, mean, marker="o", markersize=3, color="C0")
        top.fill_between(x, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], color="C0",
                         alpha=0.2, linewidth=0)
    return _finish(fig, top, bottom, [r for r in records if r.get("config", 0) == 0], metrics_path, out_path)


def _finish(fig, top, bottom, first: list[dict], metrics_path: str, out_path: str) -> str:
    """The eval panel's labels, the steps/s panel (of `first`'s records), the title; written."""
    import matplotlib.pyplot as plt  # matplotlib: its backend chosen by plot_curve

    top.set_ylabel("eval return")
    top.grid(alpha=0.3)
    bottom.plot([r["env_steps"] for r in first], [r.get("sps") for r in first], marker="o", markersize=3,
                color="C1")
    bottom.set_ylabel("steps/s")
    bottom.set_xlabel("env steps")
    bottom.grid(alpha=0.3)
    title = os.path.basename(os.path.dirname(os.path.abspath(metrics_path)))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()

    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=100)
    plt.close(fig)
    disk.write_atomic(out_path, image.getvalue())  # whole or not at all, also on a full disk
    return out_path
