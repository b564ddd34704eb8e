"""Recurrent PPO: the recurrent state is reset where an episode starts, the update replays
exactly what acting computed, and it learns a task feed-forward PPO cannot."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import ppo_rnn
from sim.core.contract import restart
from sim.core import rollout
from sim.run.build import build_engine
from sim.run.config import defaults_for
from sim.run.trainer import train
from tests.helpers import small_config


def _nets(cell):
    cfg = small_config("cartpole_no_vel", "ppo_rnn", cell=cell, hidden_size=8)
    spec = build_engine(cfg).spec
    return ppo_rnn.networks(cfg.agent_config, spec), cfg, spec


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_a_start_resets_the_state_and_nothing_before_it_leaks(cell):
    (_, policy_net, _), cfg, spec = _nets(cell)
    obs = jax.random.normal(jax.random.PRNGKey(0), (6, 3) + spec.obs_shape)  # [T, N, O]
    params = policy_net.init(jax.random.PRNGKey(1), _zeros(cell, 3), obs[0])
    fresh = _zeros(cell, 3)
    start = jnp.zeros((6, 3)).at[3, :].set(1.0)  # a new episode at t = 3 in every env
    carry0 = jax.tree.map(lambda x: x + 0.5, fresh)  # a state from before the unroll
    out, _ = ppo_rnn.replay(policy_net.apply, params, carry0, obs, start, fresh)
    after, _ = ppo_rnn.replay(policy_net.apply, params, fresh, obs[3:], jnp.zeros((3, 3)), fresh)
    np.testing.assert_allclose(out[3:], after, rtol=1e-6, atol=1e-6)  # as if the episode began fresh there
    unreset, _ = ppo_rnn.replay(policy_net.apply, params, carry0, obs, jnp.zeros((6, 3)), fresh)
    assert not np.allclose(unreset[3:], after, atol=1e-4)  # the state does carry information
    np.testing.assert_allclose(out[:3], unreset[:3], rtol=1e-6, atol=1e-6)


def _zeros(cell, batch, size=8):
    h = jnp.zeros((batch, size))
    return h if cell == "gru" else (h, h)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_the_update_replays_exactly_what_acting_computed(cell):
    """Two consecutive unrolls with episode ends inside (episodes of 5 steps, unrolls of 8):
    replaying each trajectory from its recorded initial state and starts gives back the
    log-probabilities the policy acted with, so PPO's ratio starts at 1."""
    cfg = small_config("cartpole_no_vel", "ppo_rnn", cell=cell, hidden_size=8, episode_length=5)
    engine = build_engine(cfg)
    state = engine.init(jax.random.PRNGKey(0))
    head, policy_net, _ = ppo_rnn.networks(engine.dev.agent_config, engine.spec)
    env_state, carry = state.env, state.loop
    for key in jax.random.split(jax.random.PRNGKey(1), 2):
        carry0 = carry
        env_state, carry, data, start = rollout.unroll(engine.env, engine.agent, state.agent, state.obs_stats,
                                                       env_state, carry, key, 8)
        assert 0 < float(start.sum()) < start.size  # episodes begin inside the unroll
        fresh = engine.agent.carry(cfg.num_envs)["policy"]
        raw, _ = ppo_rnn.replay(policy_net.apply, state.agent.params.policy, carry0["policy"], data.obs, start, fresh)
        np.testing.assert_allclose(head.log_prob(raw, data.acted.action), data.acted.log_prob, rtol=1e-5, atol=1e-5)


def test_act_reads_and_advances_the_carry():
    cfg = small_config("cartpole_no_vel", "ppo_rnn", hidden_size=8)
    engine = build_engine(cfg)
    state = engine.init(jax.random.PRNGKey(0))
    agent, obs = engine.agent, state.env.obs
    fresh = agent.carry(cfg.num_envs)
    _, acted, after = agent.act(state.agent, state.obs_stats, obs, jax.random.PRNGKey(2), False, fresh)
    _, other, _ = agent.act(state.agent, state.obs_stats, obs, jax.random.PRNGKey(2), False, after)
    assert not np.allclose(after["policy"], fresh["policy"]) and not np.allclose(after["value"], fresh["value"])
    assert not np.allclose(acted.log_prob, other.log_prob)  # same obs, another state: another policy
    kept = restart(agent, after, jnp.zeros(cfg.num_envs).at[0].set(1.0))
    np.testing.assert_array_equal(kept["policy"][0], 0.0)
    np.testing.assert_array_equal(kept["policy"][1:], after["policy"][1:])


def _best(tmp_path, env, agent):
    train(defaults_for(env, agent).replace(progress=False).validate(), run_dir=str(tmp_path), log=lambda *a: None)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return max(r["eval/episode_return"] for r in records if "eval/episode_return" in r)


@pytest.mark.slow
def test_ppo_rnn_learns_cartpole_without_velocities_where_feed_forward_ppo_cannot(tmp_path):
    assert _best(tmp_path / "rnn", "cartpole_no_vel", "ppo_rnn") >= 475
    assert _best(tmp_path / "ff", "cartpole_no_vel", "ppo") <= 150
