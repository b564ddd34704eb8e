"""Wrappers on a tiny probe env whose every step is known in advance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.base import Env, EnvSpec
from envs.wrappers import ActionRepeat, AutoReset, EpisodeStats, init_stats, merge_stats, normalize, update_stats


class Counter(Env):
    """obs = [position]; action adds to the position; reward = action; terminates at 3."""

    name = "counter"

    def __init__(self, episode_length=5):
        self.spec = EnvSpec(obs_shape=(1,), discrete=False, episode_length=episode_length, action_shape=(1,),
                            action_low=(0.0,), action_high=(1.0,))

    def _reset(self, key):
        return jnp.zeros(()), jnp.zeros((1,))

    def _step(self, x, action):
        x = x + action[0]
        return x, x[None], action[0], x >= 3.0


def run(env, actions):
    state = env.reset(jax.random.PRNGKey(0))
    out = []
    for a in actions:
        state = env.step(state, jnp.array([a], jnp.float32))
        out.append(state)
    return out


def test_time_limit_truncates():
    states = run(Counter(episode_length=3), [0.0, 0.0, 0.0])
    assert [float(s.truncated) for s in states] == [0.0, 0.0, 1.0]
    assert [float(s.terminated) for s in states] == [0.0, 0.0, 0.0]


def test_auto_reset_keeps_final_obs_and_transition():
    env = AutoReset(EpisodeStats(Counter(episode_length=10)))
    states = run(env, [1.0, 1.0, 1.0, 1.0])
    ended = states[2]
    assert float(ended.terminated) == 1.0 and float(ended.reward) == 1.0
    assert float(ended.info["final_obs"][0]) == 3.0  # the terminal observation
    assert float(ended.obs[0]) == 0.0 and int(ended.steps) == 0  # a fresh episode
    assert float(ended.info["last_return"]) == 3.0 and float(ended.info["episode_done"]) == 1.0
    assert float(states[3].obs[0]) == 1.0 and float(states[3].info["final_obs"][0]) == 1.0
    assert float(states[3].info["episode_return"]) == 1.0


def test_auto_reset_on_truncation_under_jit_and_scan():
    env = AutoReset(EpisodeStats(Counter(episode_length=2)))
    state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 3))

    def body(s, _):
        s = jax.vmap(env.step)(s, jnp.zeros((3, 1)))
        return s, (s.truncated, s.info["episode_done"])

    _, (trunc, done) = jax.jit(lambda s: jax.lax.scan(body, s, None, length=6))(state)
    np.testing.assert_array_equal(np.asarray(trunc)[:, 0], [0, 1, 0, 1, 0, 1])
    np.testing.assert_array_equal(np.asarray(done), np.asarray(trunc))


def test_action_repeat_sums_rewards_and_stops_at_episode_end():
    env = ActionRepeat(Counter(episode_length=100), 2)
    states = run(env, [0.5, 0.5, 1.0])
    # third call: 2 -> 3 terminates after one repeat, so the second repeat must not count
    assert [float(s.reward) for s in states] == [1.0, 1.0, 1.0]
    assert float(states[2].terminated) == 1.0 and float(states[2].obs[0]) == 3.0
    assert int(states[2].steps) == 5


def test_running_stats_match_numpy_and_merge_in_any_order():
    rng = np.random.default_rng(0)
    a, b = rng.normal(2.0, 3.0, size=(100, 4)), rng.normal(-1.0, 0.5, size=(37, 4))
    s = update_stats(update_stats(init_stats((4,)), jnp.asarray(a)), jnp.asarray(b))
    both = np.concatenate([a, b])
    np.testing.assert_allclose(s.mean, both.mean(0), rtol=1e-5)
    np.testing.assert_allclose(s.std, both.std(0), rtol=1e-4)
    merged = merge_stats(update_stats(init_stats((4,)), jnp.asarray(b)), update_stats(init_stats((4,)), jnp.asarray(a)))
    np.testing.assert_allclose(merged.mean, s.mean, rtol=1e-5)
    np.testing.assert_allclose(merged.m2, s.m2, rtol=1e-4)
    z = normalize(s, jnp.asarray(both))
    assert float(jnp.abs(z.mean())) < 1e-3


def test_action_repeat_rejects_bad_count():
    with pytest.raises(ValueError, match="action repeat"):
        ActionRepeat(Counter(), 0)
