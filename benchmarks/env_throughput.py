"""Environment throughput: one jitted `scan` of `vmap(step)` with random actions.

    .venv/bin/python benchmarks/env_throughput.py --env ant [--backend positional]
        [--num-envs 1024] [--steps 100] [--repeats 3] [--auto-reset] [--unroll-length 5]

Prints one line: env, backend, num_envs, compile_s (lower + compile of the rollout), and
env steps/s: the physics limit (`benchmarks.common.physics_limit`: num_envs * steps / best
wall time of `repeats` calls). Raw env steps, no auto-reset: episodes that end keep
stepping, which costs the same physics.

`--auto-reset` adds two rows, timed in interleaved rounds with the raw one: `AutoReset`
stepped per env under vmap (a reset computed at every step) and `AutoReset.step_batch`
(ended episodes take a spare start state; spares renewed from fresh resets once per
`--unroll-length` steps, where the trainer renews them once per epoch), and how many of
step_batch's episode ends restarted from a reused start.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import envs  # noqa: E402
from benchmarks import common  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", required=True, choices=envs.names())
    p.add_argument("--backend", default=None, help="physics backend (default: the env's registry default)")
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--steps", type=int, default=100, help="scan length per timed call")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--auto-reset", action="store_true", help="also time the two auto-reset paths")
    p.add_argument("--unroll-length", type=int, default=5, help="steps between renewals of spares (--auto-reset)")
    args = p.parse_args(argv)
    if args.auto_reset:
        return compare_auto_reset(args)

    backend = envs.check(args.env, args.backend)
    env = envs.make(args.env, backend=backend)
    rate = common.physics_limit(env, args.num_envs, args.steps, args.repeats, jax.random.PRNGKey(args.seed))
    print(common.physics_line(args.env, backend, args.num_envs, args.steps, rate))


def compare_auto_reset(args) -> None:
    from envs.wrappers import AutoReset, EpisodeStats

    backend = envs.check(args.env, args.backend)
    base = envs.make(args.env, backend=backend)
    wrapped = AutoReset(EpisodeStats(base))
    n, length = args.num_envs, args.unroll_length
    unrolls = max(1, args.steps // length)

    def scan_steps(step, state, key):
        def body(s, k):
            return step(s, common.random_actions(base.spec, k, n)), None

        return jax.lax.scan(body, state, jax.random.split(key, length))[0]

    def raw(state, key):
        return scan_steps(jax.vmap(base.step), state, key)

    def per_env(state, key):
        return scan_steps(jax.vmap(wrapped.step), state, key)

    def renewed(state, key):
        return wrapped.renew(state, jax.vmap(wrapped.reset)(jax.random.split(jax.random.fold_in(key, 1), n)))

    def batched(state, key):
        return scan_steps(wrapped.step_batch, renewed(state, key), key)

    def over_unrolls(fn):
        return jax.jit(lambda s, key: jax.lax.scan(lambda c, k: (fn(c, k), None), s,
                                                   jax.random.split(key, unrolls))[0])

    keys = jax.random.split(jax.random.PRNGKey(args.seed), n)
    runs = {"raw (no auto-reset)": [over_unrolls(raw), jax.vmap(base.reset)(keys)],
            "auto-reset, reset every step (vmap(step))": [over_unrolls(per_env), jax.vmap(wrapped.reset)(keys)],
            "auto-reset, spare starts (step_batch)": [over_unrolls(batched), jax.vmap(wrapped.reset)(keys)]}
    for run in runs.values():
        run[1] = jax.block_until_ready(run[0](run[1], jax.random.PRNGKey(1)))  # compile + warm
    best = dict.fromkeys(runs, float("inf"))
    for i in range(args.repeats):  # interleaved rounds: load hits every row alike
        for name, run in runs.items():
            run[1], seconds = common.timed(run[0], run[1], jax.random.PRNGKey(i))
            best[name] = min(best[name], seconds)
    steps = n * unrolls * length
    for name in runs:
        print(f"env={args.env} backend={backend} num_envs={n} unroll={length} {name}: "
              f"{steps / best[name]:,.0f} steps/s")

    def count(state, key):  # step_batch's episode ends, and those that restarted from a reused start
        def step(carry, k):
            s, ends, reused = carry
            used = s.info["spare_used"]
            s = wrapped.step_batch(s, common.random_actions(base.spec, k, n))
            done = s.done > 0
            return (s, ends + jnp.sum(done), reused + jnp.sum(done & used)), None

        def unroll(carry, k):
            s, ends, reused = carry
            return jax.lax.scan(step, (renewed(s, k), ends, reused), jax.random.split(k, length))[0], None

        zero = jnp.zeros((), jnp.int32)
        return jax.lax.scan(unroll, (state, zero, zero), jax.random.split(key, unrolls))[0][1:]

    ends, reused = (int(x) for x in jax.jit(count)(jax.vmap(wrapped.reset)(keys), jax.random.PRNGKey(0)))
    print(f"env={args.env} step_batch over {steps:,} random-action steps: {ends:,} episodes ended, {reused:,} of them "
          f"restarted from a start reused (its spare not yet renewed): {reused / max(ends, 1):.1%}")


if __name__ == "__main__":
    main()
