"""Pieces the off-policy agents share."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from envs.base import EnvSpec
from envs.wrappers import normalize


def continuous_only(spec: EnvSpec, agent: str) -> None:
    if spec.discrete:
        raise ValueError(f"--agent {agent} needs a continuous action space; use --agent ppo for discrete envs")


def adam(cfg) -> optax.GradientTransformation:
    chain = [optax.clip_by_global_norm(cfg.max_grad_norm)] if cfg.max_grad_norm else []
    return optax.chain(*chain, optax.adam(cfg.learning_rate))


def prep_fn(cfg):
    def prep(obs_stats, obs):
        return normalize(obs_stats, obs) if cfg.normalize_observations else obs

    return prep


def polyak(target, online, tau: float):
    """target <- (1 - tau) * target + tau * online."""
    return jax.tree.map(lambda t, o: (1.0 - tau) * t + tau * o, target, online)


def q_example(spec: EnvSpec):
    """Dummy (obs [1, O], action [1, A]) to initialise networks."""
    return jnp.zeros((1,) + spec.obs_shape, jnp.float32), jnp.zeros((1, spec.action_size), jnp.float32)


def example_transition(spec: EnvSpec) -> dict:
    """One replay row: raw obs, squashed action in [-1, 1], reward, terminated, next obs."""
    obs = jnp.zeros(spec.obs_shape, jnp.float32)
    return {"obs": obs, "action": jnp.zeros((spec.action_size,), jnp.float32),
            "reward": jnp.zeros((), jnp.float32), "terminated": jnp.zeros((), jnp.float32), "next_obs": obs}
