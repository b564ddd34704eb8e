"""Playground's joystick robots outside JAX: each task's policy observation ("state") rebuilt in
numpy from native MuJoCo's `MjData`, as the task builds it with its noise off, and its control,
so that an exported policy can drive the task's own model in `mujoco.mj_step` (`train.py play
RUN --sim2sim`, sim/run/policy/sim2sim.py).

A task declares how its observation is built by a `Joystick` here (`SIM2SIM`). What the task
keeps between steps is kept as it keeps it: the previous action (its step builds the
observation before it stores the action just applied, so the observation after step k shows
action k-1) and, for G1, the gait phase (drawn per episode in [1.25, 1.5] Hz by the task; the
midpoint here).
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np


@dataclasses.dataclass
class Joystick:
    """One joystick task's observation and control on native MuJoCo. `task` is the Playground
    env (its `mj_model`, `dt`, `n_substeps` and config)."""

    keyframe: str  # the task's start pose (and its default joint pose, the action's origin)
    imu_site: str  # the site whose frame the gravity vector is read in
    linvel_sensor: str  # the robot's velocity in its own frame
    gyro_sensor: str
    upvector_sensor: str  # the body whose z axis turning below the horizon is a fall
    command_first: bool = False  # G1: the command comes before the joints, not last
    gait_hz: float | None = None  # a gait phase clock in the observation (G1)

    def bind(self, task) -> "Joystick":
        """This declaration on `task`: its model, timing and action scale."""
        self.model = task.mj_model
        self.dt, self.n_substeps = float(task.dt), int(task.n_substeps)
        self.action_scale = float(task._config.action_scale)  # Playground keeps its merged config as `_config`
        self.start = np.array(self.model.keyframe(self.keyframe).qpos)
        self.default_pose = self.start[7:].copy()
        self.imu = self.model.site(self.imu_site).id
        return self

    def reset(self, data: mujoco.MjData, command) -> None:
        """`data` at the task's start pose, at rest, under `command` (VX, VY, YAW)."""
        mujoco.mj_resetData(self.model, data)
        data.qpos[:] = self.start
        data.ctrl[:] = self.default_pose
        mujoco.mj_forward(self.model, data)
        self.command = np.asarray(command, np.float32)
        self.last_action = np.zeros(self.model.nu, np.float32)
        self.phase = np.array([0.0, np.pi])
        self.phase_dt = 2 * np.pi * self.dt * (self.gait_hz or 0.0)

    def observe(self, data: mujoco.MjData) -> np.ndarray:
        """The task's observation "state" of `data` (noise off), float32."""
        linvel = data.sensor(self.linvel_sensor).data
        gyro = data.sensor(self.gyro_sensor).data
        gravity = data.site_xmat[self.imu].reshape(3, 3).T @ np.array([0.0, 0.0, -1.0])
        joints = [data.qpos[7:] - self.default_pose, data.qvel[6:], self.last_action]
        if self.command_first:
            parts = [linvel, gyro, gravity, self.command, *joints]
        else:
            parts = [linvel, gyro, gravity, *joints, self.command]
        if self.gait_hz is not None:
            parts += [np.cos(self.phase), np.sin(self.phase)]
        return np.concatenate(parts).astype(np.float32)

    def step(self, data: mujoco.MjData, action: np.ndarray) -> np.ndarray:
        """One control step of `action` in [-1, 1]: motor targets around the default pose held
        for the task's substeps; returns the observation the task gives after it."""
        data.ctrl[:] = self.default_pose + np.asarray(action, np.float64) * self.action_scale
        for _ in range(self.n_substeps):
            mujoco.mj_step(self.model, data)
        obs = self.observe(data)
        self.last_action = np.asarray(action, np.float32)
        self.phase = np.fmod(self.phase + self.phase_dt + np.pi, 2 * np.pi) - np.pi
        return obs

    def fell(self, data: mujoco.MjData) -> bool:
        """The task's fall: the up-vector's z below zero."""
        return bool(data.sensor(self.upvector_sensor).data[-1] < 0.0)

    def velocity(self, data: mujoco.MjData) -> np.ndarray:
        """(forward, sideways) m/s in the robot's frame and yaw rate rad/s: what the command asks."""
        return np.array([*data.sensor(self.linvel_sensor).data[:2], data.sensor(self.gyro_sensor).data[2]])


# The tasks whose observation is declared here (their flat-terrain joystick tasks).
SIM2SIM = {
    "Go1JoystickFlatTerrain": lambda: Joystick("home", "imu", "local_linvel", "gyro", "upvector"),
    "G1JoystickFlatTerrain": lambda: Joystick("knees_bent", "imu_in_pelvis", "local_linvel_pelvis", "gyro_pelvis",
                                              "upvector_torso", command_first=True, gait_hz=1.375),
}
