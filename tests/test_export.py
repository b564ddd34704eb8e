"""`--play RUN_DIR --export`: the deterministic policy with its observation normalisation
folded in, as an ONNX graph (run here by onnxruntime) and as a .npz run by numpy alone; both
match the JAX policy on 1,000 observations, for every feed-forward agent."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import agents as registry
from sim.core.contract import RECURRENT, fresh_carry
from envs.wrappers import RunningStats
from sim.run.policy import export
from sim.run.build import build_engine
from tests.helpers import agent_env, needs, small_config

KEY = jax.random.PRNGKey(0)
# Every feed-forward agent of the registry (a recurrent policy's state does not export).
AGENTS = [name for name, agent in registry.all_agents().items() if agent.kind is not RECURRENT]


def _policy(agent: str, **overrides):
    """An engine, a fresh agent state and observation statistics far from (0, 1), and 1,000
    observations around them with the JAX policy's actions."""
    env = overrides.pop("env", agent_env(agent))
    engine = build_engine(small_config(env, agent, **overrides))
    state = engine.agent.init(KEY, engine.hp)
    shape = engine.spec.obs_shape
    k1, k2, k3 = jax.random.split(KEY, 3)
    stats = RunningStats(count=np.float32(100.0), mean=jax.random.normal(k1, shape) * 3,
                         m2=100.0 * (0.5 + jax.random.uniform(k2, shape)) ** 2)
    obs = stats.mean + stats.std * jax.random.normal(k3, (1000,) + shape)
    agent = engine.agent
    want = np.asarray(jax.jit(lambda o: agent.act(state, stats, o, KEY, True, fresh_carry(agent, 1000))[0])(obs))
    return engine, state, stats, np.asarray(obs), want


@pytest.mark.parametrize("agent", AGENTS)
def test_the_npz_runs_with_numpy_alone_and_matches_the_jax_policy(agent, tmp_path):
    engine, state, stats, obs, want = _policy(agent)
    path = str(tmp_path / "policy.npz")
    export.write(path, engine, state, stats)
    got = export.numpy_policy(path)(obs)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    one = export.numpy_policy(path)(obs[:1])  # any batch size
    np.testing.assert_allclose(one, want[:1], atol=1e-5, rtol=0)


@needs("export")
@pytest.mark.parametrize("agent", AGENTS)
def test_the_onnx_graph_matches_the_jax_policy_in_onnxruntime(agent, tmp_path):
    engine, state, stats, obs, want = _policy(agent)
    path = str(tmp_path / "policy.onnx")
    export.write(path, engine, state, stats)
    got = export.run_file(path, obs)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_a_structured_observation_exports_the_policys_part_only(tmp_path):
    engine, state, stats, obs, want = _policy("sac", env="pendulum", randomize=("m=0.5:1.5",), obs_noise=0.1,
                                              privileged_critic=True)
    path = str(tmp_path / "policy.npz")
    export.write(path, engine, state, stats)
    forward = export.numpy_policy(path)
    np.testing.assert_allclose(forward(obs), want, atol=1e-5, rtol=0)
    hidden = obs.copy()
    hidden[:, 3:] = 0.0  # the privileged parts: the exported policy never reads them
    np.testing.assert_array_equal(forward(hidden), forward(obs))


def test_the_exported_policy_clips_observations_as_its_run_did(tmp_path):
    """--obs-clip is folded in with the normalisation: on observations far outside the
    statistics the file matches the JAX policy, clipped (5) or not (None), and the two differ."""
    got = {}
    for clip in (5.0, None):
        engine, state, stats, obs, _ = _policy("ppo", env="pendulum", obs_clip=clip)
        far = np.asarray(stats.mean + 20.0 * (obs - stats.mean))  # about 20 standard deviations out
        agent = engine.agent
        want = np.asarray(jax.jit(lambda o: agent.act(state, stats, o, KEY, True, None)[0])(far))
        path = str(tmp_path / f"policy_{clip}.npz")
        export.write(path, engine, state, stats)
        got[clip] = export.numpy_policy(path)(far)
        np.testing.assert_allclose(got[clip], want, atol=1e-5, rtol=0)
    assert np.abs(got[5.0] - got[None]).max() > 1e-3


def test_a_recurrent_policy_is_refused():
    engine = build_engine(small_config("cartpole", "ppo_rnn"))
    state = engine.agent.init(KEY, engine.hp)
    from envs.wrappers import init_stats

    with pytest.raises(export.ExportError, match="recurrent"):
        export.trace(engine, state, init_stats(engine.spec.obs_shape))
