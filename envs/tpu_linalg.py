"""Small Cholesky factorizations and triangular solves on a TPU as plain vector operations.

MJX's Newton constraint solver factorizes an nv x nv matrix (`jax.scipy.linalg.cho_factor`)
and solves with it (`cho_solve`: two triangular solves) in every solver iteration of every
physics substep. Vmapped over thousands of envs, these are batches of small matrices, which
a TPU runs through its linear-algebra custom calls: a profile of MJX's step on a TPU v5e
(benchmarks/physics_profile.py, read with benchmarks/read_profile.py) found the Cholesky
custom call alone taking 80% of Brax's humanoid step (nv 27, 4,096 envs) and 73% of Go1's
(nv 18, 8,192 envs), the triangular solves another 2%.

Here, on a TPU, both lower instead to a loop over the matrix's columns (rows, for the solves)
unrolled at trace time, each step elementwise arithmetic and a sum over the batch of matrices
laid out with the batch in the last axis, the one a TPU vectorizes over (its vector lanes):
full float32 products and sums, no matrix unit, no custom call. Matrices of more than
`MAX_UNROLLED` rows keep XLA's lowering. It must be registered before the programs are traced:
importing `envs` does it (`apply`). FUSEDRL_TPU_LINALG=off leaves XLA's lowering in place.
"""

from __future__ import annotations

import contextlib
import os

import jax.numpy as jnp
from jax import lax

MAX_UNROLLED = 64  # rows: the unrolled programs grow with n; MJX's robots stay well below
VARIABLE = "FUSEDRL_TPU_LINALG"


def _batch_last(x, trailing: int):
    """x [..., *trailing dims] -> ([*trailing dims, B], the leading shape): the batch in the lanes."""
    lead = x.shape[: x.ndim - trailing]
    flat = x.reshape((-1,) + x.shape[x.ndim - trailing:])
    return jnp.moveaxis(flat, 0, -1), lead


def _batch_first(x, lead):
    """The inverse of `_batch_last`."""
    x = jnp.moveaxis(x, -1, 0)
    return x.reshape(lead + x.shape[1:])


def cholesky(a):
    """Lower Cholesky factor of a batch of symmetric positive-definite matrices [..., n, n],
    column by column (NaN where a matrix is not positive definite, as XLA's)."""
    n = a.shape[-1]
    x, lead = _batch_last(a, 2)  # [n, n, B]
    factor = jnp.zeros_like(x)
    for j in range(n):
        column = x[j:, j]  # [n - j, B]
        if j:
            column = column - jnp.sum(factor[j:, :j] * factor[j, :j][None], axis=1)
        column = column / jnp.sqrt(column[:1])
        factor = lax.dynamic_update_slice(factor, column[:, None], (j, j, 0))
    return _batch_first(factor, lead)


def triangular_solve(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    """`lax.linalg.triangular_solve` for real matrices: op(a) x = b (left_side) or x op(a) = b,
    a [..., n, n], b [..., n, k] (left) or [..., k, n]."""
    del conjugate_a  # real matrices only (complex ones keep XLA's lowering)
    if not left_side:  # x a = b  <=>  a^T x^T = b^T
        x = triangular_solve(a, jnp.swapaxes(b, -1, -2), left_side=True, lower=lower, transpose_a=not transpose_a,
                             conjugate_a=False, unit_diagonal=unit_diagonal)
        return jnp.swapaxes(x, -1, -2)
    m, lead = _batch_last(jnp.swapaxes(a, -1, -2) if transpose_a else a, 2)  # [n, n, B]
    rhs, _ = _batch_last(b, 2)  # [n, k, B]
    n = m.shape[0]
    forward = lower != transpose_a  # substitution from the first row down, or the last up
    x = jnp.zeros_like(rhs)
    for i in range(n) if forward else range(n - 1, -1, -1):
        row = rhs[i]  # [k, B]
        known = slice(0, i) if forward else slice(i + 1, n)
        if (forward and i) or (not forward and i < n - 1):
            row = row - jnp.sum(m[i, known][:, None] * x[known], axis=0)
        if not unit_diagonal:
            row = row / m[i, i][None]
        x = lax.dynamic_update_slice(x, row[None], (i, 0, 0))
    return _batch_first(x, lead)


def _private_api():
    """(JAX's lowering registry, its linear-algebra primitives' module) or None where JAX moved them."""
    try:
        from jax._src.interpreters import mlir  # a private API: imported where its absence is caught
        from jax._src.lax import linalg  # the same private API
        linalg._cholesky_lowering, linalg._triangular_solve_lowering  # noqa: B018  the generic rules exist
    except (ImportError, AttributeError):
        return None
    return mlir, linalg


_applied = False


def register_small(platform: str, cholesky_fn, solve_fn, max_rows: int = MAX_UNROLLED) -> bool:
    """Registers `cholesky_fn` and `solve_fn` (this module's signatures) as `platform`'s
    lowerings of real matrices of up to `max_rows` rows; larger or complex ones keep XLA's.
    False where JAX moved its private lowering API (nothing changes)."""
    api = _private_api()
    if api is None:
        return False
    mlir, linalg = api
    generic_cholesky, generic_solve = linalg._cholesky_lowering, linalg._triangular_solve_lowering

    def small_real(aval) -> bool:
        return aval.shape[-1] <= max_rows and not jnp.issubdtype(aval.dtype, jnp.complexfloating)

    def cholesky_rule(ctx, x):
        if not small_real(ctx.avals_in[0]):
            return generic_cholesky(ctx, x)
        return mlir.lower_fun(cholesky_fn, multiple_results=False)(ctx, x)

    def solve_rule(ctx, a, b, **params):
        if not small_real(ctx.avals_in[0]):
            return generic_solve(ctx, a, b, **params)
        return mlir.lower_fun(lambda a, b: solve_fn(a, b, **params), multiple_results=False)(ctx, a, b)

    mlir.register_lowering(linalg.cholesky_p, cholesky_rule, platform=platform)
    mlir.register_lowering(linalg.triangular_solve_p, solve_rule, platform=platform)
    return True


def apply() -> bool:
    """Registers the lowerings for the TPU platform (False where FUSEDRL_TPU_LINALG=off or
    JAX moved its private lowering API: XLA's lowering stays)."""
    global _applied
    if os.environ.get(VARIABLE) == "off":
        return False
    _applied = register_small("tpu", cholesky, triangular_solve)
    return _applied


@contextlib.contextmanager
def xla_lowering():
    """XLA's own lowering on a TPU for the programs traced in the body (a peer's trainer run
    as its users run it, beside ours in one benchmark process); this module's after it."""
    api = _private_api()
    if not _applied or api is None:
        yield
        return
    mlir, linalg = api
    mlir.register_lowering(linalg.cholesky_p, linalg._cholesky_lowering, platform="tpu")
    mlir.register_lowering(linalg.triangular_solve_p, linalg._triangular_solve_lowering, platform="tpu")
    try:
        yield
    finally:
        apply()
