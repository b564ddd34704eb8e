"""The networks' matmul precision (`matmul_dtype`): what is multiplied in bfloat16 or
TensorFloat-32, and how close it stays."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import networks as nets
from tests.helpers import dot_precisions


def _dots(fn, *args) -> list[str]:
    """Operand/result types of every dot_general in fn's lowered program."""
    text = jax.jit(fn).lower(*args).as_text()
    return re.findall(r"stablehlo\.dot_general.*?: \((.*?)\) -> (\S+)", text)


def test_bf16_matmul_is_close_to_float32_value_and_gradients():
    kx, kw, kg = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(kx, (3, 5, 64))
    w = jax.random.normal(kw, (64, 32)) / 8.0
    g = jax.random.normal(kg, (3, 5, 32))

    def loss(mm, x, w):
        return jnp.sum(mm(x, w) * g)

    exact = jax.value_and_grad(loss, argnums=(1, 2))(jnp.matmul, x, w)
    mixed = jax.value_and_grad(loss, argnums=(1, 2))(nets.bf16_matmul, x, w)
    for e, m in zip(jax.tree.leaves(exact), jax.tree.leaves(mixed)):
        assert m.dtype == jnp.float32 and m.shape == e.shape
        rel = float(jnp.linalg.norm(m - e) / jnp.linalg.norm(e))
        assert 0 < rel < 1e-2, rel  # rounded (not exact), by about bfloat16's 2^-8


@pytest.mark.parametrize("matmul_dtype, bf16_dots", [("float32", 0), ("bfloat16", 3)])
def test_mlp_hidden_layers_multiply_in_the_chosen_dtype_forward_and_backward(matmul_dtype, bf16_dots):
    # 3 layers of weights: input (4 -> 32), hidden (32 -> 32), output (32 -> 2). Only the hidden
    # one is mixed: its forward, dx and dw are 3 bfloat16 dots; all the others are float32.
    net = nets.MLP((32, 32), 2, "relu", matmul_dtype=matmul_dtype)
    obs = jnp.ones((8, 4))
    params = net.init(jax.random.PRNGKey(0), obs)

    def loss(params, obs):
        return jnp.sum(net.apply(params, obs) ** 2)

    dots = _dots(jax.grad(loss), params, obs)
    mixed = [d for d in dots if "bf16" in d[0]]
    assert len(mixed) == bf16_dots, dots
    assert all("xbf16>, tensor<" in ops and ops.endswith("xbf16>") and res.endswith("xf32>") for ops, res in mixed)
    assert all("bf16" not in ops for ops, _ in dots if (ops, _) not in mixed)
    grads = jax.grad(loss)(params, obs)
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(grads))


@pytest.mark.parametrize("matmul_dtype, want", [("float32", ["HIGHEST"] * 8), ("tf32", ["HIGH"] * 8),
                                                ("bfloat16", ["HIGHEST"] * 5), ("default", ["DEFAULT"] * 8)])
def test_mlp_matmuls_take_the_chosen_precision_forward_and_backward(matmul_dtype, want):
    # 3 layers: 3 forward dots, 3 weight gradients, 2 input gradients (none for the input).
    # float32 is full float32 whatever JAX's platform default; bfloat16's 3 hidden-layer dots
    # take bfloat16 operands (counted above), its 5 others are full float32.
    net = nets.MLP((32, 32), 2, "relu", matmul_dtype=matmul_dtype)
    obs = jnp.ones((8, 4))
    params = net.init(jax.random.PRNGKey(0), obs)
    grad = jax.grad(lambda params, obs: jnp.sum(net.apply(params, obs) ** 2))
    with jax.default_matmul_precision("highest"):  # as the engine traces its programs: the layers keep theirs
        precisions = dot_precisions(jax.jit(grad).lower(params, obs))
    got = [p for p, (ops, _) in zip(precisions, _dots(grad, params, obs)) if "bf16" not in ops]
    assert got == want
    if matmul_dtype in ("tf32", "default") and jax.devices()[0].platform == "cpu":  # float32's numbers on a CPU
        f32 = nets.MLP((32, 32), 2, "relu")
        jax.tree.map(np.testing.assert_array_equal, jax.jit(grad)(params, obs),
                     jax.jit(jax.grad(lambda p, o: jnp.sum(f32.apply(p, o) ** 2)))(params, obs))


def test_bf16_mlp_gradients_stay_close_to_float32():
    obs = jax.random.normal(jax.random.PRNGKey(1), (64, 6))
    f32 = nets.MLP((128, 128, 128), 3, "swish")
    b16 = nets.MLP((128, 128, 128), 3, "swish", matmul_dtype="bfloat16")
    params = f32.init(jax.random.PRNGKey(0), obs)  # same parameter tree for both
    assert jax.tree.structure(params) == jax.tree.structure(b16.init(jax.random.PRNGKey(0), obs))

    def grads(net):
        return jax.grad(lambda p: jnp.mean(net.apply(p, obs) ** 2))(params)

    for e, m in zip(jax.tree.leaves(grads(f32)), jax.tree.leaves(grads(b16))):
        np.testing.assert_allclose(m, e, rtol=0.05, atol=0.05 * float(jnp.max(jnp.abs(e))))


def test_unknown_matmul_dtype_is_refused():
    with pytest.raises(ValueError, match="matmul_dtype"):
        nets.MLP((8,), 1, matmul_dtype="float16").init(jax.random.PRNGKey(0), jnp.ones((1, 2)))


def test_q_network_layer_norm_normalises_after_the_activation_as_brax_does():
    q = nets.QNetwork((8,), "relu", num_heads=1, layer_norm=True)
    obs, action = jnp.arange(3.0)[None] - 1.0, jnp.ones((1, 2))
    params = q.init(jax.random.PRNGKey(0), obs, action)
    mlp = jax.tree.map(lambda p: p[0], params["params"]["heads"])  # the one head's parameters
    assert "LayerNorm_0" in mlp
    x = jnp.concatenate([obs, action], axis=-1)
    h = jax.nn.relu(x @ mlp["Dense_0"]["kernel"] + mlp["Dense_0"]["bias"])
    h = (h - h.mean(-1, keepdims=True)) / jnp.sqrt(h.var(-1, keepdims=True) + 1e-6)  # scale 1, bias 0 at init
    want = h @ mlp["Dense_1"]["kernel"] + mlp["Dense_1"]["bias"]
    np.testing.assert_allclose(q.apply(params, obs, action), want, rtol=1e-5, atol=1e-6)
    plain = nets.QNetwork((8,), "relu", num_heads=1).init(jax.random.PRNGKey(0), obs, action)
    assert "LayerNorm_0" not in plain["params"]["heads"]


@pytest.mark.parametrize("head_size", [1, 3])
def test_q_network_heads_are_independent_mlps_in_one_batched_program(head_size):
    """Head k of the vmapped QNetwork is the plain MLP with the k-th slice of the stacked
    parameters, in output column k; the heads start from different weights."""
    q = nets.QNetwork((8, 8), "relu", num_heads=2, head_size=head_size)
    obs, action = jax.random.normal(jax.random.PRNGKey(1), (5, 3)), jax.random.normal(jax.random.PRNGKey(2), (5, 2))
    params = q.init(jax.random.PRNGKey(0), obs, action)
    got = q.apply(params, obs, action)
    assert got.shape == ((5, 2) if head_size == 1 else (5, 2, head_size))
    mlp = nets.MLP((8, 8), head_size, "relu")
    x = jnp.concatenate([obs, action], axis=-1)
    heads = [mlp.apply({"params": jax.tree.map(lambda p: p[k], params["params"]["heads"])}, x) for k in range(2)]
    want = jnp.stack(heads, axis=-2)
    np.testing.assert_allclose(got, want[..., 0] if head_size == 1 else want, rtol=1e-6, atol=1e-6)
    kernel = params["params"]["heads"]["Dense_0"]["kernel"]
    assert kernel.shape == (2, 5, 8) and not np.allclose(kernel[0], kernel[1])


def test_swish_is_flaxs_swish_with_the_same_gradient():
    # Wide range, both tails: sigmoid underflows below about -88 and saturates above 17.
    x = jnp.concatenate([jnp.linspace(-120.0, 120.0, 2001), jax.random.normal(jax.random.PRNGKey(0), (4096,)) * 4])
    g = jax.random.normal(jax.random.PRNGKey(1), x.shape)
    import flax.linen as nn

    np.testing.assert_array_equal(nets.swish(x), nn.swish(x))
    ours = jax.grad(lambda x: jnp.sum(nets.swish(x) * g))(x)
    autodiff = jax.grad(lambda x: jnp.sum(nn.swish(x) * g))(x)
    np.testing.assert_allclose(ours, autodiff, rtol=2e-6, atol=1e-7)
    assert nets.ACTIVATIONS["swish"] is nets.swish
    # Reverse over reverse (e.g. a gradient penalty) still differentiates it.
    second = jax.grad(lambda x: jnp.sum(jax.grad(lambda y: jnp.sum(nets.swish(y)))(x)))(x[:50])
    auto_second = jax.grad(lambda x: jnp.sum(jax.grad(lambda y: jnp.sum(nn.swish(y)))(x)))(x[:50])
    np.testing.assert_allclose(second, auto_second, rtol=1e-5, atol=1e-6)
