"""TD3 (Fujimoto et al., 2018, arXiv:1802.09477) and DDPG (Lillicrap et al., 2015) in one.

TD3's three tricks are switches: twin Q (min of two critics), target policy smoothing
(`target_noise`), delayed policy and target updates (`policy_delay`). DDPG is this agent
with all three off (`--agent ddpg`: one critic, target_noise 0, policy_delay 1).

`update` does ONE critic step (and, every `policy_delay` calls, one actor step and the
Polyak target update) on a replay batch; the engine scans it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import networks as nets
from agents.base import Agent, pmean, sharded_normal
from agents.offpolicy import adam, continuous_only, polyak, prep_fn, q_example
from envs.base import EnvSpec


@struct.dataclass
class TD3State:
    policy: dict
    target_policy: dict
    q: dict
    target_q: dict
    policy_opt: optax.OptState
    q_opt: optax.OptState
    step: jax.Array  # int32 critic updates done


def make_td3(cfg, spec: EnvSpec, axis_name: str | None = None) -> Agent:
    """axis_name: the device axis inside `shard_map`; gradients are averaged over it."""
    continuous_only(spec, cfg.agent)
    twin = cfg.agent != "ddpg"
    policy_delay = 1 if cfg.agent == "ddpg" else cfg.policy_delay
    target_noise = 0.0 if cfg.agent == "ddpg" else cfg.target_noise
    policy_net = nets.MLP(cfg.policy_hidden_sizes, spec.action_size, cfg.activation, matmul_dtype=cfg.matmul_dtype)
    q_net = nets.QNetwork(cfg.value_hidden_sizes, cfg.activation, num_heads=2 if twin else 1,
                          matmul_dtype=cfg.matmul_dtype)
    optimizer = adam(cfg)
    prep = prep_fn(cfg)
    low = jnp.asarray(spec.action_low, jnp.float32)
    high = jnp.asarray(spec.action_high, jnp.float32)

    def pi(params, obs):
        return jnp.tanh(policy_net.apply(params, obs))

    def init(key):
        policy_key, q_key = jax.random.split(key)
        obs, action = q_example(spec)
        policy = policy_net.init(policy_key, obs)
        q = q_net.init(q_key, obs, action)
        return TD3State(policy=policy, target_policy=policy, q=q, target_q=q, policy_opt=optimizer.init(policy),
                        q_opt=optimizer.init(q), step=jnp.zeros((), jnp.int32))

    def act(state: TD3State, obs_stats, obs, key, deterministic=False):
        action = pi(state.policy, prep(obs_stats, obs))
        if not deterministic:
            noise = cfg.exploration_noise * jax.random.normal(key, action.shape)
            action = jnp.clip(action + noise, -1.0, 1.0)
        return nets.scale_action(action, low, high), {"action": action}

    def critic_loss(q_params, state: TD3State, batch, key):
        next_action = pi(state.target_policy, batch["next_obs"])
        if target_noise > 0:
            noise = jnp.clip(target_noise * sharded_normal(key, next_action.shape, axis_name),
                             -cfg.target_noise_clip, cfg.target_noise_clip)
            next_action = jnp.clip(next_action + noise, -1.0, 1.0)
        next_q = jnp.min(q_net.apply(state.target_q, batch["next_obs"], next_action), axis=-1)
        target = batch["reward"] * cfg.reward_scaling + cfg.discounting * (1.0 - batch["terminated"]) * next_q
        q = q_net.apply(q_params, batch["obs"], batch["action"])
        error = q - jax.lax.stop_gradient(target)[:, None]
        return 0.5 * jnp.mean(jnp.sum(jnp.square(error), axis=-1)), jnp.mean(q)

    def actor_loss(policy_params, q_params, obs):
        return -jnp.mean(q_net.apply(q_params, obs, pi(policy_params, obs))[..., 0])

    def update(state: TD3State, obs_stats, batch: dict, key):
        batch = dict(batch, obs=prep(obs_stats, batch["obs"]), next_obs=prep(obs_stats, batch["next_obs"]))
        (c_loss, q_mean), c_grad = pmean(jax.value_and_grad(critic_loss, has_aux=True)(state.q, state, batch, key),
                                         axis_name)
        c_update, q_opt = optimizer.update(c_grad, state.q_opt, state.q)
        q = optax.apply_updates(state.q, c_update)

        def policy_step(_):
            p_loss, p_grad = pmean(jax.value_and_grad(actor_loss)(state.policy, q, batch["obs"]), axis_name)
            p_update, policy_opt = optimizer.update(p_grad, state.policy_opt, state.policy)
            policy = optax.apply_updates(state.policy, p_update)
            return (policy, policy_opt, polyak(state.target_policy, policy, cfg.tau),
                    polyak(state.target_q, q, cfg.tau), p_loss)

        def skip(_):  # no actor step: its loss gets weight 0, so the engine averages real actor steps only
            return state.policy, state.policy_opt, state.target_policy, state.target_q, jnp.zeros(())

        due = (state.step + 1) % policy_delay == 0
        if policy_delay == 1:
            policy, policy_opt, target_policy, target_q, p_loss = policy_step(None)
        else:
            policy, policy_opt, target_policy, target_q, p_loss = jax.lax.cond(due, policy_step, skip, None)
        new = TD3State(policy=policy, target_policy=target_policy, q=q, target_q=target_q, policy_opt=policy_opt,
                       q_opt=q_opt, step=state.step + 1)
        return new, {"critic": c_loss, "actor": p_loss, "q": q_mean, "weight/actor": due.astype(jnp.float32)}

    return Agent(init=init, act=act, update=update)
