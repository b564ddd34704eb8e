"""The end of a training call: what to do next, the learning curve, summary.json (and a
population's ranked table), the closing line."""

from __future__ import annotations

import json
import os

from sim.run import disk
from sim.run.populations import pbt, population
from sim.run.plots import plot_curve, read_metrics


def finish(run, record: dict) -> dict:
    """Closes the run: says what is next, draws curve.png, writes summary.json, logs the line."""
    cfg, at = run.cfg, run.at
    if at.done_epochs >= at.end_epoch:
        run.log(f"nothing to train: {run.run_dir} already has {at.steps_done:,} env steps of --total-steps "
                f"{cfg.total_steps:,} (raise it to train longer)")
    elif record and record["epoch"] < at.end_epoch and run.checkpoints.path and not run.stopper.requested:
        run.log(f"stopped after epoch {record['epoch']}/{at.end_epoch}; continue with: "
                f"python train.py --resume {run.run_dir}")
    jsonl = run.sinks.jsonl
    if jsonl and os.path.exists(jsonl.path):
        try:
            plot_curve(jsonl.path, os.path.join(run.run_dir, "curve.png"))
        except ImportError as err:  # a declared dependency, missing from a hand-made install: the run is whole
            run.log(f"curve.png not drawn ({err}: pip install matplotlib); metrics.jsonl holds the curve")
        summarize(run)
    steps = record.get("env_steps", 0)
    # (a run stopped by a signal skips its evaluation: it may not have the time)
    final = "no evaluation in this call" if at.eval_return is None else f"final eval return {round(at.eval_return, 2)}"
    rate = steps / max(at.train_s, 1e-9)
    if run.population:
        run.log(f"done: {steps:,} env steps per member, {at.train_s:.1f}s training ({rate:,.0f} steps/s per member, "
                f"{rate * run.engine.members:,.0f} in all), compile {run.compile_s:.1f}s, {final}"
                f"{'' if at.eval_return is None else ' (mean over members)'}")
    else:
        run.log(f"done: {steps:,} env steps, {at.train_s:.1f}s training ({rate:,.0f} steps/s), "
                f"compile {run.compile_s:.1f}s, {final}")
    return record


def summarize(run) -> None:
    """summary.json: every member's final evaluation and, per configuration, its statistics over
    the seeds, ranked; a population's ranked table is printed."""
    records = read_metrics(run.sinks.jsonl.path)
    summary = population.summary(run.cfg, records)
    if run.cfg.pbt.enabled:
        summary, text = pbt.summarize(run.cfg, summary, records)
        run.log(f"final evaluation per member, ranked (PBT; {run.run_dir}/summary.json):\n{text}")
    elif run.population:
        run.log(f"final evaluation per configuration, ranked by IQM over seeds ({run.run_dir}/summary.json):\n"
                + population.table(summary))
    disk.write_atomic(os.path.join(run.run_dir, "summary.json"), json.dumps(summary, indent=2))
