"""The CPU LAPACK thread-pool deadlock (envs/cpu_linalg.py): the fix is exact, it holds, and it is needed."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import cpu_linalg
from tests.helpers import check_triangular_solves

SCRIPT = os.path.join(os.path.dirname(__file__), "lapack_deadlock.py")
AFFECTED = cpu_linalg.affected(cpu_linalg.jaxlib_version())


def _run(mode: str, *args: str, timeout: float) -> subprocess.CompletedProcess | None:
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_NPROC", "NPROC", "XLA_FLAGS")}
    env.update(FUSEDRL_CPU_LINALG=mode, JAX_PLATFORMS="cpu")
    try:
        return subprocess.run([sys.executable, SCRIPT, *args], env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def test_affected_versions():
    assert not cpu_linalg.affected((0, 9, 2))
    assert cpu_linalg.affected((0, 10, 0)) and cpu_linalg.affected((0, 10, 2)) and cpu_linalg.affected((0, 11, 0))
    assert not cpu_linalg.affected((0, 11, 1)) and not cpu_linalg.affected(None)


def test_unrolled_cholesky_and_triangular_solves_match_numpy():
    rng = np.random.default_rng(0)
    batch, n = 3, 6
    a = rng.normal(size=(batch, n, n))
    spd = a @ np.swapaxes(a, 1, 2) + n * np.eye(n)
    np.testing.assert_allclose(cpu_linalg.cholesky(jnp.asarray(spd, jnp.float32)), np.linalg.cholesky(spd),
                               rtol=1e-5, atol=1e-5)
    check_triangular_solves(cpu_linalg.triangular_solve, n=n)


@pytest.mark.skipif(not AFFECTED, reason="this jaxlib's LAPACK kernels are safe: nothing is replaced")
def test_programs_trace_no_lapack_calls():
    a = jnp.eye(5)[None].repeat(4, 0) * 2.0
    text = jax.jit(lambda a: jax.scipy.linalg.solve_triangular(jnp.linalg.cholesky(a), a, lower=True)).lower(a).as_text()
    assert "lapack" not in text and "custom_call" not in text


@pytest.mark.parametrize("devices", [pytest.param("1", marks=pytest.mark.slow), "2"])  # (27 s each)
def test_batched_lapack_calls_never_deadlock(devices):
    """The reproducer that hangs an unprotected process within a few calls (see the slow test
    below) completes its 50 calls with the default fix, on one CPU device and on two."""
    done = _run("unrolled", "4096", "50", devices, timeout=180)
    assert done is not None, "batched Cholesky / triangular solves deadlocked despite envs.cpu_linalg"
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", "unrolled" if AFFECTED else "unaffected"]


@pytest.mark.slow
@pytest.mark.skipif(not AFFECTED or (os.cpu_count() or 1) < 2,
                    reason="the deadlock needs an affected jaxlib and a multi-thread pool")
@pytest.mark.parametrize("mode, devices", [("off", "1"), ("pool", "2")])
def test_lapack_on_a_shared_pool_deadlocks(mode, devices):
    """Without the fix the reproducer hangs (the regression test above can fail), and a one-thread
    pool does not help two CPU devices: XLA gives the pool a thread per device."""
    hung = [_run(mode, "4096", "50", devices, timeout=45) is None for _ in range(2)]
    assert any(hung), f"{mode} on {devices} device(s) finished twice: is the fix still needed on this jaxlib?"
