"""MuJoCo Playground (DM Control Suite) environments behind the functional `Env` API.

Needs the optional PyPI package `playground` (module `mujoco_playground`):
`pip install 'fusedrl[playground]'`. The DM Control Suite tasks ship their XML inside the
package, so they build and run offline (only the locomotion/manipulation robots would clone
mujoco_menagerie from GitHub on first use).

Backends: "mjx" runs MJX's pure-JAX implementation (`impl="jax"`, works on CPU and GPU);
"warp" runs Playground's own default, MuJoCo Warp (`impl="warp"`, NVIDIA GPU only).
"""

from __future__ import annotations

import mujoco

from envs.base import import_mjx_quietly
from envs.sim2real import SettingError
from envs.state_env import StateEnv

_IMPL = {"mjx": "jax", "warp": "warp"}
MODEL_FIELDS = ("opt.gravity", "geom_friction", "body_mass", "dof_damping", "actuator_gainprm", "actuator_biasprm")


def _shim_spec_find_body() -> None:
    """Lets Playground 0.2.0's reacher tasks build on mujoco 3.10 to 3.17.

    `reacher._make_model` picks its MjSpec call by `mujoco.__version__ >= "3.3.0"`, a string
    comparison that "3.17.0" fails, so it takes the branch for mujoco < 3.3, which calls
    `MjSpec.find_body`, removed in 3.3 (`MjSpec.body` took its place, same arguments and
    result). The old name is given back as an alias of the new one; nothing happens where the
    old name exists.
    """
    if not hasattr(mujoco.MjSpec, "find_body") and hasattr(mujoco.MjSpec, "body"):
        mujoco.MjSpec.find_body = mujoco.MjSpec.body


def load_registry():
    try:
        import_mjx_quietly()
        _shim_spec_find_body()
        from mujoco_playground import registry  # the optional playground extra
    except ImportError as e:
        raise ImportError(
            "MuJoCo Playground environments need the optional `playground` package: "
            "pip install 'fusedrl[playground]'"
        ) from e
    return registry


def default_config(name: str):
    """Task `name`'s default config (an ml_collections ConfigDict; nothing is built)."""
    return load_registry().get_default_config(name)


class PlaygroundEnv(StateEnv):
    """One Playground env. physics = Playground's `State` (mjx Data, obs, reward, done,
    metrics, info incl. its rng), kept whole so its step gets back what it produced.

    obs: [observation_size] float32 (a dict observation laid out flat by part name, as
    `EnvSpec.obs_parts` says: e.g. "privileged_state" then "state"); action: [action_size] in
    [-1, 1]; reward and terminated: [] float32 (terminated = Playground's `done`, which the
    DM Control tasks set only when the simulation went NaN).

    `kwargs` are Playground config overrides (e.g. `ctrl_dt=0.02`); the episode length comes
    from its config (1000 for the DM Control Suite) unless `episode_length` is given. Its
    `action_repeat` config entry is not applied (Playground applies it in its Brax training
    wrapper, which is not used here; it is 1 for these tasks).

    Dynamics parameters: `MODEL_FIELDS` of its MJX model (gravity, friction, masses, damping,
    actuator gains and biases).
    """

    model_attr = "_mjx_model"
    data_attr = "data"

    def __init__(self, name: str, backend: str = "mjx", episode_length: int | None = None, **kwargs):
        if backend not in _IMPL:
            raise ValueError(f"unknown playground backend {backend!r}; valid: {', '.join(_IMPL)}")
        registry = load_registry()
        self.name, self.backend, self.kwargs = name, backend, dict(kwargs)
        if "impl" in registry.get_default_config(name):
            overrides = {"impl": _IMPL[backend], **kwargs}
        elif backend == "mjx":  # a task without the choice (AeroCubeRotateZAxis) runs MJX's JAX implementation
            overrides = dict(kwargs)
        else:
            raise ValueError(f"env {name!r} runs MJX's JAX implementation only: use backend mjx")
        try:
            self._env = registry.load(name, config_overrides={k: list(v) if isinstance(v, tuple) else v
                                                              for k, v in overrides.items()})
        except (KeyError, TypeError, ValueError) as err:
            if not kwargs:
                raise
            raise SettingError("env-config", f"env {name!r} cannot take {kwargs}: {str(err).strip(chr(39))} (its "
                                             f"config: python -c \"from mujoco_playground import registry; "
                                             f"print(registry.get_default_config('{name}'))\")") from None
        # Playground keeps its (override-merged) config only as `_config`.
        # Its `mjx_model` must be the attribute set under traced parameters, or none are traced.
        traced = self._env.mjx_model is getattr(self._env, self.model_attr, None)
        self.model_fields = tuple(dict.fromkeys(MODEL_FIELDS + self._randomized_fields())) if traced else ()
        self._set_spec(self._env._config.episode_length if episode_length is None else episode_length)

    def _randomized_fields(self) -> tuple[str, ...]:
        """Model fields the task's own domain randomiser draws (none here; see RobotEnv)."""
        return ()

    @property
    def playground_env(self):
        """The raw Playground env (for rendering, `dt`, `mj_model`, ...)."""
        return self._env


def make_playground_env(name: str, backend: str = "mjx", episode_length: int | None = None, **kwargs) -> PlaygroundEnv:
    """Builds Playground env `name` (e.g. "CartpoleBalance"); raises ImportError with the
    install hint when the `playground` package is missing."""
    return PlaygroundEnv(name, backend=backend, episode_length=episode_length, **kwargs)
