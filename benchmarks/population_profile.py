"""Where a population's program loses to its members run one by one: the rollout and the
update of one iteration, timed for one run and for `--members` members vmapped in one
program, side by side in one process.

    python benchmarks/population_profile.py [--env humanoid] [--num-envs 4096] [--members 3]
        [--set NAME=VALUE ...] [--repeats 3] [--nested] [--json PATH]

Both sides are train.py's run for `--env` (its defaults, with `--num-envs` and any `--set`) on
one device, the population's as `--num-seeds M` builds it: each piece is the engine's own,
traced as its epoch traces it (the loop's `collect`, the agent's `update`), jitted alone and
vmapped over the members for the population. Printed per piece: seconds per call, env steps
per second (all members counted), and the population's share of M separate runs' rate (1.0:
a member costs what a run costs; the issue's target is 0.95). `--nested` adds the population's
rollout with its members' envs stepped as a vmap of a vmap (before
`sim.core.rollout.members_as_one_batch`), to show what that costs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

import jax  # noqa: E402

from benchmarks import common  # noqa: E402
from sim.core.evaluation import at_precision  # noqa: E402
from sim.run.config import defaults_for  # noqa: E402


def pieces(engine, members: int, repeats: int, side: str, update_too: bool = True) -> dict:
    """{piece: best seconds of one call} of the rollout and the update of one iteration, each
    figure also printed as it comes (a call cut short keeps what it measured)."""
    precision = engine.cfg.matmul_precision
    key = jax.random.PRNGKey(0)
    if members > 1:
        state = engine.init(jax.random.split(key, members))
        keys = jax.random.split(jax.random.PRNGKey(1), members)
        lift = jax.vmap
    else:
        state, keys, lift = engine.init(key), jax.random.PRNGKey(1), (lambda f: f)
    collect = jax.jit(at_precision(lift(lambda state, key: engine.loop.collect(state, key)[1]), precision))
    update = jax.jit(at_precision(lift(engine.agent.update), precision))
    out = {}

    def measured(name, value):
        out[name] = value
        print(f"{side}: {name} {value:.3f}", flush=True)

    program, seconds = common.timed(lambda: collect.lower(state, keys).compile())
    measured("collect compile s", seconds)
    data = jax.block_until_ready(program(state, keys))
    measured("collect s", common.best_of(program, repeats, state, keys))
    if not update_too:
        return out
    program, seconds = common.timed(lambda: update.lower(state.agent, state.obs_stats, data, keys).compile())
    measured("update compile s", seconds)
    measured("update s", common.best_of(program, repeats, state.agent, state.obs_stats, data, keys))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="humanoid")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="other config fields")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--nested", action="store_true", help="also the rollout with the members' envs vmapped twice")
    p.add_argument("--json", default=None, help="append the figures as one JSON line")
    a = p.parse_args(argv)
    from sim.core import rollout
    from sim.run.build import build_engine

    base = defaults_for(a.env).replace(num_envs=a.num_envs, devices=1, progress=False, num_eval_envs=8,
                                       **dict(common.parse_set(a.set)))
    steps = base.validate().steps_per_iteration
    record = {"env": base.env, "num_envs": a.num_envs, "members": a.members, "platform": jax.devices()[0].platform,
              "steps_per_iteration": steps, "set": a.set}
    for side, members in (("one", 1), ("population", a.members)):
        engine = build_engine(base.replace(num_seeds=members).validate())
        figures = pieces(engine, members, a.repeats, side)
        for name, value in figures.items():
            record[f"{side} {name}"] = value
        for piece in ("collect", "update"):
            record[f"{side} {piece} steps/s"] = members * steps / figures[f"{piece} s"]
        print(json.dumps({k: v for k, v in record.items() if k.startswith(side)}), flush=True)
    if a.nested:
        one_batch, rollout.members_as_one_batch = rollout.members_as_one_batch, lambda step: step  # the vmap of a vmap
        engine = build_engine(base.replace(num_seeds=a.members).validate())
        figures = pieces(engine, a.members, a.repeats, "nested", update_too=False)
        rollout.members_as_one_batch = one_batch
        record.update({f"nested {name}": value for name, value in figures.items()})
        record["nested collect ratio"] = a.members * steps / figures["collect s"] / record["one collect steps/s"]
    for piece in ("collect", "update"):
        record[f"{piece} ratio"] = record[f"population {piece} steps/s"] / record[f"one {piece} steps/s"]
    whole = {side: steps * (a.members if side == "population" else 1)
             / (record[f"{side} collect s"] + record[f"{side} update s"]) for side in ("one", "population")}
    record["iteration ratio"] = whole["population"] / whole["one"]
    common.emit(record, a.json)


if __name__ == "__main__":
    main()
