"""sim/core/step_ring.py: the replay ring that stores each observation once, worked by hand.

Every test writes steps whose observations say where they come from (obs = 100 * step +
env), so a sample's next observation can be checked against the one its env really saw."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sim.core.contract import Step
from sim.core import buffer, step_ring

NUM_ENVS = 4


def step(t, terminated=(), truncated=(), num_envs=NUM_ENVS):
    """Step t of every env: obs 100 t + env, reward t + env / 10; the envs listed end their
    episode here. A truncated env's true final observation is -(100 (t + 1) + env); every
    other next_obs is what the next step's obs will be (the ring never stores it)."""
    env = np.arange(num_envs, dtype=np.float32)
    term = np.isin(env, terminated).astype(np.float32)
    trunc = np.isin(env, truncated).astype(np.float32)
    nxt = np.where(trunc > 0, -(100.0 * (t + 1) + env), 100.0 * (t + 1) + env).astype(np.float32)
    return Step(obs=jnp.asarray(100.0 * t + env)[:, None], next_obs=jnp.asarray(nxt)[:, None],
                reward=jnp.asarray(t + env / 10), terminated=jnp.asarray(term), truncated=jnp.asarray(trunc),
                episode_done=jnp.asarray(np.maximum(term, trunc)), last_return=jnp.zeros(num_envs),
                acted=jnp.asarray(100.0 * t + env)[:, None])


def ring(capacity, interval=1000, num_envs=NUM_ENVS):
    return step_ring.init(step_ring.example_row(jnp.zeros(1), jnp.zeros(1)), capacity, num_envs, interval)


def fill(r, steps, **ends):
    add = jax.jit(step_ring.add)
    for t in range(steps):
        r = add(r, step(t, **{k: v(t) for k, v in ends.items()}))
    return r


@pytest.mark.parametrize("capacity, steps", [(64, 5), (30, 12)])  # not full; full and wrapped (30 % 4 != 0)
@pytest.mark.parametrize("n", [1, 3])
def test_samples_are_consecutive_steps_of_one_env_with_its_next_observation(capacity, steps, n):
    r = fill(ring(capacity), steps)
    b = step_ring.sample(r, jax.random.PRNGKey(0), 3000, n)
    obs = np.asarray(b.obs)[:, 0]
    assert b.obs.shape == (3000, 1) and b.action.shape == (3000, 1)
    np.testing.assert_array_equal(np.asarray(b.action)[:, 0], obs)
    env, t = obs % 100, obs // 100
    reward = np.asarray(b.reward).reshape(3000, n)
    np.testing.assert_allclose(reward, t[:, None] + np.arange(n) + env[:, None] / 10, atol=1e-5)  # one env's steps
    np.testing.assert_array_equal(np.asarray(b.next_obs)[:, 0], obs + 100 * n)  # the n-th step's next obs
    written = steps * NUM_ENVS
    kept = min(capacity, written)
    order = t * NUM_ENVS + env  # each row's place in the order of writing
    assert order.min() >= written - kept  # nothing the ring has overwritten
    # every row whose n steps and their successor are stored starts a sample, no other
    assert order.max() == written - 1 - n * NUM_ENVS
    assert len(set(order.tolist())) == kept - n * NUM_ENVS


def test_a_truncation_bootstraps_from_its_true_final_observation_a_termination_not_at_all():
    # env 1 truncates at step 2, env 2 terminates at step 2; n = 3 samples from step 1
    r = fill(ring(64), 6, truncated=lambda t: [1] if t == 2 else [], terminated=lambda t: [2] if t == 2 else [])
    b = step_ring.sample(r, jax.random.PRNGKey(1), 4000, 3)
    obs = np.asarray(b.obs)[:, 0]
    nxt = np.asarray(b.next_obs)[:, 0]
    trunc, term = np.asarray(b.truncated), np.asarray(b.terminated)
    from_1 = obs == 101  # env 1 from step 1: steps 1, 2 (truncated): bootstraps from step 2's final obs
    assert from_1.any()
    np.testing.assert_array_equal(trunc[from_1], [[0, 1, 0]] * from_1.sum())
    np.testing.assert_array_equal(nxt[from_1], -301.0)  # the true final observation, not the next episode's
    from_0 = obs == 1  # env 1 from step 0: its truncation is the sample's second step
    np.testing.assert_array_equal(nxt[from_0], -301.0)
    from_2 = obs == 201  # env 1 from step 2: truncated at once
    np.testing.assert_array_equal(nxt[from_2], -301.0)
    after = obs == 301  # env 1 after its truncation: plain steps again
    np.testing.assert_array_equal(nxt[after], 601.0)
    ended = obs == 102  # env 2 from step 1: terminated at its second step
    np.testing.assert_array_equal(term[ended], [[0, 1, 0]] * ended.sum())
    assert np.isfinite(nxt[ended]).all()  # unread by the target (no bootstrap), finite


def test_final_observations_outlive_every_row_that_points_at_them():
    # Every env truncates as often as it can (every `interval` steps, staggered) while a ring
    # of 10 steps per env wraps many times: each sampled truncation still finds its own final
    # observation in the side table.
    interval, capacity = 3, 10 * NUM_ENVS
    r = ring(capacity, interval)
    assert r.slots == step_ring.slots(capacity, NUM_ENVS, interval) == 10 // 3 + 2
    r = fill(r, 60, truncated=lambda t: [e for e in range(NUM_ENVS) if (t + e) % interval == interval - 1])
    b = step_ring.sample(r, jax.random.PRNGKey(2), 4000, 1)
    obs, nxt, trunc = np.asarray(b.obs)[:, 0], np.asarray(b.next_obs)[:, 0], np.asarray(b.truncated)
    assert trunc.sum() > 500
    np.testing.assert_array_equal(nxt[trunc > 0], -(obs[trunc > 0] + 100))
    np.testing.assert_array_equal(nxt[trunc == 0], obs[trunc == 0] + 100)


def test_the_ring_stores_each_observation_once():
    obs, action = jnp.zeros(244), jnp.zeros(17)
    example = step_ring.example_row(obs, action)
    capacity, envs = 4096 * 10_240, 4096
    rows = buffer.nbytes(example, capacity)
    assert rows == capacity * (244 + 17 + 2 + 1) * 4  # obs, action, reward, terminated; int32 final
    table = step_ring.nbytes(example, capacity, envs, 1000) - rows
    # 12 final obs per env and a counter each, and the ring's insert index and size
    assert table == (10_240 // 1000 + 2) * envs * 244 * 4 + envs * 4 + 2 * 4
    # against rows with obs and next_obs: 0.54x here
    assert (rows + table) / (capacity * (2 * 244 + 17 + 2) * 4) < 0.55


def test_the_memory_check_and_checkpoints_count_the_ring_as_it_is_laid_out():
    from sim.run.checkpoints import checkpoint
    from sim.run.populations import population
    from sim.run.build import build_engine
    from tests.helpers import small_config

    cfg = small_config("pendulum", "fasttd3")
    engine = build_engine(cfg)
    template = engine.template(population.keys(cfg)[0])
    ring = {p.what: p for p in engine.memory_parts(template)[0]}["the replay buffer"]
    laid_out = step_ring.nbytes(engine.loop.row, **engine.loop.ring_sizes)
    assert ring.nbytes == laid_out == checkpoint.droppable_bytes(template, engine.droppable_paths(template))
    obs = engine.spec.obs_shape[0]
    assert laid_out < cfg.agent_config.max_replay_size * (2 * obs + engine.spec.action_size + 2) * 4  # no next_obs


GATHER = re.compile(r'"stablehlo\.gather"\(.*?slice_sizes = array<i64: ([\d, ]+)>.*?: \(tensor<([\dx]+)x\w+>')


@pytest.mark.parametrize("n", [1, 3])
def test_a_sample_reads_whole_rows_of_the_ring(n):
    # A TPU compiles a gather of part of each row into a serial loop, one trip per sampled
    # row (benchmarks/tpu_compile.py showed two loops of 512 per SAC gradient step); a gather
    # of whole rows is one gather. Every gather from the ring's arrays must take whole rows.
    obs, action = jnp.zeros(7), jnp.zeros(3)
    r = step_ring.init(step_ring.example_row(obs, action), 64, NUM_ENVS, 1000)
    text = jax.jit(lambda r, key: step_ring.sample(r, key, 32, n)).lower(r, jax.random.PRNGKey(0)).as_text()
    ring_arrays = {tuple(x.shape) for x in (*r.rows.data, r.finals)}
    seen = set()
    for sizes, operand in GATHER.findall(text):
        shape = tuple(int(d) for d in operand.split("x"))
        if shape in ring_arrays:
            seen.add(shape)
            assert [int(s) for s in sizes.split(",")] == [1, *shape[1:]], f"a gather of part of the rows of {shape}"
    assert seen == ring_arrays  # the float rows, the int rows and the final observations
