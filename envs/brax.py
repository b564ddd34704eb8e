"""Brax environments behind the functional `Env` API.

Wraps the *raw* Brax env (`brax.envs.get_environment`), not `brax.envs.create`: the time
limit and truncation come from `envs.base.Env`, auto-reset from our own wrappers, so Brax's
`EpisodeWrapper`/`AutoResetWrapper` would only duplicate (and blur terminated vs truncated).

Backends (brax 0.14.2): every env runs on mjx, generalized, positional and spring, except
`swimmer`, whose constructor accepts only "generalized" (Brax raises ValueError otherwise;
the registry in `envs/__init__.py` lists the supported pairs), and whose fluid drag needs
the small JAX-compatibility shim below.
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
from brax import envs as _brax_envs

from envs.base import Env, EnvSpec

# `brax.io.mjcf.load` warns on every env construction that Brax is no longer maintained;
# one line per env built is noise, so that message (only) is dropped around construction.
_MAINTENANCE_MSG = "Brax System, piplines and environments are not actively"


def _shim_fluid_clip() -> None:
    """Lets brax 0.14.2's fluid model run on a JAX without `jnp.clip(a_min=)` (0.10.2 here).

    `brax.fluid.force` (drag, used only by envs with density/viscosity: swimmer) calls
    `jp.clip(x, a_min=1e-12)`; without this every swimmer step raises TypeError. Only that
    module's `jp` name is redirected, to jax.numpy with a keyword-tolerant `clip`; the math
    is unchanged, and nothing happens on a JAX that still takes `a_min`.
    """
    import inspect

    import brax.fluid

    if "a_min" in inspect.signature(jnp.clip).parameters:
        return

    class _Jnp:
        def __getattr__(self, attr):
            return getattr(jnp, attr)

        @staticmethod
        def clip(x, min=None, max=None, *, a_min=None, a_max=None):  # noqa: A002
            return jnp.clip(x, a_min if min is None else min, a_max if max is None else max)

    brax.fluid.jp = _Jnp()


_shim_fluid_clip()


def as_float32(tree: Any) -> Any:
    """Casts every floating leaf to (strong) float32, so reset's and step's physics pytrees
    have identical types and `lax.scan` carries stay stable (Brax returns some Python floats
    and weakly-typed scalars, e.g. `done=0.0` when termination is off)."""

    def cast(x):
        return jnp.asarray(x, jnp.float32) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x

    return jax.tree.map(cast, tree)


class BraxEnv(Env):
    """One Brax env. physics = Brax's `State` (pipeline state, obs, reward, done, metrics,
    info), kept whole so Brax's own step gets back exactly what it produced.

    obs: [observation_size] float32; action: [action_size] in [-1, 1]; reward and
    terminated: [] float32 (terminated = Brax's `done`, set only on true termination such as
    an unhealthy ant).

    Hashable and compared by configuration, so it can be closed over or passed as a static
    argument to `jit`; two equal instances trace identically.
    """

    def __init__(self, name: str, backend: str = "mjx", episode_length: int = 1000, **kwargs):
        self.name = name
        self.backend = backend
        self.kwargs = dict(kwargs)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_MAINTENANCE_MSG, category=UserWarning)
            self._env = _brax_envs.get_environment(name, backend=backend, **kwargs)
        # Brax's `observation_size` runs an eager reset; the abstract shape is free.
        obs = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0)).obs
        if not hasattr(obs, "shape"):
            raise TypeError(f"brax env {name!r} has dict observations; only array observations are supported")
        act = self._env.action_size
        self.spec = EnvSpec(
            obs_shape=tuple(obs.shape),
            discrete=False,
            episode_length=int(episode_length),
            action_shape=(act,),
            action_low=(-1.0,) * act,
            action_high=(1.0,) * act,
        )

    @property
    def brax_env(self):
        """The raw Brax env (for rendering, `dt`, `sys`, ...)."""
        return self._env

    def _key(self):
        return (type(self), self.name, self.backend, self.spec.episode_length, tuple(sorted((k, repr(v)) for k, v in self.kwargs.items())))

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other) -> bool:
        return isinstance(other, BraxEnv) and self._key() == other._key()

    def _reset(self, key: jax.Array):
        physics = as_float32(self._env.reset(key))
        return physics, physics.obs

    def _step(self, physics, action: jax.Array):
        # Brax updates `metrics` in place (`state.metrics.update(...)`); fresh dicts keep an
        # eagerly-called step from mutating the caller's previous state.
        physics = physics.replace(metrics=dict(physics.metrics), info=dict(physics.info))
        physics = as_float32(self._env.step(physics, jnp.asarray(action, jnp.float32)))
        return physics, physics.obs, jnp.reshape(physics.reward, ()), jnp.reshape(physics.done, ())

    def __repr__(self) -> str:
        return f"BraxEnv({self.name!r}, backend={self.backend!r}, episode_length={self.spec.episode_length})"


def make_brax_env(name: str, backend: str = "mjx", episode_length: int = 1000, **kwargs) -> BraxEnv:
    """Builds Brax env `name` on `backend`; `kwargs` go to the Brax env's constructor
    (e.g. `terminate_when_unhealthy=False`, `n_frames=...`)."""
    return BraxEnv(name, backend=backend, episode_length=episode_length, **kwargs)
