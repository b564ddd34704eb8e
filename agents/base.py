"""What every agent is: a named tuple of pure functions, plus the policy head they share."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from agents import networks as nets
from envs.base import EnvSpec


class Agent(NamedTuple):
    """An algorithm as pure functions; static sizes are bound by closure.

    init(key) -> agent_state
    act(agent_state, obs_stats, obs [B, O], key, deterministic) -> (env_action [B, ...], extras dict)
        `extras` is stored with each transition (e.g. the raw action and its log-prob).
    update(agent_state, obs_stats, batch, key) -> (agent_state, metrics dict of scalars)
    """

    init: Callable[[jax.Array], Any]
    act: Callable[..., tuple[jax.Array, dict]]
    update: Callable[..., tuple[Any, dict]]


def pmean(tree, axis_name: str | None):
    """Mean over the device axis (identity on one device): gradients, losses, statistics."""
    return tree if axis_name is None else jax.lax.pmean(tree, axis_name)


def sharded_normal(key: jax.Array, shape: tuple[int, ...], axis_name: str | None) -> jax.Array:
    """Standard normal noise [B, ...] for this device's shard of a global batch.

    With a device axis, every device draws the GLOBAL [n * B, ...] noise from the same key
    and keeps its own slice, so the noise each sample sees does not depend on how the batch
    is split: N devices compute exactly the single-device update of the global batch.
    """
    if axis_name is None:
        return jax.random.normal(key, shape)
    n = jax.lax.axis_size(axis_name)
    full = jax.random.normal(key, (n * shape[0],) + tuple(shape[1:]))
    return jax.lax.dynamic_slice_in_dim(full, jax.lax.axis_index(axis_name) * shape[0], shape[0])


class PolicyHead(NamedTuple):
    """Turns a policy network's raw output into actions, log-probs and entropies.

    Discrete: raw = logits [B, N]; the stored action is the int32 index.
    Continuous: raw = [B, 2A] (loc, pre-softplus std) of a tanh-squashed Gaussian; the stored
    action is the pre-squash sample u, and the env gets tanh(u) scaled to its bounds.
    """

    out_size: int
    sample: Callable[[jax.Array, jax.Array], jax.Array]  # (raw, key) -> stored action
    mode: Callable[[jax.Array], jax.Array]  # raw -> deterministic stored action
    log_prob: Callable[[jax.Array, jax.Array], jax.Array]  # (raw, stored) -> [B]
    entropy: Callable[..., jax.Array]  # (raw [B, ...], key, axis_name) -> [B]
    to_env: Callable[[jax.Array], jax.Array]  # stored action -> env action


def policy_head(spec: EnvSpec) -> PolicyHead:
    if spec.discrete:
        return PolicyHead(
            out_size=spec.num_actions,
            sample=lambda raw, key: nets.categorical_sample(raw, key),
            mode=lambda raw: jnp.argmax(raw, axis=-1).astype(jnp.int32),
            log_prob=nets.categorical_log_prob,
            entropy=lambda raw, key, axis_name=None: nets.categorical_entropy(raw),
            to_env=lambda a: a,
        )
    low = jnp.asarray(spec.action_low, jnp.float32)
    high = jnp.asarray(spec.action_high, jnp.float32)

    def sample(raw, key):
        loc, std = nets.tanh_normal_params(raw)
        return loc + std * jax.random.normal(key, loc.shape)

    def log_prob(raw, u):
        loc, std = nets.tanh_normal_params(raw)
        return nets.tanh_normal_log_prob(u, loc, std)

    def entropy(raw, key, axis_name=None):
        loc, std = nets.tanh_normal_params(raw)
        return nets.tanh_normal_entropy(loc, std, sharded_normal(key, loc.shape, axis_name))

    return PolicyHead(
        out_size=2 * spec.action_size,
        sample=sample,
        mode=lambda raw: nets.tanh_normal_params(raw)[0],
        log_prob=log_prob,
        entropy=entropy,
        to_env=lambda u: nets.scale_action(jnp.tanh(u), low, high),
    )
