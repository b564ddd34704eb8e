"""CartPole-v1, following gymnasium/envs/classic_control/cartpole.py (Gymnasium 1.4) line by line.

Differences by design: float32 instead of float64 physics, and no `steps_beyond_terminated`
bookkeeping (stepping past termination is undefined in Gymnasium; here the episode is reset).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from envs.base import Env, EnvSpec
from envs.classic import _render


@dataclasses.dataclass(frozen=True, repr=False)
class CartPole(Env):
    """Physics: float32 [x, x_dot, theta, theta_dot]. Action: int32 in {0 (left), 1 (right)}."""

    episode_length: int = 500
    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5  # half the pole's length
    force_mag: float = 10.0
    tau: float = 0.02
    kinematics_integrator: str = "euler"
    sutton_barto_reward: bool = False
    theta_threshold_radians: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4
    reset_low: float = -0.05
    reset_high: float = 0.05

    name = "cartpole"
    param_fields = ("gravity", "masscart", "masspole", "length", "force_mag")

    def __post_init__(self):
        object.__setattr__(
            self, "spec", EnvSpec(obs_shape=(4,), discrete=True, episode_length=int(self.episode_length), num_actions=2)
        )

    @staticmethod
    def _observe(state):
        """The observation of physics state [x, x_dot, theta, theta_dot] (variants see less)."""
        return state

    def _reset(self, key, params):
        state = jax.random.uniform(key, (4,), jnp.float32, self.reset_low, self.reset_high)
        return state, self._observe(state)

    def _step(self, physics, action, params):
        gravity, masspole, length, force_mag = (params[k] for k in ("gravity", "masspole", "length", "force_mag"))
        total_mass = masspole + params["masscart"]
        polemass_length = masspole * length
        x, x_dot, theta, theta_dot = physics
        force = jnp.where(action == 1, force_mag, -force_mag)
        costheta = jnp.cos(theta)
        sintheta = jnp.sin(theta)
        temp = (force + polemass_length * jnp.square(theta_dot) * sintheta) / total_mass
        thetaacc = (gravity * sintheta - costheta * temp) / (
            length * (4.0 / 3.0 - masspole * jnp.square(costheta) / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        if self.kinematics_integrator == "euler":
            x = x + self.tau * x_dot
            x_dot = x_dot + self.tau * xacc
            theta = theta + self.tau * theta_dot
            theta_dot = theta_dot + self.tau * thetaacc
        else:  # semi-implicit euler
            x_dot = x_dot + self.tau * xacc
            x = x + self.tau * x_dot
            theta_dot = theta_dot + self.tau * thetaacc
            theta = theta + self.tau * theta_dot
        state = jnp.stack([x, x_dot, theta, theta_dot]).astype(jnp.float32)
        terminated = (
            (x < -self.x_threshold)
            | (x > self.x_threshold)
            | (theta < -self.theta_threshold_radians)
            | (theta > self.theta_threshold_radians)
        )
        if self.sutton_barto_reward:
            reward = jnp.where(terminated, -1.0, 0.0)
        else:
            reward = jnp.ones((), jnp.float32)
        return state, self._observe(state), reward, terminated

    def render_frame(self, physics) -> np.ndarray:
        x, _, theta, _ = np.asarray(physics, np.float64)
        img = _render.canvas()
        h, w = img.shape[:2]
        scale = w / (2 * self.x_threshold)
        track_y = 0.75 * h
        cart_x = w / 2 + x * scale
        cart_w, cart_h = 0.5 * scale * 0.8, 0.3 * scale * 0.8
        _render.segment(img, (0, track_y), (w, track_y), 1, (0, 0, 0))
        _render.rect(img, cart_x - cart_w / 2, track_y - cart_h / 2, cart_x + cart_w / 2, track_y + cart_h / 2, (0, 0, 0))
        axle = (cart_x, track_y - cart_h / 4)
        pole = 2 * self.length * scale
        tip = (axle[0] + pole * np.sin(theta), axle[1] - pole * np.cos(theta))
        _render.segment(img, axle, tip, max(2.0, 0.1 * scale), (202, 152, 101))
        _render.disc(img, axle, max(1.5, 0.05 * scale), (129, 132, 203))
        return img


@dataclasses.dataclass(frozen=True, repr=False)
class CartPoleNoVel(CartPole):
    """CartPole observed without its velocities: [x, theta]. The physics is CartPole's; a
    policy must infer x_dot and theta_dot from what it saw before (a memory task)."""

    name = "cartpole_no_vel"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "spec", dataclasses.replace(self.spec, obs_shape=(2,)))

    @staticmethod
    def _observe(state):
        return state[::2]


@dataclasses.dataclass(frozen=True, repr=False)
class CartPolePrivileged(CartPole):
    """CartPole with a structured observation: {"state": [x, theta] (what a deployed policy
    would see), "privileged_state": [x, x_dot, theta, theta_dot] (the full simulator state, for
    a critic trained in simulation only)}. Laid out flat as privileged_state then state."""

    name = "cartpole_privileged"

    def __post_init__(self):
        super().__post_init__()
        parts = (("privileged_state", 4), ("state", 2))
        object.__setattr__(self, "spec", dataclasses.replace(self.spec, obs_shape=(6,), obs_parts=parts))

    @staticmethod
    def _observe(state):
        return {"state": state[::2], "privileged_state": state}
