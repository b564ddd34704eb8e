"""The commands besides training, each with only its own options, each checking them (its
paths first) before it computes anything:

    python train.py play RUN_DIR [--member K] [--num-eval-envs N] [--video out.mp4] [--robustness ...]
    python train.py export RUN_DIR policy.onnx|policy.npz [--member K]
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from typing import Annotated, Optional

import tyro

from sim.core.contract import ConfigError
from sim.run.settings import robustness_setting

EXPORT_SUFFIXES = (".onnx", ".npz")


class ArgumentError(ConfigError):
    """A bad positional argument; `flag` is its placeholder (RUN_DIR, FILE)."""

    def __init__(self, name: str, message: str):
        ValueError.__init__(self, f"{name}: {message}")
        self.flag = name


def _error(flag: str, message: str) -> ConfigError:
    return ArgumentError(flag, message) if flag.isupper() else ConfigError(flag, message)


def check_output_path(flag: str, path: str, suffixes: tuple[str, ...], what: str) -> None:
    """Raises ConfigError naming `flag` unless `path` ends in one of `suffixes` and its
    directory exists and is writable."""
    if not path.lower().endswith(suffixes):
        raise _error(flag, f"must be {what} path, got {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise _error(flag, f"{path}: the directory {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise _error(flag, f"{path}: the directory {folder} is not writable")


def check_run_dir(run_dir: str) -> None:
    """RUN_DIR must hold a run (its config.json)."""
    if not os.path.isfile(os.path.join(run_dir, "config.json")):
        raise ArgumentError("RUN_DIR", f"{run_dir} is not a run directory (no config.json)")


def velocity_command(text: str) -> tuple[float, float, float]:
    """--command's "VX,VY,YAW" as three finite numbers; ConfigError otherwise."""
    try:
        values = tuple(float(v) for v in text.split(","))
        if len(values) != 3 or not all(math.isfinite(v) for v in values):
            raise ValueError
    except ValueError:
        raise ConfigError("command", f"must be VX,VY,YAW (three numbers, e.g. 1,0,0), got {text!r}") from None
    return values


@dataclasses.dataclass(frozen=True)
class PlayCommand:
    """Evaluate the policy of a run's newest checkpoint: deterministic episodes on device, the
    mean, std, min and max return; optionally film one episode and test the policy under other
    physics."""

    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """The run directory whose newest checkpoint to play."""
    member: Optional[int] = None
    """A population's member to play (its index in summary.json; default: the best member by final evaluation)."""
    num_eval_envs: Optional[int] = None
    """Deterministic episodes, one per env (default: the run's --num-eval-envs)."""
    video: Optional[str] = None
    """Render one deterministic episode offscreen into this .mp4 file."""
    overwrite: bool = False
    """Replace the --video file where it exists (without this flag an existing file is refused, untouched)."""
    robustness: tuple[str, ...] = ()
    """Also evaluate the policy under these physics settings, one per value, each NAME=FACTOR or NAME=LOW:HIGH joined by commas (e.g. --robustness friction=0.3 friction=2,mass=1.5 mass=0.5:1.5), or push=SPEED for pushes up to SPEED m/s every --push-every steps of the run on average (MuJoCo physics); the nominal physics first, then a return per setting."""
    sim2sim: bool = False
    """Playground's Go1/G1 flat-terrain joystick tasks: also run the policy, exported to ONNX, in native MuJoCo (mujoco.mj_step on the task's own model, onnxruntime, no JAX in the loop) for 20 s of simulated time under --command (default 0.5,0,0), its observation rebuilt from MuJoCo's data in numpy; reports whether the robot fell and the velocity it tracked."""
    command: Optional[str] = None
    """VX,VY,YAW: a joystick robot's velocity command (m/s forward, m/s sideways, rad/s turning), fixed for every episode played and filmed (e.g. --command 1,0,0); default: commands drawn as the task draws them."""
    compile_cache: str = "auto"
    """Directory of JAX's persistent compilation cache (auto: $XDG_CACHE_HOME/fusedrl/jax, else ~/.cache/fusedrl/jax; off: none)."""

    def validate(self) -> "PlayCommand":
        check_run_dir(self.run_dir)
        if self.command is not None:
            velocity_command(self.command)
        if self.sim2sim and importlib.util.find_spec("onnxruntime") is None:
            raise ConfigError("sim2sim", "needs onnx and onnxruntime: pip install 'fusedrl[export]'")
        if self.video is not None:
            check_output_path("video", self.video, (".mp4",), "an .mp4 file")
            if os.path.exists(self.video) and not self.overwrite:
                raise ConfigError("video", f"{self.video} exists: add --overwrite to replace it, or write another file")
        if self.num_eval_envs is not None and self.num_eval_envs < 1:
            raise ConfigError("num-eval-envs", f"must be a positive integer, got {self.num_eval_envs}")
        for setting in self.robustness:
            try:
                robustness_setting(setting)
            except ValueError as err:
                raise ConfigError("robustness", str(err)) from None
        return self


@dataclasses.dataclass(frozen=True)
class ExportCommand:
    """Write the deterministic policy of a run's newest checkpoint, its observation
    normalisation folded in, to a file: .onnx (an ONNX graph, input obs [batch, obs size];
    needs the export extra) or .npz (the same program and its weights, run with numpy alone by
    sim/run/policy/export.py's numpy_policy); checked against the JAX policy on 1,000 observations."""

    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """The run directory whose newest checkpoint's policy to export."""
    path: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="FILE")]
    """The file to write: policy.onnx or policy.npz."""
    member: Optional[int] = None
    """A population's member to export (default: the best member by final evaluation)."""
    overwrite: bool = False
    """Replace FILE where it exists (without this flag an existing FILE is refused, untouched)."""
    compile_cache: str = "auto"
    """Directory of JAX's persistent compilation cache (auto: $XDG_CACHE_HOME/fusedrl/jax, else ~/.cache/fusedrl/jax; off: none)."""

    def validate(self) -> "ExportCommand":
        check_run_dir(self.run_dir)
        check_output_path("FILE", self.path, EXPORT_SUFFIXES, "an .onnx or .npz file")
        if os.path.exists(self.path) and not self.overwrite:
            raise ArgumentError("FILE", f"{self.path} exists: add --overwrite to replace it, or write another file")
        if self.path.lower().endswith(".onnx") and importlib.util.find_spec("onnx") is None:
            raise ArgumentError("FILE", f"writing {self.path} needs the export extra (the onnx package): "
                                        "pip install 'fusedrl[export]', or write a .npz, run by numpy alone")
        return self


def check_member(member: Optional[int], size: int) -> None:
    """A --member given for a run of `size` members."""
    if member is None:
        return
    if size == 1:
        raise ConfigError("member", "the run is not a population: it has no members to choose from")
    if not 0 <= member < size:
        raise ConfigError("member", f"must be in [0, {size - 1}] (the run's members), got {member}")
