"""Playground's robot tasks, one row each: observation and action sizes, the physics limit
(`common.physics_limit`: a jitted scan of vmapped steps with random actions) and its compile
time here, and the task's published PPO budget.

    .venv/bin/python benchmarks/robots.py [--num-envs 128] [--steps 5] [--repeats 2]
        [--only Go1JoystickFlatTerrain ...] [--out benchmarks/results/robots_2core]

Writes a markdown table to OUT.md (docs/environments.md includes it) and prints each row as
it is measured. Needs the `robots` extra.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

import jax  # noqa: E402

import envs  # noqa: E402
from agents.defaults.ppo import DEFAULTS  # noqa: E402
from benchmarks import common  # noqa: E402


def row(name: str, num_envs: int, steps: int, repeats: int) -> str:
    env = envs.make(name)
    parts = dict(env.spec.obs_parts)
    obs = (f"{parts['state']} (+{parts['privileged_state']} privileged)" if "privileged_state" in parts
           else str(env.spec.obs_shape[0]))
    rate = common.physics_limit(env, num_envs, steps, repeats, jax.random.PRNGKey(0))
    kind = "locomotion" if name in envs.ROBOT_LOCOMOTION else "manipulation"
    budget = DEFAULTS[name]["total_steps"]
    return (f"| `{name}` | {kind} | {obs} | {env.spec.action_size} | {rate.compile_s:.0f} | "
            f"{rate.steps_per_s:,.0f} | {budget / 1e6:,.0f}M |")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--steps", type=int, default=5, help="scan length per timed call")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--only", nargs="*", default=None, help="these tasks (default: every robot task)")
    p.add_argument("--out", default="benchmarks/results/robots_2core")
    args = p.parse_args(argv)
    header = ["| task | kind | observation (policy) | actions | compile (s) | "
              f"env steps/s at {args.num_envs} envs | PPO budget (published) |", "|---|---|---|---:|---:|---:|---:|"]
    rows = []
    for name in args.only or envs.ROBOT_ENVS:
        rows.append(row(name, args.num_envs, args.steps, args.repeats))
        print(rows[-1], flush=True)
    command = "python benchmarks/robots.py " + " ".join(argv if argv is not None else sys.argv[1:])
    common.write_table(args.out, command.strip(), "\n".join(header + rows))


if __name__ == "__main__":
    main()
