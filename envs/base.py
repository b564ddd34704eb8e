"""The one functional environment API.

An environment is a static Python object (hashable, safe to close over under `jit`) with an
`EnvSpec` and two pure functions::

    state = env.reset(key)            # EnvState with leading dims == key's leading dims (none)
    state = env.reset(key, params)    # ... with these dynamics parameters (default: env.default_params())
    state = env.step(state, action)   # EnvState

Both are written for a single environment; callers `jax.vmap` them over thousands.
All traced state lives in `EnvState`, so `jit`, `vmap` and `lax.scan` compose freely.

Dynamics parameters are data, not constants: `env.default_params()` is a pytree of arrays
(gravity, masses, friction, gains: each family's own, see its adapter), a reset stores the
one it is given in `EnvState.params`, and every step of that env reads it from there. An
episode restart keeps them. So a batch of envs can run under different physics, one per env
or one per population member, in one compiled program, without recompiling.

`terminated` (the MDP reached a terminal state: do not bootstrap) and `truncated` (the
episode was cut by the time limit: bootstrap from the next observation) are kept apart all
the way to the learner.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import io
import math
import sys
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from envs import mjx_levels


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Static description of an environment's interface."""

    obs_shape: tuple[int, ...]
    discrete: bool
    episode_length: int
    num_actions: int | None = None  # discrete only
    action_shape: tuple[int, ...] | None = None  # continuous only
    action_low: tuple[float, ...] | None = None  # continuous only, per action dim
    action_high: tuple[float, ...] | None = None
    # A structured observation's parts, (name, size) in the order they are laid out in the one
    # flat observation array (e.g. (("privileged_state", 4), ("state", 2))); () for an array.
    obs_parts: tuple[tuple[str, int], ...] = ()

    def obs_ranges(self, names: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
        """(start, stop) of each named part in the flat observation, in the order named.
        Raises ValueError naming the valid parts for an unknown one."""
        starts, start = {}, 0
        for name, size in self.obs_parts:
            starts[name] = (start, start + size)
            start += size
        unknown = [n for n in names if n not in starts]
        if unknown:
            valid = ", ".join(starts) if starts else "none: the observation is one array"
            raise ValueError(f"the observation has no part {unknown[0]!r} (its parts: {valid})")
        return tuple(starts[n] for n in names)

    @property
    def action_size(self) -> int:
        """Number of policy outputs per action: logits (discrete) or action dims."""
        if self.discrete:
            return int(self.num_actions)
        size = 1
        for d in self.action_shape:
            size *= d
        return size


@struct.dataclass
class EnvState:
    """State of one environment (or a batch of them, after `vmap`).

    obs: [*obs_shape] float32 observation after this step (after a reset, when an
        auto-reset wrapper reset the episode; the pre-reset one is in info["final_obs"]).
        An env whose own observation is a dict of arrays has them laid out flat, in the
        order of `spec.obs_parts` (`flat_obs`); agents read the parts they declare.
    reward: [] float32 reward of the transition that produced this state.
    terminated: [] float32, 1.0 when the transition reached a terminal MDP state.
    truncated: [] float32, 1.0 when the episode hit its time limit.
    steps: [] int32 steps taken in the current episode.
    physics: the environment's own inner state (a pytree).
    info: dict of extra per-env arrays; its keys are fixed at reset.
    params: the dynamics parameters this env steps with (a pytree of arrays; None for an env
        without any), set at reset and kept across episode restarts.
    """

    obs: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    steps: jax.Array
    physics: Any
    info: dict = struct.field(default_factory=dict)
    params: Any = None

    @property
    def done(self) -> jax.Array:
        """1.0 where the episode ended, for either reason."""
        return jnp.maximum(self.terminated, self.truncated)


def obs_parts_of(obs) -> tuple[tuple[str, int], ...]:
    """`EnvSpec.obs_parts` of an observation (arrays or their shapes): a dict's entries by
    name, each flattened; () for one array."""
    if not isinstance(obs, dict):
        return ()
    return tuple((name, math.prod(obs[name].shape)) for name in sorted(obs))


def flat_obs(obs, parts: tuple[tuple[str, int], ...]) -> jax.Array:
    """One env's float32 observation array: a dict's parts flattened and laid out in `parts`'
    order (an array as it is)."""
    if not isinstance(obs, dict):
        return jnp.asarray(obs, jnp.float32)
    return jnp.concatenate([jnp.reshape(obs[name], (-1,)).astype(jnp.float32) for name, _ in parts])


class Env(abc.ABC):
    """Base class: subclasses give the spec and the single-episode dynamics.

    The time limit lives here, once for every environment: `step` counts steps and sets
    `truncated` when `spec.episode_length` is reached (as Gymnasium's TimeLimit does, a step
    can be both terminated and truncated).
    """

    spec: EnvSpec
    name: str = "env"
    param_fields: tuple[str, ...] = ()  # attributes that are dynamics parameters: default_params()'s keys

    def default_params(self) -> Any:
        """The dynamics parameters a reset without any takes: a pytree of float32 arrays, the
        same structure for every value (None: the env has none). By default the attributes
        `param_fields` names, as float32 scalars."""
        if not self.param_fields:
            return None
        return {name: jnp.asarray(getattr(self, name), jnp.float32) for name in self.param_fields}

    @abc.abstractmethod
    def _reset(self, key: jax.Array, params: Any) -> tuple[Any, jax.Array]:
        """Returns (physics, obs) of a fresh episode under `params`."""

    @abc.abstractmethod
    def _step(self, physics: Any, action: jax.Array, params: Any) -> tuple[Any, jax.Array, jax.Array, jax.Array]:
        """Returns (physics, obs, reward, terminated) after applying `action` under `params`."""

    def reset(self, key: jax.Array, params: Any = None) -> EnvState:
        params = self.default_params() if params is None else params
        physics, obs = self._reset(key, params)
        zero = jnp.zeros((), jnp.float32)
        return EnvState(
            obs=flat_obs(obs, self.spec.obs_parts),
            reward=zero,
            terminated=zero,
            truncated=zero,
            steps=jnp.zeros((), jnp.int32),
            physics=physics,
            info={},
            params=params,
        )

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        physics, obs, reward, terminated = self._step(state.physics, action, state.params)
        steps = state.steps + 1
        truncated = (steps >= self.spec.episode_length).astype(jnp.float32)
        return state.replace(
            obs=flat_obs(obs, self.spec.obs_parts),
            reward=jnp.asarray(reward, jnp.float32),
            terminated=jnp.asarray(terminated, jnp.float32),
            truncated=truncated,
            steps=steps,
            physics=physics,
        )

    def solver_loop(self) -> int | None:
        """The iterations of a loop in this env's step that JAX cannot differentiate in reverse
        (MJX's constraint solver, a `lax.while_loop` where the model asks for more than one
        iteration and has constraints), or None where its step has none."""
        return None

    @property
    def unwrapped(self) -> "Env":
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, episode_length={self.spec.episode_length})"


def import_mjx_quietly() -> None:
    """Imports `mujoco.mjx` without the "Failed to import warp" lines it prints on import where
    warp-lang is absent: only MJX's Warp implementation needs warp, and the JAX one used here
    runs without it, so a user should not see them. Anything else it prints passes through.
    Then each level of MJX's body-tree passes is computed once (`envs.mjx_levels`)."""
    if "mujoco.mjx" not in sys.modules:
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            import mujoco.mjx  # noqa: F401  (imported here: its import-time prints are captured)
        for line in captured.getvalue().splitlines(keepends=True):
            if not line.startswith(("Failed to import warp:", "Failed to import mujoco_warp:")):
                sys.stdout.write(line)
    mjx_levels.apply()
