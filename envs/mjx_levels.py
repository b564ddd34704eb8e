"""Keeps XLA from recomputing MJX's kinematic tree, level by level, inside every later level.

MJX walks a model's body tree one depth at a time (`mujoco.mjx._src.scan.body_tree`: forward
kinematics, centres of mass, velocities, the recursive Newton-Euler pass): each level's
positions and orientations are elementwise functions of its parent level's. XLA's CPU fusion
duplicates cheap elementwise producers into each consumer instead of writing them once, so a
fused level recomputes its whole chain of ancestors, several times over per quaternion product:
the work grows geometrically with the tree's depth. On a shallow tree (Brax's ant, Go1) that
costs little; on Playground's Panda arm (a chain of nine bodies) MJX's kinematics took 98% of
a physics step, 464 ms for 16 envs where one unbatched env's took 10 ms, and PandaPickCube ran
11 env steps/s at 128 envs on a 2-core CPU (benchmarks/results/robots_throughput_2core.txt).

The fix: each level's results pass through `jax.lax.optimization_barrier`, an identity that XLA
may not fuse across, so every level is computed once and read by the next. The arithmetic is
MJX's own, unchanged (tests/test_robots.py compares trajectories with and without it). It
applies where JAX's default backend is the CPU: on a GPU or TPU, whose fusion passes differ
and where it has not been measured, MJX runs as it is.
`apply()` patches `body_tree` once (`envs.base.import_mjx_quietly` calls it, before any MJX
program is traced); FUSEDRL_MJX_LEVELS=off leaves MJX as it is (benchmarks/mjx_levels.py
measures both side by side).
"""

from __future__ import annotations

import functools
import os

import jax

_PATCHED = "_fusedrl_levels_materialized"
VARIABLE = "FUSEDRL_MJX_LEVELS"


def _materialized(f):
    @functools.wraps(f)
    def level(*args):
        return jax.lax.optimization_barrier(f(*args))

    return level


def apply() -> bool:
    """Makes `body_tree` materialize each level; False where FUSEDRL_MJX_LEVELS=off or MJX's
    private module moved (then nothing changes)."""
    if os.environ.get(VARIABLE) == "off":
        return False
    try:
        from mujoco.mjx._src import scan  # a private MJX module: imported where its absence is caught
    except ImportError:
        return False
    body_tree = getattr(scan, "body_tree", None)
    if body_tree is None or getattr(body_tree, _PATCHED, False):
        return body_tree is not None

    @functools.wraps(body_tree)
    def patched(m, f, *args, **kwargs):
        if jax.default_backend() != "cpu":  # measured on CPU only: elsewhere MJX runs as it is
            return body_tree(m, f, *args, **kwargs)
        return body_tree(m, _materialized(f), *args, **kwargs)

    setattr(patched, _PATCHED, True)
    patched.unpatched = body_tree
    scan.body_tree = patched
    return True
