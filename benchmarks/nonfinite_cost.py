"""What the compiled epoch's per-iteration non-finite flags cost: training steps/s with and
without them, side by side (interleaved rounds, best of 5 epochs each).

    .venv/bin/python benchmarks/nonfinite_cost.py

Without them is `sim.core.engine.nonfinite_flags` replaced by a function returning no flags (the
run then cannot stop on divergence): the difference is the flags' whole cost.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

from sim.core import engine as eng  # noqa: E402
from sim.run.config import defaults_for  # noqa: E402

REAL = eng.nonfinite_flags


def steps_per_second(env: str, agent: str, flags: bool) -> float:
    eng.nonfinite_flags = REAL if flags else (lambda state, metrics: {})
    cfg = defaults_for(env, agent).replace(progress=False).validate()
    engine = eng.Engine(cfg)
    state = engine.init(jax.random.PRNGKey(0))
    if cfg.loop.keeps_buffer:
        state = engine.prefill(state)
    epoch = engine.epoch.lower(state).compile()
    state, metrics = epoch(state)
    jax.block_until_ready(metrics)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        state, metrics = epoch(state)
        jax.block_until_ready(metrics)
        best = min(best, time.perf_counter() - t)
    return cfg.steps_per_epoch / best


def main() -> None:
    for env, agent in (("pendulum", "sac"), ("cartpole", "ppo")):
        runs = {True: [], False: []}
        for order in ((True, False), (False, True)):
            for flags in order:
                runs[flags].append(steps_per_second(env, agent, flags))
        on, off = max(runs[True]), max(runs[False])
        print(f"{env} {agent}: with flags {on:,.0f} steps/s, without {off:,.0f}, ratio {on / off:.3f}", flush=True)


if __name__ == "__main__":
    main()
