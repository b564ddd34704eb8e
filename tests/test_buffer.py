"""sim/core/buffer.py: the device-resident ring replay buffer."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sim.core import buffer
from sim.core.memory import TooLarge

EXAMPLE = {"obs": jnp.zeros(3, jnp.float32), "action": jnp.zeros(2, jnp.int32), "reward": jnp.zeros((), jnp.float32)}


def rows(values):
    """A batch whose row i carries values[i] in every field."""
    v = np.asarray(values)
    return {"obs": jnp.asarray(np.repeat(v[:, None], 3, 1), jnp.float32),
            "action": jnp.asarray(np.repeat(v[:, None], 2, 1), jnp.int32),
            "reward": jnp.asarray(v, jnp.float32)}


def test_init_shapes_and_dtypes():
    s = buffer.init(EXAMPLE, 7)
    # one ring per dtype (in the tree's leaf order: action, obs, reward), a transition one row
    # of each: int32 action (2); float32 obs (3) + reward (1)
    assert [(d.shape, d.dtype) for d in s.data] == [((7, 2), jnp.int32), ((7, 4), jnp.float32)]
    ring = buffer.contents(s)
    assert ring["obs"].shape == (7, 3) and ring["obs"].dtype == jnp.float32
    assert ring["action"].shape == (7, 2) and ring["action"].dtype == jnp.int32
    assert ring["reward"].shape == (7,)
    assert s.insert_index.dtype == jnp.int32 and s.size.dtype == jnp.int32
    assert int(s.size) == 0 and s.capacity == 7
    assert buffer.nbytes(s) == 7 * (3 * 4 + 2 * 4 + 4) == buffer.nbytes(EXAMPLE, 7)


def test_add_sample_round_trip():
    s = buffer.add(buffer.init(EXAMPLE, 8), rows([1, 2, 3, 4]))
    assert int(s.size) == 4 and int(s.insert_index) == 4
    np.testing.assert_array_equal(buffer.contents(s)["reward"], [1, 2, 3, 4, 0, 0, 0, 0])
    b = jax.jit(buffer.sample, static_argnums=2)(s, jax.random.key(0), 64)
    assert b["obs"].shape == (64, 3) and b["action"].dtype == jnp.int32
    # every sampled row is one whole stored transition
    np.testing.assert_array_equal(b["obs"][:, 0], b["reward"])
    np.testing.assert_array_equal(b["action"][:, 1], b["reward"].astype(np.int32))
    assert set(np.asarray(b["reward"]).tolist()) == {1, 2, 3, 4}


def test_wrap_around_overwrites_oldest_first():
    add = jax.jit(buffer.add)
    s = add(buffer.init(EXAMPLE, 5), rows([0, 1, 2]))
    s = add(s, rows([3, 4, 5, 6]))  # fills rows 3, 4, then wraps to 0, 1
    np.testing.assert_array_equal(buffer.contents(s)["reward"], [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(buffer.contents(s)["obs"][:, 2], [5, 6, 2, 3, 4])
    assert int(s.insert_index) == 2 and int(s.size) == 5
    s = add(s, rows([7]))  # the oldest left (2) goes next
    np.testing.assert_array_equal(buffer.contents(s)["reward"], [5, 6, 7, 3, 4])


def test_full_capacity_batch_and_size_saturates():
    s = buffer.init(EXAMPLE, 4)
    for i in range(3):
        s = buffer.add(s, rows([10 * i + 1, 10 * i + 2, 10 * i + 3]))
        assert int(s.size) == min(3 * (i + 1), 4)
    s = buffer.add(s, rows([7, 8, 9, 10]))  # B == capacity
    assert int(s.size) == 4
    assert sorted(np.asarray(buffer.contents(s)["reward"]).tolist()) == [7, 8, 9, 10]


def test_sample_only_from_filled_part():
    s = buffer.add(buffer.init(EXAMPLE, 1000), rows(np.arange(1, 11)))
    b = buffer.sample(s, jax.random.key(1), 4096)
    r = np.asarray(b["reward"])
    assert r.min() >= 1 and r.max() <= 10  # never an empty (zero) row
    assert len(set(r.tolist())) == 10  # and all filled rows are reachable


def test_can_sample():
    s = buffer.init(EXAMPLE, 10)
    assert not bool(buffer.can_sample(s, 1))
    s = buffer.add(s, rows([1, 2, 3]))
    assert bool(buffer.can_sample(s, 3)) and not bool(buffer.can_sample(s, 4))
    assert bool(jax.jit(buffer.can_sample)(s, 2))


@pytest.mark.parametrize("capacity", [0, -3, 2.5, True, "8", None])
def test_bad_capacity(capacity):
    with pytest.raises(ValueError, match="capacity"):
        buffer.init(EXAMPLE, capacity)


def test_add_mismatches_raise():
    s = buffer.init(EXAMPLE, 4)
    bad_dtype = dict(rows([1]), action=jnp.zeros((1, 2), jnp.float32))
    with pytest.raises(ValueError, match=r"\['action'\].*expected \[B, 2\] int32"):
        buffer.add(s, bad_dtype)
    bad_shape = dict(rows([1]), obs=jnp.zeros((1, 4)))
    with pytest.raises(ValueError, match=r"\['obs'\].*expected \[B, 3\] float32, got \[1, 4\]"):
        jax.jit(buffer.add)(s, bad_shape)
    with pytest.raises(ValueError, match=r"\['reward'\].*expected \[B\] float32, got \[\]"):
        buffer.add(s, dict(rows([1]), reward=jnp.zeros(())))
    with pytest.raises(ValueError, match="tree"):
        buffer.add(s, {"obs": jnp.zeros((1, 3)), "reward": jnp.zeros(1)})
    with pytest.raises(ValueError, match="disagree"):
        buffer.add(s, dict(rows([1, 2]), reward=jnp.zeros(3)))
    with pytest.raises(ValueError, match="capacity 4"):
        buffer.add(s, rows([1, 2, 3, 4, 5]))


@pytest.mark.parametrize("batch_size", [0, -1, 2.0])
def test_bad_sample_size(batch_size):
    with pytest.raises(ValueError, match="batch_size"):
        buffer.sample(buffer.init(EXAMPLE, 4), jax.random.key(0), batch_size)


class FakeDevice:
    def __init__(self, limit):
        self.limit = limit

    def memory_stats(self):
        return {"bytes_limit": self.limit}


def test_check_fits_suggests_a_capacity_that_fits():
    row = buffer.transition_bytes(EXAMPLE)  # 24 bytes
    dev = FakeDevice(10 * 1024**3)
    with pytest.raises(TooLarge, match=r"largest capacity that fits is \d+") as e:
        buffer.check_fits(EXAMPLE, 10**12, device=dev, other_bytes=1024**3)
    msg = str(e.value)
    assert f"replay buffer of {10**12} transitions x {row} bytes" in msg and "90% of 10.00 GiB" in msg
    fits = int(re.search(r"largest capacity that fits is (\d+)", msg).group(1))
    assert fits == (int(10 * 1024**3 * buffer.HEADROOM) - 1024**3) // row
    assert buffer.check_fits(EXAMPLE, fits, device=dev, other_bytes=1024**3) == fits * row
    with pytest.raises(ValueError):
        buffer.check_fits(EXAMPLE, fits + 1, device=dev, other_bytes=1024**3)


def test_check_fits_on_this_host():
    # CPU devices report no bytes_limit: the bound is the host's available RAM.
    with pytest.raises(ValueError, match="does not fit") as e:
        buffer.check_fits(EXAMPLE, 10**15)
    fits = e.value.fits
    assert e.value.quantity == "max_replay_size" and f"largest capacity that fits is {fits}" in str(e.value)
    assert fits > 0
    buffer.check_fits(EXAMPLE, max(1, fits // 2))  # half, as free RAM moves between calls


def test_gather_reads_only_the_named_fields_of_the_given_rows():
    s = buffer.add(buffer.init(EXAMPLE, 8), rows([1, 2, 3, 4]))
    at = jnp.asarray([[3, 0], [1, 1]], jnp.int32)
    got = buffer.gather(s, at, ("reward", "action"))
    assert set(got) == {"reward", "action"}
    np.testing.assert_array_equal(got["reward"], [[4, 1], [2, 2]])
    assert got["action"].shape == (2, 2, 2) and got["action"].dtype == jnp.int32
    np.testing.assert_array_equal(got["action"][..., 1], [[4, 1], [2, 2]])
    # one gather per dtype, of whole rows (obs 3 floats and reward): a TPU compiles a gather of
    # part of each row into a serial loop of one-row slices
    hlo = jax.jit(lambda s, at: buffer.gather(s, at, ("reward",))).lower(s, at).as_text()
    assert re.findall(r"slice_sizes = array<i64: ([\d, ]+)>", hlo) == ["1, 4"]
    with pytest.raises(ValueError, match="no field 'next_obs'"):
        buffer.gather(s, at, ("next_obs",))


def test_a_row_wider_than_a_tile_is_stored_as_whole_tiles_and_the_rest():
    # humanoid's replay row: obs 244 + action 17 + reward + terminated = 263 float32 columns,
    # stored as 256 + 7 (a TPU copies an array of 263 columns between layouts at every call)
    example = {"obs": jnp.zeros(244), "action": jnp.zeros(17), "reward": jnp.zeros(()), "terminated": jnp.zeros(())}
    s = buffer.init(example, 6)
    assert [d.shape for d in s.data] == [(6, 256), (6, 7)] and buffer.nbytes(s) == buffer.nbytes(example, 6)
    rng = np.random.default_rng(0)
    batch = {k: jnp.asarray(rng.normal(size=(4, *v.shape)), jnp.float32) for k, v in example.items()}
    s = buffer.add(s, batch)
    for k in example:  # every field round-trips, one that straddles the cut too (in leaf order obs is 17-260)
        np.testing.assert_array_equal(buffer.contents(s)[k][:4], batch[k])
    at = jnp.asarray([[3, 1], [0, 2]], jnp.int32)
    got = buffer.gather(s, at, ("obs", "reward"))
    np.testing.assert_array_equal(got["obs"], np.asarray(batch["obs"])[np.asarray(at)])
    np.testing.assert_array_equal(got["reward"], np.asarray(batch["reward"])[np.asarray(at)])
    # reward lies in the rest alone: its gather reads that array only
    hlo = jax.jit(lambda s, at: buffer.gather(s, at, ("reward",))).lower(s, at).as_text()
    assert re.findall(r"slice_sizes = array<i64: ([\d, ]+)>", hlo) == ["1, 7"]
