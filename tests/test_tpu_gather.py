"""Each of a batch picking one entry of a short axis, on a TPU as selects (envs/tpu_gather.py):
the same values as XLA's gather (checked by registering the rule for this CPU in a process of
its own), the gathers it takes and leaves, and in force in a program lowered for a TPU."""

import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

import envs  # noqa: F401  registers the TPU rules, as every program of the project has them
from envs import tpu_gather

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Vmapped picks of every shape the rule takes, and one it leaves (a gather of two entries).
CASES = """
import jax, jax.numpy as jnp, numpy as np
rng = np.random.default_rng(0)
x3 = rng.normal(size=(6, 3)).astype(np.float32)
x5 = rng.normal(size=(2, 4, 5, 7)).astype(np.float32)
i5 = np.array([[0, 4, 7, -1], [2, 3, 1, 9]], np.int32)
b = rng.normal(size=(5, 4)) > 0
cases = {
    "argmin of three": jax.jit(jax.vmap(lambda c: c[jnp.argmin(c)]))(x3),
    "two batch dims, rows kept, out of range clamped": jax.jit(jax.vmap(jax.vmap(lambda c, i: c[i])))(x5, i5),
    "a row kept whole": jax.jit(jax.vmap(lambda c, i: jax.lax.dynamic_slice_in_dim(c, i, 1)))(x5[0], i5[0]),
    "booleans": jax.jit(jax.vmap(lambda c, i: c[i]))(b, np.arange(5) % 4),
    "integers": jax.jit(jax.vmap(lambda c, i: c[i]))((x3 * 10).astype(np.int32), np.arange(6) % 3),
    "two entries each (left alone)": jax.jit(jax.vmap(lambda c, i: c[jnp.stack([i, 0])]))(x3, np.arange(6) % 3),
}
"""

AS_CPU = """
import sys
sys.path.insert(0, {root!r})
from jax._src.interpreters import mlir
from jax._src.lax import slicing
import envs
from envs import tpu_gather
generic, taken = slicing._gather_lower, []
def rule(ctx, operand, indices, **p):
    (x, i), (y,) = ctx.avals_in, ctx.avals_out
    found = tpu_gather.picked_axis(x.shape, i.shape, y.shape, p["dimension_numbers"], p["slice_sizes"], p["mode"])
    taken.append(found is not None)
    if found is None:
        return generic(ctx, operand, indices, **p)
    return mlir.lower_fun(lambda o, idx: tpu_gather.pick(o, idx, *found).reshape(y.shape), multiple_results=False)(
        ctx, operand, indices)
if {select!r}:
    mlir.register_lowering(slicing.gather_p, rule, platform="cpu")
"""
SAVE = """
np.savez({out!r}, taken=np.array(taken), **{{k: np.asarray(v) for k, v in cases.items()}})
"""


def _run(tmp_path, select: bool) -> dict:
    out = str(tmp_path / f"cases_{select}.npz")
    script = AS_CPU.format(root=ROOT, select=select) + CASES + SAVE.format(out=out)
    proc = subprocess.run([sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(np.load(out))


def test_selects_give_the_gather_s_values_bit_for_bit(tmp_path):
    xla, selects = _run(tmp_path, False), _run(tmp_path, True)
    assert selects["taken"].tolist() == [True, True, True, True, True, False]
    for name in xla:
        if name != "taken":
            assert xla[name].tobytes() == selects[name].tobytes(), name
    assert selects["two batch dims, rows kept, out of range clamped"].shape == (2, 4, 7)


def test_the_rule_leaves_gathers_of_other_shapes_and_long_axes():
    mode = jax.lax.GatherScatterMode.CLIP
    vmapped = jax.lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(), start_index_map=(1,),
                                             operand_batching_dims=(0,), start_indices_batching_dims=(0,))
    assert tpu_gather.picked_axis((8, 3), (8, 1), (8, 1), vmapped, (1, 1), mode) == (1, 0)
    assert tpu_gather.picked_axis((8, 17), (8, 1), (8, 1), vmapped, (1, 1), mode) is None  # over MAX_CHOICES
    assert tpu_gather.picked_axis((8, 3), (8, 1), (8, 1), vmapped, (1, 1),
                                  jax.lax.GatherScatterMode.FILL_OR_DROP) is None
    unbatched = jax.lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    assert tpu_gather.picked_axis((3,), (1,), (), unbatched, (1,), mode) is None


def _tpu_gathers(source: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != tpu_gather.VARIABLE}
    if source == "off":
        env[tpu_gather.VARIABLE] = "off"
    script = (f"import sys, re, jax, jax.numpy as jnp\nsys.path.insert(0, {ROOT!r})\nimport envs\n"
              "f = jax.vmap(lambda c: c[jnp.argmin(c)])\n"
              "p = jax.export.export(jax.jit(f), platforms=['tpu'])(jax.ShapeDtypeStruct((8, 3), jnp.float32))\n"
              "print(p.mlir_module().count('\"stablehlo.gather\"'))\n")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()[-1]


def test_a_program_lowered_for_a_tpu_picks_by_selects_unless_switched_off():
    assert _tpu_gathers("on") == "0"
    assert _tpu_gathers("off") == "1"


def test_pick_clamps_like_the_gather():
    x = jnp.arange(12.0).reshape(4, 3)
    got = tpu_gather.pick(x, jnp.asarray([[-1], [1], [2], [5]]), 1)
    np.testing.assert_array_equal(got, [[0.0], [4.0], [8.0], [11.0]])
    assert re.fullmatch(r"\d+", str(tpu_gather.MAX_CHOICES))


def test_xla_lowering_restores_xla_s_gather_for_the_body_only(monkeypatch):
    """What a benchmark's peer runs under (its users' TPU programs), and ours after it."""
    monkeypatch.delenv(tpu_gather.VARIABLE, raising=False)
    def gathers():
        f = jax.vmap(lambda c: c[jnp.argmin(c)])
        program = jax.export.export(jax.jit(f), platforms=["tpu"])(jax.ShapeDtypeStruct((8, 3), jnp.float32))
        return program.mlir_module().count('"stablehlo.gather"')

    assert tpu_gather.apply()  # as importing envs did (this module's tests may have replaced it)
    assert gathers() == 0
    with tpu_gather.xla_lowering():
        assert gathers() == 1
    assert gathers() == 0
