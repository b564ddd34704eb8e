"""Every environment behind one functional API: `envs.make(name, backend=None, **overrides)`.

Factories import their physics lazily, so listing names or building a classic task never
imports Brax or MuJoCo.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
from typing import Callable

from envs import cpu_linalg

cpu_linalg.apply()  # before anything is traced: see envs/cpu_linalg.py

from envs.base import Env, EnvSpec, EnvState  # noqa: E402

__all__ = ["Env", "EnvSpec", "EnvState", "make", "names", "backends", "default_backend", "family"]


@dataclasses.dataclass(frozen=True)
class _Entry:
    module: str  # module holding `factory`, imported on first make()
    factory: str
    backends: tuple[str, ...]
    default_backend: str
    family: str  # "classic", "brax" or "playground"
    actions: str = "continuous"  # "continuous" or "discrete"


_REGISTRY: dict[str, _Entry] = {}


def register(name: str, module: str, factory: str, backends: tuple[str, ...], default_backend: str, family: str,
             actions: str = "continuous"):
    _REGISTRY[name] = _Entry(module, factory, backends, default_backend, family, actions)


for _name, _cls, _actions in [
    ("cartpole", "CartPole", "discrete"),
    ("acrobot", "Acrobot", "discrete"),
    ("pendulum", "Pendulum", "continuous"),
    ("mountain_car_continuous", "MountainCarContinuous", "continuous"),
]:
    register(_name, "envs.classic", _cls, ("jax",), "jax", "classic", _actions)

BRAX_ENVS = (
    "ant",
    "halfcheetah",
    "hopper",
    "humanoid",
    "humanoidstandup",
    "inverted_pendulum",
    "inverted_double_pendulum",
    "pusher",
    "reacher",
    "swimmer",
    "walker2d",
)
BRAX_BACKENDS = ("mjx", "generalized", "positional", "spring")
for _name in BRAX_ENVS:
    # brax 0.14.2's swimmer accepts only the generalized pipeline; the rest take all four.
    _backends = ("generalized",) if _name == "swimmer" else BRAX_BACKENDS
    register(_name, "envs.brax", "make_brax_env", _backends, _backends[0], "brax")

# MuJoCo Playground's DM Control Suite: every task of playground 0.2 (its
# `dm_control_suite.ALL_ENVS`; tests/test_brax_envs.py checks the two agree).
PLAYGROUND_ENVS = (
    "AcrobotSwingup", "AcrobotSwingupSparse", "BallInCup", "CartpoleBalance", "CartpoleBalanceSparse",
    "CartpoleSwingup", "CartpoleSwingupSparse", "CheetahRun", "FingerSpin", "FingerTurnEasy", "FingerTurnHard",
    "FishSwim", "HopperHop", "HopperStand", "HumanoidStand", "HumanoidWalk", "HumanoidRun", "PendulumSwingup",
    "PointMass", "ReacherEasy", "ReacherHard", "SwimmerSwimmer6", "WalkerRun", "WalkerStand", "WalkerWalk",
)
for _name in PLAYGROUND_ENVS:
    register(_name, "envs.playground", "make_playground_env", ("mjx",), "mjx", "playground")

PLAYGROUND_HINT = "MuJoCo Playground's DM Control Suite tasks need the `playground` extra: pip install 'fusedrl[playground]'"


def playground_installed() -> bool:
    """Whether the `playground` extra is installed (looked up, not imported: importing it is slow)."""
    return importlib.util.find_spec("mujoco_playground") is not None


def names(include_missing: bool = False) -> list[str]:
    """Every environment this installation can build (with `include_missing`, also those an
    extra that is not installed would add)."""
    missing = not include_missing and not playground_installed()
    return [n for n, e in _REGISTRY.items() if not (missing and e.family == "playground")]


def _closest_first(value: str, valid: list[str]) -> list[str]:
    close = difflib.get_close_matches(value, valid, n=len(valid), cutoff=0.0)
    return close + [v for v in valid if v not in close]


def _entry(name: str) -> _Entry:
    if name not in _REGISTRY:
        valid = _closest_first(name, names())
        hint = "" if playground_installed() else f" ({PLAYGROUND_HINT} for {len(PLAYGROUND_ENVS)} more)"
        raise ValueError(f"unknown env {name!r}; valid names (closest first): {', '.join(valid)}{hint}")
    entry = _REGISTRY[name]
    if entry.family == "playground" and not playground_installed():
        raise ValueError(f"env {name!r}: {PLAYGROUND_HINT}")
    return entry


def backends(name: str) -> tuple[str, ...]:
    """The physics backends `name` can run on."""
    return _entry(name).backends


def default_backend(name: str) -> str:
    return _entry(name).default_backend


def describe() -> list[dict]:
    """Every registered env (those of extras not installed included, marked): name, family,
    action space, default backend and all backends; nothing is built."""
    installed = playground_installed()
    return [{"name": n, "family": e.family, "actions": e.actions, "default_backend": e.default_backend,
             "backends": list(e.backends), "installed": installed or e.family != "playground"}
            for n, e in _REGISTRY.items()]


def family(name: str) -> str:
    """"classic", "brax" or "playground"."""
    return _entry(name).family


def check(name: str, backend: str | None = None) -> str:
    """Validates a (name, backend) pair without building anything; returns the backend."""
    entry = _entry(name)
    if backend is None:
        return entry.default_backend
    if backend not in entry.backends:
        valid = _closest_first(backend, list(entry.backends))
        raise ValueError(f"unknown backend {backend!r} for env {name!r}; valid backends (closest first): {', '.join(valid)}")
    return backend


def make(name: str, backend: str | None = None, **overrides) -> Env:
    """Builds environment `name` on `backend` (its default when None).

    `overrides` are passed to the environment's constructor, e.g. `episode_length=200`.
    Raises ValueError for an unknown name or backend, listing the valid ones.
    """
    backend = check(name, backend)
    entry = _REGISTRY[name]
    factory: Callable[..., Env] = getattr(importlib.import_module(entry.module), entry.factory)
    if entry.family == "classic":
        return factory(**overrides)
    return factory(name, backend=backend, **overrides)
