"""Data parallelism over a device mesh, as pmap does it, written with `jax.shard_map`.

Each device owns `num_envs / n` environments, its shard of every batch and (off-policy) its
own replay ring of `max_replay_size / n` rows. Every TrainState leaf carries a leading
device axis [n, ...] sharded over the mesh axis `devices`; inside `shard_map` each device
runs the single-device program on its block, averaging gradients and merging observation
statistics over the axis, so parameters stay identical on every device. Across hosts the
same program runs in every process (`jax.distributed`), over a mesh of all their devices.
How many devices a run takes, and each one's sizes, the harness decides (`sim/run/devices.py`).
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "devices"


def spreads_members(members: int, n: int) -> bool:
    """Whether a population of `members` spreads its members over n > 1 devices (each device
    trains M / n whole members: no traffic between devices) rather than each member's envs
    and batches (every device holds a share of every member): when n divides the count."""
    return members > 1 and n > 1 and members % n == 0


def state_spec(population: bool, spread: bool) -> P:
    """How the training state's leaves lie over the mesh: the device axis first ([n, ...]) for
    one run, second ([M, n, ...]) for a population whose envs are split, and the population
    axis itself ([M, ...]) for one whose members are spread."""
    return P(None, AXIS) if population and not spread else P(AXIS)


def make_mesh(n: int) -> Mesh:
    return Mesh(np.array(jax.devices()[:n]), (AXIS,))


def shard_state_program(fn, mesh: Mesh, has_metrics: bool = True, population: bool = False,
                        spread: bool = False):
    """Lifts a per-device `fn(state) -> (state, metrics)` (or `-> state`) to stacked states.

    One run: leaves [n, ...] sharded over the device axis; metrics must already be reduced
    over the axis inside `fn` (pmean/psum) and come back replicated. A population (`fn`
    vmapped over its members): leaves [M, n, ...] with metrics [M] replicated, or, when its
    members are spread, leaves [M, ...] and metrics [M] both split over the devices inside
    `shard_map` (the engine's jit gathers the metrics, replicated, through its out_shardings).
    """
    spec = state_spec(population, spread)
    if spread:
        out_specs = (spec, spec) if has_metrics else spec
        mapped = jax.shard_map(jax.vmap(fn), mesh=mesh, in_specs=spec, out_specs=out_specs, check_vma=False)
        return functools.wraps(fn)(lambda state: mapped(state))
    axis = 1 if population else 0
    body = jax.vmap(fn) if population else fn

    def per_device(state):
        out = body(jax.tree.map(lambda x: jax.lax.index_in_dim(x, 0, axis, keepdims=False), state))
        new = out[0] if has_metrics else out
        new = jax.tree.map(lambda x: jax.numpy.expand_dims(x, axis), new)
        return (new, out[1]) if has_metrics else new

    out_specs = (spec, P()) if has_metrics else spec
    mapped = jax.shard_map(per_device, mesh=mesh, in_specs=spec, out_specs=out_specs, check_vma=False)
    return functools.wraps(fn)(lambda state: mapped(state))


def stacked_sharding(mesh: Mesh, spec: P = P(AXIS)) -> NamedSharding:
    return NamedSharding(mesh, spec)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())
