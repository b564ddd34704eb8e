"""Multi-device checks, run in a subprocess that forces N CPU devices before JAX starts.

    XLA_FLAGS=--xla_force_host_platform_device_count=N python tests/multidevice_checks.py CHECK

Prints one JSON object with the measured facts; tests/test_parallel.py asserts on them.
"""

import hashlib
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from agents import ppo  # noqa: E402
from agents.common import actor_critic  # noqa: E402
from sim.core.contract import Transition  # noqa: E402
from envs.wrappers import init_stats, update_stats  # noqa: E402
from sim.core import parallel  # noqa: E402
from sim.run import devices  # noqa: E402
from sim.run.policy import teacher as teachers  # noqa: E402
from sim.core.evaluation import make_agent  # noqa: E402
from sim.run.build import build_engine, core_spec  # noqa: E402
from tests.helpers import small_config  # noqa: E402

jax.config.update("jax_compilation_cache_dir", os.environ.get("FUSEDRL_JAX_CACHE", ".jax_cache"))


def max_abs_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def one_update_both_ways(cfg, spec, batch, batch_axis: int):
    """(single-device update of the global batch, N-device update of its shards), agent states."""
    n = len(jax.devices())
    single = make_agent(core_spec(cfg.replace(devices=1)), spec)
    run = core_spec(cfg.replace(devices=n))
    sharded = make_agent(run, spec, parallel.AXIS, run.device)
    state = single.init(jax.random.PRNGKey(0))
    stats = update_stats(init_stats(spec.obs_shape), batch.obs.reshape((-1,) + spec.obs_shape))
    key = jax.random.PRNGKey(1)
    want, _ = jax.jit(single.update)(state, stats, batch, key)

    mesh = parallel.make_mesh(n)
    spec_batch = P(*([None] * batch_axis + [parallel.AXIS]))
    mapped = jax.shard_map(lambda s, st, b, k: sharded.update(s, st, b, k)[0], mesh=mesh,
                           in_specs=(P(), P(), spec_batch, P()), out_specs=P(), check_vma=False)
    batch = jax.device_put(batch, NamedSharding(mesh, spec_batch))
    got = jax.jit(mapped)(state, stats, batch, key)
    return want, got


def check_gradients():
    """PPO's loss gradient and SAC's whole update step: N devices == 1 device on the global batch."""
    out = {}
    ppo_cfg = small_config("pendulum", batch_size=8, num_minibatches=1)
    spec = build_engine(ppo_cfg.replace(devices=1)).spec
    head, apply_policy, apply_value, _, _ = actor_critic(ppo_cfg.agent_config, spec)
    params = make_agent(core_spec(ppo_cfg.replace(devices=1)), spec).init(jax.random.PRNGKey(0)).params
    rng = np.random.default_rng(0)
    M = 64
    batch = ppo.Minibatch(obs=rng.normal(size=(M, 3)), action=rng.normal(size=(M, 1)),
                          log_prob=rng.normal(size=(M,)) - 1.0, advantage=rng.normal(size=(M,)) * 3 + 1,
                          target=rng.normal(size=(M,)), value=rng.normal(size=(M,)))
    batch = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), batch)
    key = jax.random.PRNGKey(1)

    def grad(b, axis_name=None):
        g, _ = jax.grad(ppo.ppo_loss, has_aux=True)(params, b, key, apply_policy, apply_value, head, ppo_cfg.agent_config,
                                                    axis_name)
        return g if axis_name is None else jax.lax.pmean(g, axis_name)

    want = jax.jit(grad)(batch)
    mesh = parallel.make_mesh(len(jax.devices()))
    mapped = jax.shard_map(lambda b: grad(b, parallel.AXIS), mesh=mesh, in_specs=P(parallel.AXIS), out_specs=P(),
                           check_vma=False)
    got = jax.jit(mapped)(jax.device_put(batch, NamedSharding(mesh, P(parallel.AXIS))))
    out["ppo_grad_max_diff"] = max_abs_diff(want, got)
    out["ppo_grad_max"] = max(float(np.max(np.abs(x))) for x in jax.tree.leaves(want))

    sac_cfg = small_config("pendulum", "sac", batch_size=16)
    M = 16
    obs = rng.normal(size=(M, 3)).astype(np.float32)
    batch = Transition(obs=obs, next_obs=obs + 0.1, reward=rng.normal(size=(M,)).astype(np.float32),
                       terminated=(rng.random(M) < 0.1).astype(np.float32),
                       action=rng.uniform(-1, 1, size=(M, 1)).astype(np.float32))
    want, got = one_update_both_ways(sac_cfg, spec, jax.tree.map(jnp.asarray, batch), batch_axis=0)
    out["sac_max_diff"] = max_abs_diff(want, got)
    # CrossQ: its batch statistics are those of the global batch too (averaged over the devices)
    crossq_cfg = small_config("pendulum", "crossq", batch_size=16, grad_updates_per_step=1, policy_delay=1)
    want, got = one_update_both_ways(crossq_cfg, spec, jax.tree.map(jnp.asarray, batch), batch_axis=0)
    out["crossq_max_diff"] = max_abs_diff(want, got)
    out["crossq_stats_max_diff"] = max_abs_diff((want.q_stats, want.policy_stats), (got.q_stats, got.policy_stats))
    return out


def check_epoch(agent):
    """An epoch over all devices: parameters bitwise identical on every device; donation in place."""
    n = len(jax.devices())
    # FastTD3's batch work (its critics' C51 logits and projections) is larger than SAC's: its
    # ring of 2^16 rows keeps a copy of the ring well above that 10% bound, its batch below.
    # CrossQ's likewise (its joint pass over [s; s'] and its normalisation layers).
    ring = {"ppo": {}, "shac": {}, "es": {}, "evosax": {}, "bc": {}, "fasttd3": {"max_replay_size": 1 << 16},
            "crossq": {"max_replay_size": 1 << 16}}.get(agent, {"max_replay_size": 1 << 14})
    batch = {} if agent in ("shac", "es", "evosax") else {"batch_size": 8 * n}  # (they have no batch: their envs are it)
    cfg = small_config("pendulum", agent, num_envs=4 * n, **batch, **ring)
    engine = build_engine(cfg, teachers.source(cfg))
    state = engine.init(jax.random.PRNGKey(0))
    if cfg.loop.droppable is not None:
        state = engine.prefill(state)
    # exact alias pairs; off-policy: temp < 10% of the state (no copy of the ring). PPO's temp
    # memory is its rollout batch, far larger than its small state, so it is not bounded here.
    compiled = engine.epoch.check(state, max_temp_fraction=0.1 if cfg.loop.droppable is not None else 1e9)
    state, metrics = compiled(state)
    state, metrics = compiled(state)
    leaves = jax.tree.leaves(jax.device_get(state.agent))
    # each device ran exactly the run's iterations: 2 epochs of iterations_per_epoch
    iterations_ok = bool(np.all(np.asarray(state.iteration) == 2 * cfg.iterations_per_epoch))
    identical = all(np.array_equal(leaf[i], leaf[0]) for leaf in leaves for i in range(n))
    envs_differ = not np.array_equal(np.asarray(state.env.obs[0]), np.asarray(state.env.obs[-1]))
    ev = engine.evaluate(state, jax.random.PRNGKey(5))
    return {"devices": engine.num_devices, "params_identical": identical, "iterations_ok": iterations_ok, "env_shards_differ": envs_differ,
            "shard_shape": list(state.env.obs.shape), "eval_return": float(ev["eval/episode_return"]),
            "loss_finite": bool(all(np.isfinite(v) for k, v in jax.device_get(metrics).items()
                                    if k.startswith("loss/")))}


def check_multihost():
    """One process of a multi-process run (JAX_COORDINATOR_ADDRESS etc. set by the caller)."""
    cfg = small_config("pendulum", num_envs=16, batch_size=16, num_minibatches=2)
    devices.initialize(cfg)
    engine = build_engine(cfg)
    state = engine.init(jax.random.PRNGKey(0))
    for _ in range(3):
        state, metrics = engine.epoch(state)
    ev = engine.evaluate(state, jax.random.PRNGKey(1))
    shards = [np.concatenate([np.asarray(s.data).ravel() for s in sorted(leaf.addressable_shards,
                                                                           key=lambda s: s.device.id)])
              for leaf in jax.tree.leaves(state.agent)]
    per_device = [np.concatenate([np.asarray(leaf.addressable_shards[i].data).ravel()
                                  for leaf in jax.tree.leaves(state.agent)]) for i in range(jax.local_device_count())]
    return {"process": jax.process_index(), "processes": jax.process_count(), "devices": engine.num_devices,
            "local_devices": jax.local_device_count(),
            "local_identical": all(np.array_equal(p, per_device[0]) for p in per_device),
            "param_checksum": float(np.sum(np.abs(per_device[0]), dtype=np.float64)),
            "param_sha256": hashlib.sha256(per_device[0].tobytes()).hexdigest(), "n_leaves": len(shards),
            "loss": float(metrics["loss/total"]), "eval_return": float(ev["eval/episode_return"])}


def check_zero_size_leaves():
    """MJX physics carries zero-size arrays (e.g. mocap_pos [0, 3]); the sharded state must keep
    its sharding on those too, epoch after epoch (the compiled program rejects anything else)."""
    import envs as envs_pkg
    from envs.base import Env
    from sim.core import engine as engine_mod

    class WithEmptyLeaf(Env):
        def __init__(self, inner):
            self.inner, self.spec, self.name = inner, inner.spec, inner.name

        def default_params(self):
            return self.inner.default_params()

        def _reset(self, key, params):
            physics, obs = self.inner._reset(key, params)
            return (physics, jnp.zeros((0, 3), jnp.float32)), obs

        def _step(self, physics, action, params):
            inner, empty = physics
            inner, obs, reward, terminated = self.inner._step(inner, action, params)
            return (inner, empty), obs, reward, terminated

    make = envs_pkg.make
    engine_mod.envs.make = lambda *a, **k: WithEmptyLeaf(make(*a, **k))
    try:
        engine = build_engine(small_config("pendulum"))
    finally:
        engine_mod.envs.make = make
    state = engine.init(jax.random.PRNGKey(0))
    compiled = engine.epoch.lower(state).compile()
    for _ in range(3):
        state, metrics = compiled(state)
    jax.block_until_ready(metrics)
    stacked = parallel.stacked_sharding(engine.mesh)
    return {"devices": engine.num_devices, "epochs": 3,
            "all_stacked": all(leaf.sharding.is_equivalent_to(stacked, leaf.ndim) for leaf in jax.tree.leaves(state))}


def check_population(num_seeds: int, discounting: str):
    """A population over the devices: whole members per device when the device count divides
    the members, else every member's envs split over the devices. Either way: exact alias
    pairs on the compiled epoch, and member 1 equals its single run (on 1 device when members
    are spread, on all of them when its envs are split)."""
    from sim.run.populations import population

    n = len(jax.devices())
    cfg = small_config("cartpole", num_seeds=num_seeds, sweep=(f"discounting={discounting}",))
    engine = build_engine(cfg)
    init_keys, _ = population.keys(cfg)
    state = engine.init(init_keys)
    compiled = engine.epoch.check(state, max_temp_fraction=1e9)  # PPO's temp is its rollout
    for _ in range(2):
        state, metrics = compiled(state)
    member = population.members(cfg)[1]
    single_cfg = population.member_config(cfg, member).replace(devices=1 if engine.spread else n)
    single = build_engine(single_cfg)
    one = single.init(population.keys(single_cfg)[0])
    for _ in range(2):
        one, _ = single.epoch(one)
    ours = jax.tree.map(lambda x: x[member.index], jax.device_get(state.agent.params))
    theirs = jax.device_get(one.agent.params)
    per_device = jax.tree.leaves(jax.device_get(state.agent))
    return {"devices": engine.num_devices, "members": engine.members, "spread": engine.spread,
            "shape": list(state.env.obs.shape), "member_max_diff": max_abs_diff(ours, theirs),
            "iterations_ok": bool(np.all(np.asarray(state.iteration) == 2 * cfg.iterations_per_epoch)),
            "copies_identical": engine.spread or all(np.array_equal(x[:, i], x[:, 0]) for x in per_device
                                                     for i in range(n)),
            "loss_shape": list(np.shape(metrics["loss/total"]))}


def check_pbt(num_seeds: int, discounting: str):
    """A PBT step on a SAC population over the devices (whole members per device, or each
    member's envs split): every member's state is the one the lineage says, leaf for leaf
    (checked on the host against the state before), in place, and the step's temporary
    memory per device against the state's."""
    from sim.core import donation, pbt
    from sim.run.populations import population

    cfg = small_config("pendulum", "sac", num_seeds=num_seeds, sweep=(f"discounting={discounting}",),
                       max_replay_size=1 << 14)
    engine = build_engine(cfg)
    state = engine.prefill(engine.init(population.keys(cfg)[0]))
    state, _ = engine.epoch(state)
    plan = pbt.Plan(explore=(pbt.Explore("learning_rate", 1e-5, 1e-2, log=True),), fraction=0.25)
    program = pbt.make_program(engine, plan)
    m = engine.members
    fitness = jnp.arange(m, dtype=jnp.float32).at[1].set(jnp.nan)  # member 1 diverged, member 0 the worst
    compiled = program.lower(state, fitness, jax.random.PRNGKey(0)).compile()
    # aliased in place; temp is what the step gathers (reported, bounded loosely: see README)
    donation.assert_in_place(compiled, state, max_temp_fraction=3.0)
    before = jax.device_get(state)
    new, lineage = compiled(state, fitness, jax.random.PRNGKey(0))
    after, source = jax.device_get(new), np.asarray(lineage["source"])
    broken = ~np.isfinite(np.asarray(fitness))

    def expect(old, got, copied):
        want = old[source] if copied is None else np.where(copied.reshape((-1,) + (1,) * (old.ndim - 1)),
                                                           old[source], old)
        return np.array_equal(got, want)

    learner = lambda s: (s.agent.replace(hp=None), s.obs_stats)  # noqa: E731
    ok = all(expect(a, b, None) for a, b in zip(jax.tree.leaves(learner(before)), jax.tree.leaves(learner(after))))
    ok = ok and all(expect(a, b, broken) for a, b in zip(jax.tree.leaves((before.env, before.loop)),
                                                          jax.tree.leaves((after.env, after.loop))))
    stacked = parallel.stacked_sharding(engine.mesh, parallel.state_spec(True, engine.spread))
    return {"devices": engine.num_devices, "spread": engine.spread, "members": m, "copied_as_told": bool(ok),
            "replaced": np.asarray(lineage["replaced"]).tolist(), "source": source.tolist(),
            "sharding_kept": all(x.sharding.is_equivalent_to(stacked, x.ndim) for x in jax.tree.leaves(new)),
            "temp_bytes": int(compiled.memory_analysis().temp_size_in_bytes),
            "state_bytes": donation.tree_bytes(state),
            "learner_bytes": donation.tree_bytes((state.agent, state.obs_stats))}


def check_learns():
    from sim.run.trainer import train

    cfg = small_config("cartpole", num_envs=32, batch_size=64, num_minibatches=4, unroll_length=32,
                       num_updates_per_batch=4, total_steps=400_000, epochs=8, num_eval_envs=32,
                       episode_length=500, learning_rate=2.5e-3, anneal_lr=True, max_grad_norm=0.5)
    record = train(cfg, run_dir=tempfile.mkdtemp(prefix="fusedrl_parallel_run"), log=lambda *a: None)
    return {"eval_return": record["eval/episode_return"], "devices": len(jax.devices())}


if __name__ == "__main__":
    which = sys.argv[1]
    result = {"gradients": check_gradients, "ppo_epoch": lambda: check_epoch("ppo"),
              "sac_epoch": lambda: check_epoch("sac"),
              "fasttd3_epoch": lambda: check_epoch("fasttd3"), "crossq_epoch": lambda: check_epoch("crossq"),
              "shac_epoch": lambda: check_epoch("shac"), "es_epoch": lambda: check_epoch("es"), "evosax_epoch": lambda: check_epoch("evosax"),
              "bc_epoch": lambda: check_epoch("bc"),
              "learns": check_learns,
              "multihost": check_multihost, "zero_size": check_zero_size_leaves,
              "population_spread": lambda: check_population(2, "0.9,0.99"),
              "population_split": lambda: check_population(3, "0.9"),
              "pbt_spread": lambda: check_pbt(2, "0.9,0.99"), "pbt_split": lambda: check_pbt(3, "0.9")}[which]()
    print("RESULT " + json.dumps(result))
