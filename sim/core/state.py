"""The training state every loop carries from one iteration (and epoch) to the next, and the
env-step counter inside it."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from envs.base import EnvState
from envs.wrappers import RunningStats


@struct.dataclass
class TrainState:
    """Everything a run carries from one epoch to the next (and into a checkpoint).

    On n > 1 devices every leaf has a leading [n] device axis (parameters identical).
    """

    agent: Any  # params, optimizer state (+ targets, temperature)
    env: EnvState  # batched over the device's envs
    obs_stats: RunningStats
    key: jax.Array  # uint32[2], identical on every device; per-device streams fold in the index
    iteration: jax.Array  # int32 training iterations done
    env_steps: jax.Array  # int32[2] env steps of the whole run so far, see `count_steps`
    loop: Any = None  # the iteration loop's own state, which it alone defines (sim/core/loops/)


STEPS_BASE = 2**30  # env_steps = (high, low) -> high * STEPS_BASE + low: no int32 overflow


def count_steps(counter: jax.Array, steps: int) -> jax.Array:
    """The on-device env-step counter [high, low] advanced by `steps` (< STEPS_BASE)."""
    low = counter[1] + steps
    return jnp.stack([counter[0] + low // STEPS_BASE, low % STEPS_BASE])


def read_steps(counter) -> int:
    """The counter's value on the host, from a device array (any local shard: every device
    holds the same count) or a host copy."""
    if hasattr(counter, "addressable_shards"):
        counter = counter.addressable_shards[0].data
    high, low = (int(x) for x in jax.device_get(counter).reshape(-1, 2)[0])
    return high * STEPS_BASE + low
