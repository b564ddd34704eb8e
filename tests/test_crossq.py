"""CrossQ: batch renormalisation worked by hand, the critics' one pass over the current and next
observations, no target networks, batch statistics in the state, and learning on CPU.
(Donation, one compile and bitwise resume: test_engine.py and test_checkpoint.py, as for every
agent; the same update on 1 and 2 devices: test_parallel.py.)"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sim.core.contract import Transition
from agents.crossq import CrossQState
from agents.networks import BatchRenorm
from sim.core.contract import without_hyperparams
from envs.wrappers import init_stats
from sim.run.build import build_engine
from tests.helpers import small_config

EPS = 1e-3


def renorm(x, train, stats=None, warmup=100, momentum=0.9):
    """(output, updated statistics) of a fresh BatchRenorm (or one with `stats`) on x."""
    layer = BatchRenorm(train, momentum, warmup_steps=warmup)
    variables = layer.init(jax.random.PRNGKey(0), x)
    if stats is not None:
        variables = {"params": variables["params"], "batch_stats": stats}
    out, mutated = layer.apply(variables, x, mutable=["batch_stats"])
    return np.asarray(out), jax.tree.map(np.asarray, mutated["batch_stats"])


def test_batch_renorm_before_its_warmup_is_batch_norm_and_moves_its_running_statistics():
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(64, 5)).astype(np.float32)
    out, stats = renorm(jnp.asarray(x), train=True)
    mean, var = x.mean(0), x.var(0)
    np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + EPS), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(stats["mean"], 0.1 * mean, rtol=1e-5)  # 0.9 * 0 + 0.1 * mean
    np.testing.assert_allclose(stats["var"], 0.9 + 0.1 * var, rtol=1e-5)
    assert int(stats["steps"]) == 1
    evaluated, unchanged = renorm(jnp.asarray(x), train=False, stats=stats)  # the running statistics
    np.testing.assert_allclose(evaluated, (x - stats["mean"]) / np.sqrt(stats["var"] + EPS), rtol=1e-4, atol=1e-4)
    assert int(unchanged["steps"]) == 1


def test_batch_renorm_after_its_warmup_corrects_towards_the_running_statistics_within_bounds():
    x = np.random.default_rng(1).normal(0.0, 1.0, size=(128, 3)).astype(np.float32)
    x[:, 2] *= 100.0  # far from its running statistics: r and d clipped
    stats = {"mean": np.array([0.5, 0.0, 0.0], np.float32), "var": np.array([4.0, 1.0, 1.0], np.float32),
             "steps": np.asarray(100, np.int32)}
    out, _ = renorm(jnp.asarray(x), train=True, stats=stats, warmup=100)
    mean, std = x.mean(0), np.sqrt(x.var(0) + EPS)
    running_std = np.sqrt(stats["var"] + EPS)
    r = np.clip(std / running_std, 1 / 3, 3)
    d = np.clip((mean - stats["mean"]) / running_std, -5, 5)
    assert r[2] == 3.0  # clipped
    np.testing.assert_allclose(out, (x - mean) / std * r + d, rtol=1e-4, atol=1e-4)


def test_batch_renorm_passes_no_gradient_through_its_corrections():
    x = jax.random.normal(jax.random.PRNGKey(2), (32, 4)) * 3 + 1
    layer = BatchRenorm(True, 0.9, warmup_steps=0)
    variables = layer.init(jax.random.PRNGKey(0), x)

    def loss(x):
        return jnp.sum(layer.apply(variables, x, mutable=["batch_stats"])[0] * jnp.arange(4.0))

    def by_hand(x):  # r and d as constants
        mean, std = jnp.mean(x, 0), jnp.sqrt(jnp.var(x, 0) + EPS)
        r = jax.lax.stop_gradient(jnp.clip(std / jnp.sqrt(1.0 + EPS), 1 / 3, 3))
        d = jax.lax.stop_gradient(jnp.clip(mean / jnp.sqrt(1.0 + EPS), -5, 5))
        return jnp.sum(((x - mean) / std * r + d) * jnp.arange(4.0))

    np.testing.assert_allclose(jax.grad(loss)(x), jax.grad(by_hand)(x), rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def engine():
    cfg = small_config("pendulum", "crossq", grad_updates_per_step=1, policy_delay=1)
    return cfg, build_engine(cfg)


def test_the_critics_see_the_current_and_next_observations_in_one_pass(engine):
    """One critic step moves each critic's input statistics towards the mean of [s; s']: both
    halves went through the critics' one training pass."""
    cfg, engine = engine
    state = engine.agent.init(jax.random.PRNGKey(0))
    assert not any(f.name.startswith("target") for f in dataclasses.fields(CrossQState))  # no target networks
    rng = np.random.default_rng(3)
    obs = rng.normal(2.0, 1.0, size=(16, 3)).astype(np.float32)
    next_obs = rng.normal(-4.0, 1.0, size=(16, 3)).astype(np.float32)
    batch = Transition(obs=obs, next_obs=next_obs, reward=np.ones(16, np.float32),
                       terminated=np.zeros(16, np.float32), action=rng.uniform(-1, 1, (16, 1)).astype(np.float32))
    new, metrics = jax.jit(engine.agent.update)(state, init_stats((3,)), jax.tree.map(jnp.asarray, batch),
                                                jax.random.PRNGKey(1))
    first = new.q_stats["twins"]["BatchRenorm_0"]
    momentum = cfg.agent_config.batch_norm_momentum
    want = (1 - momentum) * np.concatenate([obs, next_obs]).mean(0)  # the obs part of [obs, action]
    np.testing.assert_allclose(np.asarray(first["mean"])[:, :3], np.broadcast_to(want, (2, 3)), rtol=1e-4)
    assert np.all(np.asarray(first["steps"]) == 1) and int(new.step) == 1
    # the policy's statistics moved too (its step), and every new value is finite
    assert int(np.asarray(new.policy_stats["BatchRenorm_0"]["steps"])) == 1
    learned = without_hyperparams(new.replace(hp=None))  # (an unset max-grad-norm is +inf)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(learned))
    assert np.isfinite(float(metrics["critic"]))


def test_acting_reads_the_running_statistics_and_changes_nothing(engine):
    _, engine = engine
    state = engine.agent.init(jax.random.PRNGKey(0))
    obs = jnp.ones((4, 3))
    a, _, _ = engine.agent.act(state, None, obs, jax.random.PRNGKey(1), True, None)
    b, _, _ = engine.agent.act(state, None, obs, jax.random.PRNGKey(2), True, None)
    np.testing.assert_array_equal(a, b)  # deterministic, and no statistics moved in between


@pytest.mark.slow  # (56 s on a 2-core CPU; CrossQ's update and engine tests run by default)
def test_crossq_learns_pendulum_in_its_default_budget(tmp_path):
    from tests.test_learning import run

    records, evals = run(tmp_path, "pendulum", "crossq", epochs=4, num_eval_envs=16)
    assert records[-1]["env_steps"] <= 6_000 + 1_200
    assert evals[-1][1] >= -250, evals


@pytest.mark.slow  # (about 2 minutes on one core, mostly the positional backend's compile)
def test_crossq_learns_brax_inverted_pendulum_in_its_default_budget(tmp_path):
    from tests.test_learning import run

    records, evals = run(tmp_path, "inverted_pendulum", "crossq", backend="positional", epochs=4, num_eval_envs=16)
    assert evals[-1][1] >= 900, evals
