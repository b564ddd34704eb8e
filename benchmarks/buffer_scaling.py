"""Replay-buffer insert/sample cost and memory against capacity (should be flat: O(batch)).

    .venv/bin/python benchmarks/buffer_scaling.py [--capacities 1e4 1e5 1e6 4e6] [--batch 256]

For each capacity: time per `add` and per `sample` inside one jitted fori_loop (donated ring,
dispatch amortised, best of several repeats), and the compiled single-add program's
memory_analysis against the ring's own size. "trap" times one add per call when another output
of the same shape/dtype precedes the buffer (the seed-000 alias theft): that one copies the ring.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks import common  # noqa: E402
from sim.core import buffer, donation  # noqa: E402

EXAMPLE = {"obs": jnp.zeros(48), "next_obs": jnp.zeros(48), "action": jnp.zeros(2), "reward": jnp.zeros(()),
           "done": jnp.zeros(())}  # 100 float32 = 400 bytes a transition
MIB = 1024**2


def build(capacity, batch_size, loops):
    """Compiles the programs for one capacity and checks the add programs are in place."""
    batch = jax.tree.map(lambda x: jnp.ones((batch_size,) + x.shape, x.dtype), EXAMPLE)

    def add_loop(state, batch):
        return jax.lax.fori_loop(0, loops, lambda i, s: buffer.add(s, batch), state)

    def sample_loop(state, key):
        def body(i, acc):
            b = buffer.sample(state, jax.random.fold_in(key, i), batch_size)
            return acc + sum(jnp.sum(x) for x in jax.tree.leaves(b))
        return jax.lax.fori_loop(0, loops, body, jnp.zeros(()))

    r = dict(capacity=capacity, batch=batch, adds=donation.jit_in_place(add_loop, out_index=None),
             samples=jax.jit(sample_loop), one_add=donation.jit_in_place(buffer.add, out_index=None))
    state = buffer.init(EXAMPLE, capacity)
    compiled = r["one_add"].check(state, batch)  # raises unless aliased leaf for leaf and temp < 10%
    r["adds"].check(state, batch)
    mem = compiled.memory_analysis()
    ring = buffer.nbytes(state)
    # Peak live bytes of one add: inputs + outputs not sharing an input's memory + temp.
    peak = mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes + mem.temp_size_in_bytes
    rest = mem.argument_size_in_bytes - ring  # the batch and the two counters
    r.update(ring=ring, temp=mem.temp_size_in_bytes, arg=mem.argument_size_in_bytes, out=mem.output_size_in_bytes,
             alias=mem.alias_size_in_bytes, ratio=peak / (ring + rest), add=[], sample=[], one=[])
    r["state"] = jax.block_until_ready(r["adds"](state, batch))  # compile + warm: touches every page
    jax.block_until_ready(r["samples"](r["state"], jax.random.key(0)))
    r["state"] = jax.block_until_ready(r["one_add"](r["state"], batch))
    return r


def run_round(r, loops, i):
    r["state"], t = common.timed(r["adds"], r["state"], r["batch"])
    r["add"].append(t / loops)
    _, t = common.timed(r["samples"], r["state"], jax.random.key(i))
    r["sample"].append(t / loops)
    for _ in range(10):  # back to back, as a training loop would dispatch them
        r["state"], t = common.timed(r["one_add"], r["state"], r["batch"])
        r["one"].append(t)


def time_trap(r, repeats):
    """One add per call with an output shaped like the ring returned first: the ring is copied."""
    trap = jax.jit(lambda s, b: (s.data[0] + 0.0, buffer.add(s, b)), donate_argnums=0)
    _, r["state"] = trap(r["state"], r["batch"])
    times = []
    for _ in range(repeats):
        (_, r["state"]), t = common.timed(trap, r["state"], r["batch"])
        times.append(t)
    return min(times)


def last_level_cache_bytes() -> int:
    """Largest CPU cache (Linux sysfs), 0 if unknown: rings below it get cache-speed writes."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    for d in os.listdir(base) if os.path.isdir(base) else []:
        try:
            with open(os.path.join(base, d, "size")) as f:
                text = f.read().strip()
            best = max(best, int(text[:-1]) * {"K": 1024, "M": MIB}[text[-1]] if text[-1] in "KM" else int(text))
        except (OSError, ValueError):
            pass
    return best


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--capacities", type=float, nargs="+", default=[1e4, 1e5, 1e6, 4e6])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--loops", type=int, default=2000, help="adds/samples per jitted call")
    p.add_argument("--repeats", type=int, default=9, help="best of this many rounds")
    a = p.parse_args(argv)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; batch {a.batch} x "
          f"{buffer.transition_bytes(EXAMPLE)} B transitions; {a.loops} ops per call, best of {a.repeats}")
    rows, held = [], 0
    for c in map(int, a.capacities):
        try:  # every ring stays alive (rounds interleave capacities), plus room for one copy
            buffer.check_fits(EXAMPLE, c, other_bytes=held + buffer.nbytes(EXAMPLE, c))
        except ValueError as e:
            print(f"skip capacity {c}: {e}")
            continue
        rows.append(build(c, a.batch, a.loops))
        held += rows[-1]["ring"]
    # Rounds go over all capacities in turn, so load from other processes hits each alike.
    for i in range(a.repeats):
        for r in rows:
            run_round(r, a.loops, i)
    for r in rows:
        r.update(add_us=min(r["add"]) * 1e6, sample_us=min(r["sample"]) * 1e6, one_us=min(r["one"]) * 1e6)
    for r in reversed(rows):  # largest first frees memory soonest
        r["trap_us"] = time_trap(r, 3) * 1e6
        del r["state"]
    hdr = (f"{'capacity':>9} {'ring MiB':>9} {'add us':>7} {'sample us':>9} {'1 add/call us':>13} {'trap us':>9} "
           f"{'temp B':>7} {'arg MiB':>8} {'out MiB':>8} {'alias MiB':>9} {'peak/(ring+rest)':>16}")
    print(hdr)
    for r in rows:
        print(f"{r['capacity']:>9} {r['ring'] / MIB:>9.1f} {r['add_us']:>7.2f} {r['sample_us']:>9.2f} "
              f"{r['one_us']:>13.1f} {r['trap_us']:>9.0f} {r['temp']:>7} {r['arg'] / MIB:>8.2f} {r['out'] / MIB:>8.2f} "
              f"{r['alias'] / MIB:>9.2f} {r['ratio']:>16.4f}")
    if rows:
        adds = [r["add_us"] for r in rows]
        samples = [r["sample_us"] for r in rows]
        print(f"add time slowest/fastest = {max(adds) / min(adds):.2f} (target <= 1.10); "
              f"sample slowest/fastest = {max(samples) / min(samples):.2f}; "
              f"max peak/(ring+rest) = {max(r['ratio'] for r in rows):.4f} (target <= 1.1)")
        llc = last_level_cache_bytes() if jax.devices()[0].platform == "cpu" else 0
        big = [r["add_us"] for r in rows if r["ring"] > llc]
        if llc and len(big) > 1:
            print(f"rings larger than the {llc / MIB:.0f} MiB last-level cache: add slowest/fastest = "
                  f"{max(big) / min(big):.2f} (smaller rings are written at cache speed)")


if __name__ == "__main__":
    main()
