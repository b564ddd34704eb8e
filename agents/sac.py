"""Soft Actor-Critic (arXiv:1812.05905): twin Q with Polyak-averaged
targets, tanh-Gaussian policy, temperature learned towards a target entropy of -|A|.

`update` does ONE gradient step (critic, actor, temperature, targets) on a replay batch of
M transitions (the squashed action in [-1, 1] is stored); the engine scans it
`grad_updates_per_step` times.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import networks as nets
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Transition
from agents.common import explore_continuous, gradient_step, obs_inputs, pmean, polyak, prep_fn, sharded_normal
from agents.config import HyperParams, TargetNetworks, agent_config, bind, hparam, hyper_params
from agents.defaults.sac import DEFAULTS
from agents.offpolicy import ActorCriticReplayConfig, init_networks, q_regression_loss
from agents.optim import adam
from envs.base import EnvSpec


@agent_config
class SACConfig(TargetNetworks, ActorCriticReplayConfig):
    """SAC's hyper-parameters (brax.training names)."""

    init_alpha: float = hparam(1.0)
    """Initial entropy temperature (learned towards the target entropy -action_dims)."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if self.init_alpha <= 0:
            raise ConfigError("init-alpha", f"must be > 0, got {self.init_alpha}")


@struct.dataclass
class SACState:
    policy: dict
    q: dict
    target_q: dict
    log_alpha: jax.Array
    policy_opt: optax.OptState
    q_opt: optax.OptState
    alpha_opt: optax.OptState
    hp: HyperParams  # the shape-free hyper-parameters as float32 leaves


def squashed_sample(raw, noise):
    """(a = tanh(loc + std * noise) in [-1, 1], log pi(a)) of the policy output raw [M, 2A]."""
    loc, std = nets.tanh_normal_params(raw)
    u = loc + std * noise
    return jnp.tanh(u), nets.tanh_normal_log_prob(u, loc, std)


def soft_td_target(reward, terminated, next_q, next_log_prob, alpha, discount, reward_scaling):
    """y = reward_scaling * r + discount * (1 - terminated) * (min_k Q'_k(s', a') - alpha * log pi(a'|s')).

    reward, terminated, next_log_prob [M]; next_q [M, K] (target networks at a' ~ pi(s')).
    """
    soft_value = jnp.min(next_q, axis=-1) - alpha * next_log_prob
    return reward * reward_scaling + discount * (1.0 - terminated) * soft_value


def actor_loss(policy_params, q_params, obs, noise, apply_policy, apply_q, alpha):
    """mean_m (alpha * log pi(a_m|s_m) - min_k Q_k(s_m, a_m)), a_m reparameterised by noise [M, A].
    Returns (loss, log pi [M])."""
    action, log_prob = squashed_sample(apply_policy(policy_params, obs), noise)
    q = jnp.min(apply_q(q_params, obs, action), axis=-1)
    return jnp.mean(alpha * log_prob - q), log_prob


def alpha_loss(log_alpha, log_prob, target_entropy):
    """-mean(log_alpha * (log pi + target_entropy)): raises alpha while the entropy is below target."""
    return -jnp.mean(log_alpha * jax.lax.stop_gradient(log_prob + target_entropy)), None


def make_sac(config: SACConfig, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    """axis_name: the device axis inside `shard_map`; gradients are averaged over it and the
    sampling noise of each replay row does not depend on the device count."""
    action_size = spec.action_size
    policy_net = nets.MLP(config.policy_hidden_sizes, 2 * action_size, config.activation,
                          matmul_dtype=config.matmul_dtype, inputs=obs_inputs(config, spec))
    q_net = nets.QNetwork(config.value_hidden_sizes, config.activation, num_heads=2, matmul_dtype=config.matmul_dtype,
                          layer_norm=config.q_network_layer_norm, inputs=obs_inputs(config, spec, "critic"))
    prep = prep_fn(config.normalize_observations, config.obs_clip)
    low = jnp.asarray(spec.action_low, jnp.float32)
    high = jnp.asarray(spec.action_high, jnp.float32)
    target_entropy = -float(action_size)
    optimizer = adam()

    def init(key, hp=None):
        policy, q = init_networks(key, policy_net, q_net, spec)
        hp = hyper_params(config, hp)
        log_alpha = jnp.log(hp.init_alpha)
        return SACState(policy=policy, q=q, target_q=q, log_alpha=log_alpha, policy_opt=optimizer.init(policy, hp),
                        q_opt=optimizer.init(q, hp), alpha_opt=optimizer.init(log_alpha, hp), hp=hp)

    def act(state: SACState, obs_stats, obs, key, deterministic=False, carry=None):
        raw = policy_net.apply(state.policy, prep(obs_stats, obs))
        if deterministic:
            action = jnp.tanh(nets.tanh_normal_params(raw)[0])
        else:
            action, _ = squashed_sample(raw, jax.random.normal(key, (obs.shape[0], action_size)))
        return nets.scale_action(action, low, high), action, carry

    def update(state: SACState, obs_stats, batch: Transition, key):
        hp = bind(config, state.hp)
        obs, next_obs = prep(obs_stats, batch.obs), prep(obs_stats, batch.next_obs)
        critic_key, actor_key = jax.random.split(key)
        shape = (obs.shape[0], action_size)
        step = dict(optimizer=optimizer, hp=hp, axis_name=axis_name)
        # Critic and actor use the current temperature; the temperature then steps on the
        # actor's own sample (one policy forward fewer than sampling it separately).
        alpha = jnp.exp(state.log_alpha)
        next_action, next_log_prob = squashed_sample(policy_net.apply(state.policy, next_obs),
                                                     sharded_normal(critic_key, shape, axis_name))
        target = soft_td_target(batch.reward, batch.terminated, q_net.apply(state.target_q, next_obs, next_action),
                                next_log_prob, alpha, hp.discounting, hp.reward_scaling)
        q, q_opt, c_loss, q_mean = gradient_step(q_regression_loss, state.q, state.q_opt, q_net.apply, obs,
                                                 batch.action, target, **step)
        policy, policy_opt, p_loss, log_prob = gradient_step(
            actor_loss, state.policy, state.policy_opt, q, obs, sharded_normal(actor_key, shape, axis_name),
            policy_net.apply, q_net.apply, alpha, **step)
        log_alpha, alpha_opt, a_loss, _ = gradient_step(alpha_loss, state.log_alpha, state.alpha_opt, log_prob,
                                                        target_entropy, **step)
        new = state.replace(policy=policy, q=q, target_q=polyak(state.target_q, q, hp.tau), log_alpha=log_alpha,
                            policy_opt=policy_opt, q_opt=q_opt, alpha_opt=alpha_opt)
        metrics = {"critic": c_loss, "actor": p_loss, "alpha": alpha, "alpha_loss": a_loss,
                   "q": pmean(q_mean, axis_name), "entropy": pmean(-jnp.mean(log_prob), axis_name)}
        return new, metrics

    return Agent(init=init, act=act, update=update, explore=explore_continuous(spec))


AGENT = AgentDef(name="sac", about="Soft Actor-Critic (twin Q, learned temperature)", config=SACConfig,
                 make=make_sac, actions=("continuous",), defaults=DEFAULTS)
