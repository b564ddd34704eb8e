"""Proximal Policy Optimization (Schulman et al., 2017, arXiv:1707.06347) with GAE
(Schulman et al., 2016, arXiv:1506.02438), as pure functions.

Data layout: the engine hands `update` a time-major batch [T, N] of N trajectories of
T = unroll_length steps. Advantages are computed once per batch with the value network
before the updates (the PPO paper's scheme), then `num_updates_per_batch` passes of
`num_minibatches` shuffled minibatches of `batch_size * unroll_length` transitions follow.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import networks as nets
from agents.base import Agent, pmean, policy_head
from envs.base import EnvSpec
from envs.wrappers import RunningStats, normalize


@struct.dataclass
class PPOParams:
    policy: dict
    value: dict


@struct.dataclass
class PPOState:
    params: PPOParams
    opt_state: optax.OptState


def compute_gae(r_t, v_t, v_tp1, terminated_t, truncated_t, discount: float, lam: float):
    """GAE(lambda) by a reverse scan over time.

    All inputs [T, N]. v_tp1 is V(next observation of step t), i.e. of the pre-reset final
    observation where an episode ended, so time-limit truncation bootstraps correctly while
    termination does not. Returns (advantages [T, N], value targets [T, N]).

        delta_t = r_t + discount * (1 - terminated_t) * v_tp1 - v_t
        A_t     = delta_t + discount * lam * (1 - done_t) * A_{t+1}
    """
    delta = r_t + discount * (1.0 - terminated_t) * v_tp1 - v_t
    not_done = 1.0 - jnp.maximum(terminated_t, truncated_t)

    def backward(acc, x):
        delta_t, not_done_t = x
        acc = delta_t + discount * lam * not_done_t * acc
        return acc, acc

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(delta[0]), (delta, not_done), reverse=True)
    return advantages, advantages + v_t


def bootstrap_values(value_fn, obs, next_obs, truncated, episode_steps: int):
    """(V(obs_t), V(next_obs_t)), both [T, N], from about (T + 2) / T value passes, not 2.

    obs, next_obs: [T, N, ...] (as the value network takes them); truncated: [T, N];
    episode_steps: the fewest agent steps from a reset to a time-limit truncation.
    next_obs[t] is obs[t + 1] unless step t ended its episode (obs[t + 1] is then the next
    episode's start), so one pass over obs and the last next_obs gives every next value but
    those of ended steps. Terminal steps never use theirs (GAE multiplies it by 0); truncated
    steps need V of their final observation. Two truncations of one env before the last step
    are `episode_steps` apart, so when T - 2 < episode_steps each env has at most one: one row
    per env [N] holds them all. Otherwise (unrolls longer than episodes) a full pass over
    next_obs runs. The choice is static: no conditional in the program.
    """
    values = value_fn(jnp.concatenate([obs, next_obs[-1:]], axis=0))  # [T + 1, N]
    v_t, v_next = values[:-1], values[1:]
    steps = obs.shape[0]
    if steps == 1:
        return v_t, v_next
    if steps - 2 >= episode_steps:
        return v_t, value_fn(next_obs)
    trunc = truncated[:-1] > 0  # the last step's next value is already V(next_obs[-1])
    row = jnp.argmax(trunc, axis=0)  # each env's truncated step (0 where none)
    col = jnp.arange(trunc.shape[1])
    v_final = value_fn(next_obs[row, col])
    return v_t, v_next.at[row, col].set(jnp.where(trunc[row, col], v_final, v_next[row, col]))


def ppo_loss(params: PPOParams, batch: dict, key: jax.Array, apply_policy, apply_value, head, cfg,
             axis_name: str | None = None):
    """Clipped surrogate + value loss - entropy bonus on a minibatch of M transitions.

    batch: obs [M, O] (normalised), action [M, ...], log_prob [M], advantage [M],
    target [M], value [M] (old estimate). Returns (loss, metrics).
    With `axis_name`, the minibatch is this device's shard of a global one: advantages are
    normalised with global statistics, so the mean of the devices' gradients is exactly
    the gradient of the global minibatch.
    """
    raw = apply_policy(params.policy, batch["obs"])
    log_prob = head.log_prob(raw, batch["action"])
    ratio = jnp.exp(log_prob - batch["log_prob"])
    adv = batch["advantage"]
    if cfg.normalize_advantage:
        mean, mean_sq = pmean((adv.mean(), jnp.mean(jnp.square(adv))), axis_name)
        adv = (adv - mean) / (jnp.sqrt(jnp.maximum(mean_sq - mean**2, 0.0)) + 1e-8)
    eps = cfg.clipping_epsilon
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - eps, 1.0 + eps) * adv)
    policy_loss = -jnp.mean(surrogate)

    value = apply_value(params.value, batch["obs"])
    value_error = value - batch["target"]
    if cfg.clip_value_loss:
        clipped = batch["value"] + jnp.clip(value - batch["value"], -eps, eps)
        value_sq = jnp.maximum(jnp.square(value_error), jnp.square(clipped - batch["target"]))
    else:
        value_sq = jnp.square(value_error)
    value_loss = 0.5 * jnp.mean(value_sq)

    entropy = jnp.mean(head.entropy(raw, key, axis_name))
    loss = policy_loss + cfg.value_loss_coef * value_loss - cfg.entropy_cost * entropy
    metrics = {
        "total": loss,
        "policy": policy_loss,
        "value": value_loss,
        "entropy": entropy,
        "approx_kl": jnp.mean((ratio - 1.0) - jnp.log(ratio)),
        "clip_fraction": jnp.mean((jnp.abs(ratio - 1.0) > eps).astype(jnp.float32)),
    }
    return loss, metrics


def make_optimizer(cfg, total_gradient_steps: int) -> optax.GradientTransformation:
    lr = optax.linear_schedule(cfg.learning_rate, 0.0, total_gradient_steps) if cfg.anneal_lr else cfg.learning_rate
    chain = [optax.clip_by_global_norm(cfg.max_grad_norm)] if cfg.max_grad_norm else []
    return optax.chain(*chain, optax.adam(lr))


def networks(cfg, spec: EnvSpec):
    """(head, apply_policy, apply_value, policy_net, value_net) of PPO's two MLPs."""
    head = policy_head(spec)
    policy_net = nets.MLP(cfg.policy_hidden_sizes, head.out_size, cfg.activation, out_scale=0.01,
                          matmul_dtype=cfg.matmul_dtype)
    value_net = nets.MLP(cfg.value_hidden_sizes, 1, cfg.activation, matmul_dtype=cfg.matmul_dtype)
    return head, policy_net.apply, (lambda p, obs: value_net.apply(p, obs)[..., 0]), policy_net, value_net


def make_ppo(cfg, spec: EnvSpec, axis_name: str | None = None) -> Agent:
    """Builds PPO for `spec` from a `sim.run.config.Config` (per-device sizes when sharded).

    axis_name: the device axis when running inside `shard_map`; gradients and advantage
    statistics are averaged over it, so parameters stay identical on every device.
    """
    head, apply_policy, apply_value, policy_net, value_net = networks(cfg, spec)
    episode_steps = -(-spec.episode_length // max(cfg.action_repeat, 1))  # agent steps to a truncation
    total_gradient_steps = cfg.total_iterations * cfg.num_updates_per_batch * cfg.num_minibatches
    optimizer = make_optimizer(cfg, total_gradient_steps)

    def prep(obs_stats: RunningStats, obs):
        return normalize(obs_stats, obs) if cfg.normalize_observations else obs

    def init(key):
        policy_key, value_key = jax.random.split(key)
        dummy = jnp.zeros((1,) + spec.obs_shape, jnp.float32)
        params = PPOParams(policy=policy_net.init(policy_key, dummy), value=value_net.init(value_key, dummy))
        return PPOState(params=params, opt_state=optimizer.init(params))

    def act(state: PPOState, obs_stats, obs, key, deterministic=False):
        raw = apply_policy(state.params.policy, prep(obs_stats, obs))
        action = head.mode(raw) if deterministic else head.sample(raw, key)
        return head.to_env(action), {"action": action, "log_prob": head.log_prob(raw, action)}

    def update(state: PPOState, obs_stats, data: dict, key):
        """data: time-major [T, N] dict with obs, next_obs, reward, terminated, truncated,
        action, log_prob. Rewards are scaled here."""
        obs = prep(obs_stats, data["obs"])
        v_t, v_tp1 = bootstrap_values(lambda o: apply_value(state.params.value, o), obs,
                                      prep(obs_stats, data["next_obs"]), data["truncated"], episode_steps)
        advantage, target = compute_gae(data["reward"] * cfg.reward_scaling, v_t, v_tp1, data["terminated"],
                                        data["truncated"], cfg.discounting, cfg.gae_lambda)
        flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), {
            "obs": obs, "action": data["action"], "log_prob": data["log_prob"],
            "advantage": advantage, "target": target, "value": v_t})
        num = flat["advantage"].shape[0]
        mb = num // cfg.num_minibatches
        grad_fn = jax.grad(ppo_loss, has_aux=True)

        def minibatch_step(carry, minibatch):
            params, opt_state, key = carry
            key, entropy_key = jax.random.split(key)
            grads, metrics = grad_fn(params, minibatch, entropy_key, apply_policy, apply_value, head, cfg,
                                     axis_name)
            grads, metrics = pmean((grads, metrics), axis_name)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state, key), metrics

        def epoch_step(carry, _):
            params, opt_state, key = carry
            key, perm_key = jax.random.split(key)
            perm = jax.random.permutation(perm_key, num)
            shuffled = jax.tree.map(lambda x: x[perm].reshape((cfg.num_minibatches, mb) + x.shape[1:]), flat)
            return jax.lax.scan(minibatch_step, (params, opt_state, key), shuffled)

        (params, opt_state, _), metrics = jax.lax.scan(
            epoch_step, (state.params, state.opt_state, key), None, length=cfg.num_updates_per_batch)
        return PPOState(params=params, opt_state=opt_state), jax.tree.map(jnp.mean, metrics)

    return Agent(init=init, act=act, update=update)
