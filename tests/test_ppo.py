"""PPO pieces against values worked out by hand or by a plain Python loop."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as sps

from agents import networks as nets
from agents.common import policy_head, scan_minibatches, shuffle_order
from agents.ppo import Minibatch, PPOParams, ppo_loss
from agents.returns import bootstrap_values
from envs.base import EnvSpec


def _cfg(**kw):
    base = dict(normalize_advantage=False, clipping_epsilon=0.2, clip_value_loss=False, value_loss_coef=0.5,
                entropy_cost=0.01)
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_ppo_loss_by_hand():
    """Discrete head with logits given directly as 'params': every term worked out by hand."""
    spec = EnvSpec(obs_shape=(1,), discrete=True, episode_length=10, num_actions=2)
    head = policy_head(spec)
    logits = jnp.array([[0.0, 0.0], [np.log(3.0), 0.0]])  # probs (.5,.5) and (.75,.25)
    params = PPOParams(policy=logits, value=jnp.array([1.0, 2.0]))
    apply_policy = lambda p, obs: p  # noqa: E731
    apply_value = lambda p, obs: p  # noqa: E731
    old_logp = np.log(np.array([0.25, 0.5]))  # ratios: 0.5/0.25 = 2, 0.75/0.5 = 1.5
    batch = Minibatch(obs=jnp.zeros((2, 1)), action=jnp.array([0, 0]), log_prob=jnp.asarray(old_logp),
                      advantage=jnp.array([1.0, -1.0]), target=jnp.array([0.0, 0.0]), value=jnp.zeros(2))
    loss, m = ppo_loss(params, batch, jax.random.PRNGKey(0), apply_policy, apply_value, head, _cfg())
    # surrogate: min(2*1, 1.2*1) = 1.2 ; min(1.5*-1, 1.2*-1) = -1.5 -> policy loss -(1.2-1.5)/2 = 0.15
    assert float(m["policy"]) == pytest.approx(0.15, abs=1e-6)
    # value: 0.5 * mean(1^2, 2^2) = 1.25
    assert float(m["value"]) == pytest.approx(1.25, abs=1e-6)
    ent = np.mean([np.log(2.0), -(0.75 * np.log(0.75) + 0.25 * np.log(0.25))])
    assert float(m["entropy"]) == pytest.approx(ent, abs=1e-6)
    assert float(loss) == pytest.approx(0.15 + 0.5 * 1.25 - 0.01 * ent, abs=1e-6)
    assert float(m["clip_fraction"]) == pytest.approx(1.0)


def test_value_clipping_by_hand():
    spec = EnvSpec(obs_shape=(1,), discrete=True, episode_length=10, num_actions=2)
    head = policy_head(spec)
    params = PPOParams(policy=jnp.zeros((1, 2)), value=jnp.array([1.0]))
    batch = Minibatch(obs=jnp.zeros((1, 1)), action=jnp.array([0]), log_prob=jnp.log(jnp.array([0.5])),
                      advantage=jnp.array([0.0]), target=jnp.array([0.5]), value=jnp.array([0.0]))
    _, m = ppo_loss(params, batch, jax.random.PRNGKey(0), lambda p, o: p, lambda p, o: p, head,
                    _cfg(clip_value_loss=True))
    # unclipped error 0.5; clipped value 0.2 -> error 0.3; max of squares 0.25 -> 0.5 * 0.25
    assert float(m["value"]) == pytest.approx(0.125, abs=1e-6)


def test_tanh_normal_log_prob_matches_change_of_variables():
    rng = np.random.default_rng(1)
    loc, std = rng.normal(size=3), rng.uniform(0.3, 1.5, size=3)
    u = rng.normal(size=3)
    a = np.tanh(u)
    # density of a = tanh(u): p_u(u) / |da/du| = p_u(u) / (1 - a^2)
    want = np.sum(sps.norm.logpdf(u, loc, std) - np.log(1 - a ** 2))
    got = nets.tanh_normal_log_prob(jnp.asarray(u), jnp.asarray(loc), jnp.asarray(std))
    assert float(got) == pytest.approx(want, rel=1e-5)


def test_continuous_head_maps_to_env_bounds():
    spec = EnvSpec(obs_shape=(3,), discrete=False, episode_length=10, action_shape=(1,), action_low=(-2.0,),
                   action_high=(2.0,))
    head = policy_head(spec)
    assert head.out_size == 2
    u = jnp.array([[-50.0], [0.0], [50.0]])
    np.testing.assert_allclose(head.to_env(u)[:, 0], [-2.0, 0.0, 2.0], atol=1e-5)
    raw = jnp.zeros((4, 2))
    sample = head.sample(raw, jax.random.PRNGKey(0))
    assert sample.shape == (4, 1) and np.all(np.isfinite(head.log_prob(raw, sample)))


def test_categorical_log_prob():
    logits = jnp.log(jnp.array([[0.2, 0.3, 0.5]]))
    assert float(nets.categorical_log_prob(logits, jnp.array([2]))[0]) == pytest.approx(np.log(0.5), rel=1e-6)


def _consistent_batch(done_at, T=6, N=5, O=3, seed=0):
    """obs/next_obs [T, N, O] as an auto-reset unroll makes them: next_obs[t] = obs[t + 1]
    except where step t ended (its own final observation there)."""
    rng = np.random.default_rng(seed)
    seq = rng.normal(size=(T + 1, N, O)).astype(np.float32)
    next_obs = seq[1:].copy()
    ended = np.zeros((T, N), np.float32)
    for t, n in done_at:
        ended[t, n] = 1.0
        next_obs[t, n] = rng.normal(size=O)
    return jnp.asarray(seq[:-1]), jnp.asarray(next_obs), jnp.asarray(ended)


@pytest.mark.parametrize("done_at, episode_steps", [
    ([], 100),
    ([(1, 0), (3, 2), (5, 4), (0, 1)], 100),  # one truncation per env, incl. the last step
    ([(1, 0), (4, 0), (2, 3)], 3),  # env 0 truncates twice (episodes of 3 steps): the full pass
])
def test_bootstrap_values_equal_a_full_pass_over_next_obs(done_at, episode_steps):
    w = jnp.asarray(np.random.default_rng(1).normal(size=(3,)), jnp.float32)

    def value_fn(o):
        return jnp.tanh(o @ w)

    obs, next_obs, truncated = _consistent_batch(done_at)
    v_t, v_next = jax.jit(bootstrap_values, static_argnums=(0, 4))(value_fn, obs, next_obs, truncated, episode_steps)
    np.testing.assert_allclose(v_t, value_fn(obs), rtol=1e-6)
    np.testing.assert_allclose(v_next, value_fn(next_obs), rtol=1e-6)
    # a one-step unroll: its next values are the last next_obs pass
    v1 = bootstrap_values(value_fn, obs[:1], next_obs[:1], truncated[:1], episode_steps)
    np.testing.assert_allclose(v1[1], value_fn(next_obs[:1]), rtol=1e-6)


def test_shuffle_order_is_a_uniform_permutation():
    n = 327_680  # humanoid's rows per iteration: ties among its random keys are rare, not absent
    orders = [np.asarray(shuffle_order(jax.random.PRNGKey(k), n)) for k in range(3)]
    for order in orders:
        assert order.dtype == np.int32
        np.testing.assert_array_equal(np.sort(order), np.arange(n))  # every row once
    assert not np.array_equal(orders[0], orders[1])
    np.testing.assert_array_equal(orders[0], np.asarray(shuffle_order(jax.random.PRNGKey(0), n)))
    # Uniform: where each of 8 rows lands, over 4,000 keys, is uniform over 8 slots; and
    # the first minibatch's rows are spread over the whole batch.
    small = np.asarray(jax.vmap(lambda k: shuffle_order(k, 8))(jax.random.split(jax.random.PRNGKey(9), 4000)))
    for row in range(8):
        counts = np.bincount(np.argmax(small == row, axis=1), minlength=8)
        assert sps.chisquare(counts).pvalue > 1e-4, counts
    first = orders[0][: n // 32]
    assert abs(first.mean() / n - 0.5) < 0.01


def test_scan_minibatches_visits_every_row_once_in_the_shuffled_order():
    rows = {"id": jnp.arange(24, dtype=jnp.int32), "x": jnp.arange(48, dtype=jnp.float32).reshape(24, 2)}
    key = jax.random.PRNGKey(3)

    def step(total, minibatch):
        np.testing.assert_equal(minibatch["x"].shape, (6, 2))
        return total + jnp.sum(minibatch["x"]), minibatch

    total, seen = scan_minibatches(step, 0.0, rows, key, num_minibatches=4)
    assert float(total) == float(jnp.sum(rows["x"]))
    np.testing.assert_array_equal(np.asarray(seen["id"]).reshape(-1), np.asarray(shuffle_order(key, 24)))
    np.testing.assert_array_equal(np.asarray(seen["x"]), np.asarray(rows["x"])[np.asarray(seen["id"])])


def _one_update(**switches):
    """The losses of PPO's one update of one pass of one minibatch (the whole batch) on a fixed
    random batch of 8 trajectories of 6 steps, under `switches` (losses, not parameters: Adam's
    first step is about the learning rate times the gradient's sign, which rounding can flip
    where a gradient is near 0)."""
    from sim.core.contract import Step
    from agents.ppo import PPOActed, PPOConfig, make_ppo
    from envs.wrappers import init_stats

    spec = EnvSpec(obs_shape=(3,), discrete=False, episode_length=4, action_shape=(2,), action_low=(-1.0, -1.0),
                   action_high=(1.0, 1.0))
    config = PPOConfig(unroll_length=6, batch_size=8, num_minibatches=1, num_updates_per_batch=1,
                       policy_hidden_sizes=(8,), value_hidden_sizes=(8,), **switches)
    agent = make_ppo(config, spec)
    state = agent.init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    T, N = 6, 8
    steps = np.arange(T)[:, None] + np.arange(N)[None]  # truncations every 4 steps, staggered
    data = Step(obs=jnp.asarray(rng.normal(size=(T, N, 3)), jnp.float32),
                next_obs=jnp.asarray(rng.normal(size=(T, N, 3)), jnp.float32),
                reward=jnp.asarray(rng.normal(size=(T, N)), jnp.float32),
                terminated=jnp.asarray(rng.random((T, N)) < 0.1, jnp.float32),
                truncated=jnp.asarray(steps % 4 == 3, jnp.float32), episode_done=jnp.zeros((T, N)),
                last_return=jnp.zeros((T, N)),
                acted=PPOActed(action=jnp.asarray(rng.normal(size=(T, N, 2)), jnp.float32),
                               log_prob=jnp.asarray(rng.normal(size=(T, N)), jnp.float32)))
    _, losses = jax.jit(agent.update)(state, init_stats((3,)), data, jax.random.PRNGKey(1))
    return {k: float(v) for k, v in losses.items()}


def test_brax_s_ways_reduce_to_ours_on_one_minibatch_of_the_whole_batch():
    """On one pass of one minibatch (the whole batch), trajectory minibatches and advantages
    recomputed per minibatch (with the network that valued the batch) are the same update."""
    ours = _one_update()
    assert set(ours) >= {"total", "policy", "value"}
    for switches in ({"trajectory_minibatches": True}, {"gae_per_minibatch": True}):
        other = _one_update(**switches)
        for name in ("policy", "value", "approx_kl", "clip_fraction"):  # (entropy: sampled per row, rows reordered)
            np.testing.assert_allclose(other[name], ours[name], rtol=1e-5, atol=1e-6, err_msg=f"{switches} {name}")
    masked, brax = _one_update(bootstrap_truncation=False), _one_update(advantage_estimator="brax")
    assert abs(masked["value"] - ours["value"]) > 1e-3 and abs(brax["policy"] - ours["policy"]) > 1e-3


def test_obs_clip_bounds_what_the_policy_reads():
    """--obs-clip reaches the agent: with 5 an observation 100 standard deviations out acts as
    one 6 out (both clipped to 5); with None (no clipping) the two act differently."""
    from agents.ppo import PPOConfig, make_ppo
    from envs.wrappers import init_stats, update_stats

    spec = EnvSpec(obs_shape=(3,), discrete=False, episode_length=4, action_shape=(2,), action_low=(-1.0, -1.0),
                   action_high=(1.0, 1.0))
    stats = update_stats(init_stats((3,)), jnp.asarray(np.random.default_rng(0).normal(size=(256, 3)), jnp.float32))
    far, near = (stats.mean + k * stats.std * jnp.array([1.0, -1.0, 1.0]) for k in (100.0, 6.0))
    actions = {}
    for clip in (5.0, None):
        agent = make_ppo(PPOConfig(policy_hidden_sizes=(8,), value_hidden_sizes=(8,), obs_clip=clip), spec)
        state = agent.init(jax.random.PRNGKey(0))
        act = jax.jit(lambda obs: agent.act(state, stats, obs[None], jax.random.PRNGKey(1), True)[0][0])
        actions[clip] = (np.asarray(act(far)), np.asarray(act(near)))
    np.testing.assert_allclose(actions[5.0][0], actions[5.0][1], rtol=1e-6)
    assert np.abs(actions[None][0] - actions[None][1]).max() > 1e-3
    assert np.abs(actions[None][0] - actions[5.0][0]).max() > 1e-3
