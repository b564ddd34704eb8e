"""The seed trap (shared/seeds/000_*.txt) as a regression test: a donated replay buffer must be
updated in place whatever order the train step returns its outputs in.

What decides it (JAX 0.10 `_set_up_aliases`): each flat OUTPUT, in order, takes the first
still-unclaimed donated input of the same shape and dtype. Returning the buffer after params
and key changes nothing by itself (test_plain_jit_return_order_alone_is_harmless); an earlier
output shaped like a buffer leaf steals that leaf's alias and the ring gets copied every call,
with no "donated buffers were not usable" warning (test_plain_jit_same_shaped_output_steals).
sim.core.donation.jit_in_place returns the donated state first inside the program and restores the
caller's order outside, so every order is in place (test_jit_in_place_every_order).
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from sim.core import buffer, donation

CAPACITY = 2**16
EXAMPLE = {"obs": jnp.zeros(8), "action": jnp.zeros(2), "reward": jnp.zeros(()), "next_obs": jnp.zeros(8),
           "done": jnp.zeros(())}
OPT = optax.adam(1e-3)
B_ADD, B_SAMPLE = 256, 128


def init_params(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (10, 32)) * 0.1, "b1": jnp.zeros(32),
            "w2": jax.random.normal(k2, (32, 1)) * 0.1, "b2": jnp.zeros(1)}


def q_value(p, obs, act):
    h = jnp.tanh(jnp.concatenate([obs, act], -1) @ p["w1"] + p["b1"])
    return (h @ p["w2"] + p["b2"])[..., 0]


def ddpg_step(buf, params, opt_state, key, sample_first=False):
    """add a batch -> sample -> critic gradient step; returns (buf, params, opt_state, key)."""
    key, k_new, k_sample = jax.random.split(key, 3)
    new = {"obs": jax.random.normal(k_new, (B_ADD, 8)), "action": jnp.tanh(jax.random.normal(k_new, (B_ADD, 2))),
           "reward": jnp.ones(B_ADD), "next_obs": jax.random.normal(k_sample, (B_ADD, 8)), "done": jnp.zeros(B_ADD)}
    if sample_first:  # read-then-write
        batch = buffer.sample(buf, k_sample, B_SAMPLE)
        buf = buffer.add(buf, new)
    else:  # write-then-read
        buf = buffer.add(buf, new)
        batch = buffer.sample(buf, k_sample, B_SAMPLE)

    def loss(p):
        target = batch["reward"] + 0.99 * (1 - batch["done"]) * q_value(p, batch["next_obs"], batch["action"])
        return jnp.mean((q_value(p, batch["obs"], batch["action"]) - jax.lax.stop_gradient(target)) ** 2)

    updates, opt_state = OPT.update(jax.grad(loss)(params), opt_state, params)
    return buf, optax.apply_updates(params, updates), opt_state, key


def chained_steps(buf, params, opt_state, key):
    """A long chain of dataflow between the first add and the return: 8 scanned steps."""
    def body(carry, _):
        return ddpg_step(*carry), None
    return jax.lax.scan(body, (buf, params, opt_state, key), None, length=8)[0]


# name -> (step(buf, params, opt_state, key) -> outputs, where the new buffer is in the outputs)
ORDERS = {
    "buffer_params_key": (lambda *a: ddpg_step(*a), 0),
    "params_buffer_key": (lambda *a: (lambda b, p, o, k: (p, o, b, k))(*ddpg_step(*a)), 2),
    "params_key_buffer": (lambda *a: (lambda b, p, o, k: (p, o, k, b))(*ddpg_step(*a)), 3),
    "chain_params_key_buffer": (lambda *a: (lambda b, p, o, k: (p, o, k, b))(*chained_steps(*a)), 3),
    # adversarial: an output with exactly the shape/dtype of the ring, before the buffer
    "same_shape_before_buffer": (lambda *a: (lambda b, p, o, k: (b.data[0] * 2.0, p, b))(*ddpg_step(*a)), 2),
}
BENIGN = [n for n in ORDERS if n != "same_shape_before_buffer"]


def fresh():
    params = init_params(jax.random.key(0))
    return buffer.init(EXAMPLE, CAPACITY), params, OPT.init(params), jax.random.key(1)


def buffer_bytes():
    return buffer.nbytes(EXAMPLE, CAPACITY)


def to_numpy(x):
    return np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)


def compile_plain(fun, args):
    return jax.jit(fun, donate_argnums=0).lower(*args).compile()


@pytest.mark.parametrize("order", BENIGN)
def test_plain_jit_return_order_alone_is_harmless(order):
    args = fresh()
    compiled = compile_plain(ORDERS[order][0], args)
    donation.assert_in_place(compiled, args[0])
    mem = compiled.memory_analysis()
    assert mem.alias_size_in_bytes >= buffer_bytes() and mem.temp_size_in_bytes < 0.1 * buffer_bytes()


def test_plain_jit_same_shaped_output_steals_the_alias():
    args = fresh()
    compiled = compile_plain(ORDERS["same_shape_before_buffer"][0], args)
    leaves = jax.tree_util.tree_flatten_with_path(args[0])[0]
    param = {jax.tree_util.keystr(p): i for i, (p, _) in enumerate(leaves)}
    aliases = donation.alias_map(compiled)
    # the donated ring went to output 0 (ring * 2), not to the new buffer's ring
    assert aliases[param[".data[0]"]] == 0
    mem = compiled.memory_analysis()
    assert mem.alias_size_in_bytes >= buffer_bytes()  # so alias bytes alone prove nothing...
    fresh_bytes = mem.output_size_in_bytes - mem.alias_size_in_bytes + mem.temp_size_in_bytes
    assert fresh_bytes >= buffer_bytes()  # ...the new ring is written to fresh memory: a full copy
    with pytest.raises(AssertionError, match="not updated in place"):
        donation.assert_in_place(compiled, args[0])
    # and no warning flags it: every donated input did alias *some* output
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax.jit(ORDERS["same_shape_before_buffer"][0], donate_argnums=0)(*fresh())


@pytest.mark.parametrize("order", list(ORDERS))
def test_jit_in_place_every_order(order):
    fun, out_index = ORDERS[order]
    step = donation.jit_in_place(fun, donate_argnums=0, out_index=out_index)
    args = fresh()
    compiled = step.check(*args)  # each buffer leaf aliases its own new value, temp < 10%
    mem = compiled.memory_analysis()
    assert mem.alias_size_in_bytes >= buffer_bytes() and mem.temp_size_in_bytes < 0.1 * buffer_bytes()

    expected = jax.jit(fun)(*fresh())  # no donation: the reference result
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Some donated buffers were not usable" would raise
        out = step(*args)
    assert all(x.is_deleted() for x in jax.tree.leaves(args[0]))
    assert not any(x.is_deleted() for x in jax.tree.leaves(args[1:]))
    assert jax.tree.structure(out) == jax.tree.structure(expected)  # caller's order restored
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(expected)):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-6)
    added = (8 if order.startswith("chain") else 1) * B_ADD
    new_buf = out[out_index]
    assert int(new_buf.size) == added
    again = step(new_buf, *fresh()[1:])  # the returned buffer donates again on the next call
    assert new_buf.data[0].is_deleted() and int(again[out_index].size) == 2 * added


def test_add_then_sample_stays_in_place_sample_then_add_copies():
    args = fresh()
    write_then_read = compile_plain(lambda *a: ddpg_step(*a, sample_first=False), args)
    read_then_write = compile_plain(lambda *a: ddpg_step(*a, sample_first=True), args)
    donation.assert_in_place(write_then_read, args[0], pairs={i: i for i in range(len(jax.tree.leaves(args[0])))})
    # read-then-write: the alias is still exact, but the scatter does not depend on the gather,
    # so XLA (CPU, JAX 0.10) copies every ring it reads into temp memory to keep the old rows
    # alive: one full extra buffer per call. The engine therefore adds before it samples.
    assert donation.alias_map(read_then_write) == donation.alias_map(write_then_read)
    temp = read_then_write.memory_analysis().temp_size_in_bytes
    if jax.default_backend() == "cpu":
        assert temp >= buffer_bytes()
    with pytest.raises(AssertionError, match="temp memory"):
        donation.assert_in_place(read_then_write, args[0])


def test_unusable_donation_warns_and_bad_new_state_raises():
    buf = buffer.init(EXAMPLE, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="donated buffers were not usable"):
            jax.jit(lambda b: jnp.sum(b.data[0]), donate_argnums=0)(buf)
    drift = donation.jit_in_place(lambda b: (b.replace(size=b.size.astype(jnp.float32)), 0))
    with pytest.raises(ValueError, match=r"\.size is float32\[\].*int32\[\]"):
        drift(buffer.init(EXAMPLE, 8))
    dropped = donation.jit_in_place(lambda b: (b.data, 0))
    with pytest.raises(ValueError, match="tree structure"):
        dropped(buffer.init(EXAMPLE, 8))


def test_jit_in_place_several_donated_args_and_bare_state():
    def fun(params, buf, key):
        return key, buffer.add(buf, jax.tree.map(lambda x: jnp.ones((4,) + x.shape), EXAMPLE)), params
    step = donation.jit_in_place(fun, donate_argnums=(0, 1), out_index=(2, 1))
    args = (init_params(jax.random.key(0)), buffer.init(EXAMPLE, 1024), jax.random.key(1))
    compiled = step.check(*args)  # ahead-of-time use, as train.py does with engine.epoch
    key, buf, params = compiled(*args)
    assert int(buf.size) == 4 and params["w1"].shape == (10, 32) and args[1].data[0].is_deleted()
    key, buf, params = step(params, buf, key)
    assert int(buf.size) == 8
    bare = donation.jit_in_place(lambda b: buffer.add(b, jax.tree.map(lambda x: jnp.ones((4,) + x.shape), EXAMPLE)),
                                 out_index=None)
    bare.check(buffer.init(EXAMPLE, 1024))
    assert int(bare(buffer.init(EXAMPLE, 1024)).size) == 4
