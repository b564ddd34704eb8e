"""Structured observations: an env's dict of arrays is laid out flat by part, and each of an
agent's networks reads the parts its config names (a policy that sees only "state", a critic
that also sees "privileged_state")."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
import envs
from agents import networks as nets
from sim.core.contract import Budget, ConfigError
from agents.common import obs_inputs
from envs.base import flat_obs, obs_parts_of
from sim.run.config import defaults_for
from tests.helpers import small_config


def test_a_dict_observation_is_laid_out_flat_by_part_name():
    obs = {"state": jnp.arange(2.0), "privileged_state": jnp.arange(6.0).reshape(2, 3) + 10}
    parts = obs_parts_of(jax.eval_shape(lambda: obs))
    assert parts == (("privileged_state", 6), ("state", 2))
    np.testing.assert_array_equal(flat_obs(obs, parts), [10, 11, 12, 13, 14, 15, 0, 1])
    assert obs_parts_of(jnp.zeros(3)) == () and flat_obs(jnp.arange(3), ()).dtype == jnp.float32


def test_the_privileged_cartpole_sees_cartpoles_state_whole_and_without_velocities():
    env, full = envs.make("cartpole_privileged"), envs.make("cartpole")
    assert env.spec.obs_shape == (6,) and env.spec.obs_parts == (("privileged_state", 4), ("state", 2))
    key = jax.random.PRNGKey(3)
    a, b = env.reset(key), full.reset(key)
    for _ in range(5):
        np.testing.assert_array_equal(a.obs[:4], b.obs)
        np.testing.assert_array_equal(a.obs[4:], b.obs[::2])
        a, b = env.step(a, 1), full.step(b, 1)
    assert env.spec.obs_ranges(("state", "privileged_state")) == ((4, 6), (0, 4))


def test_which_parts_each_network_reads():
    priv, array = envs.make("cartpole_privileged").spec, envs.make("cartpole").spec
    cfg = defaults_for("cartpole_privileged", "ppo").agent_config
    assert obs_inputs(cfg, array) is None and obs_inputs(cfg, array, "critic") is None  # one array: all of it
    assert obs_inputs(cfg, priv) == ((4, 6),) and obs_inputs(cfg, priv, "critic") == ((4, 6),)  # "state"
    assert obs_inputs(dataclasses.replace(cfg, actor_obs="privileged_state"), priv, "critic") == ((0, 4),)  # as the actor
    # Every part in its own order is the observation as it is.
    assert obs_inputs(dataclasses.replace(cfg, critic_obs="privileged_state,state"), priv, "critic") is None
    assert obs_inputs(dataclasses.replace(cfg, critic_obs="state, privileged_state"), priv, "critic") == ((4, 6), (0, 4))


def test_the_policy_reads_only_its_parts_and_the_critic_its_own():
    spec = envs.make("cartpole_privileged").spec
    cfg = dataclasses.replace(defaults_for("cartpole_privileged", "ppo").agent_config, critic_obs="privileged_state")
    assert obs_inputs(cfg, spec) == ((4, 6),) and obs_inputs(cfg, spec, "critic") == ((0, 4),)
    agent = agents.get("ppo").make(cfg, spec, None, Budget(10))
    state = agent.init(jax.random.PRNGKey(0))
    params = state.params
    assert params.policy["params"]["Dense_0"]["kernel"].shape[0] == 2
    assert params.value["params"]["Dense_0"]["kernel"].shape[0] == 4
    from agents.common import actor_critic

    _, apply_policy, apply_value, _, _ = actor_critic(cfg, spec)
    obs = jax.random.normal(jax.random.PRNGKey(1), (8, 6))
    hidden = obs.at[:, 1].add(3.0).at[:, 3].add(-2.0)  # the velocities: privileged, unseen by the policy
    np.testing.assert_array_equal(apply_policy(params.policy, obs), apply_policy(params.policy, hidden))
    assert not np.allclose(apply_value(params.value, obs), apply_value(params.value, hidden))
    seen = obs.at[:, 4].add(1.0)  # x, in "state": both read it
    assert not np.allclose(apply_policy(params.policy, obs), apply_policy(params.policy, seen))


def test_q_networks_read_their_parts():
    q = nets.QNetwork((8,), inputs=((0, 4),))
    obs, action = jnp.ones((3, 6)), jnp.ones((3, 1))
    params = q.init(jax.random.PRNGKey(0), obs, action)
    assert params["params"]["heads"]["Dense_0"]["kernel"].shape[1:] == (4 + 1, 8)  # [heads, in, out]
    np.testing.assert_array_equal(q.apply(params, obs, action), q.apply(params, obs.at[:, 4:].set(7.0), action))


@pytest.mark.parametrize("agent", ["ppo", "dqn", "pqn", "ppo_rnn"])
def test_an_unknown_part_is_a_one_line_config_error(agent):
    cfg = dataclasses.replace(defaults_for("cartpole_privileged", agent).agent_config, actor_obs="velocity")
    with pytest.raises(ConfigError, match=r"--actor-obs: the observation has no part 'velocity' \(its parts: "
                                          r"privileged_state, state\)"):
        agents.get(agent).make(cfg, envs.make("cartpole_privileged").spec, None, Budget(10))
    array_env = envs.make("cartpole").spec
    with pytest.raises(ConfigError, match="no part 'velocity'.*one array"):
        agents.get(agent).make(cfg, array_env, None, Budget(10))


def test_an_asymmetric_actor_critic_trains_end_to_end(tmp_path):
    from sim.run.trainer import train

    cfg = small_config("cartpole_privileged", "ppo", critic_obs="privileged_state")
    record = train(cfg, run_dir=str(tmp_path), log=lambda *a: None)
    assert record["epoch"] == cfg.num_epochs and np.isfinite(record["eval/episode_return"])
