"""Recurrent PPO: PPO (arXiv:1707.06347) whose policy and value
networks each carry a GRU (arXiv:1406.1078) or LSTM (Neural Computation 9(8),
1997) state from step to step, for tasks the last observation does not
determine (`cartpole_no_vel`, `pendulum_no_vel`).

Acting: each env's recurrent state lives in the training state (the recurrent loop,
`sim/core/loops/recurrent.py`), reset to zeros where an episode starts. Learning: the
update gets a `Sequence` of N trajectories of T steps with the recurrent state each began
from; advantages are computed once by replaying every trajectory through the value network
(GAE, bootstrapping a truncation from the final observation after the step's recurrent
state); minibatches are whole trajectories, replayed from their initial state through the
current networks, so the gradient flows back through the unroll (truncated BPTT over T).
Network: obs -> Dense(hidden_size) -> GRU/LSTM(hidden_size) -> MLP head; `--matmul-dtype`
applies to the heads' hidden layers.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from agents import networks as nets
from agents import returns
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Sequence, reset_where
from agents.common import obs_inputs, policy_head, prep_fn
from agents.config import RecurrentCore, agent_config, bind, hyper_params
from agents.defaults.ppo import RNN as DEFAULTS
from agents.optim import adam
from agents.ppo import Minibatch, PPOActed, PPOConfig, PPOParams, PPOState, ppo_loss, update_passes
from envs.base import EnvSpec


@agent_config
class PPORNNConfig(RecurrentCore, PPOConfig):
    """Recurrent PPO's hyper-parameters: PPO's, and its recurrent core's (the policy's and the
    value network's)."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        # Its minibatches are whole trajectories already; Brax's other ways are PPO's alone.
        for flag, changed in (("gae-per-minibatch", self.gae_per_minibatch),
                              ("no-bootstrap-truncation", not self.bootstrap_truncation),
                              ("advantage-estimator", self.advantage_estimator != "gae")):
            if changed:
                raise ConfigError(flag, "is PPO's (--agent ppo); recurrent PPO computes GAE once per batch, "
                                        "bootstrapping truncated steps")


def orthogonal(key, shape, dtype=jnp.float32):
    """The orthogonal initializer (arXiv:1312.6120) by Gram-Schmidt in plain
    XLA ops: the Q of a Gaussian matrix's QR with R's diagonal positive, as flax's default
    recurrent init draws it, without a LAPACK QR. A QR batched over a population's members
    (or devices) would run jaxlib's CPU LAPACK kernel, which can deadlock XLA's thread pool
    (envs/cpu_linalg.py)."""
    rows, cols = shape
    a = jax.random.normal(key, (max(rows, cols), min(rows, cols)), jnp.float32)

    def column(q, j):
        v = a[:, j]
        for _ in range(2):  # twice: classical Gram-Schmidt, re-orthogonalised, is exact to rounding
            v = v - q @ (q.T @ v)
        return q.at[:, j].set(v / jnp.linalg.norm(v)), None

    q, _ = jax.lax.scan(column, jnp.zeros_like(a), jnp.arange(a.shape[1]))
    return (q if rows >= cols else q.T).astype(dtype)


class RecurrentNet(nn.Module):
    """One step: (recurrent state [B, H], obs [B, O]) -> (state, output [B, out_size])."""

    cell: str
    hidden_size: int
    hidden_sizes: tuple[int, ...]
    out_size: int
    activation: str
    out_scale: float = 1.0
    matmul_dtype: str = "float32"
    inputs: tuple[tuple[int, int], ...] | None = None  # the observation features it reads (`nets.take`)

    @nn.compact
    def __call__(self, carry, obs):
        x = nets.ACTIVATIONS[self.activation](nn.Dense(self.hidden_size)(nets.take(obs, self.inputs)))
        cell = nn.GRUCell if self.cell == "gru" else nn.OptimizedLSTMCell
        core = cell(self.hidden_size, recurrent_kernel_init=orthogonal)
        carry, x = core(carry, x)
        head = nets.MLP(self.hidden_sizes, self.out_size, self.activation, out_scale=self.out_scale,
                        matmul_dtype=self.matmul_dtype)
        return carry, head(x)


class RecurrentTrajectories(NamedTuple):
    """The update's rows: N whole trajectories, trajectory-major ([N, T, ...]; carry0 [N, ...])."""

    obs: jax.Array
    start: jax.Array
    carry0: Any
    action: jax.Array
    log_prob: jax.Array
    advantage: jax.Array
    target: jax.Array
    value: jax.Array


def replay(apply, params, carry0, obs, start, fresh, next_obs=None):
    """A network run over trajectories from their initial states: obs [T, N, O], start
    [T, N] -> outputs [T, N, ...], the state reset to `fresh` where start is set. With
    `next_obs` also the outputs for next_obs[t] after step t's state (bootstrap values)."""

    def step(carry, x):
        carry = reset_where(x[1], fresh, carry)
        carry, out = apply(params, carry, x[0])
        return carry, (out, None if next_obs is None else apply(params, carry, x[2])[1])

    return jax.lax.scan(step, carry0, (obs, start, next_obs))[1]


def networks(config: PPORNNConfig, spec: EnvSpec):
    """(policy head, policy network, value network): the policy's last layer starts near zero."""
    head = policy_head(spec)
    net = dict(cell=config.cell, hidden_size=config.hidden_size, activation=config.activation,
               matmul_dtype=config.matmul_dtype)
    policy_net = RecurrentNet(hidden_sizes=config.policy_hidden_sizes, out_size=head.out_size, out_scale=0.01,
                              inputs=obs_inputs(config, spec), **net)
    return head, policy_net, RecurrentNet(hidden_sizes=config.value_hidden_sizes, out_size=1,
                                          inputs=obs_inputs(config, spec, "critic"), **net)


def zero_state(config: PPORNNConfig, batch: int):
    """A fresh episode's recurrent state of one network: [B, H] (GRU), or two of them (LSTM)."""
    h = jnp.zeros((batch, config.hidden_size), jnp.float32)
    return h if config.cell == "gru" else (h, h)


def make_ppo_rnn(config: PPORNNConfig, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    """Builds recurrent PPO for `spec` (per-device sizes in `config` when sharded)."""
    head, policy_net, value_net = networks(config, spec)
    total_gradient_steps = budget.total_iterations * config.num_updates_per_batch * config.num_minibatches
    prep = prep_fn(config.normalize_observations, config.obs_clip)
    optimizer = adam()

    zeros = functools.partial(zero_state, config)

    def init(key, hp=None):
        policy_key, value_key = jax.random.split(key)
        dummy = jnp.zeros((1,) + spec.obs_shape, jnp.float32)
        params = PPOParams(policy=policy_net.init(policy_key, zeros(1), dummy),
                           value=value_net.init(value_key, zeros(1), dummy))
        hp = hyper_params(config, hp)
        return PPOState(params=params, opt_state=optimizer.init(params, hp), hp=hp)

    def act(state: PPOState, obs_stats, obs, key, deterministic, carry):
        x = prep(obs_stats, obs)
        policy_carry, raw = policy_net.apply(state.params.policy, carry["policy"], x)
        # The value network's state advances where training reads it (evaluation never does).
        value_carry = carry["value"] if deterministic else value_net.apply(state.params.value, carry["value"], x)[0]
        action = head.mode(raw) if deterministic else head.sample(raw, key)
        acted = PPOActed(action=action, log_prob=head.log_prob(raw, action))
        return head.to_env(action), acted, {"policy": policy_carry, "value": value_carry}

    def values(params, carry0, obs, start, next_obs=None):
        out = replay(value_net.apply, params, carry0, obs, start, zeros(obs.shape[1]), next_obs)
        return jax.tree.map(lambda v: v[..., 0], out)

    def apply_policy(params, seq):  # (obs [T, M, O], start [T, M], carry0) -> raw [T * M, ...]
        raw, _ = replay(policy_net.apply, params, seq[2]["policy"], seq[0], seq[1], zeros(seq[0].shape[1]))
        return raw.reshape((-1,) + raw.shape[2:])

    def apply_value(params, seq):  # the same -> V [T * M]
        return values(params, seq[2]["value"], seq[0], seq[1])[0].reshape(-1)

    def trajectory_loss(params, rows: RecurrentTrajectories, key, hp):
        """PPO's loss on M whole trajectories, replayed through the networks from carry0."""
        time_major = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), rows._replace(carry0=None))
        flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), time_major._replace(obs=None, start=None))
        batch = Minibatch(obs=(time_major.obs, time_major.start, rows.carry0), action=flat.action,
                          log_prob=flat.log_prob, advantage=flat.advantage, target=flat.target, value=flat.value)
        return ppo_loss(params, batch, key, apply_policy, apply_value, head, hp, axis_name)

    def update(state: PPOState, obs_stats, seq: Sequence, key):
        hp, data = bind(config, state.hp), seq.steps
        obs = prep(obs_stats, data.obs)
        v_t, v_tp1 = values(state.params.value, seq.carry0["value"], obs, seq.start, prep(obs_stats, data.next_obs))
        steps = returns.episode_discounts(data.terminated, data.truncated, hp.discounting, hp.gae_lambda)
        advantage, target = returns.over_envs(returns.gae, data.reward * hp.reward_scaling, v_t, v_tp1, *steps)
        per_step = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), RecurrentTrajectories(
            obs=obs, start=seq.start, carry0=None, action=data.acted.action, log_prob=data.acted.log_prob,
            advantage=advantage, target=target, value=v_t))
        rows = per_step._replace(carry0=seq.carry0)
        return update_passes(config, optimizer, state, rows, key, total_gradient_steps, trajectory_loss, (hp,),
                             axis_name)

    return Agent(init=init, act=act, update=update, carry=lambda batch: {"policy": zeros(batch), "value": zeros(batch)})


AGENT = AgentDef(name="ppo_rnn", about="recurrent PPO (GRU or LSTM core, truncated BPTT over the unroll)",
                 config=PPORNNConfig, make=make_ppo_rnn, actions=("continuous", "discrete"), defaults=DEFAULTS)
