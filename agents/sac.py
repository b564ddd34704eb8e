"""Soft Actor-Critic (Haarnoja et al., 2018, arXiv:1812.05905): twin Q with Polyak-averaged
targets, tanh-Gaussian policy, temperature learned towards a target entropy of -|A|.

`update` does ONE gradient step (critic, actor, temperature, targets) on a replay batch
[M, ...] of obs, action (squashed, in [-1, 1]), reward, terminated, next_obs; the engine
scans it `grad_updates_per_step` times.
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
class SACState:
    policy: dict
    q: dict
    target_q: dict
    log_alpha: jax.Array
    policy_opt: optax.OptState
    q_opt: optax.OptState
    alpha_opt: optax.OptState


def make_sac(cfg, spec: EnvSpec, axis_name: str | None = None) -> Agent:
    """axis_name: the device axis inside `shard_map`; gradients are averaged over it and the
    sampling noise of each replay row does not depend on the device count."""
    continuous_only(spec, "sac")
    action_size = spec.action_size
    policy_net = nets.MLP(cfg.policy_hidden_sizes, 2 * action_size, cfg.activation, matmul_dtype=cfg.matmul_dtype)
    q_net = nets.QNetwork(cfg.value_hidden_sizes, cfg.activation, num_heads=2, matmul_dtype=cfg.matmul_dtype)
    optimizer = adam(cfg)
    prep = prep_fn(cfg)
    low = jnp.asarray(spec.action_low, jnp.float32)
    high = jnp.asarray(spec.action_high, jnp.float32)
    target_entropy = -float(action_size)

    def sample_action(policy_params, obs, key, axis=None):
        """Squashed action a in [-1, 1] and its log-density (axis: see sharded_normal)."""
        loc, std = nets.tanh_normal_params(policy_net.apply(policy_params, obs))
        u = loc + std * sharded_normal(key, loc.shape, axis)
        return jnp.tanh(u), nets.tanh_normal_log_prob(u, loc, std)

    def init(key):
        policy_key, q_key = jax.random.split(key)
        obs, action = q_example(spec)
        policy = policy_net.init(policy_key, obs)
        q = q_net.init(q_key, obs, action)
        log_alpha = jnp.asarray(jnp.log(cfg.init_alpha), jnp.float32)
        return SACState(policy=policy, q=q, target_q=q, log_alpha=log_alpha, policy_opt=optimizer.init(policy),
                        q_opt=optimizer.init(q), alpha_opt=optimizer.init(log_alpha))

    def act(state: SACState, obs_stats, obs, key, deterministic=False):
        obs = prep(obs_stats, obs)
        if deterministic:
            action = jnp.tanh(nets.tanh_normal_params(policy_net.apply(state.policy, obs))[0])
        else:
            action, _ = sample_action(state.policy, obs, key)
        return nets.scale_action(action, low, high), {"action": action}

    def alpha_loss(log_alpha, log_prob):
        return -jnp.mean(log_alpha * jax.lax.stop_gradient(log_prob + target_entropy))

    def critic_loss(q_params, state: SACState, batch, alpha, key):
        next_action, next_log_prob = sample_action(state.policy, batch["next_obs"], key, axis_name)
        next_q = jnp.min(q_net.apply(state.target_q, batch["next_obs"], next_action), axis=-1)
        target = (batch["reward"] * cfg.reward_scaling
                  + cfg.discounting * (1.0 - batch["terminated"]) * (next_q - alpha * next_log_prob))
        q = q_net.apply(q_params, batch["obs"], batch["action"])
        error = q - jax.lax.stop_gradient(target)[:, None]
        return 0.5 * jnp.mean(jnp.sum(jnp.square(error), axis=-1)), jnp.mean(q)

    def actor_loss(policy_params, q_params, obs, alpha, key):
        action, log_prob = sample_action(policy_params, obs, key, axis_name)
        q = jnp.min(q_net.apply(q_params, obs, action), axis=-1)
        return jnp.mean(alpha * log_prob - q), log_prob

    def update(state: SACState, obs_stats, batch: dict, key):
        batch = dict(batch, obs=prep(obs_stats, batch["obs"]), next_obs=prep(obs_stats, batch["next_obs"]))
        critic_key, actor_key = jax.random.split(key)
        # Critic and actor use the current temperature; the temperature then steps on the
        # actor's own sample (one policy forward fewer than sampling it separately).
        alpha = jnp.exp(state.log_alpha)

        (c_loss, q_mean), c_grad = pmean(jax.value_and_grad(critic_loss, has_aux=True)(
            state.q, state, batch, alpha, critic_key), axis_name)
        c_update, q_opt = optimizer.update(c_grad, state.q_opt, state.q)
        q = optax.apply_updates(state.q, c_update)

        (p_loss, log_prob), p_grad = jax.value_and_grad(actor_loss, has_aux=True)(
            state.policy, q, batch["obs"], alpha, actor_key)
        p_loss, p_grad = pmean((p_loss, p_grad), axis_name)
        p_update, policy_opt = optimizer.update(p_grad, state.policy_opt, state.policy)
        policy = optax.apply_updates(state.policy, p_update)

        a_loss, a_grad = pmean(jax.value_and_grad(alpha_loss)(state.log_alpha, log_prob), axis_name)
        a_update, alpha_opt = optimizer.update(a_grad, state.alpha_opt, state.log_alpha)
        log_alpha = optax.apply_updates(state.log_alpha, a_update)
        entropy = pmean(-jnp.mean(log_prob), axis_name)

        new = SACState(policy=policy, q=q, target_q=polyak(state.target_q, q, cfg.tau), log_alpha=log_alpha,
                       policy_opt=policy_opt, q_opt=q_opt, alpha_opt=alpha_opt)
        metrics = {"critic": c_loss, "actor": p_loss, "alpha": alpha, "alpha_loss": a_loss, "q": q_mean,
                   "entropy": entropy}
        return new, metrics

    return Agent(init=init, act=act, update=update)
