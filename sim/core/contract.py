"""The contract between an agent and the rest of the program.

An agent is one module of `agents/` that declares an `AgentDef`: its name, its frozen config
dataclass (its hyper-parameters, each with its help text; `agents/config.py` holds the bases),
its iteration kind (`UNROLL`: on-policy unrolls of the parallel envs; `RECURRENT`: the same
with each env's recurrent state carried along; `REPLAY`: one step of every env into the
donated replay ring, then gradient steps on samples of it; `DIFFERENTIABLE`: a short unroll
whose rewards are differentiated through the env's step; `GENERATION`: a population of
perturbed policies playing an episode each, then one update from their fitness), the action spaces it supports,
its per-env defaults and `make(config, spec, axis_name, budget) -> Agent`.
`agents/__init__.py` registers it with one line; the engine, the command line, checkpoints
and `play` read only what it declares.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Literal, NamedTuple, Optional, Protocol

import jax
import jax.numpy as jnp
import optax
from flax import struct

ActionSpace = Literal["continuous", "discrete"]


class ConfigError(ValueError):
    """A bad config value: `flag` names the command-line flag to change."""

    def __init__(self, flag: str, message: str):
        super().__init__(f"--{flag}: {message}")
        self.flag = flag


# ---- what agents learn from ----
@struct.dataclass
class Step:
    """One step of every env, as a rollout records it ([T, B] time-major when stacked).

    `next_obs` is the observation the step produced (before an auto-reset), so a time-limit
    truncation bootstraps from it while a termination does not. `acted` is the agent's own
    typed record of what it did (its `act`'s second output: a stored action, a log-prob...).
    """

    obs: jax.Array
    next_obs: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    episode_done: jax.Array
    last_return: jax.Array
    acted: Any


@struct.dataclass
class Transition:
    """What a replay agent learns from: a sampled step's `obs` and `action` (the action in the
    agent's stored dtype: int32 for discrete), its `reward`, `terminated` and `truncated`,
    and `next_obs`, the observation its target bootstraps from (the true final one after a
    truncation; after a termination any finite one, unread). Leaves [M, ...]; for samples of
    n > 1 consecutive steps of one env (`ReplayConfig.steps_per_sample`), reward, terminated and
    truncated are [M, n] and next_obs is the next observation of the first of the n steps
    that ended its episode, else of the last (`bootstrap_index`)."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    next_obs: jax.Array
    truncated: Any = None


def bootstrap_index(terminated_t, truncated_t):
    """int32[]: the step of a sequence [n] whose next observation its n-step target values:
    the first step that ended its episode, else the last."""
    n = terminated_t.shape[0]
    if n == 1:
        return jnp.zeros((), jnp.int32)
    done = jnp.maximum(terminated_t, truncated_t)[:-1] > 0
    return jnp.where(jnp.any(done), jnp.argmax(done), n - 1).astype(jnp.int32)


@struct.dataclass
class Sequence:
    """What a recurrent agent learns from: the unroll's steps [T, N] (time-major), each
    env's recurrent state when the unroll began (`carry0`, leaves [N, ...]) and where an
    episode starts (`start` [T, N]: 1.0 where obs[t] is an episode's first observation, the
    recurrent state is then reset before it is read)."""

    steps: Step
    carry0: Any
    start: jax.Array


@struct.dataclass
class Weighted:
    """A loss an update computed only where `weight` > 0 (a delayed actor's, 0 elsewhere):
    what an update returns for it instead of a plain value; averages count only those steps."""

    value: jax.Array
    weight: jax.Array


class Budget(NamedTuple):
    """What the run tells an agent about itself: schedules (epsilon, learning-rate annealing)
    run over `total_iterations` iterations of the engine; to an agent that distils
    (`AgentDef.teacher`), `teacher`: (the env's spec) -> the teacher's deterministic actions on
    that env's observations, from the run layer, called when a training program is traced
    (None where the agent only acts: play, export)."""

    total_iterations: int
    action_repeat: int = 1
    teacher: Optional[Callable[[Any], Callable[[jax.Array], jax.Array]]] = None


# ---- an agent: pure functions, typed ----
class InitFn(Protocol):
    def __call__(self, key: jax.Array, hp: Any = None) -> Any:
        """The agent state: a struct with an `hp` field, `hyper_params(config, hp)`: the
        config's values, or `hp` given (a population member's, vmapped over its members; a
        resume replaces them with the command line's values). Initial values that depend on a
        hyper-parameter (SAC's temperature) read it from that `hp`."""


class ActFn(Protocol):
    def __call__(self, state: Any, obs_stats: Any, obs: jax.Array, key: jax.Array, deterministic: bool,
                 carry: Any) -> tuple[jax.Array, Any, Any]:
        """(env action [B, ...], acted, carry) for observations [B, O]. `acted` is stored in
        `Step.acted` (UNROLL) or as `Transition.action` (REPLAY); `carry` is the agent's per-env
        state [B, ...] (`Agent.carry`), returned advanced, or None in and out where it keeps none."""


@dataclasses.dataclass(frozen=True)
class Differentiable:
    """What a differentiable agent (APG, SHAC) learns from: `unroll(agent_state) -> (steps, after)`
    steps every env `horizon_length` times from where it stands, acting with `agent_state`'s
    policy (its actions reparameterised samples), so `steps` ([T, B] `Step`s) are
    differentiable with respect to that state's parameters, through the env's own step.
    `after` is where the envs then stand, opaque to the agent: its update returns it, and the
    loop continues from it."""

    unroll: Callable[[Any], tuple[Step, Any]]


@dataclasses.dataclass(frozen=True)
class Generation:
    """What an evolution agent (ES, ARS) learns from: `evaluate(policies, act) -> (fitness, after)`
    plays one episode of the parallel envs under each of `members` policies (`policies`: a
    pytree of their parameters with a leading [members] axis; `act(policy, obs_stats, obs [K, O])
    -> env actions [K, ...]` acts with one of them, deterministically), each on its own
    num_envs / members envs, and returns every member's fitness [members] (the mean undiscounted
    return of its envs' episodes, each counted up to its first end) on every device; `after`
    is where the envs then stand, opaque: the update returns it, and the loop continues from it."""

    members: int
    evaluate: Callable[..., tuple[jax.Array, Any]]


class UpdateFn(Protocol):
    def __call__(self, state: Any, obs_stats: Any, data: Any, key: jax.Array) -> tuple[Any, dict]:
        """(state, metrics: scalars, or `Weighted` losses). data: `Step` [T, N] (UNROLL),
        `Sequence` (RECURRENT) or `Transition` [M] (REPLAY: one gradient step; with
        `updates_per_call` k > 1, k gradient steps on `Transition` [k, M], key [k, 2], metrics [k]).
        DIFFERENTIABLE: data is a `Differentiable`, and the update returns its unroll's `after`
        as a third output, gradients stopped: (state, metrics, after). GENERATION: data is a
        `Generation`, and the update returns its evaluation's `after` likewise."""


class ExploreFn(Protocol):
    def __call__(self, key: jax.Array, batch: int) -> tuple[jax.Array, Any]:
        """(env action [B, ...], acted): uniform random actions (a replay ring's prefill)."""


class CarryFn(Protocol):
    def __call__(self, batch: int) -> Any:
        """The per-env state [B, ...] of a fresh episode."""


class Agent(NamedTuple):
    """An algorithm as pure functions (see the Protocols above); static sizes are bound by
    closure, hyper-parameters that do not change shapes live in the state (`state.hp`).

    `carry` (None: none) makes the agent keep a per-env state that its loop carries from step
    to step and resets at episode starts: a recurrent core (PPO-RNN), or FastTD3's per-env
    exploration noise scale. `updates_per_call` k > 1: the replay loop hands `update` k
    batches at once (the agent makes k only where it divides grad_updates_per_step).
    (A REPLAY agent's samples are its config's `steps_per_sample` consecutive steps of one env.)
    """

    init: InitFn
    act: ActFn
    update: UpdateFn
    explore: Optional[ExploreFn] = None
    updates_per_call: int = 1
    carry: Optional[CarryFn] = None


def without_hyperparams(tree):
    """`tree` (an agent state) with every optimizer state's injected hyper-parameters left out:
    inputs that training never changes (an unset `max_grad_norm` is +inf), unlike what it learns."""
    injected = optax.InjectStatefulHyperparamsState

    def strip(node):
        return node._replace(hyperparams={}) if isinstance(node, injected) else node

    return jax.tree.map(strip, tree, is_leaf=lambda node: isinstance(node, injected))


def reset_where(start: jax.Array, fresh, carry):
    """`carry` (leaves [B, ...]) with `fresh`'s rows where `start` [B] is set."""
    return jax.tree.map(lambda f, c: jnp.where(start.reshape((-1,) + (1,) * (c.ndim - 1)) > 0, f, c), fresh, carry)


def fresh_carry(agent: Agent, batch: int):
    """A fresh episode's per-env state of `agent` for `batch` envs (None where it keeps none)."""
    return None if agent.carry is None else agent.carry(batch)


def restart(agent: Agent, carry, start: jax.Array):
    """`carry` [B, ...] with a fresh episode's state where `start` [B] is set (None stays None)."""
    return None if carry is None else reset_where(start, agent.carry(start.shape[0]), carry)


# ---- what an agent module declares ----
@dataclasses.dataclass(frozen=True)
class Kind:
    """An iteration kind: what the engine does in one iteration for the agents of this kind
    (the core maps each kind to its loop, sim/core/loops/)."""

    name: str  # as the command line's help shows it
    gradients_through_env: bool = False  # it differentiates through the env's step: the env must allow that


UNROLL = Kind("unroll")  # unrolls of every env, then updates on them
REPLAY = Kind("replay")  # one step of every env into the replay ring, then gradient steps
RECURRENT = Kind("recurrent")  # unrolls that carry each env's recurrent state; updates on `Sequence`s
DIFFERENTIABLE = Kind("differentiable", gradients_through_env=True)  # a short unroll differentiated through the env
GENERATION = Kind("generation")  # a population of perturbed policies, one episode each, then one update


@dataclasses.dataclass(frozen=True)
class AgentDef:
    """What one agent module declares (see the module docstring)."""

    name: str
    about: str
    config: type  # an `agent_config` subclass of UnrollConfig (UNROLL) or ReplayConfig (REPLAY)
    make: Callable[..., Agent]  # (config, spec, axis_name, budget) -> Agent
    actions: tuple[ActionSpace, ...]
    defaults: dict[str, dict] = dataclasses.field(default_factory=dict)  # env -> flag values (run or agent)
    # The agent distils a teacher run (its config's `teacher` and `teacher_other_env`): the run
    # layer loads and checks it before anything compiles or is written, and hands its policy
    # to the agent (`Budget.teacher`).
    teacher: bool = False
    # Config fields that say what the agent's state means (evosax's strategy): a resumed run
    # cannot change them, even where the state's layout would allow it.
    fixed: tuple[str, ...] = ()

    @property
    def kind(self) -> Kind:
        return self.config.kind

    def env_defaults(self, env: str) -> dict:
        return dict(self.defaults.get(env, {}))

    def check_actions(self, spec, env: str) -> None:
        space = "discrete" if spec.discrete else "continuous"
        if space not in self.actions:
            raise ConfigError("agent", f"{self.name} needs {' or '.join(self.actions)} actions and {env} has "
                                       f"{space} ones; choose another --agent or --env")
