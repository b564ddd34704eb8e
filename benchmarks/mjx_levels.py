"""MJX's body-tree levels materialized (envs/mjx_levels.py) or fused as XLA chooses, side by
side: the physics limit of each env (benchmarks/env_throughput.py, one process per
measurement, FUSEDRL_MJX_LEVELS=off for MJX as it is), in alternating rounds.

    .venv/bin/python benchmarks/mjx_levels.py [--envs PandaPickCube Go1JoystickFlatTerrain ...]
        [--num-envs 128] [--steps 5] [--rounds 2] [--out benchmarks/results/mjx_levels_table_2core]
        [--from-log LOG]

Prints each measurement as it comes, then a table of the best per env and mode with the ratio,
also written to OUT.md (docs/environments.md includes it). `--from-log` makes the table from a
log of this script's measurement lines instead of measuring.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks import common  # noqa: E402

MODES = {"levels": {}, "fused": {"FUSEDRL_MJX_LEVELS": "off"}}


def measure(env: str, num_envs: int, steps: int, mode: str) -> tuple[float, float]:
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "env_throughput.py"),
           "--env", env, "--num-envs", str(num_envs), "--steps", str(steps), "--repeats", "2"]
    _, out = common.run_process(cmd, env=dict(os.environ, **MODES[mode]))
    found = re.search(r"compile_s=([\d.]+) steps_per_s=([\d,]+)", out)
    if found is None:
        raise SystemExit(f"{env} [{mode}]: no figures in its output:\n{out[-2000:]}")
    return float(found.group(2).replace(",", "")), float(found.group(1))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", nargs="+", default=["PandaPickCube", "Go1JoystickFlatTerrain", "G1JoystickFlatTerrain",
                                                 "humanoid", "ant"])
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default="benchmarks/results/mjx_levels_table_2core")
    p.add_argument("--from-log", default=None, help="a log of this script's measurement lines: tabulate, measure nothing")
    args = p.parse_args(argv)
    lines = open(args.from_log).read().splitlines() if args.from_log else measured(args)
    best: dict[tuple[str, str], tuple[float, float]] = {}
    for line in lines:
        found = LINE.match(line)
        if found:
            env, mode, rate, compile_s = found.group(1), found.group(2), float(found.group(3).replace(",", "")), \
                float(found.group(4))
            if rate > best.get((env, mode), (0.0, 0.0))[0]:
                best[env, mode] = (rate, compile_s)
    envs = list(dict.fromkeys(env for env, _ in best))
    rows = [f"| env ({args.num_envs} envs, best of {args.rounds} rounds) | levels computed once | fused (MJX as is) | "
            "ratio |", "|---|---:|---:|---:|"]
    for env in envs:
        (a, ca), (b, cb) = best[env, "levels"], best[env, "fused"]
        rows.append(f"| {env} | {a:,.0f} (compile {ca:.0f} s) | {b:,.0f} (compile {cb:.0f} s) | {a / b:.2f} |")
    print("\n" + "\n".join(rows))
    command = "python benchmarks/mjx_levels.py " + " ".join(argv if argv is not None else sys.argv[1:])
    common.write_table(args.out, command.strip(), "\n".join(rows))


LINE = re.compile(r"round \d+: (\S+) \[(\w+)\] ([\d,]+) env steps/s, compile ([\d.]+) s")


def measured(args) -> list[str]:
    lines = []
    for r in range(args.rounds):
        for env in args.envs:
            for mode in (("levels", "fused") if r % 2 == 0 else ("fused", "levels")):
                rate, compile_s = measure(env, args.num_envs, args.steps, mode)
                lines.append(f"round {r + 1}: {env} [{mode}] {rate:,.0f} env steps/s, compile {compile_s:.0f} s")
                print(lines[-1], flush=True)
    return lines


if __name__ == "__main__":
    main()
