"""The part of the Brax and Playground adapters they share: both wrap an env whose state is a
Brax-style `State` (obs, reward, done, metrics, info, physics data) with `reset`/`step`,
and both read their physics model from an attribute of that env (Brax's `sys`, Playground's
`_mjx_model`): the dynamics parameters are fields of that model, set to the env's traced
values for the length of a reset or a step.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from envs.base import Env, EnvSpec, obs_parts_of


def stable_types(tree: Any) -> Any:
    """Every floating leaf as (strong) float32 and every other leaf strongly typed, so reset's
    and step's physics pytrees have identical types: a program that carries them (a `lax.scan`,
    an epoch fed its own output) compiles once. Brax returns some Python floats and weakly-typed
    scalars (e.g. `done=0.0` when termination is off); Playground's robots turn some metrics and
    info flags weakly typed after a step (Go1's `reward/termination`, Aloha's `episode_picked`),
    which, left alone, compiles such a program a second time (about 20 s for Go1 on a CPU)."""

    def cast(x):
        dtype = jnp.result_type(x)
        return jnp.asarray(x, jnp.float32 if jnp.issubdtype(dtype, jnp.floating) else dtype)

    return jax.tree.map(cast, tree)


class StateEnv(Env):
    """Adapter around `self._env` (set by the subclass before `_set_spec`).

    physics = the wrapped env's whole `State`, so its step gets back exactly what it produced.
    obs: [observation_size] float32; action: [action_size] in [-1, 1]; reward and
    terminated: [] float32 (terminated = the wrapped env's `done`).

    Hashable and compared by configuration (type, name, backend, episode length, kwargs),
    so it can be closed over or passed as a static argument to `jit`.
    """

    name: str
    backend: str
    kwargs: dict
    model_attr: str  # the wrapped env's attribute holding its physics model
    model_fields: tuple[str, ...] = ()  # its fields (dotted paths) traced as dynamics parameters

    def _set_spec(self, episode_length: int) -> None:
        # The abstract shape is free; the wrapped env's `observation_size` runs an eager reset.
        # A dict observation (e.g. {"state", "privileged_state"}) is laid out flat, by name.
        obs = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0)).obs
        parts = obs_parts_of(obs)
        act = self._env.action_size
        self.spec = EnvSpec(obs_shape=(sum(size for _, size in parts),) if parts else tuple(obs.shape),
                            discrete=False, episode_length=int(episode_length), action_shape=(act,),
                            action_low=(-1.0,) * act, action_high=(1.0,) * act, obs_parts=parts)

    def _key(self):
        return (type(self), self.name, self.backend, self.spec.episode_length,
                tuple(sorted((k, repr(v)) for k, v in self.kwargs.items())))

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other) -> bool:
        return isinstance(other, StateEnv) and self._key() == other._key()

    def default_params(self) -> dict | None:
        """{model field path: float32 array} of `model_fields`, e.g. {"opt.gravity": [3],
        "geom_friction": [ngeom, 3], "body_mass": [nbody]} (None when there are none)."""
        model = getattr(self._env, self.model_attr)
        fields = {path: jnp.asarray(functools.reduce(getattr, path.split("."), model), jnp.float32)
                  for path in self.model_fields}
        return fields or None

    @contextlib.contextmanager
    def _model_with(self, params):
        """The wrapped env, its model's parameter fields set to `params` (traced) until exit."""
        model = getattr(self._env, self.model_attr)
        if params:
            setattr(self._env, self.model_attr, model.tree_replace(params))
        try:
            yield self._env
        finally:
            setattr(self._env, self.model_attr, model)

    def _reset(self, key: jax.Array, params):
        with self._model_with(params) as env:
            physics = stable_types(env.reset(key))
        return physics, physics.obs

    def _step(self, physics, action: jax.Array, params):
        # Brax-style envs update `metrics`/`info` in place; fresh dicts keep an eagerly
        # called step from mutating the caller's previous state.
        physics = physics.replace(metrics=dict(physics.metrics), info=dict(physics.info))
        with self._model_with(params) as env:
            physics = stable_types(env.step(physics, jnp.asarray(action, jnp.float32)))
        return physics, physics.obs, jnp.reshape(physics.reward, ()), jnp.reshape(physics.done, ())

    data_attr: str | None = None  # the field of the wrapped env's State holding MuJoCo data (MJX physics)

    def push_map(self):
        """[nv, 2] float32: the joint velocities a horizontal velocity (vx, vy) of the robot's root
        adds (its first body below the world with joints: a free joint's x and y, a slide joint's
        horizontal axis); None where the physics is not MuJoCo data (Brax's own pipelines) or
        the root has no horizontal joint."""
        if self.data_attr is None:
            return None
        model = getattr(self._env, self.model_attr)
        jnt_type, jnt_body = np.asarray(model.jnt_type), np.asarray(model.jnt_bodyid)
        jnt_dof, jnt_axis, parent = np.asarray(model.jnt_dofadr), np.asarray(model.jnt_axis), np.asarray(model.body_parentid)
        roots = [b for b in dict.fromkeys(jnt_body.tolist()) if parent[b] == 0]
        out = np.zeros((int(model.nv), 2), np.float32)
        for j in np.flatnonzero(jnt_body == roots[0]) if roots else ():
            if jnt_type[j] == 0:  # free: linear velocity (x, y, z) first, in the world frame
                out[jnt_dof[j], 0] = out[jnt_dof[j] + 1, 1] = 1.0
            elif jnt_type[j] == 2:  # slide along its axis
                out[jnt_dof[j]] = jnt_axis[j][:2]
        return out if out.any() else None

    def solver_loop(self) -> int | None:
        """MJX's constraint solver loops (`opt.iterations` > 1, a `lax.while_loop`) where the
        model has constraint rows; Brax's own pipelines (no MuJoCo data) never do."""
        if self.data_attr is None:
            return None
        iterations = int(getattr(self._env, self.model_attr).opt.iterations)
        if iterations <= 1:
            return None
        data = getattr(jax.eval_shape(self._env.reset, jax.random.PRNGKey(0)), self.data_attr)
        rows = getattr(getattr(data, "_impl", data), "efc_J", None)
        return None if rows is not None and rows.size == 0 else iterations  # (no rows: MJX skips the solver)

    def add_velocity(self, physics, dqvel: jax.Array):
        """`physics` with `dqvel` [nv] added to its joint velocities (see `push_map`)."""
        data = getattr(physics, self.data_attr)
        return physics.replace(**{self.data_attr: data.replace(qvel=data.qvel + dqvel)})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, backend={self.backend!r}, " \
               f"episode_length={self.spec.episode_length})"
