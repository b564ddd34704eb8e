"""What the continuous-action replay agents (SAC, TD3, DDPG, FastTD3, FastSAC) share: their
network sizes, a dummy input for their Q networks and the Q regression loss."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from agents.config import Critic, ReplayConfig, agent_config
from envs.base import EnvSpec


@agent_config
class ActorCriticReplayConfig(Critic, ReplayConfig):
    """A policy network and Q networks learned from the replay ring."""

    policy_hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the policy network."""
    value_hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of each Q network."""
    q_network_layer_norm: bool = False
    """LayerNorm after each hidden activation of the Q networks (brax.training's q_network_layer_norm; on in MuJoCo Playground's DM Control Suite SAC config)."""


def q_example(spec: EnvSpec):
    """Dummy (obs [1, O], action [1, A]) to initialise networks."""
    return jnp.zeros((1,) + spec.obs_shape, jnp.float32), jnp.zeros((1, spec.action_size), jnp.float32)


def init_networks(key, policy_net, q_net, spec: EnvSpec):
    """(policy parameters, Q parameters) of a policy network on observations and a Q network
    on (observation, action), from one key."""
    policy_key, q_key = jax.random.split(key)
    obs, action = q_example(spec)
    return policy_net.init(policy_key, obs), q_net.init(q_key, obs, action)


def q_regression_loss(q_params, apply_q, obs, action, target):
    """Every Q head regressed on the same target y.

    obs [M, O], action [M, A], target [M] (no gradient flows into it).
    loss = 0.5 * mean_m sum_k (Q_k(s_m, a_m) - y_m)^2. Returns (loss, mean Q).
    """
    q = apply_q(q_params, obs, action)  # [M, K]
    error = q - jax.lax.stop_gradient(target)[:, None]
    return 0.5 * jnp.mean(jnp.sum(jnp.square(error), axis=-1)), jnp.mean(q)
