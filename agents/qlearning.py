"""What the Q-learning agents (PQN, DQN) share: a Q network over discrete actions, its
config fields, and epsilon-greedy acting on a decaying epsilon."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from agents import networks as nets
from sim.core.contract import ConfigError
from agents.config import bind, hparam
from agents.common import epsilon_greedy, linear_decay, obs_inputs


@dataclasses.dataclass(frozen=True)
class QConfig:
    """Config fields of a Q network acted on epsilon-greedily (mixed into an agent's config)."""

    value_hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the Q network."""
    layer_norm: bool = True
    """LayerNorm after each hidden layer of the Q network: keeps the bootstrapped regression stable (PQN's replacement for a target network; without it DQN's Q rose past 1 / (1 - discounting) on cartpole)."""
    epsilon_start: float = hparam(1.0)
    """Exploration probability at the start of the run."""
    epsilon_finish: float = hparam(0.05)
    """Exploration probability after the decay."""
    epsilon_decay: float = hparam(0.2)
    """Fraction of the run over which epsilon decays linearly from start to finish."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        for name in ("epsilon_start", "epsilon_finish", "epsilon_decay"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name.replace("_", "-"), f"must be in [0.0, 1.0], got {getattr(self, name)}")


def q_network(config: QConfig, spec) -> nets.MLP:
    """obs [B, O] -> Q values [B, num_actions]."""
    return nets.MLP(config.value_hidden_sizes, spec.num_actions, config.activation,
                    matmul_dtype=config.matmul_dtype, layer_norm=config.layer_norm, inputs=obs_inputs(config, spec))


def epsilon_greedy_act(q_net, prep, config: QConfig, total_steps: int):
    """`act` of a Q agent whose state counts its updates in `step`: greedy when deterministic,
    else epsilon-greedy with epsilon decayed over `total_steps` of them. Stores the int32 action."""

    def act(state, obs_stats, obs, key, deterministic=False, carry=None):
        q = q_net.apply(state.params, prep(obs_stats, obs))
        if deterministic:
            action = jnp.argmax(q, axis=-1).astype(jnp.int32)
        else:
            hp = bind(config, state.hp)
            progress = state.step.astype(jnp.float32) / total_steps
            action = epsilon_greedy(q, key, linear_decay(hp.epsilon_start, hp.epsilon_finish, hp.epsilon_decay,
                                                         progress))
        return action, action, carry

    return act
