"""Device-resident ring replay buffer as pure functions (no host-side counters).

    state = init(example_transition, capacity)   # data leaves [capacity, ...]
    state = add(state, batch)                    # batch leaves [B, ...], B <= capacity
    batch = sample(state, key, batch_size)       # leaves [batch_size, ...]

Everything is jit-friendly; `add` costs O(B) and updates in place when the state is donated
(see sim/donation.py for how the engine makes sure the alias really lands on the buffer).
"""

from __future__ import annotations

import operator
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

_GIB = 1024**3


@struct.dataclass
class BufferState:
    data: Any  # pytree; each leaf [capacity, ...]
    insert_index: jax.Array  # int32[]: next row to write (the oldest row once full)
    size: jax.Array  # int32[]: filled rows, saturates at capacity

    @property
    def capacity(self) -> int:
        return jax.tree.leaves(self.data)[0].shape[0]


def _check_capacity(capacity) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
        raise ValueError(f"replay capacity must be an int, got {capacity!r}")
    if capacity < 1:
        raise ValueError(f"replay capacity must be >= 1, got {capacity}")
    return operator.index(capacity)


def init(example_transition, capacity: int) -> BufferState:
    """example_transition: pytree of single-transition arrays (no batch dim)."""
    capacity = _check_capacity(capacity)
    data = jax.tree.map(lambda x: jnp.zeros((capacity,) + jnp.shape(x), jnp.result_type(x)), example_transition)
    return BufferState(data=data, insert_index=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32))


def _check_batch(data, batch) -> int:
    """Trace-time check that batch leaves are [B, *row] with the buffer's rows/dtypes; returns B."""
    d_leaves, d_def = jax.tree.flatten_with_path(data)
    try:
        b_leaves = d_def.flatten_up_to(batch)
    except (ValueError, TypeError) as e:
        raise ValueError(f"replay batch tree does not match the buffer's {d_def}: {e}") from None
    sizes = set()
    for (path, d), b in zip(d_leaves, b_leaves):
        name = jax.tree_util.keystr(path) or "<root>"
        want = "[" + ", ".join(["B", *map(str, d.shape[1:])]) + f"] {d.dtype}"
        if jnp.ndim(b) != d.ndim or jnp.shape(b)[1:] != d.shape[1:] or jnp.result_type(b) != d.dtype:
            raise ValueError(f"replay batch leaf {name}: expected {want}, got {list(jnp.shape(b))} {jnp.result_type(b)}")
        sizes.add(jnp.shape(b)[0])
    if len(sizes) != 1:
        raise ValueError(f"replay batch leaves disagree on the batch size: {sorted(sizes)}")
    (n,) = sizes
    if not 1 <= n <= d_leaves[0][1].shape[0]:
        raise ValueError(f"replay batch of {n} rows does not fit a buffer of capacity {d_leaves[0][1].shape[0]}")
    return n


def add(state: BufferState, batch) -> BufferState:
    """Writes batch (leaves [B, ...]) at insert_index, overwriting the oldest rows once full."""
    n = _check_batch(state.data, batch)
    cap = state.capacity
    start = state.insert_index
    # One scatter to B explicit row indices handles the wrap-around; with unique_indices XLA
    # writes the B rows where they lie, so a donated ring is updated in place (temp ~1 KiB at
    # any capacity, benchmarks/buffer_scaling.py). Measured on CPU it is 2-3x faster than
    # lax.cond(fits, dynamic_update_slice, scatter), and it needs no branch (a cond's predicate
    # can cost a device->host sync on GPU). dynamic_update_slice alone would clamp the start
    # to cap - B and overwrite live rows.
    rows = (start + jnp.arange(n, dtype=jnp.int32)) % cap
    data = jax.tree.map(lambda d, b: d.at[rows].set(b, unique_indices=True,
                                                    indices_are_sorted=False, mode="promise_in_bounds"),
                        state.data, batch)
    return BufferState(data=data, insert_index=((start + n) % cap).astype(jnp.int32),
                       size=jnp.minimum(state.size + n, cap).astype(jnp.int32))


def sample(state: BufferState, key: jax.Array, batch_size: int):
    """Uniform rows from the filled part [0, size): leaves [batch_size, ...].

    An empty buffer yields row 0 (zeros); gate learning with can_sample.
    """
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"sample batch_size must be a static int >= 1, got {batch_size!r}")
    idx = jax.random.randint(key, (int(batch_size),), 0, jnp.maximum(state.size, 1), dtype=jnp.int32)
    return jax.tree.map(lambda d: d.at[idx].get(mode="promise_in_bounds"), state.data)


def can_sample(state: BufferState, min_size) -> jax.Array:
    """bool[]: at least min_size transitions are stored."""
    return state.size >= min_size


def transition_bytes(example_transition) -> int:
    return int(sum(np.prod(jnp.shape(x), dtype=np.int64) * jnp.result_type(x).itemsize
                   for x in jax.tree.leaves(example_transition)))


def nbytes(state_or_example, capacity: int | None = None) -> int:
    """Bytes of a BufferState's data, or of `capacity` rows shaped like an example transition."""
    if isinstance(state_or_example, BufferState):
        return int(sum(x.nbytes for x in jax.tree.leaves(state_or_example.data)))
    return _check_capacity(capacity) * transition_bytes(state_or_example)


def _memory_limit(device) -> tuple[int, str]:
    stats = None
    try:
        stats = device.memory_stats()
    except Exception:  # CPU backends may not implement it
        pass
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), "device memory"
    # CPU: the buffer lives in host RAM, so what the host can still hand out is the bound.
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "device memory (host RAM available)"
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "device memory (host RAM available)"


HEADROOM = 0.9  # share of device memory the ring + `other_bytes` may take; the rest is left to XLA


def check_fits(example_transition, capacity: int, device=None, other_bytes: int = 0) -> int:
    """Raises ValueError before compiling if the ring cannot fit; returns the ring's bytes.

    The ring and `other_bytes` (the rest of the state) may take `HEADROOM` of the memory
    limit: the program also needs room for sampled batches, activations and XLA's own
    workspace, so a suggested capacity leaves that room instead of landing on the edge.
    """
    capacity = _check_capacity(capacity)
    row = transition_bytes(example_transition)
    total, what = _memory_limit(device or jax.devices()[0])
    limit = int(total * HEADROOM)
    need = capacity * row
    if need + other_bytes > limit:
        fits = max(0, (limit - other_bytes) // max(row, 1))
        raise ValueError(f"replay buffer of {capacity} transitions x {row} bytes = {need / _GIB:.2f} GiB does not fit "
                         f"in {limit / _GIB:.2f} GiB ({HEADROOM:.0%} of {total / _GIB:.2f} GiB of {what}); "
                         f"the largest capacity that fits is {fits} "
                         f"(--max-replay-size {fits})")
    return need
