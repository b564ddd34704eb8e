"""Flax MLPs and the two action distributions the agents use.

Shapes: `B...` are any leading batch dims; O = observation size, A = action dims (or the
number of discrete actions).
"""

from __future__ import annotations

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax


@jax.custom_vjp
def swish(x: jax.Array) -> jax.Array:
    """x * sigmoid(x) (flax's `nn.swish`), with a hand-written gradient.

    The backward pass reuses the forward's sigmoid s and output y = x s:
    d/dx = s + y (1 - s). Left to autodiff, XLA keeps x and recomputes from it: on a CPU the
    5x256 value network's forward and backward over 10,240 rows took 124 ms, 115 ms with this.
    """
    return x * jax.nn.sigmoid(x)


def _swish_fwd(x):
    s = jax.nn.sigmoid(x)
    y = x * s
    return y, (s, y)


def _swish_bwd(saved, g):
    s, y = saved
    return (g * (s + y * (1.0 - s)),)


swish.defvjp(_swish_fwd, _swish_bwd)

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "swish": swish,
    "tanh": nn.tanh,
    "relu": nn.relu,
    "elu": nn.elu,
}


MATMUL_DTYPES = ("float32", "tf32", "bfloat16", "default")
# The precision of each network matmul with float32 operands: full float32 on every platform,
# or TensorFloat-32 (10-bit mantissa products, float32 sums) where the hardware has it (NVIDIA
# Ampere and newer; elsewhere it is float32), or the platform's default (one bfloat16 pass on a
# TPU, as Brax's trainers run there; float32 on a CPU). bfloat16's hidden layers take bfloat16
# operands. An explicit precision holds whatever `jax.default_matmul_precision` the program is
# traced under.
PRECISION = {"float32": lax.Precision.HIGHEST, "tf32": lax.Precision.HIGH, "bfloat16": lax.Precision.HIGHEST,
             "default": lax.Precision.DEFAULT}


def _matmul(a: jax.Array, b: jax.Array, a_dims: tuple[int, ...], b_dims: tuple[int, ...]) -> jax.Array:
    return lax.dot_general(a, b, ((a_dims, b_dims), ((), ())), preferred_element_type=jnp.float32)


@jax.custom_vjp
def bf16_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
    """x [..., I] @ w [I, O] -> float32 [..., O], multiplied in bfloat16, summed in float32.

    Its gradient's two matmuls (dx = g w^T, dw = x^T g) take bfloat16 operands too; left to
    autodiff, they would multiply the float32 cotangent in float32.
    """
    return _bf16_matmul_fwd(x, w)[0]


def _bf16_matmul_fwd(x, w):
    xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    return _matmul(xb, wb, (x.ndim - 1,), (0,)), (xb, wb)


def _bf16_matmul_bwd(saved, g):
    xb, wb = saved
    gb = g.astype(jnp.bfloat16)
    batch = tuple(range(xb.ndim - 1))
    return _matmul(gb, wb, (gb.ndim - 1,), (1,)), _matmul(xb, gb, batch, batch)


bf16_matmul.defvjp(_bf16_matmul_fwd, _bf16_matmul_bwd)


def bf16_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """`nn.Dense`'s contraction (lhs's last dim with rhs's first) through `bf16_matmul`."""
    (lhs_c, rhs_c), batch = dimension_numbers
    if tuple(lhs_c) != (lhs.ndim - 1,) or tuple(rhs_c) != (0,) or any(batch):
        raise ValueError(f"bf16_matmul contracts x [..., I] with w [I, O]; got {dimension_numbers}")
    return bf16_matmul(lhs, rhs)


def take(x: jax.Array, inputs) -> jax.Array:
    """The features of `x` [B..., O] that `inputs` names ((start, stop) ranges, in order;
    None: all of them)."""
    if inputs is None:
        return x
    parts = [x[..., start:stop] for start, stop in inputs]
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)


class MLP(nn.Module):
    """Dense layers with `activation` between them (not after the last one).

    matmul_dtype "bfloat16": the hidden-to-hidden layers (all but the first and the last)
    multiply in bfloat16 with float32 sums (`bf16_matmul`); parameters, activations and the
    input and output layers stay float32. "tf32": every layer at TensorFloat-32 precision
    where the hardware has it; "default": every layer at the platform's default precision;
    "float32": full float32 everywhere (`PRECISION`).
    """

    hidden_sizes: Sequence[int]
    out_size: int
    activation: str = "swish"
    out_scale: float = 1.0  # scale of the last layer's init: small for policy heads
    matmul_dtype: str = "float32"
    layer_norm: bool = False  # LayerNorm after each hidden layer's matmul, before its activation
    norm_after_activation: bool = False  # with layer_norm: after the activation instead (Brax's order)
    inputs: tuple[tuple[int, int], ...] | None = None  # the input features it reads (`take`); None: all

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.matmul_dtype not in MATMUL_DTYPES:
            raise ValueError(f"matmul_dtype must be one of {MATMUL_DTYPES}, got {self.matmul_dtype!r}")
        x = take(x, self.inputs)
        act = ACTIVATIONS[self.activation]
        precision = PRECISION[self.matmul_dtype]
        for i, size in enumerate(self.hidden_sizes):
            dot = bf16_dot_general if i > 0 and self.matmul_dtype == "bfloat16" else None
            x = nn.Dense(size, kernel_init=nn.initializers.lecun_uniform(), dot_general=dot, precision=precision)(x)
            if self.layer_norm and self.norm_after_activation:
                x = nn.LayerNorm()(act(x))
            else:
                x = act(nn.LayerNorm()(x) if self.layer_norm else x)
        init = nn.initializers.variance_scaling(self.out_scale, "fan_in", "uniform")
        return nn.Dense(self.out_size, kernel_init=init, precision=precision)(x)


class BatchRenorm(nn.Module):
    """Batch renormalisation (arXiv:1702.03275) of the last axis of x [B..., F], with learned
    scale and bias. Its running mean and variance (and a step count) live in the `batch_stats`
    collection: state that is neither parameters nor optimizer state.

    train: normalise with the batch's statistics (over every device on `axis_name`: global
    statistics, so the update on n devices is the one-device update of the whole batch), then
    after `warmup_steps` updates correct them towards the running ones,
    x_hat = (x - mean_B) / std_B * r + d, r = clip(std_B / std, 1/r_max, r_max) and
    d = clip((mean_B - mean) / std, -d_max, d_max) with no gradient through r and d; the
    running statistics move by `1 - momentum` towards the batch's. Not train: normalise with
    the running statistics (acting, evaluation, a critic valued for the actor's loss).
    """

    train: bool
    momentum: float = 0.99
    epsilon: float = 1e-3
    warmup_steps: int = 100_000
    r_max: float = 3.0
    d_max: float = 5.0
    axis_name: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        size = x.shape[-1]
        ra_mean = self.variable("batch_stats", "mean", lambda: jnp.zeros((size,), jnp.float32))
        ra_var = self.variable("batch_stats", "var", lambda: jnp.ones((size,), jnp.float32))
        steps = self.variable("batch_stats", "steps", lambda: jnp.zeros((), jnp.int32))
        scale = self.param("scale", nn.initializers.ones, (size,), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (size,), jnp.float32)
        if not self.train or self.is_initializing():
            return (x - ra_mean.value) * jax.lax.rsqrt(ra_var.value + self.epsilon) * scale + bias
        axes = tuple(range(x.ndim - 1))
        mean = jnp.mean(x, axes)
        if self.axis_name is not None:
            mean = jax.lax.pmean(mean, self.axis_name)
        var = jnp.mean(jnp.square(x - mean), axes)
        if self.axis_name is not None:
            var = jax.lax.pmean(var, self.axis_name)
        std = jnp.sqrt(var + self.epsilon)
        running_std = jnp.sqrt(ra_var.value + self.epsilon)
        r = jax.lax.stop_gradient(jnp.clip(std / running_std, 1.0 / self.r_max, self.r_max))
        d = jax.lax.stop_gradient(jnp.clip((mean - ra_mean.value) / running_std, -self.d_max, self.d_max))
        warm = steps.value >= self.warmup_steps
        x_hat = (x - mean) / std
        x_hat = jnp.where(warm, x_hat * r + d, x_hat)
        ra_mean.value = self.momentum * ra_mean.value + (1.0 - self.momentum) * jax.lax.stop_gradient(mean)
        ra_var.value = self.momentum * ra_var.value + (1.0 - self.momentum) * jax.lax.stop_gradient(var)
        steps.value = steps.value + 1
        return x_hat * scale + bias


class QNetwork(nn.Module):
    """`num_heads` independent Q(s, a) MLPs. [B..., O], [B..., A] -> [B..., num_heads], or with
    `head_size` > 1 (a distributional critic's logits) [B..., num_heads, head_size].

    The heads are one MLP vmapped over a leading head axis of its parameters (`heads`, kernels
    [num_heads, in, out]): each layer of all heads is one batched matmul and one activation, not
    one per head. SAC's compiled epoch (twin 256 x 256 critics) has 897 fusions and 76 dots
    against 1,020 and 91 with one MLP per head; on a 2-core CPU, where its time is the matmuls',
    the two run equally fast within the noise (76.3 against 76.8 ms per iteration, best of 8).
    """

    hidden_sizes: Sequence[int]
    activation: str = "relu"
    num_heads: int = 2
    head_size: int = 1  # outputs of each head
    matmul_dtype: str = "float32"
    layer_norm: bool = False  # LayerNorm after each hidden activation (brax.training's q_network_layer_norm)
    inputs: tuple[tuple[int, int], ...] | None = None  # the observation features it reads (`take`); None: all

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([take(obs, self.inputs), action], axis=-1)
        heads = nn.vmap(MLP, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=None, out_axes=-2,
                        axis_size=self.num_heads)
        out = heads(self.hidden_sizes, self.head_size, self.activation, matmul_dtype=self.matmul_dtype,
                    layer_norm=self.layer_norm, norm_after_activation=True, name="heads")(x)
        return out[..., 0] if self.head_size == 1 else out


# ---------------------------------------------------------------------------------------
# Distributions: plain functions on the network's raw output.


def categorical_sample(logits: jax.Array, key: jax.Array) -> jax.Array:
    """[B..., N] -> [B...] int32."""
    return jax.random.categorical(key, logits).astype(jnp.int32)


def categorical_log_prob(logits: jax.Array, action: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def categorical_entropy(logits: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def tanh_normal_params(raw: jax.Array, min_std: float = 1e-3) -> tuple[jax.Array, jax.Array]:
    """[B..., 2A] network output -> (loc [B..., A], std [B..., A]); std = softplus + min_std."""
    loc, pre_std = jnp.split(raw, 2, axis=-1)
    return loc, jax.nn.softplus(pre_std) + min_std


def normal_log_prob(u: jax.Array, loc: jax.Array, std: jax.Array) -> jax.Array:
    """Diagonal Gaussian log-density of the pre-squash sample u, summed over A."""
    z = (u - loc) / std
    return jnp.sum(-0.5 * jnp.square(z) - jnp.log(std) - 0.5 * jnp.log(2.0 * jnp.pi), axis=-1)


def tanh_log_det_jacobian(u: jax.Array) -> jax.Array:
    """log |d tanh(u) / du| summed over A, written stably: log(1 - tanh(u)^2)."""
    return jnp.sum(2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u)), axis=-1)


def tanh_normal_log_prob(u: jax.Array, loc: jax.Array, std: jax.Array) -> jax.Array:
    """Log-density of a = tanh(u), u ~ N(loc, std): change of variables."""
    return normal_log_prob(u, loc, std) - tanh_log_det_jacobian(u)


def tanh_normal_entropy(loc: jax.Array, std: jax.Array, noise: jax.Array) -> jax.Array:
    """One-sample estimate of the squashed Gaussian's entropy: H[N] + E[log |J|].

    noise: standard normal [B..., A]; the sample loc + std * noise is reparameterised.
    """
    u = loc + std * noise
    gaussian = jnp.sum(0.5 + 0.5 * jnp.log(2.0 * jnp.pi) + jnp.log(std), axis=-1)
    return gaussian + tanh_log_det_jacobian(u)


def scale_action(squashed: jax.Array, low: jax.Array, high: jax.Array) -> jax.Array:
    """Maps [-1, 1] to [low, high]."""
    return low + 0.5 * (squashed + 1.0) * (high - low)
