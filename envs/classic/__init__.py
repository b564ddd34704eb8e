"""Pure-JAX classic control tasks matching Gymnasium 1.4's reference implementations."""

from envs.classic.acrobot import Acrobot
from envs.classic.cartpole import CartPole, CartPoleNoVel, CartPolePrivileged
from envs.classic.mountain_car_continuous import MountainCarContinuous
from envs.classic.pendulum import Pendulum, PendulumNoVel

__all__ = ["CartPole", "CartPoleNoVel", "CartPolePrivileged", "Acrobot", "Pendulum", "PendulumNoVel", "MountainCarContinuous"]
