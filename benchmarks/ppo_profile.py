"""Where one PPO iteration's time goes: the engine's rollout and the agent's update, apart.

    .venv/bin/python benchmarks/ppo_profile.py [--env ant] [--backend mjx] [--num-envs 256]
        [--unroll-length 5] [--batch-size 256] [--num-minibatches 8] [--num-updates-per-batch 4]

Builds `sim.core.engine.Engine` on `defaults_for(env)` with these sizes (the ppo_vs_brax.py
settings by default) and times, best of `--repeats`: (1) one iteration's rollout, the
engine's own `rollout.unroll` over its `unrolls_per_iteration` unrolls, jitted alone; (2) one
`agent.update` on that batch, jitted alone; (3) the compiled epoch program, per iteration. It
prints each in ms and env steps/s, and the update's matmul rate: the value MLP's
multiply-accumulates per row times the passes one update makes per row (for GAE a forward
over T+1 rows plus one truncation row per env, (T+2)/T; then forward + backward, counted as
3 passes, per epoch of minibatches); the small policy MLP is left out of the count.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from sim.core import rollout  # noqa: E402
from sim.run.config import defaults_for  # noqa: E402
from sim.core.engine import Engine  # noqa: E402


def best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="ant")
    p.add_argument("--backend", default="mjx")
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--unroll-length", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--num-minibatches", type=int, default=8)
    p.add_argument("--num-updates-per-batch", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    cfg = defaults_for(a.env).replace(backend=a.backend, num_envs=a.num_envs,
                              unroll_length=a.unroll_length, batch_size=a.batch_size,
                              num_minibatches=a.num_minibatches, num_updates_per_batch=a.num_updates_per_batch,
                              epochs=1, total_steps=1, num_eval_envs=8, progress=False)
    cfg = cfg.replace(total_steps=cfg.steps_per_iteration * 3, epochs=1).validate()
    engine = Engine(cfg)
    state = engine.init(jax.random.PRNGKey(0))

    @jax.jit
    def collect(state, key):
        def one(env_state, k):
            return rollout.unroll(engine.env, engine.agent, state.agent, state.obs_stats, env_state, k,
                                  cfg.hp.unroll_length)

        _, data = jax.lax.scan(one, state.env, jax.random.split(key, cfg.unrolls_per_iteration))
        return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape((x.shape[1], -1) + x.shape[3:]), data)

    update = jax.jit(engine.agent.update)
    data = jax.block_until_ready(collect(state, jax.random.PRNGKey(1)))
    jax.block_until_ready(update(state.agent, state.obs_stats, data, jax.random.PRNGKey(2)))
    epoch = engine.epoch.lower(state).compile()  # not donated-from again: it consumes `state` last
    t_roll = best_of(lambda: collect(state, jax.random.PRNGKey(3)), a.repeats)
    t_upd = best_of(lambda: update(state.agent, state.obs_stats, data, jax.random.PRNGKey(4)), a.repeats)
    t_epoch = float("inf")
    for _ in range(a.repeats):
        t = time.perf_counter()
        state, metrics = epoch(state)
        jax.block_until_ready(metrics)
        t_epoch = min(t_epoch, time.perf_counter() - t)
    t_iter = t_epoch / cfg.iterations_per_epoch
    steps = cfg.steps_per_iteration
    obs = engine.spec.obs_shape[0]
    sizes = (obs, *cfg.hp.value_hidden_sizes, 1)
    macs = sum(i * o for i, o in zip(sizes[:-1], sizes[1:]))
    passes = (cfg.hp.unroll_length + 2) / cfg.hp.unroll_length + 3 * cfg.hp.num_updates_per_batch
    gflops = 2 * macs * steps * passes / t_upd / 1e9
    print(f"{a.env} {a.backend} {a.num_envs} envs, {steps:,} env steps per iteration "
          f"({cfg.unrolls_per_iteration} unrolls x {cfg.hp.unroll_length} steps), on {jax.devices()[0].platform}")
    print(f"  rollout alone : {t_roll * 1e3:8.0f} ms  {steps / t_roll:>9,.0f} steps/s")
    print(f"  update alone  : {t_upd * 1e3:8.0f} ms  value MLP {sizes}: {passes:.1f} passes x {macs:,} MAC/row "
          f"= {gflops:.0f} GFLOP/s")
    print(f"  epoch program : {t_iter * 1e3:8.0f} ms  {steps / t_iter:>9,.0f} steps/s per iteration "
          f"(rollout + update = {(t_roll + t_upd) * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
