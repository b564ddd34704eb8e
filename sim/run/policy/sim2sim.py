"""`train.py play RUN --sim2sim`: the run's exported ONNX policy drives the task's own model in
native MuJoCo (`mujoco.mj_step`, MuJoCo's C engine, not MJX), the observation rebuilt from
`MjData` in numpy as the task builds it (envs/robot_obs.py), under one fixed velocity command,
with no JAX in the loop: the first check that a policy trained in MJX survives another
simulator. (Imported by `play` once it has chosen MuJoCo's GL backend: MuJoCo reads it on import.)

Reported: whether and when the robot fell (the task's own fall test), and the velocity it
tracked (forward and sideways m/s in its own frame, yaw rate rad/s) against the command,
averaged after the first `SETTLE` seconds.
"""

from __future__ import annotations

import mujoco
import numpy as np

from envs.robot_obs import SIM2SIM
from sim.run.config import ConfigError

SECONDS = 20.0  # simulated time
SETTLE = 2.0  # seconds left out of the tracked velocity (standing up to speed)
DEFAULT_COMMAND = (0.5, 0.0, 0.0)  # where play is given no --command: walk forward at 0.5 m/s


def check(env_name: str) -> None:
    """ConfigError unless `env_name` declares its observation for native MuJoCo."""
    if env_name not in SIM2SIM:
        raise ConfigError("sim2sim", f"env {env_name} declares no observation for native MuJoCo; --sim2sim runs "
                                     f"{', '.join(SIM2SIM)}")


def settled_mean(velocity, dt: float) -> np.ndarray:
    """The mean of per-step (vx, vy, yaw) after the first `SETTLE` seconds (NaN if none)."""
    settled = np.asarray(velocity).reshape(-1, 3)[int(round(SETTLE / dt)):]
    return settled.mean(0) if len(settled) else np.full(3, np.nan)


def onnx_policy(path: str):
    """The ONNX policy file at `path` (`export_policy`'s) as act([1, obs_size]) -> [1, action_size]."""
    import onnxruntime  # the optional export extra (`play` checks it is installed before any work)

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return lambda obs: session.run(None, {"obs": obs})[0]


def run(policy, evaluation, command, seconds: float = SECONDS, log=print, engine: str = "ONNX policy") -> dict:
    """Runs `policy` (a file's: act([1, obs_size]) -> [1, action_size], `onnx_policy` or
    export.numpy_policy) for `seconds` of simulated time on the evaluation env's task in native
    MuJoCo; returns what it measured."""
    env_name = evaluation.cfg.env
    check(env_name)
    spec = evaluation.spec
    start, stop = spec.obs_ranges(("state",))[0]
    joystick = SIM2SIM[env_name]().bind(evaluation.base_env.unwrapped.playground_env)

    def act(state: np.ndarray, other: np.ndarray) -> np.ndarray:
        flat = other.copy()  # the observation's other parts: never read by the policy (checked below)
        flat[0, start:stop] = state
        return np.asarray(policy(flat))[0]

    data = mujoco.MjData(joystick.model)
    joystick.reset(data, command)
    obs = joystick.observe(data)
    zeros = np.zeros((1,) + tuple(spec.obs_shape), np.float32)
    noise = np.random.default_rng(0).normal(size=zeros.shape).astype(np.float32)
    if not np.allclose(act(obs, zeros), act(obs, noise), atol=1e-6):
        raise ConfigError("sim2sim", "the policy reads more of the observation than its part \"state\" (what the "
                                     "robot senses): native MuJoCo rebuilds that part alone")
    steps, velocity, fell_at = int(round(seconds / joystick.dt)), [], None
    for k in range(steps):
        obs = joystick.step(data, np.clip(act(obs, zeros), -1.0, 1.0))
        velocity.append(joystick.velocity(data))
        if joystick.fell(data):
            fell_at = (k + 1) * joystick.dt
            break
    mean = settled_mean(velocity, joystick.dt)
    out = {"command": [float(c) for c in command], "seconds": len(velocity) * joystick.dt, "fell": fell_at is not None,
           "fell_at_s": fell_at, "tracked_velocity": mean.tolist(),
           "tracking_error": (np.abs(mean - np.asarray(command))).tolist(), "engine": f"mujoco {mujoco.__version__}"}
    vx, vy, yaw = mean
    log(f"sim2sim (native MuJoCo {mujoco.__version__}, {engine}, command {tuple(out['command'])}): "
        + (f"fell after {fell_at:.2f} s" if fell_at is not None else f"stood {out['seconds']:.0f} s")
        + f"; tracked vx {vx:+.2f} m/s, vy {vy:+.2f} m/s, yaw {yaw:+.2f} rad/s after the first {SETTLE:.0f} s")
    return out
