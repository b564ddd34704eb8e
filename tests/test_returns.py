"""The returns module against plain Python loops, by hand, and what each reduces to (V-trace
on-policy: lambda-returns and GAE)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import returns

GAMMA = 0.9


def random_series(T=17, N=5, seed=0, p_end=0.1):
    rng = np.random.default_rng(seed)
    r, v, v_next = (rng.normal(size=(T, N)).astype(np.float32) for _ in range(3))
    term = (rng.random((T, N)) < p_end).astype(np.float32)
    trunc = ((rng.random((T, N)) < p_end) & (term == 0)).astype(np.float32)
    # as an unroll makes them: step t's next value is step t + 1's value unless step t ended
    v_next[:-1] = np.where(np.maximum(term, trunc)[:-1] > 0, v_next[:-1], v[1:])
    return r, v, v_next, term, trunc


def steps(term, trunc, gamma=GAMMA, lam=1.0):
    """(discount_t, lambda_t) of an unroll's episode ends."""
    return returns.episode_discounts(jnp.asarray(term), jnp.asarray(trunc), gamma, lam)


def gae_loop(r, v, v_next, term, trunc, gamma, lam):
    """Textbook GAE, one trajectory at a time, episode boundaries cut the trace."""
    T, N = r.shape
    adv = np.zeros((T, N))
    for n in range(N):
        acc = 0.0
        for t in reversed(range(T)):
            delta = r[t, n] + gamma * (1 - term[t, n]) * v_next[t, n] - v[t, n]
            done = max(term[t, n], trunc[t, n])
            acc = delta + gamma * lam * (1 - done) * (acc if t < T - 1 else 0.0)
            adv[t, n] = acc
    return adv, adv + v


def n_step_loop(r, v_next, term, trunc, gamma, n):
    """Sum the next n rewards (fewer where the episode or the sequence ends), then bootstrap."""
    T, N = r.shape
    out = np.zeros((T, N))
    for e in range(N):
        for t in range(T):
            g, scale = 0.0, 1.0
            for k in range(t, min(t + n, T)):
                g += scale * r[k, e]
                scale *= gamma
                if term[k, e] or trunc[k, e] or k == min(t + n, T) - 1:
                    g += 0.0 if term[k, e] else scale * v_next[k, e]
                    break
            out[t, e] = g
    return out


def monte_carlo(r, v_next, term, trunc, gamma):
    """Discounted rewards to the episode's end (or the sequence's), plus that end's bootstrap."""
    return n_step_loop(r, v_next, term, trunc, gamma, n=r.shape[0])


def test_gae_matches_python_loop():
    r, v, v_next, term, trunc = random_series()
    adv, target = returns.over_envs(returns.gae, r, v, v_next, *steps(term, trunc, 0.97, 0.9))
    want_adv, want_target = gae_loop(r, v, v_next, term, trunc, 0.97, 0.9)
    np.testing.assert_allclose(adv, want_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(target, want_target, rtol=1e-5, atol=1e-5)


def test_gae_by_hand_truncation_bootstraps_termination_does_not():
    # Two steps, gamma 0.5, lambda 1. Step 0 truncated: bootstrap from V(final obs) = 4.
    r, v = np.ones(2, np.float32), np.zeros(2, np.float32)
    v_next = np.array([4.0, 2.0], np.float32)
    adv, _ = returns.gae(r, v, v_next, *steps(np.array([0.0, 1.0]), np.array([1.0, 0.0]), 0.5, 1.0))
    # t=0: 1 + 0.5 * 4 = 3 (trace cut by the truncation); t=1: terminal, no bootstrap: 1.
    np.testing.assert_allclose(np.asarray(adv), [3.0, 1.0])


def test_gae_reduces_to_td_error_and_monte_carlo_and_its_targets_are_lambda_returns():
    r, v, v_next, term, trunc = random_series(seed=1)
    adv0, _ = returns.over_envs(returns.gae, r, v, v_next, *steps(term, trunc, lam=0.0))
    np.testing.assert_allclose(adv0, r + GAMMA * (1 - term) * v_next - v, rtol=1e-5, atol=1e-5)
    adv1, _ = returns.over_envs(returns.gae, r, v, v_next, *steps(term, trunc, lam=1.0))
    np.testing.assert_allclose(adv1, monte_carlo(r, v_next, term, trunc, GAMMA) - v, rtol=1e-4, atol=1e-4)
    _, target = returns.over_envs(returns.gae, r, v, v_next, *steps(term, trunc, lam=0.8))
    lam_ret = returns.over_envs(returns.lambda_returns, r, v_next, *steps(term, trunc, lam=0.8))
    np.testing.assert_allclose(target, lam_ret, rtol=1e-4, atol=1e-4)


def q_lambda_loop(r, q_next, term, trunc, gamma, lam):
    T, N = r.shape
    out = np.zeros((T, N))
    for n in range(N):
        g = q_next[T - 1, n]
        for t in reversed(range(T)):
            done = max(term[t, n], trunc[t, n])
            nxt = q_next[t, n] + (lam * (g - q_next[t, n]) if (t < T - 1 and not done) else 0.0)
            g = r[t, n] + gamma * (1 - term[t, n]) * nxt
            out[t, n] = g
    return out


def test_lambda_returns_match_python_loop_and_reduce_to_td0_and_monte_carlo():
    r, _, q_next, term, trunc = random_series(T=9, N=4, p_end=0.15)
    got = returns.over_envs(returns.lambda_returns, r, q_next, *steps(term, trunc, lam=0.7))
    np.testing.assert_allclose(got, q_lambda_loop(r, q_next, term, trunc, GAMMA, 0.7), rtol=1e-5, atol=1e-5)
    td0 = returns.over_envs(returns.lambda_returns, r, q_next, *steps(term, trunc, lam=0.0))
    np.testing.assert_allclose(td0, r + GAMMA * (1 - term) * q_next, rtol=1e-5, atol=1e-5)
    mc = returns.over_envs(returns.lambda_returns, r, q_next, *steps(term, trunc, lam=1.0))
    np.testing.assert_allclose(mc, monte_carlo(r, q_next, term, trunc, GAMMA), rtol=1e-4, atol=1e-4)


def test_lambda_returns_by_hand():
    # three steps, gamma 0.5, lambda 1: G_2 = 1 + 0.5 * 4 = 3 (bootstraps fully), G_1 = 1 + 0.5 * 3 = 2.5,
    # G_0 truncated: bootstraps from its own final observation's value 8 -> 1 + 0.5 * 8 = 5
    got = returns.lambda_returns(jnp.ones(3), jnp.array([8.0, 6.0, 4.0]),
                                 *steps(jnp.zeros(3), jnp.array([1.0, 0.0, 0.0]), 0.5, 1.0))
    np.testing.assert_allclose(np.asarray(got), [5.0, 2.5, 3.0])


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_n_step_returns_match_python_loop(n):
    r, _, v_next, term, trunc = random_series(T=12, N=6, seed=2, p_end=0.15)
    got = returns.over_envs(returns.n_step_returns, r, v_next, *steps(term, trunc), n=n)
    np.testing.assert_allclose(got, n_step_loop(r, v_next, term, trunc, GAMMA, n), rtol=1e-5, atol=1e-5)


def test_n_step_returns_reduce_to_td0_and_monte_carlo():
    r, _, v_next, term, trunc = random_series(T=10, N=3, seed=3, p_end=0.2)
    one = returns.over_envs(returns.n_step_returns, r, v_next, *steps(term, trunc), n=1)
    np.testing.assert_allclose(one, r + GAMMA * (1 - term) * v_next, rtol=1e-6, atol=1e-6)
    whole = returns.over_envs(returns.n_step_returns, r, v_next, *steps(term, trunc), n=10)
    lam1 = returns.over_envs(returns.lambda_returns, r, v_next, *steps(term, trunc, lam=1.0))
    np.testing.assert_allclose(whole, lam1, rtol=1e-5, atol=1e-5)


def test_n_step_returns_by_hand():
    # gamma 0.5, n 2, rewards 1, 2, 4, 8; step 1 terminates, the sequence ends at step 3 (v_tp1 10)
    r = jnp.array([1.0, 2.0, 4.0, 8.0])
    v_next = jnp.array([100.0, 100.0, 6.0, 10.0])
    term = jnp.array([0.0, 1.0, 0.0, 0.0])
    got = returns.n_step_returns(r, v_next, *steps(term, jnp.zeros(4), 0.5), 2)
    # G_0 = 1 + 0.5 * 2 (then terminal); G_1 = 2; G_2 = 4 + 0.5 * 8 + 0.25 * 10; G_3 = 8 + 0.5 * 10
    np.testing.assert_allclose(np.asarray(got), [2.0, 2.0, 10.5, 13.0])
    with pytest.raises(ValueError, match="n >= 1"):
        returns.n_step_returns(r, v_next, *steps(term, jnp.zeros(4), 0.5), 0)


def test_each_is_unbatched_and_traces_under_jit_and_vmap():
    """[T] in, [T] out; a vmap over envs equals the columns one by one, compiled."""
    r, v, v_next, term, trunc = random_series(T=7, N=3, seed=4)
    discount_t, lambda_t = steps(term, trunc, lam=0.5)
    batched = jax.jit(lambda *xs: returns.over_envs(returns.lambda_returns, *xs))(r, v_next, discount_t, lambda_t)
    for e in range(3):
        column = returns.lambda_returns(r[:, e], v_next[:, e], discount_t[:, e], lambda_t[:, e])
        assert column.shape == (7,)
        np.testing.assert_allclose(batched[:, e], column, rtol=1e-6)


def vtrace_loop(r, v, v_next, term, trunc, rho, gamma, lam, clip_rho, clip_c):
    """V-trace targets as the paper defines them, a sum per step (arXiv:1802.01561, eq. 1):
    vs_s = V(x_s) + sum_{t >= s} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t, the sum stopping at
    the episode's (or the sequence's) end, delta_t = min(clip_rho, rho_t) (r_t + gamma V(x_{t+1})
    - V(x_t)) (no bootstrap after a termination), c_i = lam min(clip_c, rho_i)."""
    T, N = r.shape
    out = np.zeros((T, N))
    for e in range(N):
        for s in range(T):
            total, scale = 0.0, 1.0
            for t in range(s, T):
                delta = min(clip_rho, rho[t, e]) * (r[t, e] + gamma * (1 - term[t, e]) * v_next[t, e] - v[t, e])
                total += scale * delta
                if term[t, e] or trunc[t, e]:
                    break
                scale *= gamma * lam * min(clip_c, rho[t, e])
            out[s, e] = v[s, e] + total
    return out


def test_vtrace_matches_the_papers_sum():
    r, v, v_next, term, trunc = random_series(T=11, N=4, seed=5, p_end=0.15)
    rho = np.exp(np.random.default_rng(7).normal(size=r.shape)).astype(np.float32)  # both sides of 1
    vs, _ = returns.over_envs(returns.vtrace, r, v, v_next, *steps(term, trunc, lam=0.9), rho)
    want = vtrace_loop(r, v, v_next, term, trunc, rho, GAMMA, 0.9, 1.0, 1.0)
    np.testing.assert_allclose(vs, want, rtol=1e-4, atol=1e-4)
    loose, _ = returns.over_envs(lambda *xs: returns.vtrace(*xs, clip_rho=2.0), r, v, v_next,
                                 *steps(term, trunc, lam=0.9), rho)
    np.testing.assert_allclose(loose, vtrace_loop(r, v, v_next, term, trunc, rho, GAMMA, 0.9, 2.0, 1.0), rtol=1e-4,
                               atol=1e-4)


def test_vtrace_on_policy_reduces_to_lambda_returns_and_gae():
    r, v, v_next, term, trunc = random_series(seed=6)
    ones = np.ones_like(r)
    for lam in (0.0, 0.7, 1.0):
        discount_t, lambda_t = steps(term, trunc, lam=lam)
        vs, pg = returns.over_envs(returns.vtrace, r, v, v_next, discount_t, lambda_t, ones)
        adv, target = returns.over_envs(returns.gae, r, v, v_next, discount_t, lambda_t)
        np.testing.assert_allclose(vs, returns.over_envs(returns.lambda_returns, r, v_next, discount_t, lambda_t),
                                   rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(vs, target, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(pg, adv, rtol=1e-4, atol=1e-4)
    # lambda 1: the n-step returns with n the whole sequence; lambda 0: one-step TD targets
    vs1, _ = returns.over_envs(returns.vtrace, r, v, v_next, *steps(term, trunc, lam=1.0), ones)
    whole = returns.over_envs(returns.n_step_returns, r, v_next, *steps(term, trunc), n=r.shape[0])
    np.testing.assert_allclose(vs1, whole, rtol=1e-4, atol=1e-4)
    vs0, _ = returns.over_envs(returns.vtrace, r, v, v_next, *steps(term, trunc, lam=0.0), ones)
    np.testing.assert_allclose(vs0, r + GAMMA * (1 - term) * v_next, rtol=1e-5, atol=1e-5)


def test_vtrace_by_hand():
    # gamma 0.5, lambda 1, two steps, values 0, bootstraps 4 and 8, ratios 2 (clipped to 1) and 0.5
    r, v = jnp.ones(2), jnp.zeros(2)
    v_next = jnp.array([4.0, 8.0])
    vs, pg = returns.vtrace(r, v, v_next, *steps(jnp.zeros(2), jnp.zeros(2), 0.5, 1.0), jnp.array([2.0, 0.5]))
    # delta_1 = 0.5 * (1 + 0.5 * 8) = 2.5 = vs_1; delta_0 = 1 * (1 + 0.5 * 4) = 3; vs_0 = 3 + 0.5 * min(1, 2) * 2.5
    np.testing.assert_allclose(np.asarray(vs), [4.25, 2.5])
    # pg_0 = min(1, 2) * (1 + 0.5 * vs_1) = 2.25; pg_1 = 0.5 * (1 + 0.5 * 8) = 2.5
    np.testing.assert_allclose(np.asarray(pg), [2.25, 2.5])


def brax_gae_loop(r, v, v_next, term, trunc, gamma, lam, mask_truncated):
    """Brax PPO's compute_gae, written out: vs by its reverse recursion, then its advantages
    r_t + gamma (1 - term_t) vs_{t+1} - v_t, both times (1 - truncated_t) when masked."""
    T, N = r.shape
    mask = 1 - trunc if mask_truncated else np.ones_like(trunc)
    vs, adv = np.zeros((T, N)), np.zeros((T, N))
    for n in range(N):
        acc = 0.0
        for t in reversed(range(T)):
            delta = (r[t, n] + gamma * (1 - term[t, n]) * v_next[t, n] - v[t, n]) * mask[t, n]
            going_on = 1 - max(term[t, n], trunc[t, n])
            acc = delta + gamma * lam * going_on * (acc if t < T - 1 else 0.0)
            vs[t, n] = acc + v[t, n]
        for t in range(T):
            ended = max(term[t, n], trunc[t, n]) > 0 or t == T - 1
            following = v_next[t, n] if ended else vs[t + 1, n]
            adv[t, n] = (r[t, n] + gamma * (1 - term[t, n]) * following - v[t, n]) * mask[t, n]
    return adv, vs


@pytest.mark.parametrize("mask_truncated", [False, True])
def test_brax_advantages_and_the_truncation_mask_by_hand(mask_truncated):
    r, v, v_next, term, trunc = random_series(p_end=0.15)
    lam = 0.95
    discount_t, lambda_t = steps(term, trunc, lam=lam)
    mask = jnp.asarray(1 - trunc) if mask_truncated else None
    going_on = jnp.asarray(1 - np.maximum(term, trunc))
    adv, targets = jax.vmap(lambda *xs: returns.one_step_then_gae(*xs[:6], mask_t=None if mask is None else xs[6]),
                            in_axes=1, out_axes=1)(r, v, v_next, discount_t, lambda_t, going_on,
                                                   *([] if mask is None else [mask]))
    want_adv, want_vs = brax_gae_loop(r, v, v_next, term, trunc, GAMMA, lam, mask_truncated)
    np.testing.assert_allclose(adv, want_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(targets, want_vs, rtol=1e-5, atol=1e-5)
    if mask is None:
        gae_adv, gae_targets = returns.over_envs(returns.gae, r, v, v_next, discount_t, lambda_t)
    else:
        gae_adv, gae_targets = returns.over_envs(lambda *xs: returns.gae(*xs[:5], mask_t=xs[5]), r, v, v_next,
                                                 discount_t, lambda_t, mask)
    np.testing.assert_allclose(targets, gae_targets, rtol=1e-5, atol=1e-5)  # the value targets are GAE's
    if mask_truncated:  # a masked truncated step learns nothing: advantage 0, target its own value
        ended = trunc > 0
        np.testing.assert_allclose(np.asarray(adv)[ended], 0.0, atol=1e-6)
        np.testing.assert_allclose(np.asarray(targets)[ended], v[ended], atol=1e-6)
    assert not np.allclose(adv, gae_adv)  # no lambda on the first step: not GAE's advantages
