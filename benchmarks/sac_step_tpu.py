"""One SAC gradient step, ours against Brax's, compiled for a TPU on this machine (no chip):
what the TPU's compiler makes of each and what its cost model says it costs.

    python benchmarks/sac_step_tpu.py --libtpu DIR [--env humanoid] [--batch-size 512]
        [--steps 64] [--json PATH]

Compiles a scan of `--steps` gradient steps on one fixed batch, as the replay loop runs them
(ours: the agent's `update` built as the engine builds it, with the network layers at full
float32 as train.py runs them, and at the platform's default precision, one bfloat16 pass on
a TPU; Brax's: its SAC losses and `gradient_update_fn` with the same sizes and its Adam, at the
default precision as its trainer runs there), for the topology of `benchmarks/tpu_compile.py`,
and prints per side the ops of the loop's body (fusions, of which convolutions), the flops and
operand bytes of one step, and XLA's `optimal_seconds` for it. Nothing runs: a difference in
time on the chip that these do not show is for a profile there (`benchmarks/sac_profile.py
--trace`). Needs libtpu (see tpu_compile.py) and brax.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks import tpu_compile  # noqa: E402


def body_ops(text: str) -> dict:
    """{ops, fusions, convolutions} of the largest while body of a compiled module's text (the
    scan of gradient steps): its instructions, its fusions, and those that hold a convolution."""
    comps = tpu_compile.computations(text)
    bodies = re.findall(r" while\(.*?body=%([\w.\-]+)", text)
    body = max(bodies, key=lambda b: comps.get(b, "").count("\n"))
    ops = [line for line in comps[body].split("\n") if re.match(r"^\s+(ROOT )?\S+ = ", line)]
    fusions = [line for line in ops if " fusion(" in line]
    called = [re.search(r"calls=%([\w.\-]+)", line) for line in fusions]
    convolutions = sum(1 for c in called if c and " convolution(" in comps.get(c.group(1), ""))
    return {"ops": len(ops), "fusions": len(fusions), "convolutions": convolutions}


def costs(compiled) -> dict:
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return {"gflop": analysis["flops"] / 1e9, "mbytes": analysis["bytes accessed"] / 1e6,
            "optimal_us": analysis["optimal_seconds"] * 1e6}


def ours(env: str, batch_size: int, steps: int, default_precision: bool, place):
    """The scan of our SAC's updates on a fixed batch, lowered for the TPU."""
    import jax
    from jax import lax

    from agents import networks
    from sim.core import step_ring
    from sim.run.build import build_engine
    from sim.run.config import defaults_for

    saved = dict(networks.PRECISION)
    if default_precision:  # before tracing: the layers read it when they are applied
        networks.PRECISION["float32"] = lax.Precision.DEFAULT
    try:
        cfg = defaults_for(env, "sac").replace(backend="mjx", num_envs=128, batch_size=batch_size,
                                               grad_updates_per_step=steps, num_eval_envs=1, progress=False,
                                               compile_cache="off", devices=1).validate()
        engine = build_engine(cfg)
        state = place(jax.eval_shape(engine.init, jax.random.PRNGKey(0)))
        key = place(jax.eval_shape(lambda: jax.random.PRNGKey(1)))
        batch = place(jax.eval_shape(lambda r, k: step_ring.sample(r, k, batch_size, cfg.agent_config.steps_per_sample),
                                     state.loop.ring, key))

        def updates(agent, obs_stats, batch, key):  # every array an argument, as in the engine's programs
            def body(s, k):
                return engine.agent.update(s, obs_stats, batch, k)[0], None
            return jax.lax.scan(body, agent, jax.random.split(key, steps))[0]

        return jax.jit(updates).lower(state.agent, state.obs_stats, batch, key)
    finally:
        networks.PRECISION.update(saved)


def brax(obs_size: int, action_size: int, batch_size: int, steps: int, place):
    """The scan of Brax's SAC gradient steps (its sgd_step: temperature, critic, actor, target)
    on a fixed batch, lowered for the TPU."""
    import jax
    import jax.numpy as jnp
    import optax
    from brax.training import gradients
    from brax.training.acme import running_statistics, specs
    from brax.training.agents.sac import losses, networks as sac_networks
    from brax.training.types import Transition

    net = sac_networks.make_sac_networks(obs_size, action_size, hidden_layer_sizes=(256, 256),
                                         preprocess_observations_fn=running_statistics.normalize)
    alpha_loss, critic_loss, actor_loss = losses.make_losses(net, reward_scaling=1.0, discounting=0.99,
                                                             action_size=action_size)
    alpha_update = gradients.gradient_update_fn(alpha_loss, optax.adam(3e-4), pmap_axis_name=None)
    critic_update = gradients.gradient_update_fn(critic_loss, optax.adam(6e-4), pmap_axis_name=None)
    actor_update = gradients.gradient_update_fn(actor_loss, optax.adam(6e-4), pmap_axis_name=None)

    def init(key):
        policy, q = net.policy_network.init(key), net.q_network.init(key)
        return {"policy": policy, "q": q, "target_q": q, "log_alpha": jnp.zeros(()),
                "stats": running_statistics.init_state(specs.Array((obs_size,), jnp.dtype("float32"))),
                "policy_opt": optax.adam(6e-4).init(policy), "q_opt": optax.adam(6e-4).init(q),
                "alpha_opt": optax.adam(3e-4).init(jnp.zeros(()))}

    def step(carry, batch):
        s, key = carry
        key, k_alpha, k_critic, k_actor = jax.random.split(key, 4)
        _, log_alpha, alpha_opt = alpha_update(s["log_alpha"], s["policy"], s["stats"], batch, k_alpha,
                                               optimizer_state=s["alpha_opt"])
        alpha = jnp.exp(s["log_alpha"])
        _, q, q_opt = critic_update(s["q"], s["policy"], s["stats"], s["target_q"], alpha, batch, k_critic,
                                    optimizer_state=s["q_opt"])
        _, policy, policy_opt = actor_update(s["policy"], s["stats"], s["q"], alpha, batch, k_actor,
                                             optimizer_state=s["policy_opt"])
        target_q = jax.tree.map(lambda t, x: t * 0.995 + x * 0.005, s["target_q"], q)
        return ({**s, "policy": policy, "q": q, "target_q": target_q, "log_alpha": log_alpha, "policy_opt": policy_opt,
                 "q_opt": q_opt, "alpha_opt": alpha_opt}, key), None

    def updates(s, batch, key):
        return jax.lax.scan(lambda c, _: step(c, batch), (s, key), None, length=steps)[0]

    zeros = lambda *shape: jnp.zeros(shape)  # noqa: E731
    batch = Transition(observation=zeros(batch_size, obs_size), action=zeros(batch_size, action_size),
                       reward=zeros(batch_size), discount=zeros(batch_size),
                       next_observation=zeros(batch_size, obs_size),
                       extras={"state_extras": {"truncation": zeros(batch_size)}, "policy_extras": {}})
    args = (jax.eval_shape(init, jax.random.PRNGKey(0)), jax.eval_shape(lambda: batch),
            jax.eval_shape(lambda: jax.random.PRNGKey(1)))
    return jax.jit(updates).lower(*place(args))


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    tpu_compile._use_libtpu(argv)  # before JAX is imported
    import jax
    from jax.sharding import SingleDeviceSharding

    import envs
    from benchmarks import common

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="humanoid")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--steps", type=int, default=64, help="gradient steps in the compiled scan")
    p.add_argument("--topology", default="v5e:1x1")
    p.add_argument("--libtpu", default=None, help="the folder libtpu is installed in (pip --target)")
    p.add_argument("--json", default=None, help="append one JSON line per side")
    a = p.parse_args(argv)
    on_tpu = SingleDeviceSharding(tpu_compile.tpu_device(a.topology, "sac_step_tpu.py"))
    place = lambda tree: jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=on_tpu), tree)  # noqa: E731
    spec = envs.make(a.env, "mjx").spec
    sides = {"ours, network layers at float32 (train.py)": lambda: ours(a.env, a.batch_size, a.steps, False, place),
             "ours, network layers at the default precision": lambda: ours(a.env, a.batch_size, a.steps, True, place),
             "brax, at the default precision": lambda: brax(spec.obs_shape[0], spec.action_size, a.batch_size, a.steps,
                                                            place)}
    print(f"one SAC gradient step on {a.env} (obs {spec.obs_shape[0]}, action {spec.action_size}), batch "
          f"{a.batch_size}, hidden (256, 256), in a scan of {a.steps}, compiled for a TPU {a.topology}:", flush=True)
    for side, lower in sides.items():
        t0 = time.perf_counter()
        compiled = lower().compile()
        record = {"side": side, "env": a.env, "batch_size": a.batch_size, "topology": a.topology,
                  "compile_s": round(time.perf_counter() - t0, 1), **body_ops(compiled.as_text()), **costs(compiled)}
        print(f"  {side:<46}: {record['ops']} ops in the step's loop body, {record['fusions']} fusions "
              f"({record['convolutions']} with a convolution); one step {record['gflop']:.2f} GFLOP, "
              f"{record['mbytes']:.0f} MB of operands, XLA's estimate {record['optimal_us']:.0f} us", flush=True)
        common.emit(record, a.json)


if __name__ == "__main__":
    main()
