"""PQN: Parallelised Q-Network (2024, "Simplifying Deep Temporal Difference
Learning", arXiv:2407.04811), as pure functions.

Q-learning without a replay buffer and without a target network: the parallel envs' unrolls
give Q(lambda) returns computed with the current network, LayerNorm in the Q network keeps
the bootstrapped regression stable, and epsilon-greedy exploration decays linearly. The
update takes passes of shuffled minibatches over the iteration's [T, N] steps, as PPO does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import returns
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Step
from agents.common import annealed, gradient_step, pmean, prep_fn, scan_minibatches
from agents.config import HyperParams, UnrollConfig, agent_config, bind, hparam, hyper_params
from agents.defaults.q import PQN as DEFAULTS
from agents.optim import adam
from agents.qlearning import QConfig, epsilon_greedy_act, q_network
from envs.base import EnvSpec


@agent_config
class PQNConfig(QConfig, UnrollConfig):
    """PQN's hyper-parameters (the sizes of an iteration are PPO's, with the same names)."""

    td_lambda: float = hparam(0.95)
    """Lambda of the Q(lambda) returns (0: one-step Q-learning targets; 1: Monte-Carlo returns)."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if not 0.0 <= self.td_lambda <= 1.0:
            raise ConfigError("td-lambda", f"must be in [0.0, 1.0], got {self.td_lambda}")


@struct.dataclass
class PQNState:
    params: dict
    opt_state: optax.OptState
    step: jax.Array  # int32 updates done: the epsilon schedule's clock
    hp: HyperParams  # the shape-free hyper-parameters as float32 leaves


def q_loss(params, apply_q, obs, action, target):
    """0.5 * mean_m (Q(s_m, a_m) - G_m)^2. obs [M, O], action int32 [M], target [M]."""
    q = jnp.take_along_axis(apply_q(params, obs), action[:, None], axis=-1)[:, 0]
    return 0.5 * jnp.mean(jnp.square(q - jax.lax.stop_gradient(target))), jnp.mean(q)


def make_pqn(config: PQNConfig, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    q_net = q_network(config, spec)
    optimizer = adam()
    prep = prep_fn(config.normalize_observations, config.obs_clip)
    total_gradient_steps = budget.total_iterations * config.num_updates_per_batch * config.num_minibatches

    def init(key, hp=None):
        params = q_net.init(key, jnp.zeros((1,) + spec.obs_shape, jnp.float32))
        hp = hyper_params(config, hp)
        return PQNState(params=params, opt_state=optimizer.init(params, hp), step=jnp.zeros((), jnp.int32), hp=hp)

    def update(state: PQNState, obs_stats, data: Step, key):
        hp = bind(config, state.hp)
        obs = prep(obs_stats, data.obs)
        q_next = jnp.max(q_net.apply(state.params, prep(obs_stats, data.next_obs)), axis=-1)
        steps = returns.episode_discounts(data.terminated, data.truncated, hp.discounting, hp.td_lambda)
        target = returns.over_envs(returns.lambda_returns, data.reward * hp.reward_scaling, q_next, *steps)
        flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), (obs, data.acted, target))

        def minibatch_step(carry, minibatch):
            params, opt_state = carry
            lr = annealed(hp.learning_rate, opt_state, total_gradient_steps) if config.anneal_lr else hp.learning_rate
            params, opt_state, loss, q_mean = gradient_step(q_loss, params, opt_state, q_net.apply, *minibatch,
                                                            optimizer=optimizer, hp=hp, learning_rate=lr,
                                                            axis_name=axis_name)
            return (params, opt_state), {"q": loss, "q_mean": pmean(q_mean, axis_name)}

        def epoch_step(carry, perm_key):
            return scan_minibatches(minibatch_step, carry, flat, perm_key, config.num_minibatches)

        (params, opt_state), metrics = jax.lax.scan(epoch_step, (state.params, state.opt_state),
                                                    jax.random.split(key, config.num_updates_per_batch))
        new = state.replace(params=params, opt_state=opt_state, step=state.step + 1)
        return new, jax.tree.map(jnp.mean, metrics)

    return Agent(init=init, act=epsilon_greedy_act(q_net, prep, config, budget.total_iterations), update=update)


AGENT = AgentDef(name="pqn", about="Parallelised Q-Network: Q(lambda) on the parallel envs' unrolls, no replay",
                 config=PQNConfig, make=make_pqn, actions=("discrete",),
                 defaults=DEFAULTS)
