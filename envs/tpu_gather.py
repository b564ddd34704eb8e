"""Each of a batch picking one entry of a short axis, on a TPU as a chain of selects.

MJX's constraint solver ends each line-search iteration by taking, per env, the best of three
candidate points (`x[argmin(cost)]` over a stacked [3] axis, for each of the point's four
fields). Vmapped over the envs, each is a gather of one entry per row of a [envs, 3] array,
which a TPU runs as a gather fusion of about 43 us at 4,096 envs whatever its size: a profile
of Brax's humanoid on a TPU v5e (benchmarks/results/tpu_v5e/profile_humanoid_xla_linalg.txt)
found four of them in every line-search iteration taking 5.6% of MJX's step, about a third of
what is left once `envs/tpu_linalg.py` removed the Cholesky custom call.

Here, on a TPU, a gather of that shape (batch dimensions leading, one index per batch element
into one axis of at most `MAX_CHOICES` entries, the rest of the operand taken whole, as a
vmapped `x[i]` is) lowers to
`MAX_CHOICES` - 1 elementwise selects: the same values, bit for bit (out-of-range indices
clamped, as the gather's CLIP mode does). Every other gather keeps XLA's lowering. Importing
`envs` registers it (`apply`); FUSEDRL_TPU_GATHER=off leaves XLA's lowering in place.
"""

from __future__ import annotations

import contextlib
import os

import jax.numpy as jnp
from jax import lax

MAX_CHOICES = 16  # entries of the indexed axis: one select each
VARIABLE = "FUSEDRL_TPU_GATHER"
_applied = False


def picked_axis(operand_shape, indices_shape, out_shape, dimension_numbers, slice_sizes, mode):
    """(the indexed axis, its place in the index vector) of a gather that picks, for each batch
    element, one entry along a short axis and keeps the rest whole (output: the operand's shape
    with that axis 1, or without it where the gather collapses it; other indexed axes are
    taken whole, their indices clamped to 0); None for any other gather."""
    from jax._src.lax.slicing import GatherScatterMode  # a private API: the rule is registered only where it exists

    dn = dimension_numbers
    rank, nb = len(operand_shape), len(dn.operand_batching_dims)
    if mode not in (GatherScatterMode.CLIP, GatherScatterMode.PROMISE_IN_BOUNDS) or nb == 0:
        return None
    if tuple(dn.operand_batching_dims) != tuple(range(nb)) or tuple(dn.start_indices_batching_dims) != tuple(range(nb)):
        return None
    starts = [int(d) for d in dn.start_index_map]
    if tuple(indices_shape) != tuple(operand_shape[:nb]) + (len(starts),) or min(starts, default=0) < nb:
        return None
    if tuple(slice_sizes[:nb]) != (1,) * nb:
        return None
    picked = [d for d in starts if slice_sizes[d] == 1 and operand_shape[d] > 1]
    whole = all(slice_sizes[d] == operand_shape[d] for d in range(nb, rank) if d not in picked)
    if len(picked) != 1 or not whole or operand_shape[picked[0]] > MAX_CHOICES:
        return None
    axis = picked[0]
    collapsed = tuple(dn.collapsed_slice_dims)
    kept = tuple(1 if d == axis else operand_shape[d] for d in range(rank))
    out = tuple(n for d, n in enumerate(kept) if not (collapsed and d == axis))
    if collapsed not in ((), (axis,)) or tuple(out_shape) != out or tuple(dn.offset_dims) != tuple(range(nb, len(out))):
        return None
    return axis, starts.index(axis)


def pick(operand, indices, axis: int, place: int = 0):
    """operand [B..., K on `axis`, ...] at indices [B..., n] (the `place`-th of each: clamped
    to [0, K)), the operand's shape with `axis` of size 1: a chain of selects, one per entry
    after the first."""
    k = operand.shape[axis]
    nb = indices.ndim - 1
    index = jnp.clip(indices[..., place], 0, k - 1)
    index = index.reshape(index.shape + (1,) * (operand.ndim - nb))
    out = lax.slice_in_dim(operand, 0, 1, axis=axis)
    for j in range(1, k):
        out = jnp.where(index == j, lax.slice_in_dim(operand, j, j + 1, axis=axis), out)
    return out


def apply() -> bool:
    """Registers the rule for the TPU platform (False where FUSEDRL_TPU_GATHER=off or JAX moved
    its private lowering API: XLA's lowering stays)."""
    global _applied
    if os.environ.get(VARIABLE) == "off":
        return False
    try:
        from jax._src.interpreters import mlir  # a private API: imported where its absence is caught
        from jax._src.lax import slicing  # the same private API
        generic = slicing._gather_lower
        slicing.GatherScatterMode  # noqa: B018  picked_axis reads it
    except (ImportError, AttributeError):
        return False

    def gather_rule(ctx, operand, indices, *, dimension_numbers, slice_sizes, unique_indices, indices_are_sorted,
                    mode, fill_value):
        (x, i), (y,) = ctx.avals_in, ctx.avals_out
        plain = jnp.issubdtype(x.dtype, jnp.number) or jnp.issubdtype(x.dtype, jnp.bool_)
        found = picked_axis(x.shape, i.shape, y.shape, dimension_numbers, slice_sizes, mode) if plain else None
        if found is None:
            return generic(ctx, operand, indices, dimension_numbers=dimension_numbers, slice_sizes=slice_sizes,
                           unique_indices=unique_indices, indices_are_sorted=indices_are_sorted, mode=mode,
                           fill_value=fill_value)
        return mlir.lower_fun(lambda o, idx: pick(o, idx, *found).reshape(y.shape), multiple_results=False)(
            ctx, operand, indices)

    mlir.register_lowering(slicing.gather_p, gather_rule, platform="tpu")
    _applied = True
    return True


@contextlib.contextmanager
def xla_lowering():
    """XLA's own gather on a TPU for the programs traced in the body (a peer's trainer run as
    its users run it, beside ours in one benchmark process); this module's after it."""
    if not _applied:
        yield
        return
    from jax._src.interpreters import mlir  # a private API, here since apply() found it
    from jax._src.lax import slicing  # the same private API
    mlir.register_lowering(slicing.gather_p, slicing._gather_lower, platform="tpu")
    try:
        yield
    finally:
        apply()
