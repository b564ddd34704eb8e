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

    def _reset(self, key, params):
        return jnp.zeros(()), jnp.zeros((1,))

    def _step(self, x, action, params):
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


def test_normalize_clips_to_its_bound_and_not_without_one():
    rng = np.random.default_rng(0)
    s = update_stats(init_stats((2,)), jnp.asarray(rng.normal(1.0, 2.0, size=(1000, 2))))
    far = s.mean + 100.0 * s.std  # 100 standard deviations out
    np.testing.assert_allclose(normalize(s, far), [5.0, 5.0])  # the default bound
    np.testing.assert_allclose(normalize(s, -far, clip=5.0), [-5.0, -5.0])  # -far is -2 mean further out
    np.testing.assert_allclose(normalize(s, far, clip=None), [100.0, 100.0], rtol=1e-4)


def test_action_repeat_rejects_bad_count():
    with pytest.raises(ValueError, match="action repeat"):
        ActionRepeat(Counter(), 0)


class RandomStart(Env):
    """obs = [position]; each episode starts at a uniform random position; action adds to it."""

    name = "random_start"

    def __init__(self, episode_length):
        self.spec = EnvSpec(obs_shape=(1,), discrete=False, episode_length=episode_length, action_shape=(1,),
                            action_low=(0.0,), action_high=(1.0,))

    def _reset(self, key, params):
        x = jax.random.uniform(key, (), minval=100.0, maxval=200.0)
        return x, x[None]

    def _step(self, x, action, params):
        x = x + action[0]
        return x, x[None], action[0], jnp.zeros((), jnp.bool_)


def batched_run(env, num_envs, unrolls, length, renew=True):
    """Unrolls of step_batch (spares renewed from fresh resets before each, as the trainer
    renews them before each epoch); per step: obs, final_obs, done and whether the env's spare
    had started an episode already (before the step), stacked [unrolls * length, num_envs]."""
    state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))
    action = jnp.full((num_envs, 1), 0.5)

    def unroll(state, key):
        if renew:
            state = env.renew(state, jax.vmap(env.reset)(jax.random.split(key, num_envs)))

        def body(s, _):
            used = s.info["spare_used"]
            s = env.step_batch(s, action)
            return s, (s.obs[:, 0], s.info["final_obs"][:, 0], s.done, used)

        return jax.lax.scan(body, state, None, length=length)

    keys = jax.random.split(jax.random.PRNGKey(1), unrolls)
    _, out = jax.jit(lambda s: jax.lax.scan(unroll, s, keys))(state)
    return state, [np.asarray(x).reshape((unrolls * length, num_envs)) for x in out]


@pytest.mark.parametrize("episode_length, length, renew", [(3, 4, True), (2, 5, True), (1, 4, True), (2, 6, False)])
def test_step_batch_starts_episodes_from_fresh_resets_reusing_one_only_before_a_renewal(episode_length, length,
                                                                                         renew):
    # (3, 4): at most one end per env between renewals; (2, 5): envs end twice between two;
    # (1, 4): at every step; no renewal: every later end reuses
    env = AutoReset(EpisodeStats(RandomStart(episode_length)))
    first, (obs, final_obs, done, used) = batched_run(env, 4, 3, length, renew)
    assert np.all(done == np.tile(np.arange(1, done.shape[0] + 1) % episode_length == 0, (4, 1)).T)
    current = np.array(first.obs[:, 0])  # each env's current episode start
    fresh = list(current)
    reused = 0
    for t in range(done.shape[0]):
        previous = current if t == 0 else obs[t - 1]
        # the transition stepped from the previous obs (the fresh start after an end) ...
        np.testing.assert_allclose(final_obs[t], previous + 0.5, rtol=0, atol=1e-4)
        for i in np.flatnonzero(done[t] > 0):
            # ... and where it ended, the env holds a start in the reset range: a new one, or,
            # when its spare had started an episode since the last renewal, that same start again
            assert 100.0 <= obs[t][i] <= 200.0
            if used[t][i]:  # the spare it took is the start of the episode that just ended
                assert obs[t][i] == current[i]
                reused += 1
            else:
                fresh.append(obs[t][i])
            current[i] = obs[t][i]
    assert len(set(fresh)) == len(fresh)  # every start not reused is a new draw
    assert reused == int(np.sum(done * used)) and (reused > 0 or not renew)


@pytest.mark.parametrize("lead", [(), (2,)])
def test_renew_hands_fresh_spares_to_the_envs_that_used_theirs_and_no_other(lead):
    """Every env that used its spare takes the fresh batch's, whatever axes lead the envs' (a
    population's members); the others keep theirs; the physics runs only in the fresh resets."""
    env = AutoReset(EpisodeStats(RandomStart(100)))
    reset = jax.vmap(env.reset)
    for _ in lead:
        reset = jax.vmap(reset)
    state = reset(jax.random.split(jax.random.PRNGKey(2), lead + (4,)))
    fresh = reset(jax.random.split(jax.random.PRNGKey(3), lead + (4,)))
    used = jnp.broadcast_to(jnp.asarray([True, False, True, True]), lead + (4,))
    state = state.replace(info=dict(state.info, spare_used=used))
    new = jax.jit(env.renew)(state, fresh)
    old, got, given = (np.asarray(s.info["spare"]["obs"][..., 0]) for s in (state, new, fresh))
    np.testing.assert_array_equal(got, np.where(used, given, old))
    assert not np.any(np.asarray(new.info["spare_used"]))
    np.testing.assert_array_equal(new.info["reset_key"], state.info["reset_key"])
    unspared = AutoReset(EpisodeStats(RandomStart(100)), spares=False)
    assert unspared.renew(state, fresh) is state


def test_step_batch_equals_per_env_step_while_no_episode_ends():
    env = AutoReset(EpisodeStats(RandomStart(100)))
    state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(1), 3))
    a, b = state, state
    for _ in range(4):
        a = jax.vmap(env.step)(a, jnp.full((3, 1), 0.25))
        b = env.step_batch(b, jnp.full((3, 1), 0.25))
    jax.tree.map(np.testing.assert_array_equal, a, b)


def test_without_spares_every_episode_starts_from_its_own_fresh_reset():
    # episodes of 2 steps, unrolls of 5: with spares most ends would reuse a start
    env = AutoReset(EpisodeStats(RandomStart(2)), spares=False)
    first, (obs, final_obs, done, used) = batched_run(env, 4, 3, 5)
    starts = list(np.asarray(first.obs[:, 0])) + list(obs[done > 0])
    assert int(done.sum()) == 4 * 7 and len(set(starts)) == len(starts)
    assert np.all((obs[done > 0] >= 100.0) & (obs[done > 0] <= 200.0))
    state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(3), 4))
    action = jnp.full((4, 1), 0.5)
    jax.tree.map(np.testing.assert_array_equal, env.step_batch(env.renew(state, state), action),
                 jax.vmap(env.step)(state, action))
