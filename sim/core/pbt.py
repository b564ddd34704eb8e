"""Population-based training (2017, "Population Based Training of Neural
Networks", arXiv:1711.09846) as one compiled, donated program on a population's state.

    program = make_program(engine, plan)
    state, lineage = program(state, fitness, key)     # fitness [M]; lineage: small arrays [M]

Exploit (truncation selection): the members are ranked by fitness; the bottom `fraction` of
them (at least one), and every member whose fitness is not finite, take a copy of a member
drawn uniformly from the top `fraction`: its agent state (parameters, optimizer state, target
networks, temperature, hyper-parameters) and its observation statistics. Its own envs keep
running and its loop keeps its state (a replay ring, per-env carries), except for a member
whose fitness is not finite (a diverged one): its envs and loop state may hold NaN, so it
takes its parent's too.
Every member keeps its own random key, so a copy does not repeat its parent's draws.

Explore: each replaced member's explored hyper-parameters (`plan.explore`) are, with
probability `plan.resample`, drawn anew from their range (log-uniformly for a log range),
else its parent's value times one of `plan.factors` (0.8 or 1.25) chosen at random; then
clipped to the range. The other members keep theirs.

Everything is a gather along the member axis (axis 0 of every leaf) or a select: no host copy
and no recompilation. A diverged member's envs and loop state are copied one member at a time into
the donated state, so the program's temporary memory is the population's learner state and a
member's envs and loop state or two, not the population's. Where whole members lie on different
devices, what crosses devices is the population's agent states and observation statistics
(gathered on every device: their bytes) and, for a diverged member only, its parent's envs
and loop state (one sum over the devices of that member's slice, `spread_cloner`).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from sim.core import donation, parallel


@dataclasses.dataclass(frozen=True)
class Explore:
    """One explored hyper-parameter: its field name and the range it stays in."""

    name: str
    low: float
    high: float
    log: bool = False  # resampled log-uniformly (a positive range)


@dataclasses.dataclass(frozen=True)
class Plan:
    explore: tuple[Explore, ...]
    fraction: float = 0.25  # of the members, bottom (replaced) and top (parents), at least one each
    resample: float = 0.25  # probability of a fresh draw instead of a perturbation
    factors: tuple[float, float] = (0.8, 1.25)

    def replaced_count(self, members: int) -> int:
        """How many members a step replaces by rank (non-finite ones come on top of them)."""
        return max(1, int(math.floor(members * self.fraction)))


def ranks(fitness: jax.Array) -> jax.Array:
    """int32 [M]: each member's place in ascending fitness (0: the worst), non-finite lowest,
    ties in member order."""
    score = jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf)
    order = jnp.argsort(score, stable=True)
    return jnp.zeros_like(order, dtype=jnp.int32).at[order].set(jnp.arange(order.shape[0], dtype=jnp.int32))


def choose(fitness: jax.Array, key: jax.Array, plan: Plan):
    """(source [M]: the member each member copies, itself when kept; replaced [M] bool)."""
    m = fitness.shape[0]
    k = plan.replaced_count(m)
    rank = ranks(fitness)
    finite = jnp.isfinite(fitness)
    # the k worst finite members, and every non-finite one (ranked below them all); never
    # one of the k best, the parents
    replaced = ((rank - jnp.sum(~finite) < k) & (rank < m - k)) | ~finite
    top = jnp.argsort(rank)[m - k:]  # the k best members
    parent = top[jax.random.randint(key, (m,), 0, k)]
    return jnp.where(replaced, parent, jnp.arange(m, dtype=parent.dtype)).astype(jnp.int32), replaced


def explored(value: jax.Array, replaced: jax.Array, key: jax.Array, spec: Explore, plan: Plan) -> jax.Array:
    """A hyper-parameter's new values [M] from the values copied from each member's parent [M]."""
    pick_key, factor_key, draw_key = jax.random.split(key, 3)
    m = value.shape[0]
    u = jax.random.uniform(draw_key, (m,))
    if spec.log:
        drawn = jnp.exp(math.log(spec.low) + u * (math.log(spec.high) - math.log(spec.low)))
    else:
        drawn = spec.low + u * (spec.high - spec.low)
    factor = jnp.where(jax.random.bernoulli(factor_key, 0.5, (m,)), plan.factors[1], plan.factors[0])
    moved = jnp.where(jax.random.bernoulli(pick_key, plan.resample, (m,)), drawn, value * factor)
    return jnp.where(replaced, jnp.clip(moved, spec.low, spec.high), value).astype(value.dtype)


def clone_members(tree, source: jax.Array, mask: jax.Array):
    """`tree` (leaves [M, ...]) where member i holds member source[i]'s slice if mask[i]: one
    member at a time, into the (donated) leaves, so temporary memory is a member's slice or
    two. A source is never itself overwritten (parents are kept members)."""
    leaves, treedef = jax.tree.flatten(tree)
    if not leaves:
        return tree

    def body(i, xs):
        def one(x):
            mine = jax.lax.dynamic_index_in_dim(x, i, 0, keepdims=True)
            theirs = jax.lax.dynamic_index_in_dim(x, source[i], 0, keepdims=True)
            return jax.lax.dynamic_update_index_in_dim(x, jnp.where(mask[i], theirs, mine), i, 0)

        return [one(x) for x in xs]

    return jax.tree.unflatten(treedef, jax.lax.fori_loop(0, source.shape[0], body, leaves))


def _as_bits(x):
    """x's bits as an unsigned integer array (bool: uint8), so that a sum with zeros is exact
    (a float sum would turn -0.0 into 0.0)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint8)
    return jax.lax.bitcast_convert_type(x, jnp.dtype(f"uint{x.dtype.itemsize * 8}"))


def _from_bits(bits, like):
    return bits.astype(jnp.bool_) if like.dtype == jnp.bool_ else jax.lax.bitcast_convert_type(bits, like.dtype)


def spread_cloner(mesh, members: int):
    """`clone_members` for a population whose whole members are spread over `mesh`'s devices
    (leaves [M, ...] split on the member axis): each member to copy crosses from its owner to
    every device in one sum (the owner's slice plus zeros), and only a copied member's slice
    travels; the device that holds the target writes it. Temporary memory: two members' slices."""
    per = members // mesh.size

    def local(tree, source, mask):
        leaves, treedef = jax.tree.flatten(tree)
        if not leaves:
            return tree
        device = jax.lax.axis_index(parallel.AXIS)

        def copy(j, xs):
            src = source[j]
            owned = [jnp.where(device == src // per, _as_bits(jax.lax.dynamic_index_in_dim(x, src % per, 0)), 0)
                     for x in xs]
            pieces = jax.lax.psum(owned, parallel.AXIS)
            mine = device == j // per
            return [jax.lax.dynamic_update_index_in_dim(
                x, jnp.where(mine, _from_bits(p, x), jax.lax.dynamic_index_in_dim(x, j % per, 0)), j % per, 0)
                for x, p in zip(xs, pieces)]

        def body(j, xs):  # the same branch on every device: `mask` is replicated
            return jax.lax.cond(mask[j], lambda: copy(j, xs), lambda: xs)

        return jax.tree.unflatten(treedef, jax.lax.fori_loop(0, members, body, leaves))

    def clone(tree, source, mask):
        return jax.shard_map(local, mesh=mesh, in_specs=(P(parallel.AXIS), P(), P()), out_specs=P(parallel.AXIS),
                             check_vma=False)(tree, source, mask)

    return clone


def step(state, fitness: jax.Array, key: jax.Array, plan: Plan, clone=clone_members):
    """One exploit-and-explore step on a population's state (leaves [M, ...]): (new state,
    lineage {"source": [M], "replaced": [M], "hp/<name>": [M] each explored value}).
    `clone`: how a diverged member's envs and loop state are copied (`clone_members`, or
    `spread_cloner` for members spread over devices)."""
    choose_key, explore_key = jax.random.split(key)
    source, replaced = choose(fitness, choose_key, plan)
    take = lambda x: jnp.take(x, source, axis=0)  # noqa: E731
    agent = jax.tree.map(take, state.agent)
    hp, lineage = agent.hp, {"source": source, "replaced": replaced}
    new = {}
    for i, spec in enumerate(plan.explore):
        leaf = getattr(hp, spec.name)  # [M] or [M, devices] (a member's copies are equal)
        value = jnp.reshape(leaf, (leaf.shape[0], -1))[:, 0]
        value = explored(value, replaced, jax.random.fold_in(explore_key, i), spec, plan)
        new[spec.name] = jnp.broadcast_to(jnp.reshape(value, (-1,) + (1,) * (leaf.ndim - 1)), leaf.shape)
        lineage[f"hp/{spec.name}"] = value
    broken = replaced & ~jnp.isfinite(fitness)
    rest = clone({"env": state.env, "loop": state.loop}, source, broken)
    state = state.replace(agent=agent.replace(hp=hp.replace(**new)), obs_stats=jax.tree.map(take, state.obs_stats),
                          **rest)
    return state, lineage


def make_program(engine, plan: Plan):
    """The compiled step for `engine`'s population state, donated and updated in place, its
    state kept on the devices as the epoch program lays it out."""
    kw, clone = {}, clone_members
    if engine.mesh:
        stacked = parallel.stacked_sharding(engine.mesh, parallel.state_spec(True, engine.spread))
        kw = {"out_shardings": (stacked, parallel.replicated(engine.mesh))}
        if engine.spread:
            clone = spread_cloner(engine.mesh, engine.members)

    def pbt_step(state, fitness, key):
        return step(state, fitness, key, plan, clone)

    return donation.jit_in_place(pbt_step, **kw)
