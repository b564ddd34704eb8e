"""Distillation: behaviour cloning with DAgger's data (arXiv:1011.0686), as Brax's `bc` trainer
does it. A student policy learns to act as a trained teacher does, on the states the student's
own acting visits: in each iteration every env's action is the teacher's with probability
beta (`--teacher-fraction`, times `--teacher-decay` after each iteration), the student's
otherwise, and every step is labelled with the teacher's action whoever acted. The teacher is
another run's deterministic policy (`--teacher RUN_DIR`, `sim/run/policy/teacher.py`) reading its
own observation (the privileged or clean parts of the student's env); the student reads only
its `--actor-obs` (the part "state" of a structured observation: what the robot sees).

Loss: continuous actions, the squared distance between the student's squashed action and the
teacher's, both in [-1, 1] of the action bounds (summed over action dims); discrete, the
cross-entropy of the student's logits with the teacher's action. `bc` is a feed-forward student
on unrolls (minibatches of steps), `bc_rnn` a recurrent one (GRU or LSTM, as ppo_rnn's) on
whole trajectories replayed from their first recurrent state (truncated BPTT over the unroll),
for students that must infer what they cannot see. The teacher is read where the training
program is built; `play` and `export` use the student alone.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import networks as nets
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Sequence
from agents.common import obs_inputs, pmean, prep_fn
from agents.config import HyperParams, RecurrentCore, UnrollConfig, agent_config, bind, hparam, hyper_params
from agents.defaults.bc import BC_DEFAULTS, BC_RNN_DEFAULTS
from agents.optim import adam, steps_done
from agents.ppo import update_passes
from agents.ppo_rnn import RecurrentNet, replay, zero_state
from envs.base import EnvSpec


@struct.dataclass
class BCState:
    params: dict
    opt_state: optax.OptState
    hp: HyperParams


@struct.dataclass
class BCActed:
    """What a student's step records: the teacher's action as the label (int32 for discrete
    actions, in [-1, 1] of the bounds for continuous ones) and whether the teacher acted."""

    label: jax.Array
    teacher: jax.Array


@agent_config
class BCConfig(UnrollConfig):
    """Distillation's hyper-parameters: the teacher, DAgger's mixture and the student's network."""

    teacher: str = ""
    """The run directory of the teacher: a trained feed-forward policy (its newest checkpoint; a population's best member). It reads its own observation from this env's: the parts of the names it was trained on, or, trained on a plain array, this env's whole observation or its clean part privileged_state (cartpole_privileged for a cartpole teacher; --obs-noise / --randomize / --action-delay give any env one). Required to train; play and export use the student alone."""
    teacher_other_env: bool = False
    """Take a teacher trained on another env than this one (or than the env this one is a variant of, e.g. cartpole for cartpole_privileged): by default it is refused, as another env's policy whose observation and actions only happen to have this env's sizes teaches nothing."""
    teacher_fraction: float = hparam(1.0)
    """Probability that an env's action is the teacher's in the first iteration (DAgger's beta); the student acts otherwise. Every step is labelled with the teacher's action."""
    teacher_decay: float = hparam(0.5)
    """Multiplies the teacher's probability after every iteration: 1.0 keeps it (with --teacher-fraction 1: behaviour cloning on the teacher's own states), 0.0 lets the student act alone from the second iteration (Brax's default schedule)."""
    learning_rate: float = hparam(1e-3)
    """Adam learning rate."""
    policy_hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the student's network (after its recurrent core for bc_rnn)."""
    num_updates_per_batch: int = 4
    """Passes (epochs) of minibatch updates over each iteration's labelled steps."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)  # (the run layer checks the teacher, for a training run only)
        for name in ("teacher_fraction", "teacher_decay"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name.replace("_", "-"), f"must be in [0.0, 1.0], got {getattr(self, name)}")


@agent_config
class BCRNNConfig(RecurrentCore, BCConfig):
    """Recurrent distillation's hyper-parameters: bc's, and the student's recurrent core."""


class Student(NamedTuple):
    """The student's network as one step: (params, carry, obs [B, O]) -> (carry, raw [B, out])
    (carry None for a feed-forward student), and its init."""

    init: Callable  # key -> params
    step: Callable
    carry: Optional[Callable]  # batch -> a fresh recurrent state (None: feed-forward)


def student_network(config: BCConfig, spec: EnvSpec) -> Student:
    """An MLP (bc) or ppo_rnn's recurrent network (bc_rnn) reading `--actor-obs`, one output per
    action (a logit, or the pre-tanh action), its last layer starting near zero."""
    inputs = obs_inputs(config, spec)
    dummy = jnp.zeros((1,) + spec.obs_shape, jnp.float32)
    if isinstance(config, BCRNNConfig):
        net = RecurrentNet(cell=config.cell, hidden_size=config.hidden_size, hidden_sizes=config.policy_hidden_sizes,
                           out_size=spec.action_size, activation=config.activation, out_scale=0.01,
                           matmul_dtype=config.matmul_dtype, inputs=inputs)
        zeros = functools.partial(zero_state, config)
        return Student(lambda key: net.init(key, zeros(1), dummy), net.apply, zeros)
    net = nets.MLP(config.policy_hidden_sizes, spec.action_size, config.activation, out_scale=0.01,
                   matmul_dtype=config.matmul_dtype, inputs=inputs)
    return Student(lambda key: net.init(key, dummy), lambda params, carry, obs: (carry, net.apply(params, obs)), None)


def action_units(spec: EnvSpec):
    """(to_env: a student's raw output -> env actions, label: a teacher's env actions -> the
    student's targets) for `spec`'s actions: argmax and the int32 action (discrete); tanh scaled
    to the bounds, and the bounds mapped onto [-1, 1], clipped (continuous)."""
    if spec.discrete:
        return (lambda raw: jnp.argmax(raw, axis=-1).astype(jnp.int32)), (lambda action: action.astype(jnp.int32))
    low = jnp.asarray(spec.action_low, jnp.float32)
    high = jnp.asarray(spec.action_high, jnp.float32)
    return (lambda raw: nets.scale_action(jnp.tanh(raw), low, high),
            lambda action: jnp.clip(2.0 * (action - low) / (high - low) - 1.0, -1.0, 1.0))


def imitation(raw: jax.Array, target: jax.Array, discrete: bool) -> tuple[jax.Array, dict]:
    """The student's loss on raw outputs [M, A] against the teacher's labels [M(, A)], and its
    metrics: the agreement of the arg-max with the teacher's action (discrete), or the mean
    absolute gap of the squashed actions (continuous)."""
    if discrete:
        loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(raw), target[:, None], axis=-1))
        return loss, {"imitation": loss, "agreement": jnp.mean((jnp.argmax(raw, axis=-1) == target).astype(jnp.float32))}
    gap = jnp.tanh(raw) - target
    loss = jnp.mean(jnp.sum(jnp.square(gap), axis=-1))
    return loss, {"imitation": loss, "action_gap": jnp.mean(jnp.abs(gap))}


def no_teacher(spec: EnvSpec):
    raise ConfigError("teacher", "this agent was built without its teacher (Budget.teacher): only a training run, "
                                 "which loads --teacher, samples the teacher's actions")


def make_bc(config: BCConfig, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    """Builds the distillation agent for `spec` (per-device sizes in `config` when sharded)."""
    student = student_network(config, spec)
    total_gradient_steps = budget.total_iterations * config.num_updates_per_batch * config.num_minibatches
    prep = prep_fn(config.normalize_observations, config.obs_clip)
    optimizer = adam()
    to_env, label = action_units(spec)
    # (the teacher's policy is read once, when first called: while the training program is traced)
    teacher = functools.cache(functools.partial(budget.teacher or no_teacher, spec))

    def init(key, hp=None):
        params = student.init(key)
        hp = hyper_params(config, hp)
        return BCState(params=params, opt_state=optimizer.init(params, hp), hp=hp)

    def act(state: BCState, obs_stats, obs, key, deterministic=False, carry=None):
        carry, raw = student.step(state.params, carry, prep(obs_stats, obs))
        mine = to_env(raw)
        if deterministic:
            return mine, None, carry
        hp = bind(config, state.hp)
        theirs = teacher()(obs)
        updates = steps_done(state.opt_state) // (config.num_updates_per_batch * config.num_minibatches)
        beta = hp.teacher_fraction * hp.teacher_decay ** updates.astype(jnp.float32)
        turn = jax.random.bernoulli(key, beta, (obs.shape[0],))
        action = jnp.where(turn.reshape((-1,) + (1,) * (mine.ndim - 1)), theirs, mine)
        return action, BCActed(label=label(theirs), teacher=turn.astype(jnp.float32)), carry

    def step_loss(params, rows, key, hp):  # rows: (obs [M, O], label [M(, A)])
        return imitation(student.step(params, None, rows[0])[1], rows[1], spec.discrete)

    def trajectory_loss(params, rows, key, hp):  # rows: obs, start, label [M, T, ...] and carry0 [M, ...]
        obs, start, target, carry0 = rows
        time_major = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), (obs, start))
        raw = replay(student.step, params, carry0, *time_major, student.carry(obs.shape[0]))[0]
        raw = jnp.swapaxes(raw, 0, 1).reshape((-1, raw.shape[-1]))
        return imitation(raw, target.reshape((-1,) + target.shape[2:]), spec.discrete)

    def update(state: BCState, obs_stats, data, key):
        """`num_updates_per_batch` shuffled passes of `num_minibatches` minibatches of the labelled
        steps (bc: `Step` [T, N]) or whole trajectories (bc_rnn: `Sequence`)."""
        steps = data.steps if isinstance(data, Sequence) else data
        if isinstance(data, Sequence):
            rows = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), (prep(obs_stats, steps.obs), data.start,
                                                                   steps.acted.label))
            rows, loss_fn = (*rows, data.carry0), trajectory_loss
        else:
            rows = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), (prep(obs_stats, steps.obs), steps.acted.label))
            loss_fn = step_loss
        state, metrics = update_passes(config, optimizer, state, rows, key, total_gradient_steps, loss_fn,
                                       (bind(config, state.hp),), axis_name)
        metrics["teacher_acted"] = pmean(jnp.mean(steps.acted.teacher), axis_name)
        return state, metrics

    return Agent(init=init, act=act, update=update, carry=student.carry)


AGENT = AgentDef(name="bc", about="distillation of a teacher run into a feed-forward student (behaviour cloning on "
                                  "DAgger's data)", config=BCConfig, make=make_bc,
                 actions=("continuous", "discrete"), defaults=BC_DEFAULTS, teacher=True)
RNN = AgentDef(name="bc_rnn", about="distillation into a recurrent student (GRU or LSTM; truncated BPTT over the "
                                    "unroll)", config=BCRNNConfig, make=make_bc,
               actions=("continuous", "discrete"), defaults=BC_RNN_DEFAULTS, teacher=True)
