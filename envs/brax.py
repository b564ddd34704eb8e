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

import inspect
import warnings

import jax.numpy as jnp

from envs.base import import_mjx_quietly

import_mjx_quietly()  # before Brax imports it

import brax.fluid  # noqa: E402
from brax import envs as _brax_envs  # noqa: E402
from brax.envs.base import PipelineEnv  # noqa: E402

from envs.state_env import StateEnv  # noqa: E402
from envs.sim2real import SettingError  # noqa: E402

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


# The System fields each backend's physics reads, traced as the env's dynamics parameters:
# MJX reads MuJoCo's model fields; the generalized, positional and spring pipelines Brax's
# own (`gravity`, `link.inertia.mass`, `actuator.gain`; damping only in generalized), and all
# four take contact friction from `geom_friction`.
MODEL_FIELDS = {
    "mjx": ("opt.gravity", "geom_friction", "body_mass", "dof_damping", "actuator_gainprm", "actuator_biasprm"),
    "generalized": ("gravity", "geom_friction", "link.inertia.mass", "dof.damping", "actuator.gain"),
    "positional": ("gravity", "geom_friction", "link.inertia.mass", "actuator.gain"),
    "spring": ("gravity", "geom_friction", "link.inertia.mass", "actuator.gain"),
}


def constructor_defaults(name: str) -> dict:
    """{argument: default} of Brax env `name`'s constructor (nothing is built): its own
    arguments and those it passes on to Brax's `PipelineEnv` (`n_frames`, `debug`); not
    `backend`, which the run's --backend sets."""
    out = {}
    for init in (PipelineEnv.__init__, _brax_envs._envs[name].__init__):
        out.update({p.name: p.default for p in inspect.signature(init).parameters.values()
                    if p.default is not inspect.Parameter.empty})
    out.pop("backend", None)
    return out


class BraxEnv(StateEnv):
    """One Brax env; physics = Brax's `State`. terminated = Brax's `done`, set only on true
    termination (e.g. an unhealthy ant). See `StateEnv` for shapes and hashing; its dynamics
    parameters are the `MODEL_FIELDS` of its backend in Brax's `sys`."""

    model_attr = "sys"

    def __init__(self, name: str, backend: str = "mjx", episode_length: int = 1000, **kwargs):
        self.name = name
        self.backend = backend
        self.kwargs = dict(kwargs)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_MAINTENANCE_MSG, category=UserWarning)
            try:
                self._env = _brax_envs.get_environment(name, backend=backend, **kwargs)
            except TypeError as err:
                if not kwargs:
                    raise
                raise SettingError("env-config", f"Brax env {name!r} cannot take {kwargs}: {err}") from None
        self.model_fields = MODEL_FIELDS.get(backend, ())
        self.data_attr = "pipeline_state" if backend == "mjx" else None  # MJX data: pushes (envs/sim2real.py)
        self._set_spec(episode_length)

    @property
    def brax_env(self):
        """The raw Brax env (for rendering, `dt`, `sys`, ...)."""
        return self._env


def make_brax_env(name: str, backend: str = "mjx", episode_length: int = 1000, **kwargs) -> BraxEnv:
    """Builds Brax env `name` on `backend`; `kwargs` go to the Brax env's constructor
    (e.g. `terminate_when_unhealthy=False`, `n_frames=...`)."""
    return BraxEnv(name, backend=backend, episode_length=episode_length, **kwargs)
