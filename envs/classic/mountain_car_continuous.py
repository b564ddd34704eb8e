"""MountainCarContinuous-v0, following gymnasium/envs/classic_control/continuous_mountain_car.py
(Gymnasium 1.4) line by line.

Note the reference's quirk, kept here: the force is clipped to [-1, 1] but the action penalty
uses the *unclipped* action. Gymnasium already stores this state as float32.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from envs.base import Env, EnvSpec
from envs.classic import _render


@dataclasses.dataclass(frozen=True, repr=False)
class MountainCarContinuous(Env):
    """Physics: float32 [position, velocity]. Action: float32 (1,) force."""

    episode_length: int = 999
    min_action: float = -1.0
    max_action: float = 1.0
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.45
    goal_velocity: float = 0.0
    power: float = 0.0015
    reset_low: float = -0.6
    reset_high: float = -0.4

    name = "mountain_car_continuous"
    param_fields = ("power",)

    def __post_init__(self):
        object.__setattr__(
            self,
            "spec",
            EnvSpec(
                obs_shape=(2,),
                discrete=False,
                episode_length=int(self.episode_length),
                action_shape=(1,),
                action_low=(float(self.min_action),),
                action_high=(float(self.max_action),),
            ),
        )

    def _reset(self, key, params):
        position = jax.random.uniform(key, (), jnp.float32, self.reset_low, self.reset_high)
        state = jnp.stack([position, jnp.zeros((), jnp.float32)])
        return state, state

    def _step(self, physics, action, params):
        action = jnp.asarray(action, jnp.float32)
        position, velocity = physics[0], physics[1]
        force = jnp.minimum(jnp.maximum(action[0], self.min_action), self.max_action)
        velocity = velocity + force * params["power"] - 0.0025 * jnp.cos(3 * position)
        velocity = jnp.clip(velocity, -self.max_speed, self.max_speed)
        position = position + velocity
        position = jnp.clip(position, self.min_position, self.max_position)
        # An inelastic wall: hitting the left bound stops the car.
        velocity = jnp.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        reward = jnp.where(terminated, 100.0, 0.0) - action[0] ** 2 * 0.1
        state = jnp.stack([position, velocity]).astype(jnp.float32)
        return state, state, reward, terminated

    def _height(self, xs):
        return np.sin(3 * xs) * 0.45 + 0.55

    def render_frame(self, physics) -> np.ndarray:
        position = float(np.asarray(physics, np.float64)[0])
        img = _render.canvas()
        h, w = img.shape[:2]
        scale_x = w / (self.max_position - self.min_position)
        scale_y = 0.85 * h  # heights lie in [0.1, 1.0]

        def px(x, y):
            return ((x - self.min_position) * scale_x, h - 0.05 * h - y * scale_y)

        cols = self.min_position + (np.arange(w) + 0.5) / scale_x
        _render.below(img, px(cols, self._height(cols))[1], (180, 180, 180))
        flag_x, flag_y = px(self.goal_position, self._height(self.goal_position))
        _render.segment(img, (flag_x, flag_y), (flag_x, flag_y - 0.1 * h), 1, (0, 0, 0))
        _render.rect(img, flag_x, flag_y - 0.1 * h, flag_x + 0.05 * w, flag_y - 0.07 * h, (204, 204, 0))
        _render.disc(img, px(position, self._height(position)), 0.03 * w, (0, 0, 0))
        return img
