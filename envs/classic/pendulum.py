"""Pendulum-v1, following gymnasium/envs/classic_control/pendulum.py (Gymnasium 1.4) line by line.

The cost uses the clipped torque; there is no termination (only the 200-step time limit).
Float32 instead of float64 physics.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from envs.base import Env, EnvSpec
from envs.classic import _render


def angle_normalize(x):
    return ((x + math.pi) % (2 * math.pi)) - math.pi


@dataclasses.dataclass(frozen=True, repr=False)
class Pendulum(Env):
    """Physics: float32 [theta, theta_dot] (theta = 0 is upright). Action: float32 (1,) torque."""

    episode_length: int = 200
    g: float = 10.0
    m: float = 1.0
    l: float = 1.0
    dt: float = 0.05
    max_speed: float = 8.0
    max_torque: float = 2.0
    x_init: float = math.pi  # reset: theta ~ U(-x_init, x_init)
    y_init: float = 1.0  # reset: theta_dot ~ U(-y_init, y_init)

    name = "pendulum"
    param_fields = ("g", "m", "l")

    def __post_init__(self):
        object.__setattr__(
            self,
            "spec",
            EnvSpec(
                obs_shape=(3,),
                discrete=False,
                episode_length=int(self.episode_length),
                action_shape=(1,),
                action_low=(-float(self.max_torque),),
                action_high=(float(self.max_torque),),
            ),
        )

    @staticmethod
    def _obs(state):
        return jnp.stack([jnp.cos(state[0]), jnp.sin(state[0]), state[1]])

    def _reset(self, key, params):
        high = jnp.array([self.x_init, self.y_init], jnp.float32)
        state = jax.random.uniform(key, (2,), jnp.float32, -high, high)
        return state, self._obs(state)

    def _step(self, physics, action, params):
        th, thdot = physics[0], physics[1]
        g, m, l, dt = params["g"], params["m"], params["l"], self.dt
        u = jnp.clip(jnp.asarray(action, jnp.float32), -self.max_torque, self.max_torque)[0]
        costs = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * (u**2)
        newthdot = thdot + (3 * g / (2 * l) * jnp.sin(th) + 3.0 / (m * l**2) * u) * dt
        newthdot = jnp.clip(newthdot, -self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        state = jnp.stack([newth, newthdot]).astype(jnp.float32)
        return state, self._obs(state), -costs, jnp.zeros((), jnp.bool_)

    def render_frame(self, physics) -> np.ndarray:
        th = float(np.asarray(physics, np.float64)[0])
        img = _render.canvas()
        h, w = img.shape[:2]
        r = 0.4 * h
        centre = (w / 2, h / 2)
        tip = (centre[0] - r * np.sin(th), centre[1] - r * np.cos(th))  # theta grows counter-clockwise
        _render.segment(img, centre, tip, 0.1 * r, (204, 77, 77))
        _render.disc(img, centre, 0.06 * r, (0, 0, 0))
        return img


@dataclasses.dataclass(frozen=True, repr=False)
class PendulumNoVel(Pendulum):
    """Pendulum observed without its angular velocity: [cos theta, sin theta]. The physics is
    Pendulum's; a policy must infer theta_dot from what it saw before (a memory task)."""

    name = "pendulum_no_vel"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "spec", dataclasses.replace(self.spec, obs_shape=(2,)))

    @staticmethod
    def _obs(state):
        return jnp.stack([jnp.cos(state[0]), jnp.sin(state[0])])
