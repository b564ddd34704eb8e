"""What the compiled epoch's per-iteration non-finite flags cost: training steps/s with and
without them, side by side (interleaved rounds, best of 5 epochs each).

    .venv/bin/python benchmarks/nonfinite_cost.py [--jobs pendulum:sac cartpole:ppo]
        [--set NAME=VALUE ...] [--repeats 5]

Without them is `sim.core.engine.nonfinite_flags` replaced by a function returning no flags (the
run then cannot stop on divergence): the difference is the flags' whole cost. Each job runs
its env's own config (train.py's defaults, `--set` applied); each side is the best of its
rounds, each round one untimed epoch and `--repeats` timed ones.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

from benchmarks import common  # noqa: E402
from sim.core import engine as eng  # noqa: E402
from sim.run.build import build_engine
from sim.run.config import defaults_for  # noqa: E402

REAL = eng.nonfinite_flags


def steps_per_second(env: str, agent: str, flags: bool, repeats: int = 5, overrides=()) -> float:
    """Training steps/s of the job's epoch program, with or without the flags: best of
    `repeats` epochs after an untimed one."""
    cfg = defaults_for(env, agent).replace(progress=False, **dict(overrides)).validate()
    eng.nonfinite_flags = REAL if flags else (lambda state, metrics: {})
    try:  # read when the epoch program is traced
        engine = build_engine(cfg)
        state = engine.init(jax.random.PRNGKey(0))
        if cfg.loop.droppable is not None:
            state = engine.prefill(state)
        epoch = engine.epoch.lower(state).compile()
    finally:
        eng.nonfinite_flags = REAL
    (state, _), _ = common.timed(epoch, state)
    return cfg.steps_per_epoch / common.best_epoch(epoch, state, repeats)[0]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", nargs="+", default=["pendulum:sac", "cartpole:ppo"], metavar="ENV:AGENT")
    p.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="config fields of every job")
    p.add_argument("--repeats", type=int, default=5, help="timed epochs of each run")
    a = p.parse_args(argv)
    for env, agent in (job.split(":") for job in a.jobs):
        runs = {True: [], False: []}
        for order in ((True, False), (False, True)):
            for flags in order:
                runs[flags].append(steps_per_second(env, agent, flags, a.repeats, common.parse_set(a.set)))
        on, off = max(runs[True]), max(runs[False])
        print(f"{env} {agent}: with flags {on:,.0f} steps/s, without {off:,.0f}, ratio {on / off:.3f}", flush=True)


if __name__ == "__main__":
    main()
