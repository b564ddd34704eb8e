"""The replay ring of env steps, each observation stored once.

Every `add` writes one step of each of `num_envs` envs (rows in env order) into a packed ring
(`sim/core/buffer.py`). A row holds what the step saw and did and what came of it: `obs`, the
agent's `action`, `reward`, `terminated`, and `final`. Its next observation is not stored: it
is the `obs` of the same env's next row (`num_envs` rows later in the order of writing), except
where the step ended its episode (that row then holds the next episode's first observation):
- after a termination no next observation is needed (a target does not bootstrap from it);
- after a truncation the true final observation is kept in a side table, `finals`, and the
  row's `final` says where (-1: the step did not truncate).

Each env's truncations take its own slots of the side table in turn. An env truncates at most
once per `interval` steps (its time limit, counted in ring steps), so `slots` = the ring's
steps per env // interval + 2 slots per env outlive every row that points at one. Against
rows of (obs, action, reward, terminated, next_obs) this halves a ring of large
observations (humanoid: 4096 envs x 10,240 steps x 244 floats), for a side table of
`slots` observations per env (12 for a 10,240-step ring and 1,000-step episodes).

A sample is `n` consecutive steps of one env (n = 1: one step) and the observation its target
bootstraps from: the step's obs and action, the n steps' rewards and episode ends, and one
next observation, that of the first step that ended its episode, else of the last
(`sim.core.contract.bootstrap_index`). It gathers only those columns: the scalars of n steps,
obs and action of one, and one next observation. The newest step of every env is not
sampled until its successor is written (the next iteration).

    ring = init(example_row, capacity, num_envs, interval)
    ring = add(ring, step)                   # sim.core.contract.Step, leaves [num_envs, ...]
    batch = sample(ring, key, batch_size, n) # sim.core.contract.Transition (see `sample`)
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from sim.core.contract import Step, Transition, bootstrap_index
from sim.core import buffer


class Row(NamedTuple):
    """One stored step (the fields sampled together lie next to each other in the packed row)."""

    obs: jax.Array
    action: Any  # as the agent stores it (int32 for discrete actions)
    reward: jax.Array
    terminated: jax.Array
    final: jax.Array  # int32: the row of `finals` holding the step's final observation; -1: not truncated


@struct.dataclass
class StepRing:
    rows: buffer.BufferState  # of Row
    finals: jax.Array  # [slots * num_envs, *obs_shape] float32: final observations of truncated steps
    truncations: jax.Array  # int32 [num_envs]: each env's truncations so far (its next slot, mod slots)
    num_envs: int = struct.field(pytree_node=False)

    @property
    def slots(self) -> int:
        return self.finals.shape[0] // self.num_envs


def example_row(obs, action) -> Row:
    """A row of zeros for one env's `obs` and the agent's stored `action`."""
    scalar = jnp.zeros((), jnp.float32)
    return Row(obs=obs, action=action, reward=scalar, terminated=scalar, final=jnp.zeros((), jnp.int32))


def slots(capacity: int, num_envs: int, interval: int) -> int:
    """Side-table slots per env: more truncations than any row in the ring can point back to."""
    return math.ceil(capacity / num_envs) // max(1, int(interval)) + 2


def init(example: Row, capacity: int, num_envs: int, interval: int) -> StepRing:
    """An empty ring of `capacity` rows for `num_envs` envs that truncate at most once per
    `interval` steps."""
    if capacity <= num_envs:
        raise ValueError(f"a ring of {capacity} rows cannot hold two steps of {num_envs} envs")
    table = jnp.zeros((slots(capacity, num_envs, interval) * num_envs,) + jnp.shape(example.obs), jnp.float32)
    return StepRing(rows=buffer.init(example, capacity), finals=table,
                    truncations=jnp.zeros((num_envs,), jnp.int32), num_envs=int(num_envs))


def nbytes(example: Row, capacity: int, num_envs: int, interval: int) -> int:
    """Bytes of a ring's arrays, from shapes alone."""
    shapes = jax.eval_shape(lambda: init(example, capacity, num_envs, interval))
    return int(sum(np.prod(x.shape, dtype=np.int64) * x.dtype.itemsize for x in jax.tree.leaves(shapes)))


def check_fits(example: Row, capacity: int, num_envs: int, interval: int, device=None) -> int:
    """`buffer.check_fits` for the rows, with the side table counted beside them (the
    capacity it suggests keeps this table, which only shrinks with it); returns the bytes."""
    table = nbytes(example, capacity, num_envs, interval) - buffer.nbytes(example, capacity)
    return buffer.check_fits(example, capacity, device, other_bytes=table) + table


def add(ring: StepRing, step: Step) -> StepRing:
    """Writes one step of every env (`Step` leaves [num_envs, ...]): the rows, and the final
    observations of the envs whose episode it truncated."""
    n = ring.num_envs
    truncated = step.truncated > 0
    final = jnp.where(truncated, (ring.truncations % ring.slots) * n + jnp.arange(n, dtype=jnp.int32), -1)
    # Envs that did not truncate write nowhere: their index lies past the table and is dropped.
    finals = ring.finals.at[jnp.where(truncated, final, ring.finals.shape[0])].set(step.next_obs, mode="drop")
    row = Row(obs=step.obs, action=step.acted, reward=step.reward, terminated=step.terminated,
              final=final.astype(jnp.int32))
    return ring.replace(rows=buffer.add(ring.rows, row), finals=finals,
                        truncations=ring.truncations + truncated.astype(jnp.int32))


def sample(ring: StepRing, key: jax.Array, batch_size: int, n: int = 1) -> Transition:
    """`batch_size` uniform samples of `n` consecutive steps of one env, as a `Transition`:
    obs and action of the first step ([M, ...]), reward, terminated and truncated of the n
    steps ([M] for n = 1, else [M, n]) and next_obs [M, ...], the observation its target
    bootstraps from (the next observation of the first step that ended its episode, else of
    the last; after a termination any finite observation, as the target does not read it).

    A sample starts at any stored row whose n steps and their successor are stored: never
    past the newest row, never into rows the ring has overwritten.
    """
    rows, envs = ring.rows, ring.num_envs
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"steps per sample must be a static int >= 1, got {n!r}")
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"sample batch_size must be a static int >= 1, got {batch_size!r}")
    cap = rows.capacity
    oldest = (rows.insert_index - rows.size) % cap
    start = jax.random.randint(key, (int(batch_size),), 0, jnp.maximum(rows.size - n * envs, 1), dtype=jnp.int32)
    at = (oldest + start[:, None] + envs * jnp.arange(n + 1, dtype=jnp.int32)) % cap  # [M, n + 1]: n steps, then one more
    ends = buffer.gather(rows, at[:, :n], ("reward", "terminated", "final"))  # [M, n] each
    truncated = (ends["final"] >= 0).astype(jnp.float32)
    index = jax.vmap(bootstrap_index)(ends["terminated"], truncated)  # [M]
    first = buffer.gather(rows, at[:, 0], ("obs", "action"))
    after = jnp.take_along_axis(at, index[:, None] + 1, axis=1)[:, 0]
    following = buffer.gather(rows, after, ("obs",))["obs"]
    final = jnp.take_along_axis(ends["final"], index[:, None], axis=1)[:, 0]
    kept = ring.finals.at[jnp.maximum(final, 0)].get(mode="promise_in_bounds")
    trunc_at = (final >= 0).reshape((-1,) + (1,) * (following.ndim - 1))
    next_obs = jnp.where(trunc_at, kept, following)
    pick = (lambda x: x[:, 0]) if n == 1 else (lambda x: x)
    return Transition(obs=first["obs"], action=first["action"], reward=pick(ends["reward"]),
                      terminated=pick(ends["terminated"]), truncated=pick(truncated), next_obs=next_obs)


def contents(ring: StepRing) -> Row:
    """The whole ring's rows (leaves [capacity, ...]), for inspection and tests."""
    return buffer.contents(ring.rows)
