"""The compiled epoch's metric records, typed: an agent's losses (a `Weighted` one where an
update computes it only at some gradient steps), an iteration's `Iteration` record (loss sums
with their counts, the episodes that ended, the non-finite flags) and what the epoch hands
the host: a dict of named means with the non-finite flags under `NONFINITE`, by quantity."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from sim.core.contract import Weighted

NONFINITE = "nonfinite"  # the epoch output's key of {quantity: first iteration it was NaN or Inf, -1: never}


@struct.dataclass
class LossSum:
    """A loss summed over the gradient steps of an iteration that computed it, and their count."""

    total: jax.Array
    count: jax.Array


@struct.dataclass
class Iteration:
    """What one training iteration records."""

    losses: dict  # name -> LossSum
    return_sum: jax.Array  # the returns of the episodes that ended in it
    episodes: jax.Array  # how many ended
    nonfinite: dict = struct.field(default_factory=dict)  # quantity -> bool (the engine fills it)


def loss_sums(losses: dict) -> dict:
    """An update's losses [steps] (each a value or a `Weighted`) -> {name: LossSum} over the
    steps that computed them."""
    out = {}
    for name, loss in losses.items():
        value, weight = (loss.value, loss.weight) if isinstance(loss, Weighted) else (loss, jnp.ones_like(loss))
        out[name] = LossSum(total=jnp.sum(jnp.where(weight > 0, value, 0.0)), count=jnp.sum(weight))
    return out


def iteration(losses: dict, data) -> Iteration:
    """The record of an iteration from its update's losses [steps] and its env `Step`s (any
    leading dims: the episodes that ended in them)."""
    return Iteration(losses=loss_sums(losses), return_sum=jnp.sum(data.episode_done * data.last_return),
                     episodes=jnp.sum(data.episode_done))
