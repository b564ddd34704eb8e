"""Small Cholesky factorizations and triangular solves on a TPU as vector operations
(envs/tpu_linalg.py): exact against numpy, in force in a program lowered for a TPU (checked
here by lowering for the TPU on this CPU), and MJX's physics unchanged by them."""

import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs  # noqa: F401  registers the TPU lowerings, as every program of the project has them
from envs import tpu_linalg
from tests.helpers import check_triangular_solves

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINALG_OPS = re.compile(r"stablehlo\.(cholesky|triangular_solve|custom_call)")


@pytest.mark.parametrize("batch", [(), (3,), (2, 4)])
@pytest.mark.parametrize("n", [1, 6, 27])
def test_cholesky_matches_numpy(batch, n):
    rng = np.random.default_rng(n)
    a = rng.normal(size=batch + (n, n))
    spd = a @ np.swapaxes(a, -1, -2) + n * np.eye(n)
    np.testing.assert_allclose(jax.jit(tpu_linalg.cholesky)(jnp.asarray(spd, jnp.float32)), np.linalg.cholesky(spd),
                               rtol=2e-5, atol=2e-5)


def test_cholesky_of_a_matrix_that_is_not_positive_definite_is_nan():
    bad = jnp.asarray([[[1.0, 2.0], [2.0, 1.0]]])
    assert np.isnan(np.asarray(tpu_linalg.cholesky(bad))[0, 1, 1])


@pytest.mark.parametrize("n", [1, 5])
def test_triangular_solves_match_numpy(n):
    check_triangular_solves(tpu_linalg.triangular_solve, n=n)


# MJX's Newton step: factorize the Hessian, solve with it (vmapped over envs).
LOWER_FOR_TPU = """
import re, sys, jax, jax.numpy as jnp
sys.path.insert(0, {root!r})
import envs
solve = lambda h, g: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(h), g)
program = jax.export.export(jax.jit(jax.vmap(solve)), platforms=["tpu"])(
    jax.ShapeDtypeStruct((8, 27, 27), jnp.float32), jax.ShapeDtypeStruct((8, 27), jnp.float32))
print(sorted(set(re.findall({pattern!r}, program.mlir_module()))))
"""


def _lowered_ops(setting: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != tpu_linalg.VARIABLE}
    if setting:
        env[tpu_linalg.VARIABLE] = setting
    script = LOWER_FOR_TPU.format(root=ROOT, pattern=LINALG_OPS.pattern)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_a_program_lowered_for_a_tpu_has_no_linalg_custom_calls_unless_switched_off():
    assert _lowered_ops(None) == "[]"
    assert _lowered_ops("off") == "['cholesky', 'triangular_solve']"


def _tpu_ops() -> list[str]:
    solve = jax.vmap(lambda h, g: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(h), g))
    program = jax.export.export(jax.jit(solve), platforms=["tpu"])(
        jax.ShapeDtypeStruct((8, 5, 5), jnp.float32), jax.ShapeDtypeStruct((8, 5), jnp.float32))
    return sorted(set(LINALG_OPS.findall(program.mlir_module())))


def test_xla_lowering_restores_xla_s_ops_for_the_body_only():
    """What a benchmark's peer runs under (its users' TPU programs), and ours after it."""
    assert _tpu_ops() == []
    with tpu_linalg.xla_lowering():
        assert _tpu_ops() == ["cholesky", "triangular_solve"]
    assert _tpu_ops() == []


# MJX's step with the TPU's lowerings (envs/tpu_linalg.py's and envs/tpu_gather.py's) registered
# for this CPU, against this CPU's own, from the
# same states: 30 states of one rollout (saved by the first run, loaded by the second), each
# stepped once (one step apart, so a contact's chaos cannot amplify rounding differences).
ROLLOUT = """
import sys, numpy as np, jax, jax.numpy as jnp
sys.path.insert(0, {root!r})
import envs
from envs import tpu_linalg
if {tpu!r}:
    from jax._src.interpreters import mlir
    from jax._src.lax import linalg
    mlir.register_lowering(linalg.cholesky_p, mlir.lower_fun(tpu_linalg.cholesky, multiple_results=False), platform="cpu")
    mlir.register_lowering(linalg.triangular_solve_p, mlir.lower_fun(
        lambda a, b, **p: tpu_linalg.triangular_solve(a, b, **p), multiple_results=False), platform="cpu")
    from jax._src.lax import slicing  # envs/tpu_gather.py's picks too
    from envs import tpu_gather
    def gather_rule(ctx, operand, indices, **p):
        (x, i), (y,) = ctx.avals_in, ctx.avals_out
        found = tpu_gather.picked_axis(x.shape, i.shape, y.shape, p["dimension_numbers"], p["slice_sizes"], p["mode"])
        if found is None:
            return slicing._gather_lower(ctx, operand, indices, **p)
        return mlir.lower_fun(lambda o, idx: tpu_gather.pick(o, idx, *found).reshape(y.shape),
                              multiple_results=False)(ctx, operand, indices)
    mlir.register_lowering(slicing.gather_p, gather_rule, platform="cpu")
env = envs.make("ant", "mjx")
state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 4))
actions = jax.random.uniform(jax.random.PRNGKey(1), (30, 4) + env.spec.action_shape, minval=-1.0, maxval=1.0)
step = jax.vmap(env.step)
if {states!r} is None:  # the rollout's states, stacked [30, 4, ...]
    states = jax.jit(lambda s: jax.lax.scan(lambda s, a: (step(s, a), s), s, actions)[1])(state)
    np.savez({out!r} + ".states.npz", *jax.tree.leaves(states))
else:
    saved = np.load({states!r})
    states = jax.tree.unflatten(jax.tree.structure(state), [saved[f"arr_{{i}}"] for i in range(len(saved.files))])
nxt = jax.jit(jax.vmap(step))(states, actions)
np.save({out!r}, np.asarray(nxt.physics.pipeline_state.qacc))
"""


def _one_steps(tmp_path, tpu: bool, states):
    path = str(tmp_path / f"qacc_{tpu}.npy")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", ROLLOUT.format(root=ROOT, tpu=tpu, out=path, states=states)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return np.load(path), path + ".states.npz"


@pytest.mark.slow  # two processes compiling ant's MJX step: 2.5 minutes on 2 cores
def test_mjx_steps_are_the_same_under_the_tpu_lowering(tmp_path):
    """The joint accelerations MJX's solver computes, one step from each of 30 states."""
    cpu, states = _one_steps(tmp_path, False, None)
    tpu, _ = _one_steps(tmp_path, True, states)
    assert cpu.shape[:2] == (30, 4) and np.all(np.isfinite(tpu)) and np.abs(cpu).max() > 1.0
    np.testing.assert_allclose(tpu, cpu, rtol=1e-4, atol=1e-3 * np.abs(cpu).max())
