"""Time of one jitted call that gathers B random rows of a [2^20, D] float32 array and sums them,
for a few D and B: what a gather of many rows costs against one of a few on an accelerator.

    python benchmarks/gather_rows.py

Each figure is a call's wall time, dispatch and the key's fold_in included (20 calls in a row):
a rough bound, not the gather alone. Its TPU v5e figures: results/tpu_v5e/gather_rows.log.
"""
import time, jax, jax.numpy as jnp
N=1<<20
for D in (256, 263, 512):
  x = jnp.zeros((N, D), jnp.float32) + 1.0
  for B in (512, 1024, 32768, 65536):
    f = jax.jit(lambda x, k: jnp.take(x, jax.random.randint(k, (B,), 0, 40000), axis=0, mode="clip").sum(0))
    k = jax.random.key(0); f(x, k).block_until_ready()
    t=time.perf_counter(); 
    for i in range(20): r=f(x, jax.random.fold_in(k,i))
    r.block_until_ready(); dt=(time.perf_counter()-t)/20
    print(f"D={D} B={B}: {dt*1e6:9.1f} us  {dt/B*1e9:6.1f} ns/row", flush=True)
