"""The CPU LAPACK thread-pool deadlock's reproducer (see envs/cpu_linalg.py), run in a subprocess.

    FUSEDRL_CPU_LINALG=unrolled|pool|off python tests/lapack_deadlock.py BATCH CALLS [DEVICES]

Two independent batched Cholesky factorizations and triangular solves in one jitted program,
the batch split over DEVICES CPU devices (default 1). On an affected jaxlib with LAPACK on a
multi-thread intra-op pool ("off", or "pool" with several devices) the thunk executor runs
them at once and the process never returns. `envs` is imported first, as every program of
the project does, which applies the FUSEDRL_CPU_LINALG mode. Prints "ok" and the mode.
"""

import os
import sys

devices = int(sys.argv[3]) if len(sys.argv) > 3 else 1
if devices > 1:
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import envs  # noqa: E402  (applies the fix before anything is traced)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

batch, calls, n = int(sys.argv[1]), int(sys.argv[2]), 27
batched = NamedSharding(Mesh(jax.devices()[:devices], ("batch",)), PartitionSpec("batch"))


def spd(key):
    a = jax.random.normal(key, (batch, n, n))
    return jax.device_put(a @ jnp.swapaxes(a, -1, -2) + n * jnp.eye(n), batched)


@jax.jit
def program(a, b, c):
    la, lb = jnp.linalg.cholesky(a), jnp.linalg.cholesky(b)
    solve = jax.scipy.linalg.solve_triangular
    return la.sum() + lb.sum() + solve(la, c, lower=True).sum() + solve(lb, c, lower=True).sum()


a, b = spd(jax.random.PRNGKey(0)), spd(jax.random.PRNGKey(1))
c = jax.device_put(jnp.ones((batch, n, 1)), batched)
for i in range(calls):
    program(a + i * 1e-6, b, c).block_until_ready()
print("ok", envs.cpu_linalg.apply())
