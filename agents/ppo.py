"""Proximal Policy Optimization (arXiv:1707.06347) with GAE
(arXiv:1506.02438), as pure functions.

Data layout: the engine hands `update` a time-major batch [T, N] of N trajectories of
T = unroll_length steps. Advantages are computed once per batch with the value network
before the updates (the PPO paper's scheme), then `num_updates_per_batch` passes of
`num_minibatches` shuffled minibatches of `batch_size * unroll_length` transitions follow.
Brax's PPO differs in four ways, each a switch here: minibatches of whole trajectories
(`trajectory_minibatches`), advantages recomputed in every minibatch with the current value
network (`gae_per_minibatch`), truncated steps masked rather than bootstrapped from their
final observation (`bootstrap_truncation` off), and its advantage estimator
(`advantage_estimator="brax"`, `returns.one_step_then_gae`). Humanoid's config recomputes
(agents/defaults/ppo.py): without it humanoid stalls near 360 at 4M steps on a TPU.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import returns
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Step
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


class Trajectories(NamedTuple):
    """Whole trajectories of the update, [M, T, ...] (M trajectories of T steps, normalised
    observations): what a minibatch of trajectories samples. `advantage` and `target` are the
    batch's (unused where each minibatch recomputes them), `value` the acting value network's."""

    obs: jax.Array
    next_obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array


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
    trajectory_minibatches: bool = False
    """Minibatches of whole trajectories (batch_size of them, each unroll_length steps, as Brax's PPO samples them); off: of single steps shuffled across trajectories."""
    gae_per_minibatch: bool = False
    """Recompute each minibatch's values, advantages and value targets with the current value network (Brax's PPO; minibatches are then whole trajectories); off: once per batch, before the passes (the PPO paper's scheme)."""
    bootstrap_truncation: bool = True
    """Where a time limit cut an episode, bootstrap its last step's return from the value of the episode's final observation; off: that step's TD error and advantage are 0 (Brax's PPO)."""
    advantage_estimator: Literal["gae", "brax"] = "gae"
    """gae: GAE's advantages, delta_t + gamma lambda A_{t+1}; brax: Brax PPO's, r_t + gamma vs_{t+1} - V(s_t) with vs the lambda-returns (delta_t + gamma A_{t+1}: no lambda on the first step). Value targets are the lambda-returns either way."""

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


def estimate(config: PPOConfig, hp, value_fn, obs, next_obs, reward, terminated, truncated, episode_steps: int):
    """(v_t, advantages, value targets), each [T, N], of time-major steps valued by `value_fn`,
    with the config's advantage estimator and truncation handling."""
    v_t, v_tp1 = returns.bootstrap_values(value_fn, obs, next_obs, truncated, episode_steps)
    discount_t, lambda_t = returns.episode_discounts(terminated, truncated, hp.discounting, hp.gae_lambda)
    series = [reward * hp.reward_scaling, v_t, v_tp1, discount_t, lambda_t]
    if config.advantage_estimator == "brax":
        fn, series = returns.one_step_then_gae, series + [1.0 - jnp.maximum(terminated, truncated)]
    else:
        fn = returns.gae
    if config.bootstrap_truncation:
        advantage, target = returns.over_envs(fn, *series)
    else:  # Brax's: a truncated step's TD error is masked
        advantage, target = returns.over_envs(lambda *xs: fn(*xs[:-1], mask_t=xs[-1]), *series, 1.0 - truncated)
    return v_t, advantage, target


def trajectory_loss(params: PPOParams, rows: Trajectories, key: jax.Array, config: PPOConfig, apply_policy,
                    apply_value, head, hp, episode_steps: int, axis_name: str | None = None):
    """`ppo_loss` on a minibatch of whole trajectories [M, T], its advantages and targets
    recomputed with the current value network where `config.gae_per_minibatch` says so."""
    steps = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), rows)  # time-major [T, M]
    advantage, target = steps.advantage, steps.target
    if config.gae_per_minibatch:
        _, advantage, target = estimate(config, hp, lambda o: jax.lax.stop_gradient(apply_value(params.value, o)),
                                        steps.obs, steps.next_obs, steps.reward, steps.terminated, steps.truncated,
                                        episode_steps)
    batch = Minibatch(obs=steps.obs, action=steps.action, log_prob=steps.log_prob, advantage=advantage,
                      target=target, value=steps.value)
    batch = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch)
    return ppo_loss(params, batch, key, apply_policy, apply_value, head, hp, axis_name)


def make_ppo(config: PPOConfig, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    """Builds PPO for `spec` (per-device sizes in `config` when sharded).

    axis_name: the device axis when running inside `shard_map`; gradients and advantage
    statistics are averaged over it, so parameters stay identical on every device.
    """
    head, apply_policy, apply_value, policy_net, value_net = actor_critic(config, spec)
    episode_steps = -(-spec.episode_length // max(budget.action_repeat, 1))  # agent steps to a truncation
    total_gradient_steps = budget.total_iterations * config.num_updates_per_batch * config.num_minibatches
    prep = prep_fn(config.normalize_observations, config.obs_clip)
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

    def batch_rows(state: PPOState, obs_stats, data: Step):
        """What the minibatches sample: the iteration's [T, N] steps as flat [T * N] transitions,
        or as [N, T] trajectories, with the batch's advantages and targets."""
        hp = bind(config, state.hp)
        obs, next_obs = prep(obs_stats, data.obs), prep(obs_stats, data.next_obs)
        v_t, advantage, target = estimate(config, hp, lambda o: apply_value(state.params.value, o), obs, next_obs,
                                          data.reward, data.terminated, data.truncated, episode_steps)
        if not (config.trajectory_minibatches or config.gae_per_minibatch):
            batch = Minibatch(obs=obs, action=data.acted.action, log_prob=data.acted.log_prob, advantage=advantage,
                              target=target, value=v_t)
            return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch)
        rows = Trajectories(obs=obs, next_obs=next_obs, action=data.acted.action, log_prob=data.acted.log_prob,
                            reward=data.reward, terminated=data.terminated, truncated=data.truncated, value=v_t,
                            advantage=advantage, target=target)
        return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), rows)

    def update(state: PPOState, obs_stats, data: Step, key):
        """`num_updates_per_batch` shuffled passes of `num_minibatches` minibatches over `data`."""
        hp = bind(config, state.hp)
        rows = batch_rows(state, obs_stats, data)
        if isinstance(rows, Trajectories):
            return update_passes(config, optimizer, state, rows, key, total_gradient_steps, trajectory_loss,
                                 (config, apply_policy, apply_value, head, hp, episode_steps, axis_name), axis_name)
        return update_passes(config, optimizer, state, rows, key, total_gradient_steps, ppo_loss,
                             (apply_policy, apply_value, head, hp, axis_name), axis_name)

    return Agent(init=init, act=act, update=update)


AGENT = AgentDef(name="ppo", about="Proximal Policy Optimization with GAE", config=PPOConfig, make=make_ppo,
                 actions=("continuous", "discrete"), defaults=DEFAULTS)
