"""Where one off-policy iteration's time goes: env step + replay add, sampling, gradient steps.

    .venv/bin/python benchmarks/sac_profile.py [--env inverted_pendulum] [--backend positional]
        [--agent sac] [--num-envs 128] [--batch-size 512] [--grad-updates-per-step 64]
        [--max-replay-size 1048576] [--matmul-dtype float32] [--network-precision highest]
        [--trace DIR]

Builds `sim.core.engine.Engine` on `defaults_for(env, agent)` with these sizes (the sac_vs_brax.py
settings by default), fills the ring to `--fill` rows, and times, best of `--repeats`, each
jitted alone: (1) collect: one env step of every env written into the ring (the engine's own
`_collect`); (2) `grad_updates_per_step` replay samples; (3) `grad_updates_per_step` agent
updates on one fixed batch; (4) the engine's gradient scan (sample + update); and (5) the
compiled epoch program, per iteration. Prints each in ms and the updates' matmul rate: the
hidden-to-hidden MACs of one SAC step (a count of the network passes, stated below).

`--network-precision default` runs the network layers at the platform's default matmul
precision (one bfloat16 pass on a TPU, as Brax's trainers run there) where train.py runs them
at full float32: a measurement, not an option of train.py. `--trace DIR` writes a JAX profiler
trace of the timed epoch calls (`benchmarks/read_profile.py DIR` reads an accelerator's).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from jax import lax  # noqa: E402

from agents import networks  # noqa: E402
from benchmarks import common  # noqa: E402
from sim.core import step_ring  # noqa: E402
from sim.run.config import defaults_for  # noqa: E402
from sim.run.build import build_engine  # noqa: E402

# Network passes of one SAC gradient step, in units of one MLP forward over the batch (a
# backward with weight gradients counts 2, one with input gradients only counts 1):
# critic: policy(next) 1 + target twin Q 2 + twin Q 2 + its backward 4; actor: policy 1 +
# twin Q 2 + Q input-gradients 2 + policy backward 2; the temperature reuses the actor's sample.
SAC_PASSES = 16


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="inverted_pendulum")
    p.add_argument("--backend", default="positional")
    p.add_argument("--agent", default="sac", choices=("sac", "td3", "ddpg"))
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--grad-updates-per-step", type=int, default=64)
    p.add_argument("--max-replay-size", type=int, default=1 << 20)
    p.add_argument("--fill", type=int, default=40_000, help="rows in the ring while timing (as after a short run)")
    p.add_argument("--matmul-dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--network-precision", default="highest", choices=("highest", "default"),
                   help="the network layers' matmul precision (train.py: highest)")
    p.add_argument("--trace", default=None, help="JAX profiler trace of the timed epoch calls")
    p.add_argument("--iterations", type=int, default=8, help="iterations of the timed epoch program")
    p.add_argument("--repeats", type=int, default=3)
    return p.parse_args(argv)


def build(a):
    """(cfg, engine, state with `fill` rows in the ring)."""
    cfg = defaults_for(a.env, a.agent).replace(backend=a.backend, num_envs=a.num_envs, batch_size=a.batch_size,
                                               grad_updates_per_step=a.grad_updates_per_step,
                                               max_replay_size=a.max_replay_size, min_replay_size=a.num_envs,
                                               matmul_dtype=a.matmul_dtype, num_eval_envs=8, progress=False,
                                               epochs=1)
    cfg = cfg.replace(total_steps=cfg.prefill_steps + a.iterations * cfg.steps_per_iteration).validate()
    engine = build_engine(cfg)
    state = engine.prefill(engine.init(jax.random.PRNGKey(0)))
    fill = min(a.fill, cfg.agent_config.max_replay_size)
    ring = state.loop.ring.replace(rows=state.loop.ring.rows.replace(size=jnp.asarray(fill, jnp.int32)))
    return cfg, engine, state.replace(loop=state.loop.replace(ring=ring))


def part_programs(cfg, engine, state) -> dict:
    """The iteration's parts as separate programs: collect, sample, update (fixed / sampled batches)."""
    updates, batch_size = cfg.agent_config.grad_updates_per_step, cfg.agent_config.batch_size
    n = cfg.agent_config.steps_per_sample

    def sample(buf, key):
        return step_ring.sample(buf, key, batch_size, n)

    batch = sample(state.loop.ring, jax.random.PRNGKey(5))

    def samples(buf, key):
        def body(acc, k):
            return acc + sum(jnp.sum(x) for x in jax.tree.leaves(sample(buf, k))), None
        return jax.lax.scan(body, jnp.zeros(()), jax.random.split(key, updates))[0]

    def fixed_updates(agent_state, obs_stats, batch, key):
        def body(s, k):
            return engine.agent.update(s, obs_stats, batch, k)[0], None
        return jax.lax.scan(body, agent_state, jax.random.split(key, updates))[0]

    def sampled_updates(agent_state, obs_stats, buf, key):
        def body(s, k):
            k1, k2 = jax.random.split(k)
            return engine.agent.update(s, obs_stats, sample(buf, k1), k2)[0], None
        return jax.lax.scan(body, agent_state, jax.random.split(key, updates))[0]

    # Every array an argument, as in the engine's programs: none baked in as a constant.
    collect, samples, fixed, sampled = (jax.jit(f) for f in (
        lambda s, k: engine.loop.collect(s, k, random_actions=False)[0].loop.ring.rows.size, samples, fixed_updates,
        sampled_updates))
    key = jax.random.PRNGKey(1)
    return {"collect": lambda: collect(state, key), "sample": lambda: samples(state.loop.ring, key),
            "update": lambda: fixed(state.agent, state.obs_stats, batch, key),
            "both": lambda: sampled(state.agent, state.obs_stats, state.loop.ring, key)}


def main(argv=None) -> None:
    a = parse(argv)
    if a.network_precision == "default":  # before the networks are built: their layers read it
        networks.PRECISION[a.matmul_dtype] = lax.Precision.DEFAULT
    t0 = time.perf_counter()
    cfg, engine, state = build(a)
    updates, fill = cfg.agent_config.grad_updates_per_step, int(state.loop.ring.rows.size)
    hidden = cfg.agent_config.value_hidden_sizes
    print(f"{a.agent} {a.env} {a.backend}: {a.num_envs} envs, {updates} gradient steps of batch {cfg.agent_config.batch_size} per "
          f"iteration, ring {cfg.agent_config.max_replay_size:,} rows ({fill:,} filled), hidden {hidden}, matmul "
          f"{a.matmul_dtype} (network layers at {a.network_precision} precision), on {jax.devices()[0].platform}; "
          f"built and prefilled in {time.perf_counter() - t0:.0f} s", flush=True)
    macs = sum(i * o for i, o in zip(hidden[:-1], hidden[1:]))  # one MLP's hidden-to-hidden MACs per row
    labels = {"collect": "collect (step + add)        ", "sample": f"{updates} samples                  ",
              "update": f"{updates} updates, fixed batch     ", "both": f"{updates} x (sample + update)      "}
    t = {}
    # Each figure printed as it comes: a run cut short (a lent machine's time limit) keeps them.
    for name, fn in part_programs(cfg, engine, state).items():
        t1 = time.perf_counter()
        jax.block_until_ready(fn())
        compile_s = time.perf_counter() - t1
        t[name] = common.best_of(fn, a.repeats)
        extra = ""
        if name == "update":
            gflops = 2 * macs * cfg.agent_config.batch_size * SAC_PASSES * updates / t[name] / 1e9
            extra = f"  ({t[name] / updates * 1e3:.3f} ms each" + (
                f"; hidden layers at {gflops:.0f} GFLOP/s)" if a.agent == "sac" else ")")
        print(f"  {labels[name]}: {t[name] * 1e3:8.2f} ms{extra}  [compiled and first run in {compile_s:.0f} s]",
              flush=True)
    t1 = time.perf_counter()
    epoch = engine.epoch.lower(state).compile()
    compile_s = time.perf_counter() - t1
    with jax.profiler.trace(a.trace) if a.trace else contextlib.nullcontext():
        t_iter = common.best_epoch(epoch, state, a.repeats)[0] / cfg.iterations_per_epoch
    print(f"  epoch program, per iteration: {t_iter * 1e3:8.2f} ms  {cfg.num_envs / t_iter:,.0f} env steps/s "
          f"(parts add up to {(t['collect'] + t['both']) * 1e3:.1f} ms)  [compiled in {compile_s:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
