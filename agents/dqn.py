"""DQN (Nature 518:529, 2015) on the donated replay ring: a Q network regressed
with the Huber loss on one-step targets of a Polyak-averaged target network, epsilon-greedy
exploration decaying linearly. The ring stores the discrete actions as int32 indices.

`update` does ONE gradient step on a replay batch; the engine scans it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Transition
from agents.common import annealed, explore_discrete, gradient_step, pmean, polyak, prep_fn
from agents.config import HyperParams, ReplayConfig, TargetNetworks, agent_config, bind, hparam, hyper_params
from agents.defaults.q import DQN as DEFAULTS
from agents.optim import adam
from agents.qlearning import QConfig, epsilon_greedy_act, q_network


@agent_config
class DQNConfig(TargetNetworks, QConfig, ReplayConfig):
    """DQN's hyper-parameters."""

    huber_delta: float = hparam(1.0)
    """Huber loss threshold: squared error below it, absolute error above."""
    anneal_lr: bool = False
    """Linearly anneal the learning rate to zero over the run."""
    double_q: bool = True
    """Double DQN (arXiv:1509.06461): the online network picks the next action, the target network values it."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if self.huber_delta <= 0:
            raise ConfigError("huber-delta", f"must be > 0, got {self.huber_delta}")


@struct.dataclass
class DQNState:
    params: dict
    target_params: dict
    opt_state: optax.OptState
    step: jax.Array  # int32 gradient steps done: the epsilon schedule's clock
    hp: HyperParams  # the shape-free hyper-parameters as float32 leaves


def dqn_target(reward, terminated, next_q_target, discount, reward_scaling, next_q_online=None):
    """y = reward_scaling * r + discount * (1 - terminated) * Q_target(s', a'), next_q_* [M, N] -> [M].

    a' = argmax_a Q_target(s', a) (DQN), or argmax_a Q_online(s', a) when `next_q_online` is
    given (Double DQN: the target network values the online network's choice).
    """
    choice = next_q_target if next_q_online is None else next_q_online
    a_next = jnp.argmax(choice, axis=-1)
    next_value = jnp.take_along_axis(next_q_target, a_next[:, None], axis=-1)[:, 0]
    return reward * reward_scaling + discount * (1.0 - terminated) * next_value


def huber(error, delta):
    """0.5 * error^2 where |error| <= delta, delta * (|error| - 0.5 * delta) beyond."""
    small = jnp.minimum(jnp.abs(error), delta)
    return 0.5 * small**2 + delta * (jnp.abs(error) - small)


def huber_q_loss(params, apply_q, obs, action, target, delta):
    """mean_m huber(Q(s_m, a_m) - y_m). obs [M, O], action int32 [M], target [M]. Returns (loss, mean Q)."""
    q = jnp.take_along_axis(apply_q(params, obs), action[:, None], axis=-1)[:, 0]
    return jnp.mean(huber(q - jax.lax.stop_gradient(target), delta)), jnp.mean(q)


def make_dqn(config: DQNConfig, spec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    q_net = q_network(config, spec)
    optimizer = adam()
    prep = prep_fn(config.normalize_observations, config.obs_clip)
    total_steps = budget.total_iterations * config.grad_updates_per_step

    def init(key, hp=None):
        params = q_net.init(key, jnp.zeros((1,) + spec.obs_shape, jnp.float32))
        hp = hyper_params(config, hp)
        return DQNState(params=params, target_params=params, opt_state=optimizer.init(params, hp),
                        step=jnp.zeros((), jnp.int32), hp=hp)

    def update(state: DQNState, obs_stats, batch: Transition, key):
        hp = bind(config, state.hp)
        obs, next_obs = prep(obs_stats, batch.obs), prep(obs_stats, batch.next_obs)
        online = q_net.apply(state.params, next_obs) if config.double_q else None
        target = dqn_target(batch.reward, batch.terminated, q_net.apply(state.target_params, next_obs),
                            hp.discounting, hp.reward_scaling, online)
        lr = annealed(hp.learning_rate, state.opt_state, total_steps) if config.anneal_lr else hp.learning_rate
        params, opt_state, loss, q_mean = gradient_step(huber_q_loss, state.params, state.opt_state, q_net.apply,
                                                        obs, batch.action, target, hp.huber_delta,
                                                        optimizer=optimizer, hp=hp, learning_rate=lr,
                                                        axis_name=axis_name)
        new = state.replace(params=params, target_params=polyak(state.target_params, params, hp.tau),
                            opt_state=opt_state, step=state.step + 1)
        return new, {"q": loss, "q_mean": pmean(q_mean, axis_name)}

    return Agent(init=init, act=epsilon_greedy_act(q_net, prep, config, total_steps), update=update,
                 explore=explore_discrete(spec))


# Classic control: 8 envs, 4 gradient steps of 64 transitions per iteration (0.5 per env step).
AGENT = AgentDef(name="dqn", about="Deep Q-Network on the replay ring (target network, Huber loss)",
                 config=DQNConfig, make=make_dqn, actions=("discrete",),
                 defaults=DEFAULTS)
