"""Device time per MJX stage, per op category and per op, from a JAX profiler trace of an
accelerator (`benchmarks/physics_profile.py --trace DIR`, or any `jax.profiler.trace`).

    python benchmarks/read_profile.py DIR [--top 25] [--json PATH]

Reads the trace with XProf's converter (`pip install xprof`, not a dependency of the project:
a reader's tool, run where the trace is read) and sums each op's device self time under the
deepest name-stack entry that names an MJX stage (`STAGES`; ops outside MJX's step, the env
wrapper's rewards and observations and the random actions, fall under "outside MJX"). A CPU
trace holds no per-op device times: read an accelerator's.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from collections import defaultdict

# Name-stack entries that name a stage of MJX's step: forward.py's own scopes, and those that
# benchmarks/physics_profile.py adds around its inner stages.
STAGES = ("kinematics", "com_pos", "camlight", "crb", "factor_m", "collision", "make_constraint", "transmission",
          "com_vel", "passive", "rne", "fwd_position", "fwd_velocity", "fwd_actuation", "fwd_acceleration", "solve",
          "sensor_pos", "sensor_vel", "sensor_acc", "euler", "implicit", "rungekutta4", "_advance", "_integrate_pos",
          "renew")
_WRAPPED = re.compile(r"^[a-z_]+\((.*)\)$")  # vmap(name), jvp(name), ...


def stage_of(op_name: str) -> str:
    """The deepest MJX stage that `op_name`'s name stack enters, or "outside MJX"."""
    found = "outside MJX"
    for entry in op_name.split("/"):
        while (m := _WRAPPED.match(entry)) is not None:
            entry = m.group(1)
        if entry in STAGES:
            found = entry
    return found


def rows_of(trace_dir: str) -> list[dict]:
    """hlo_stats rows of every xplane under `trace_dir`, as dicts."""
    try:
        from xprof.convert import raw_to_tool_data  # the reader's tool, not a project dependency
    except ImportError:
        sys.exit("read_profile needs XProf's converter: pip install xprof")
    paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        sys.exit(f"no *.xplane.pb under {trace_dir}")
    data, _ = raw_to_tool_data.xspace_to_tool_data(paths, "hlo_stats", {})
    table = json.loads(data)
    cols = [c["id"] for c in table["cols"]]
    return [dict(zip(cols, [c.get("v") if c else None for c in row["c"]])) for row in table["rows"]]


def summarize(rows: list[dict]) -> dict:
    by_stage, by_category = defaultdict(float), defaultdict(float)
    for row in rows:
        us = float(row.get("total_self_time") or 0.0)
        by_stage[stage_of(row.get("tf_op_name") or "")] += us
        by_category[row.get("category") or "?"] += us
    total = sum(by_stage.values())
    top = sorted(rows, key=lambda r: -float(r.get("total_self_time") or 0.0))
    return {"total_us": total, "by_stage": dict(by_stage), "by_category": dict(by_category),
            "top": [{k: r.get(k) for k in ("category", "hlo_op_name", "tf_op_name", "occurrences", "total_self_time",
                                           "bound_by", "hlo_op_expression")} for r in top[:100]]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace_dir")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    rows = rows_of(a.trace_dir)
    if not rows:
        sys.exit(f"{a.trace_dir}: the trace holds no per-op device times (a CPU trace?)")
    s = summarize(rows)
    total = s["total_us"]
    print(f"device self time {total / 1e3:,.1f} ms over {len(rows)} ops")
    for title, table in (("stage", s["by_stage"]), ("category", s["by_category"])):
        print(f"\nby {title}:")
        for name, us in sorted(table.items(), key=lambda kv: -kv[1]):
            print(f"  {name:28s} {us / 1e3:10.2f} ms  {100 * us / total:5.1f}%")
    print(f"\ntop {a.top} ops:")
    for r in s["top"][:a.top]:
        us = float(r["total_self_time"] or 0.0)
        print(f"  {100 * us / total:5.1f}%  {r['category']:18s} {stage_of(r['tf_op_name'] or ''):16s} "
              f"x{r['occurrences']}  {(r['tf_op_name'] or '')[-90:]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=1)


if __name__ == "__main__":
    main()
