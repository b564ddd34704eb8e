"""Proximal Policy Optimization (arXiv:1707.06347) with GAE
(arXiv:1506.02438), as pure functions.

Data layout: the engine hands `update` a time-major batch [T, N] of N trajectories of
T = unroll_length steps. Advantages are computed once per batch with the value network
before the updates (the PPO paper's scheme), then `num_updates_per_batch` passes of
`num_minibatches` shuffled minibatches of `batch_size * unroll_length` transitions follow.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import returns
from agents.base import Agent, AgentDef, Budget, ConfigError, Step
from agents.common import actor_critic, annealed, gradient_step, pmean, prep_fn, scan_minibatches
from agents.config import Critic, HyperParams, UnrollConfig, agent_config, bind, hparam, hyper_params
from agents.defaults.ppo import DEFAULTS
from agents.optim import Optimizer, adam
from envs.base import EnvSpec


@struct.dataclass
class PPOParams:
    policy: dict
    value: dict


@struct.dataclass
class PPOState:
    params: PPOParams
    opt_state: optax.OptState
    hp: HyperParams  # the shape-free hyper-parameters as float32 leaves


@struct.dataclass
class PPOActed:
    """What PPO records of each step it acted in: the stored action and its log-probability."""

    action: jax.Array
    log_prob: jax.Array


class Minibatch(NamedTuple):
    """M transitions of the update: obs [M, O] (normalised), action [M, ...], log_prob [M]
    (behaviour policy), advantage [M], target [M] (value target), value [M] (old estimate)."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    advantage: jax.Array
    target: jax.Array
    value: jax.Array


@agent_config
class PPOConfig(Critic, UnrollConfig):
    """PPO's hyper-parameters (brax.training names)."""

    policy_hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the policy network."""
    value_hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the value network."""
    gae_lambda: float = hparam(0.95)
    """GAE lambda."""
    entropy_cost: float = hparam(0.01)
    """Weight of the entropy bonus."""
    clipping_epsilon: float = hparam(0.2)
    """Ratio clipping epsilon of the surrogate objective."""
    value_loss_coef: float = hparam(0.5)
    """Weight of the value loss (0.5 * squared error)."""
    clip_value_loss: bool = False
    """Clip the value update around the old value estimate, like the policy ratio."""
    normalize_advantage: bool = True
    """Normalise advantages per minibatch."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError("gae-lambda", f"must be in [0.0, 1.0], got {self.gae_lambda}")
        if self.clipping_epsilon <= 0:
            raise ConfigError("clipping-epsilon", f"must be > 0, got {self.clipping_epsilon}")


def ppo_loss(params: PPOParams, batch: Minibatch, key: jax.Array, apply_policy, apply_value, head, hp,
             axis_name: str | None = None):
    """Clipped surrogate + value loss - entropy bonus on a minibatch of M transitions.

    hp: the PPO config (Python or traced values): clipping_epsilon, value_loss_coef,
    entropy_cost, clip_value_loss, normalize_advantage. Returns (loss, metrics).
    With `axis_name`, the minibatch is this device's shard of a global one: advantages are
    normalised with global statistics, so the mean of the devices' gradients is exactly
    the gradient of the global minibatch.
    """
    raw = apply_policy(params.policy, batch.obs)
    log_prob = head.log_prob(raw, batch.action)
    ratio = jnp.exp(log_prob - batch.log_prob)
    adv = batch.advantage
    if hp.normalize_advantage:
        mean, mean_sq = pmean((adv.mean(), jnp.mean(jnp.square(adv))), axis_name)
        adv = (adv - mean) / (jnp.sqrt(jnp.maximum(mean_sq - mean**2, 0.0)) + 1e-8)
    eps = hp.clipping_epsilon
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - eps, 1.0 + eps) * adv)
    policy_loss = -jnp.mean(surrogate)

    value = apply_value(params.value, batch.obs)
    value_error = value - batch.target
    if hp.clip_value_loss:
        clipped = batch.value + jnp.clip(value - batch.value, -eps, eps)
        value_sq = jnp.maximum(jnp.square(value_error), jnp.square(clipped - batch.target))
    else:
        value_sq = jnp.square(value_error)
    value_loss = 0.5 * jnp.mean(value_sq)

    entropy = jnp.mean(head.entropy(raw, key, axis_name))
    loss = policy_loss + hp.value_loss_coef * value_loss - hp.entropy_cost * entropy
    metrics = {
        "total": loss,
        "policy": policy_loss,
        "value": value_loss,
        "entropy": entropy,
        "approx_kl": jnp.mean((ratio - 1.0) - jnp.log(ratio)),
        "clip_fraction": jnp.mean((jnp.abs(ratio - 1.0) > eps).astype(jnp.float32)),
    }
    return loss, metrics


def update_passes(config: PPOConfig, optimizer: Optimizer, state: PPOState, rows, key: jax.Array,
                  total_gradient_steps: int, loss_fn, loss_args: tuple, axis_name: str | None):
    """`config.num_updates_per_batch` shuffled passes over `rows` (leaves [R, ...]: what a
    minibatch samples, transitions or whole trajectories), each `config.num_minibatches`
    gradient steps on `loss_fn(params, minibatch, key, *loss_args) -> (loss, metrics)`.
    Returns (state, the metrics' means)."""
    hp = bind(config, state.hp)

    def minibatch_step(carry, minibatch):
        params, opt_state, key = carry
        key, entropy_key = jax.random.split(key)
        lr = annealed(hp.learning_rate, opt_state, total_gradient_steps) if config.anneal_lr else hp.learning_rate
        params, opt_state, _, metrics = gradient_step(loss_fn, params, opt_state, minibatch, entropy_key, *loss_args,
                                                      optimizer=optimizer, hp=hp, learning_rate=lr, axis_name=axis_name)
        return (params, opt_state, key), pmean(metrics, axis_name)

    def epoch_step(carry, _):
        params, opt_state, key = carry
        key, perm_key = jax.random.split(key)
        return scan_minibatches(minibatch_step, (params, opt_state, key), rows, perm_key, config.num_minibatches)

    (params, opt_state, _), metrics = jax.lax.scan(
        epoch_step, (state.params, state.opt_state, key), None, length=config.num_updates_per_batch)
    return state.replace(params=params, opt_state=opt_state), jax.tree.map(jnp.mean, metrics)


def make_ppo(config: PPOConfig, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    """Builds PPO for `spec` (per-device sizes in `config` when sharded).

    axis_name: the device axis when running inside `shard_map`; gradients and advantage
    statistics are averaged over it, so parameters stay identical on every device.
    """
    head, apply_policy, apply_value, policy_net, value_net = actor_critic(config, spec)
    episode_steps = -(-spec.episode_length // max(budget.action_repeat, 1))  # agent steps to a truncation
    total_gradient_steps = budget.total_iterations * config.num_updates_per_batch * config.num_minibatches
    prep = prep_fn(config.normalize_observations)
    optimizer = adam()

    def init(key, hp=None):
        policy_key, value_key = jax.random.split(key)
        dummy = jnp.zeros((1,) + spec.obs_shape, jnp.float32)
        params = PPOParams(policy=policy_net.init(policy_key, dummy), value=value_net.init(value_key, dummy))
        hp = hyper_params(config, hp)
        return PPOState(params=params, opt_state=optimizer.init(params, hp), hp=hp)

    def act(state: PPOState, obs_stats, obs, key, deterministic=False, carry=None):
        raw = apply_policy(state.params.policy, prep(obs_stats, obs))
        action = head.mode(raw) if deterministic else head.sample(raw, key)
        return head.to_env(action), PPOActed(action=action, log_prob=head.log_prob(raw, action)), carry

    def minibatches(state: PPOState, obs_stats, data: Step) -> Minibatch:
        """The iteration's [T, N] steps -> flat [T * N] transitions with advantages and targets."""
        hp = bind(config, state.hp)
        obs = prep(obs_stats, data.obs)
        v_t, v_tp1 = returns.bootstrap_values(lambda o: apply_value(state.params.value, o), obs,
                                              prep(obs_stats, data.next_obs), data.truncated, episode_steps)
        steps = returns.episode_discounts(data.terminated, data.truncated, hp.discounting, hp.gae_lambda)
        advantage, target = returns.over_envs(returns.gae, data.reward * hp.reward_scaling, v_t, v_tp1, *steps)
        batch = Minibatch(obs=obs, action=data.acted.action, log_prob=data.acted.log_prob, advantage=advantage,
                          target=target, value=v_t)
        return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch)

    def update(state: PPOState, obs_stats, data: Step, key):
        """`num_updates_per_batch` shuffled passes of `num_minibatches` minibatches over `data`."""
        hp = bind(config, state.hp)
        return update_passes(config, optimizer, state, minibatches(state, obs_stats, data), key, total_gradient_steps,
                             ppo_loss, (apply_policy, apply_value, head, hp, axis_name), axis_name)

    return Agent(init=init, act=act, update=update)


AGENT = AgentDef(name="ppo", about="Proximal Policy Optimization with GAE", config=PPOConfig, make=make_ppo,
                 actions=("continuous", "discrete"), defaults=DEFAULTS)
