"""Keeps jaxlib's CPU LAPACK kernels from deadlocking XLA's intra-op thread pool.

jaxlib 0.10.0 and 0.11.0 split a batched LAPACK call (Cholesky, triangular solve, ...) into
slices, queue them on XLA's CPU intra-op pool and block the calling thread until they finish.
The calling thread is itself a pool thread whenever XLA's thunk executor runs independent
LAPACK calls concurrently (or several CPU devices run at once); once every pool thread waits
on slices queued behind it, nothing runs them and the process sleeps forever at 0% CPU.
MJX's constraint solver, vmapped over thousands of envs, issues batched Cholesky
factorizations and triangular solves at every physics step.

The fix (mode "unrolled", the default on affected jaxlibs): on CPU, Cholesky and triangular
solves of matrices up to `MAX_UNROLLED` rows lower to plain XLA operations, the loop over
rows unrolled and each row's work vectorized over the batch, instead of to LAPACK custom
calls: no LAPACK kernel runs, so none can block the pool, whatever its size or the number of
CPU devices; larger matrices use XLA's own expansion of the same operations. It must run
before the programs are traced; importing `envs` does it.

Mode "pool" instead keeps LAPACK and gives XLA's CPU client a one-thread intra-op pool
(PJRT_NPROC=1; the kernels only split a batch on a larger pool); but XLA sizes that pool to
at least the number of CPU devices, so `--devices N` on a CPU host can still deadlock. Mode
"off" changes nothing. Choose with the FUSEDRL_CPU_LINALG environment variable;
benchmarks/cpu_linalg.py measures the modes side by side. Upstream removed the slicing from
open-source builds after 0.11.0 (jax commit 859992407d, issue 36927), so newer jaxlibs are
left alone.
"""

from __future__ import annotations

import os
import sys
import warnings
from importlib import metadata

import jax.numpy as jnp

from envs import tpu_linalg

# jaxlib releases whose CPU LAPACK kernels slice batches over the intra-op pool: [first, fixed).
AFFECTED = ((0, 10, 0), (0, 11, 1))
MODES = ("unrolled", "pool", "off")
VARIABLE = "FUSEDRL_CPU_LINALG"
MAX_UNROLLED = 64  # rows: the unrolled programs grow with n, and MJX's matrices stay well below
HIGHEST = "highest"  # full float32 sums, stated: these are lowered outside the program's precision context


def jaxlib_version() -> tuple[int, ...] | None:
    try:
        text = metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return None
    return tuple(int("".join(ch for ch in piece if ch.isdigit()) or 0) for piece in text.split(".")[:3])


def affected(version: tuple[int, ...] | None) -> bool:
    return version is not None and AFFECTED[0] <= version < AFFECTED[1]


def apply() -> str:
    """Applies the mode FUSEDRL_CPU_LINALG names (default: unrolled) on affected jaxlibs;
    returns the mode in force ("unaffected" on other jaxlibs)."""
    if not affected(jaxlib_version()):
        return "unaffected"
    mode = os.environ.get(VARIABLE) or "unrolled"
    if mode not in MODES:
        raise ValueError(f"{VARIABLE}={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "unrolled" and not _register_unrolled():
        mode = "pool"  # JAX moved its private lowering API: the one-thread pool still guards one device
    if mode == "pool":
        os.environ.setdefault("PJRT_NPROC", "1")
        if _backends_started():
            warnings.warn("envs imported after JAX started its CPU backend: PJRT_NPROC=1 comes too late; "
                          "batched LAPACK calls (MJX physics) may deadlock", stacklevel=2)
    return mode


# ---- the unrolled lowerings ----
def cholesky(a):
    """Lower Cholesky factor of a batch of symmetric positive-definite matrices [..., n, n]
    (column by column; NaN where a matrix is not positive definite)."""
    n = a.shape[-1]
    factor = jnp.zeros_like(a)
    for j in range(n):
        column = a[..., j:, j]
        if j:
            column = column - jnp.einsum("...ik,...k->...i", factor[..., j:, :j], factor[..., j, :j],
                                         precision=HIGHEST)
        factor = factor.at[..., j:, j].set(column / jnp.sqrt(column[..., :1]))
    return factor


def triangular_solve(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    """`lax.linalg.triangular_solve` for real matrices: op(a) x = b (left_side) or x op(a) = b."""
    del conjugate_a  # real matrices only (complex ones keep XLA's lowering)
    if not left_side:  # x a = b  <=>  a^T x^T = b^T
        x = triangular_solve(a, jnp.swapaxes(b, -1, -2), left_side=True, lower=lower, transpose_a=not transpose_a,
                             conjugate_a=False, unit_diagonal=unit_diagonal)
        return jnp.swapaxes(x, -1, -2)
    m = jnp.swapaxes(a, -1, -2) if transpose_a else a
    n = m.shape[-1]
    forward = lower != transpose_a  # substitution from the first row down, or the last up
    x = jnp.zeros_like(b)
    for i in range(n) if forward else range(n - 1, -1, -1):
        row = b[..., i, :]
        known = slice(0, i) if forward else slice(i + 1, n)
        if (forward and i) or (not forward and i < n - 1):
            row = row - jnp.einsum("...k,...kj->...j", m[..., i, known], x[..., known, :], precision=HIGHEST)
        if not unit_diagonal:
            row = row / m[..., i, i][..., None]
        x = x.at[..., i, :].set(row)
    return x


def _register_unrolled() -> bool:
    return tpu_linalg.register_small("cpu", cholesky, triangular_solve, MAX_UNROLLED)


def _backends_started() -> bool:
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge  # a private API: imported where its absence is caught

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # a private API: assume the best if it moves
        return False
