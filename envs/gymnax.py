"""gymnax's environments (classic control, bsuite, MinAtar, misc) behind the functional `Env`
API, named `gymnax/<its name>` (e.g. `gymnax/Breakout-MinAtar`).

Needs the optional package `gymnax`, version 1.0.x (`pip install 'fusedrl[gymnax]'`): gymnax
1.0 changed what `step` returns (terminated and truncated apart), so other versions are
refused in one line. This adapter calls gymnax's `reset_env` / `step_env` (no auto-reset:
ours keeps a spare start per env) with its time limit lifted, so `done` is a termination
only and the episode length is ours (`episode_length`, default: gymnax's own
`max_steps_in_episode`), truncating as every env here does. Observations are flattened to
float32 vectors; stochastic dynamics draw from a key carried in the physics state.

Dynamics parameters: gymnax's own `EnvParams` are kept, their floating fields traced (the
env's `default_params()`: {field: float32 array}, e.g. gravity, masspole, force_mag for
CartPole-v1), the integer and boolean ones (step limits, sizes, flags a shape or a branch may
depend on) constant; each step passes gymnax the EnvParams with the env's own values.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata

import jax
import jax.numpy as jnp

from envs.base import Env, EnvSpec

PREFIX = "gymnax/"
SUPPORTED = "1.0"  # gymnax major.minor this adapter is written for
INSTALL = "pip install 'fusedrl[gymnax]'"


def check_version() -> None:
    """Raises ValueError (one line) unless gymnax 1.0.x is installed; never imports it."""
    try:
        version = importlib.metadata.version("gymnax")
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(f"gymnax environments need the optional `gymnax` package: {INSTALL}") from None
    if ".".join(version.split(".")[:2]) != SUPPORTED:
        raise ValueError(f"gymnax {version} is installed; this trainer supports gymnax {SUPPORTED}.x, whose step "
                         f"returns terminated and truncated apart: {INSTALL}")


def _floating(value) -> bool:
    return isinstance(value, float) or (hasattr(value, "dtype") and jnp.issubdtype(value.dtype, jnp.floating))


class GymnaxEnv(Env):
    def __init__(self, name: str, episode_length: int | None = None):
        check_version()
        import gymnax  # the optional gymnax extra

        self.name = name
        self._env, params = gymnax.make(name.removeprefix(PREFIX))
        limit = getattr(params, "max_steps_in_episode", None)
        if episode_length is None:
            if limit is None:
                raise ValueError(f"env {name!r} has no time limit of its own: give episode_length")
            episode_length = int(limit)
        if limit is not None:  # its time limit would end episodes as terminations
            params = params.replace(max_steps_in_episode=type(limit)(2**30))
        self._params = params
        self._traced = tuple(f.name for f in dataclasses.fields(params) if _floating(getattr(params, f.name)))
        obs = jax.eval_shape(lambda key: self._env.reset_env(key, params)[0], jax.random.PRNGKey(0))
        space = self._env.action_space(params)
        size = int(jnp.size(jnp.zeros(obs.shape)))
        if hasattr(space, "n"):
            self.spec = EnvSpec(obs_shape=(size,), discrete=True, episode_length=int(episode_length),
                                num_actions=int(space.n))
        else:
            shape = tuple(space.shape)
            low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), shape).reshape(-1)
            high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), shape).reshape(-1)
            self.spec = EnvSpec(obs_shape=(size,), discrete=False, episode_length=int(episode_length),
                                action_shape=shape, action_low=tuple(float(x) for x in low),
                                action_high=tuple(float(x) for x in high))

    @staticmethod
    def _flat(obs) -> jax.Array:
        return jnp.reshape(obs, (-1,)).astype(jnp.float32)

    def default_params(self) -> dict:
        return {name: jnp.asarray(getattr(self._params, name), jnp.float32) for name in self._traced}

    def _env_params(self, params: dict):
        """gymnax's EnvParams with the traced values, each in its field's own dtype."""
        return self._params.replace(**{name: jnp.asarray(value, jnp.result_type(getattr(self._params, name)))
                                       for name, value in params.items()})

    def _reset(self, key: jax.Array, params):
        key, reset_key = jax.random.split(key)
        obs, state = self._env.reset_env(reset_key, self._env_params(params))
        return (state, key), self._flat(obs)

    def _step(self, physics, action: jax.Array, params):
        state, key = physics
        key, step_key = jax.random.split(key)
        obs, state, reward, done, _ = self._env.step_env(step_key, state, action, self._env_params(params))
        return ((state, key), self._flat(obs), jnp.reshape(reward, ()).astype(jnp.float32),
                jnp.reshape(done, ()).astype(jnp.float32))

    def _key(self):
        return type(self), self.name, self.spec.episode_length

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other) -> bool:
        return isinstance(other, GymnaxEnv) and self._key() == other._key()


def make_gymnax_env(name: str, backend: str = "jax", episode_length: int | None = None) -> GymnaxEnv:
    return GymnaxEnv(name, episode_length=episode_length)
