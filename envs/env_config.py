"""An env's config entries (`--env-config KEY=VALUE`, `envs.parse_env_config`'s pairs) checked
against what the env declares, without building it or compiling anything: keys the run sets
itself through its own flags, keys the env does not have, values of another type than the
entry's default (a Brax constructor argument's, a Playground config entry's), values that are
not finite, and ranges where the config says what a value means (Playground's timesteps,
Brax's frames per step, a joystick robot's velocity command).

A mistake here would otherwise surface while the programs are traced (a string where Brax
multiplies a number), or never (a control timestep of 0: the physics does not advance).
"""

from __future__ import annotations

import difflib
import math
import numbers

import envs
from envs.robot_tasks import ROBOT_TASKS

# Keys the run sets itself, with the flag that sets them.
RUN_KEYS = {"episode_length": "--episode-length", "action_repeat": "--action-repeat", "backend": "--backend",
            "impl": "--backend", "name": "--env"}
# Playground's timesteps (seconds): each > 0, and a control step at least one physics step
# (Playground steps the physics round(ctrl_dt / sim_dt) times per control step).
TIMESTEPS = ("ctrl_dt", "sim_dt")


def check(name: str, entries: tuple[tuple[str, object], ...]) -> None:
    """Raises ValueError (its message says which entry and what to change) unless every entry
    of `entries` is one env `name` takes. Imports the env family's package (Brax, Playground)
    to read its defaults; builds nothing."""
    if not entries:
        return
    for key, value in entries:
        if key in RUN_KEYS:
            raise ValueError(f"{key} is set by the run itself: use {RUN_KEYS[key]} instead")
        if not _finite(value):
            raise ValueError(f"{key}={_show(value)}: values must be finite numbers")
    family = envs.family(name)
    if family == "brax":
        _check_brax(name, entries)
    elif family in ("playground", "robots"):
        _check_playground(name, entries, robot=family == "robots")


def _check_brax(name: str, entries) -> None:
    from envs.brax import constructor_defaults  # imports Brax: only where a Brax env is configured

    defaults = constructor_defaults(name)
    for key, value in entries:
        if key not in defaults:
            raise ValueError(f"Brax env {name!r} takes no argument {key!r} (its arguments: "
                             f"{', '.join(_closest_first(key, list(defaults)))})")
        _check_type(key, value, defaults[key])
        if key == "n_frames" and value < 1:
            raise ValueError(f"n_frames={value}: physics steps per env step must be >= 1")


def _check_playground(name: str, entries, robot: bool) -> None:
    from envs.playground import default_config  # imports Playground: only where one of its tasks is configured

    config = default_config(name)
    given = {}
    for key, value in entries:
        if robot and key == "command":
            _check_command(name, value)
            continue
        default = _entry(config, key, name)
        if _is_group(default):
            first = next(iter(default.keys()), "NAME")
            raise ValueError(f"{key} is a group of entries ({', '.join(default.keys())}): set them one by one, e.g. "
                             f"{key}.{first}=...")
        _check_type(key, value, default)
        given[key] = value
    steps = {k: given.get(k, config.get(k)) for k in TIMESTEPS if k in given or k in config}
    for key, value in steps.items():
        if key in given and not value > 0:
            raise ValueError(f"{key}={value}: a timestep must be > 0 seconds")
    if len(steps) == 2 and (set(given) & set(TIMESTEPS)) and round(steps["ctrl_dt"] / steps["sim_dt"]) < 1:
        raise ValueError(f"ctrl_dt={steps['ctrl_dt']} is shorter than half of sim_dt={steps['sim_dt']}: a control "
                         f"step would take no physics step (the env would never move)")


def _check_command(name: str, value) -> None:
    """A joystick robot's fixed velocity command: numbers (VX, VY, YAW), finite."""
    if not ROBOT_TASKS[name].command:
        joystick = ", ".join(n for n, task in ROBOT_TASKS.items() if task.command)
        raise ValueError(f"command: env {name!r} has no velocity command (the joystick tasks have: {joystick})")
    if not (isinstance(value, tuple) and value and all(_is_number(v) for v in value)):
        raise ValueError(f"command={_show(value)}: a velocity command is a list of numbers, e.g. command=[1,0,0] "
                         f"(VX, VY, YAW)")


def _entry(config, key: str, name: str):
    """The default of dotted `key` in a Playground config; ValueError naming the valid entries."""
    node = config
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if not _is_group(node) or part not in node:
            group = ".".join(parts[:depth])
            valid = [k for k in node.keys() if depth or k not in RUN_KEYS] if _is_group(node) else []
            listed = f" ({group + chr(39) + 's' if group else 'its'} entries: {', '.join(_closest_first(part, valid))})"
            raise ValueError(f"env {name}'s config has no entry {key!r}" + (listed if valid else ""))
        node = node[part]
    return node


def _is_group(node) -> bool:
    return hasattr(node, "keys") and hasattr(node, "items") and not isinstance(node, (str, tuple, list))


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _finite(value) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_finite(v) for v in value)
    return not _is_number(value) or math.isfinite(value)


def _matches(value, default) -> bool:
    """Whether `value` (a JSON value: bool, int, float, str, tuple) can stand where `default` does."""
    if default is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, numbers.Integral):
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if isinstance(default, numbers.Real):
        return _is_number(value)
    if isinstance(default, str):
        return isinstance(value, str)
    if isinstance(default, (tuple, list)):
        return isinstance(value, tuple) and (not default or (len(value) == len(default) and all(
            _matches(v, d) for v, d in zip(value, default))))
    return True  # other kinds of default (arrays, objects) are not judged here


def _kind(default) -> str:
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, numbers.Integral):
        return "an integer"
    if isinstance(default, numbers.Real):
        return "a number"
    if isinstance(default, str):
        return "a string"
    return f"a list of {len(default)} values"


def _check_type(key: str, value, default) -> None:
    if not _matches(value, default):
        raise ValueError(f"{key}={_show(value)}: {key} takes {_kind(default)} (its default is {_show(default)})")


def _show(value) -> str:
    """A value as it would be written on the command line (JSON-like)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ",".join(_show(v) for v in value) + "]"
    return str(value)


def _closest_first(value: str, valid: list[str]) -> list[str]:
    close = difflib.get_close_matches(value, valid, n=3)
    return close + [v for v in valid if v not in close]
