"""Acrobot-v1, following gymnasium/envs/classic_control/acrobot.py (Gymnasium 1.4) line by line.

Same `_dsdt` ("book" dynamics by default), one classical RK4 step over dt with the torque held
constant, angles wrapped to [-pi, pi] and velocities clipped only after the step. Float32
instead of float64; no torque noise (Gymnasium's `torque_noise_max` is 0).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from envs.base import Env, EnvSpec
from envs.classic import _render

pi = math.pi


def wrap(x, m, M):
    """Gymnasium's `while x > M: x -= M - m` (and the mirror loop) in closed form."""
    diff = M - m
    x = jnp.where(x > M, x - diff * jnp.ceil((x - M) / diff), x)
    return jnp.where(x < m, x + diff * jnp.ceil((m - x) / diff), x)


def bound(x, m, M):
    return jnp.minimum(jnp.maximum(x, m), M)


@dataclasses.dataclass(frozen=True, repr=False)
class Acrobot(Env):
    """Physics: float32 [theta1, theta2, dtheta1, dtheta2]. Action: int32 in {0, 1, 2}."""

    episode_length: int = 500
    dt: float = 0.2
    link_length_1: float = 1.0
    link_length_2: float = 1.0
    link_mass_1: float = 1.0
    link_mass_2: float = 1.0
    link_com_pos_1: float = 0.5
    link_com_pos_2: float = 0.5
    link_moi: float = 1.0
    max_vel_1: float = 4 * pi
    max_vel_2: float = 9 * pi
    avail_torque: tuple[float, ...] = (-1.0, 0.0, 1.0)
    gravity: float = 9.8
    book_or_nips: str = "book"
    reset_low: float = -0.1
    reset_high: float = 0.1

    name = "acrobot"
    param_fields = ("link_length_1", "link_length_2", "link_mass_1", "link_mass_2", "link_com_pos_1", "link_com_pos_2",
                    "link_moi", "gravity")

    def __post_init__(self):
        object.__setattr__(self, "avail_torque", tuple(float(t) for t in self.avail_torque))
        object.__setattr__(
            self,
            "spec",
            EnvSpec(obs_shape=(6,), discrete=True, episode_length=int(self.episode_length), num_actions=len(self.avail_torque)),
        )

    def _obs(self, s):
        return jnp.stack([jnp.cos(s[0]), jnp.sin(s[0]), jnp.cos(s[1]), jnp.sin(s[1]), s[2], s[3]])

    def _reset(self, key, params):
        state = jax.random.uniform(key, (4,), jnp.float32, self.reset_low, self.reset_high)
        return state, self._obs(state)

    def _dsdt(self, s, a, p):
        m1, m2 = p["link_mass_1"], p["link_mass_2"]
        l1 = p["link_length_1"]
        lc1, lc2 = p["link_com_pos_1"], p["link_com_pos_2"]
        I1 = I2 = p["link_moi"]
        g = p["gravity"]
        theta1, theta2, dtheta1, dtheta2 = s[0], s[1], s[2], s[3]
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * jnp.cos(theta2)) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * jnp.cos(theta2)) + I2
        phi2 = m2 * lc2 * g * jnp.cos(theta1 + theta2 - pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * jnp.sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * jnp.sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * jnp.cos(theta1 - pi / 2)
            + phi2
        )
        if self.book_or_nips == "nips":
            ddtheta2 = (a + d2 / d1 * phi1 - phi2) / (m2 * lc2**2 + I2 - d2**2 / d1)
        else:
            ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * jnp.sin(theta2) - phi2) / (
                m2 * lc2**2 + I2 - d2**2 / d1
            )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return jnp.stack([dtheta1, dtheta2, ddtheta1, ddtheta2])

    def _step(self, physics, action, params):
        torque = jnp.asarray(self.avail_torque, jnp.float32)[action]
        y0 = physics
        dt = self.dt
        dt2 = dt / 2.0
        k1 = self._dsdt(y0, torque, params)
        k2 = self._dsdt(y0 + dt2 * k1, torque, params)
        k3 = self._dsdt(y0 + dt2 * k2, torque, params)
        k4 = self._dsdt(y0 + dt * k3, torque, params)
        ns = y0 + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        ns = jnp.stack(
            [
                wrap(ns[0], -pi, pi),
                wrap(ns[1], -pi, pi),
                bound(ns[2], -self.max_vel_1, self.max_vel_1),
                bound(ns[3], -self.max_vel_2, self.max_vel_2),
            ]
        ).astype(jnp.float32)
        terminated = -jnp.cos(ns[0]) - jnp.cos(ns[1] + ns[0]) > 1.0
        reward = jnp.where(terminated, 0.0, -1.0)
        return ns, self._obs(ns), reward, terminated

    def render_frame(self, physics) -> np.ndarray:
        s = np.asarray(physics, np.float64)
        img = _render.canvas()
        h, w = img.shape[:2]
        reach = self.link_length_1 + self.link_length_2
        scale = (h / 2) / (reach + 0.2)
        pivot = (w / 2, h / 2)

        def px(x, y):  # world y points up
            return (pivot[0] + x * scale, pivot[1] - y * scale)

        _render.segment(img, px(-reach - 0.2, 1.0), px(reach + 0.2, 1.0), 1, (0, 0, 0))  # goal height
        p1 = (self.link_length_1 * np.sin(s[0]), -self.link_length_1 * np.cos(s[0]))
        p2 = (p1[0] + self.link_length_2 * np.sin(s[0] + s[1]), p1[1] - self.link_length_2 * np.cos(s[0] + s[1]))
        _render.segment(img, px(0, 0), px(*p1), 0.1 * scale, (0, 204, 204))
        _render.segment(img, px(*p1), px(*p2), 0.1 * scale, (0, 204, 204))
        _render.disc(img, px(0, 0), 0.06 * scale, (204, 204, 0))
        _render.disc(img, px(*p1), 0.06 * scale, (204, 204, 0))
        return img
