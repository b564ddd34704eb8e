"""Where one PPO iteration's time goes, against the compound limit: the physics plus the
update's matmuls at this machine's matmul peak.

    .venv/bin/python benchmarks/ppo_profile.py [--env humanoid] [--num-envs 4096] [--devices 1]
        [--set NAME=VALUE ...] [--physics-steps 20] [--repeats 2] [--json PATH]

Runs the env's own config (train.py's defaults for `--env`, with `--num-envs` and any
`--set NAME=VALUE`) on `--devices` XLA devices (on a CPU host, N host devices, as train.py's
`--devices N`), one epoch of one iteration, and times side by side in one process, best of
`--repeats`:

1. the physics limit (`benchmarks.common.physics_limit`): raw `jit(scan(vmap(step)))` with
   random actions and no auto-reset over the run's envs (each device stepping its share,
   under `shard_map`), `--physics-steps` long;
2. the matmul peak: one float32 [rows, H] x [H, H] product per device, rows the per-device
   minibatch (`batch_size * unroll_length`) and H the value network's widest layer;
3. on one device, the rollout alone (the loop's `collect` of an iteration) and the update
   alone (`agent.update` on that batch), each jitted on its own;
4. the compiled epoch program, per iteration (what `train.py` runs).

The update's matmul work is counted layer by layer from the network sizes, per env step:
the policy's forward in the rollout; the value network's forward for GAE over (T + 2) / T
rows (T + 1 time rows and one truncation row per trajectory); then, per pass of
`num_updates_per_batch`, the forward and backward of both networks (forward 2 * MACs; backward
2 * MACs for the weights and 2 * MACs for the inputs but the first layer's, which has none).
The compound limit is steps / (steps / physics + FLOPs / peak): the steps/s of a trainer that
only steps physics and does its matmuls at peak, one after the other. Printed: each time,
its share of the iteration, and the epoch's ratio to the physics limit and to the compound limit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import envs  # noqa: E402
from agents.common import policy_head  # noqa: E402
from benchmarks import common  # noqa: E402
from sim.core import parallel  # noqa: E402
from sim.run import devices  # noqa: E402
from sim.run.config import defaults_for  # noqa: E402


def mlp_macs(sizes) -> tuple[int, int]:
    """(multiply-accumulates per row of an MLP with these layer sizes, those of its first layer)."""
    return sum(i * o for i, o in zip(sizes[:-1], sizes[1:])), sizes[0] * sizes[1]


def update_flops(cfg, obs_size: int, out_size: int) -> dict:
    """Matmul FLOPs per env step of an iteration, by part (see the module doc)."""
    hp = cfg.agent_config
    policy, policy_first = mlp_macs((obs_size, *hp.policy_hidden_sizes, out_size))
    value, value_first = mlp_macs((obs_size, *hp.value_hidden_sizes, 1))
    agent_steps = 1.0 / cfg.action_repeat  # the networks see one row per agent step

    def fwd_bwd(macs, first):
        return 2 * macs + 2 * macs + 2 * (macs - first)

    t = hp.unroll_length
    return {"rollout policy": agent_steps * 2 * policy,
            "GAE values": agent_steps * 2 * value * (t + 2) / t,
            "update passes": agent_steps * hp.num_updates_per_batch * (fwd_bwd(policy, policy_first)
                                                                      + fwd_bwd(value, value_first))}


def matmul_peak(mesh, n: int, rows: int, width: int, repeats: int) -> float:
    """FLOP/s of one [rows, width] x [width, width] float32 product on each of n devices at once."""
    a = jax.random.normal(jax.random.PRNGKey(0), (n * rows, width))
    b = jax.random.normal(jax.random.PRNGKey(1), (width, width))

    def product(a, b):
        return jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST)

    if mesh is None:
        run = jax.jit(product)
    else:
        run = jax.jit(jax.shard_map(product, mesh=mesh, in_specs=(P(parallel.AXIS), P()), out_specs=P(parallel.AXIS),
                                    check_vma=False))
        a = jax.device_put(a, NamedSharding(mesh, P(parallel.AXIS)))
    jax.block_until_ready(run(a, b))
    return 2 * n * rows * width * width / common.best_of(run, max(repeats, 5), a, b)


def components(engine, state, repeats: int) -> tuple[float, float]:
    """(rollout alone, update alone) seconds of one iteration on one device, each the engine's
    own piece traced as its epoch traces it: the loop's `collect`, the agent's `update`."""
    from sim.core.evaluation import full_precision

    collect = jax.jit(full_precision(lambda state, key: engine.loop.collect(state, key)[1]))
    update = jax.jit(full_precision(engine.agent.update))
    data = jax.block_until_ready(collect(state, jax.random.PRNGKey(1)))
    jax.block_until_ready(update(state.agent, state.obs_stats, data, jax.random.PRNGKey(2)))
    t_roll = common.best_of(collect, repeats, state, jax.random.PRNGKey(3))
    t_upd = common.best_of(update, repeats, state.agent, state.obs_stats, data, jax.random.PRNGKey(4))
    return t_roll, t_upd


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="humanoid")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--devices", type=int, default=1, help="XLA devices (host devices on a CPU)")
    p.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="other config fields")
    p.add_argument("--physics-steps", type=int, default=20, help="scan length of the physics-limit call")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", default=None, help="also write the figures here")
    a = p.parse_args(argv)
    n = a.devices
    devices.split_host_cpu(n)  # N host devices on a CPU (before JAX starts its backends)
    from sim.run.build import build_engine

    cfg = defaults_for(a.env).replace(num_envs=a.num_envs, devices=n, progress=False, num_eval_envs=8,
                                      **dict(common.parse_set(a.set)))
    cfg = cfg.replace(epochs=1, total_steps=cfg.steps_per_iteration).validate()  # one iteration per epoch
    engine = build_engine(cfg)
    dev = engine.dev
    state = engine.init(jax.random.PRNGKey(0))
    steps = cfg.steps_per_iteration
    t_roll = t_upd = None
    if n == 1:
        t_roll, t_upd = components(engine, state, a.repeats)
    t_iter, state = common.best_epoch(engine.epoch.lower(state).compile(), state, a.repeats)
    env = envs.make(cfg.env, cfg.backend, episode_length=cfg.episode_length)
    physics = common.physics_limit(env, cfg.num_envs, a.physics_steps, a.repeats, jax.random.PRNGKey(1),
                                   engine.mesh, precision=cfg.hosts.matmul_precision).steps_per_s
    width = max(cfg.agent_config.value_hidden_sizes)
    rows = dev.agent_config.batch_size * dev.agent_config.unroll_length
    peak = matmul_peak(engine.mesh, n, rows, width, a.repeats)
    flops = update_flops(cfg, engine.spec.obs_shape[0], policy_head(engine.spec).out_size)
    t_physics = steps / physics
    t_matmul = steps * sum(flops.values()) / peak
    compound = steps / (t_physics + t_matmul)
    sps = steps / t_iter
    print(f"{cfg.env} {cfg.backend or 'default backend'}, {cfg.num_envs} envs on {n} {jax.devices()[0].platform} "
          f"device(s): {steps:,} env steps per iteration ({engine.loop.unrolls} unrolls x "
          f"{cfg.agent_config.unroll_length} steps; {cfg.agent_config.num_updates_per_batch} passes of {cfg.agent_config.num_minibatches} "
          f"minibatches of {rows * n:,} rows)")
    print(f"  physics limit   : {physics:>9,.0f} steps/s  ({t_physics:7.2f} s per iteration)")
    print(f"  matmul peak     : {peak / 1e9:>9,.0f} GFLOP/s  ([{rows}, {width}] x [{width}, {width}] per device)")
    print(f"  matmul work     : {sum(flops.values()) / 1e6:9.2f} MFLOP per env step ("
          + ", ".join(f"{k} {v / 1e6:.2f}" for k, v in flops.items()) + f"): {t_matmul:.2f} s at peak")
    print(f"  compound limit  : {compound:>9,.0f} steps/s  ({t_physics + t_matmul:7.2f} s per iteration)")
    if t_roll is not None:
        print(f"  rollout alone   : {steps / t_roll:>9,.0f} steps/s  ({t_roll:7.2f} s; physics alone {t_physics:.2f})")
        print(f"  update alone    : {t_upd:9.2f} s  (its matmuls at peak {t_matmul:.2f} s: "
              f"{t_matmul / t_upd:.2f} of it)")
    print(f"  epoch program   : {sps:>9,.0f} steps/s  ({t_iter:7.2f} s per iteration): "
          f"{sps / physics:.2f} of the physics limit, {sps / compound:.2f} of the compound limit", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"env": cfg.env, "num_envs": cfg.num_envs, "devices": n, "platform": jax.devices()[0].platform,
                       "steps_per_iteration": steps, "physics_sps": physics, "matmul_peak_flops": peak,
                       "matmul_flops_per_step": flops, "compound_sps": compound, "rollout_s": t_roll,
                       "update_s": t_upd, "iteration_s": t_iter, "train_sps": sps,
                       "of_physics": sps / physics, "of_compound": sps / compound}, f, indent=2)


if __name__ == "__main__":
    main()
