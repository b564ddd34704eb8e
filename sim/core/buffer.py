"""Device-resident ring replay buffer as pure functions (no host-side counters).

    state = init(example_transition, capacity)   # a ring of packed rows per dtype (Layout)
    state = add(state, batch)                    # batch leaves [B, ...], B <= capacity
    batch = sample(state, key, batch_size)       # leaves [batch_size, ...]
    fields = gather(state, rows, ("obs",))       # only some fields of given rows
    contents(state)                              # the whole ring as leaves [capacity, ...]

Everything is jit-friendly; `add` costs O(B) and updates in place when the state is donated
(see sim/core/donation.py for how the engine makes sure the alias really lands on the buffer).
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from sim.core.memory import GIB as _GIB, HEADROOM, TooLarge, device_limit


def _width(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


# A TPU tiles an array's last two dims by (8, 128): an array whose rows are not a whole number
# of 128 columns (humanoid's ring: 263) is laid out column-major as a program's argument, and a
# program that writes and gathers its rows copies it to row-major and back at every call (two
# copies of the whole ring: benchmarks/tpu_compile.py). Stored as a block of whole tiles and a
# narrow remainder, neither is copied, and no byte is added anywhere.
TILE = 128


class Layout(NamedTuple):
    """Where each field of a transition lives in the packed rows (static, hashable).

    Fields of one dtype share one row, each field a run of columns, so a transition is one
    row per dtype: `add` writes B rows, `sample` reads B rows. A row of w columns is stored
    as one [capacity, w] array, or where w > 128 is not a multiple of 128, as two: its first
    128 * (w // 128) columns and the rest (`arrays`; see TILE).
    """

    treedef: Any  # of the example transition
    fields: tuple  # per leaf, in flatten order: (group, first column, shape)
    groups: tuple  # per group: (dtype, width)
    arrays: tuple  # per stored array: (group, first column, width)

    def paths(self) -> list[str]:
        """Each field's path in the transition tree, e.g. "['obs']" (flatten order)."""
        dummy = jax.tree.unflatten(self.treedef, [0] * len(self.fields))
        return [jax.tree_util.keystr(p) for p, _ in jax.tree.flatten_with_path(dummy)[0]]

    def names(self) -> list[str]:
        """Each field's name: its path without the leading dot or brackets ("obs")."""
        return [p.lstrip(".").removeprefix("['").removesuffix("']") for p in self.paths()]

    @classmethod
    def of(cls, example_transition) -> "Layout":
        leaves, treedef = jax.tree.flatten(example_transition)
        dtypes, widths, fields = [], [], []
        for leaf in leaves:
            dtype, shape = jnp.dtype(jnp.result_type(leaf)), tuple(jnp.shape(leaf))
            if dtype not in dtypes:
                dtypes.append(dtype)
                widths.append(0)
            g = dtypes.index(dtype)
            fields.append((g, widths[g], shape))
            widths[g] += _width(shape)
        arrays = []
        for g, width in enumerate(widths):
            whole = width // TILE * TILE
            cuts = (0, whole, width) if 0 < whole < width else (0, width)
            arrays += [(g, a, b - a) for a, b in zip(cuts, cuts[1:])]
        return cls(treedef, tuple(fields), tuple(zip(dtypes, widths)), tuple(arrays))

    def pack(self, tree) -> tuple:
        """Tree of [N..., *field shape] leaves -> the stored arrays' [N..., width] parts."""
        leaves = self.treedef.flatten_up_to(tree)
        lead = jnp.shape(leaves[0])[:jnp.ndim(leaves[0]) - len(self.fields[0][2])]
        parts = [[] for _ in self.groups]
        for (g, _, shape), leaf in zip(self.fields, leaves):
            parts[g].append(jnp.reshape(leaf, lead + (_width(shape),)))
        rows = [p[0] if len(p) == 1 else jnp.concatenate(p, axis=-1) for p in parts]
        return tuple(rows[g][..., col:col + width] for g, col, width in self.arrays)

    def unpack(self, arrays):
        """Inverse of pack: the stored arrays (or rows of them) -> the transition tree."""
        parts = [[x for (g, _, _), x in zip(self.arrays, arrays) if g == group] for group in range(len(self.groups))]
        whole = [p[0] if len(p) == 1 else jnp.concatenate(p, axis=-1) for p in parts]
        leaves = []
        for g, col, shape in self.fields:
            x = whole[g]
            leaves.append(jnp.reshape(x[..., col:col + _width(shape)], x.shape[:-1] + shape))
        return jax.tree.unflatten(self.treedef, leaves)


@struct.dataclass
class BufferState:
    data: tuple  # the stored [capacity, width] arrays, one or two per dtype (Layout.arrays)
    insert_index: jax.Array  # int32[]: next row to write (the oldest row once full)
    size: jax.Array  # int32[]: filled rows, saturates at capacity
    layout: Layout = struct.field(pytree_node=False)

    @property
    def capacity(self) -> int:
        return self.data[0].shape[-2]


def _check_capacity(capacity) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
        raise ValueError(f"replay capacity must be an int, got {capacity!r}")
    if capacity < 1:
        raise ValueError(f"replay capacity must be >= 1, got {capacity}")
    return operator.index(capacity)


def init(example_transition, capacity: int) -> BufferState:
    """example_transition: pytree of single-transition arrays (no batch dim)."""
    capacity = _check_capacity(capacity)
    layout = Layout.of(example_transition)
    if not layout.fields:
        raise ValueError("replay example transition has no arrays")
    data = tuple(jnp.zeros((capacity, width), layout.groups[g][0]) for g, _, width in layout.arrays)
    return BufferState(data=data, insert_index=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32),
                       layout=layout)


def contents(state: BufferState):
    """The whole ring as the transition tree, leaves [capacity, ...] (for inspection and tests)."""
    return state.layout.unpack(state.data)


def _check_batch(state: BufferState, batch) -> int:
    """Trace-time check that batch leaves are [B, *row] with the buffer's rows/dtypes; returns B."""
    layout = state.layout
    try:
        b_leaves = layout.treedef.flatten_up_to(batch)
    except (ValueError, TypeError) as e:
        raise ValueError(f"replay batch tree does not match the buffer's {layout.treedef}: {e}") from None
    paths = [p or "<root>" for p in layout.paths()]
    sizes = set()
    for name, (g, _, shape), b in zip(paths, layout.fields, b_leaves):
        dtype = layout.groups[g][0]
        want = "[" + ", ".join(["B", *map(str, shape)]) + f"] {dtype}"
        if jnp.ndim(b) != len(shape) + 1 or tuple(jnp.shape(b)[1:]) != shape or jnp.result_type(b) != dtype:
            raise ValueError(f"replay batch leaf {name}: expected {want}, got {list(jnp.shape(b))} {jnp.result_type(b)}")
        sizes.add(jnp.shape(b)[0])
    if len(sizes) != 1:
        raise ValueError(f"replay batch leaves disagree on the batch size: {sorted(sizes)}")
    (n,) = sizes
    if not 1 <= n <= state.capacity:
        raise ValueError(f"replay batch of {n} rows does not fit a buffer of capacity {state.capacity}")
    return n


def add(state: BufferState, batch) -> BufferState:
    """Writes batch (leaves [B, ...]) at insert_index, overwriting the oldest rows once full."""
    n = _check_batch(state, batch)
    cap = state.capacity
    start = state.insert_index
    # One scatter of B whole rows per dtype to B explicit row indices handles the wrap-around;
    # with unique_indices XLA writes the rows where they lie, so a donated ring is updated in
    # place (temp: the packed batch, the same at any capacity; benchmarks/buffer_scaling.py).
    # Measured on CPU it is 2-3x faster than lax.cond(fits, dynamic_update_slice, scatter),
    # and it needs no branch (a cond's predicate can cost a device->host sync on GPU).
    # dynamic_update_slice alone would clamp the start to cap - B and overwrite live rows.
    rows = (start + jnp.arange(n, dtype=jnp.int32)) % cap
    data = tuple(d.at[rows].set(b, unique_indices=True, indices_are_sorted=False, mode="promise_in_bounds")
                 for d, b in zip(state.data, state.layout.pack(batch)))
    return state.replace(data=data, insert_index=((start + n) % cap).astype(jnp.int32),
                         size=jnp.minimum(state.size + n, cap).astype(jnp.int32))


def sample(state: BufferState, key: jax.Array, batch_size: int):
    """Uniform rows from the filled part [0, size): leaves [batch_size, ...].

    An empty buffer yields row 0 (zeros); gate learning with can_sample. A transition is one
    row per dtype, so a sample reads batch_size rows, not one per field.
    """
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"sample batch_size must be a static int >= 1, got {batch_size!r}")
    idx = jax.random.randint(key, (int(batch_size),), 0, jnp.maximum(state.size, 1), dtype=jnp.int32)
    return state.layout.unpack(tuple(d.at[idx].get(mode="promise_in_bounds") for d in state.data))


def gather(state: BufferState, rows: jax.Array, names) -> dict:
    """Only the named fields of the given rows: {name: [*rows.shape, *field shape]}, by a
    gather of whole rows of each stored array that holds them (fields are named by their
    attribute or key in the example transition, e.g. "obs")."""
    layout = state.layout
    where = dict(zip(layout.names(), layout.fields))
    unknown = [name for name in names if name not in where]
    if unknown:
        raise ValueError(f"the replay rows have no field {unknown[0]!r} (they have {sorted(where)})")
    out = {}
    for g in sorted({where[name][0] for name in names}):
        mine = [(name, where[name][1], where[name][2]) for name in names if where[name][0] == g]
        lo = min(col for _, col, _ in mine)
        hi = max(col + _width(shape) for _, col, shape in mine)
        # Whole rows of the stored arrays that hold the columns, then the columns: a TPU
        # compiles a gather of part of each row into a serial loop of one-row slices (512 rows:
        # a loop of 512), where a gather of whole rows is one gather; on a CPU the two cost
        # the same (the column slice fuses into the gather).
        held = [(col, x.at[rows].get(mode="promise_in_bounds"))  # [*rows.shape, width]
                for (group, col, width), x in zip(layout.arrays, state.data) if group == g and col < hi and lo < col + width]
        first = held[0][0]
        block = held[0][1] if len(held) == 1 else jnp.concatenate([x for _, x in held], axis=-1)
        for name, col, shape in mine:
            out[name] = jnp.reshape(block[..., col - first:col - first + _width(shape)], jnp.shape(rows) + shape)
    return out


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


def check_fits(example_transition, capacity: int, device=None, other_bytes: int = 0) -> int:
    """Raises TooLarge (quantity max_replay_size) before compiling if the ring cannot fit;
    returns the ring's bytes.

    The ring and `other_bytes` (the rest of the state) may take `HEADROOM` of the memory
    limit: the program also needs room for sampled batches, activations and XLA's own
    workspace, so a suggested capacity leaves that room instead of landing on the edge.
    """
    capacity = _check_capacity(capacity)
    row = transition_bytes(example_transition)
    total, what = device_limit(device or jax.devices()[0])
    limit = int(total * HEADROOM)
    need = capacity * row
    if need + other_bytes > limit:
        fits = max(0, (limit - other_bytes) // max(row, 1))
        raise TooLarge(f"replay buffer of {capacity} transitions x {row} bytes = {need / _GIB:.2f} GiB does not fit "
                       f"in {limit / _GIB:.2f} GiB ({HEADROOM:.0%} of {total / _GIB:.2f} GiB of {what}); "
                       f"the largest capacity that fits is {fits}", "max_replay_size", fits)
    return need
