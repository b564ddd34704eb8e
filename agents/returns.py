"""Returns and advantages: the targets agents learn from, one trajectory at a time.

Every function here takes ONE env's time series, arrays of shape [T] (time first), and is
written for the caller to `jax.vmap` over envs (and members): `over_envs` does it for the
usual [T, N] layout. The conventions, shared by all:

- `r_t`: the reward of step t.
- `v_tp1`: the value of the observation step t produced, i.e. of the pre-reset final
  observation where step t ended its episode (a state-value, or max_a Q for Q-learning).
- `terminated_t`: 1 where step t reached a terminal state: nothing is bootstrapped from it.
- `truncated_t`: 1 where the time limit cut the episode after step t: the return
  bootstraps from `v_tp1` there, as if the episode went on.
- Either one ends the episode, so no trace crosses it; the sequence's last step
  bootstraps from its own `v_tp1`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def gae(r_t, v_t, v_tp1, terminated_t, truncated_t, discount, lam):
    """Generalised advantage estimation (arXiv:1506.02438, "High-Dimensional Continuous
    Control Using Generalized Advantage Estimation"), by a reverse scan. Inputs [T]; returns
    (advantages [T], value targets [T] = advantages + v_t):

        delta_t = r_t + discount * (1 - terminated_t) * v_tp1 - v_t
        A_t     = delta_t + discount * lam * (1 - done_t) * A_{t+1},   A_T = 0

    lam = 1 gives the Monte-Carlo advantage (bootstrapped at the sequence's end), lam = 0
    the one-step TD error. The targets equal `lambda_returns` of the same inputs.
    """
    delta = r_t + discount * (1.0 - terminated_t) * v_tp1 - v_t
    not_done = 1.0 - jnp.maximum(terminated_t, truncated_t)

    def backward(acc, x):
        delta_t, not_done_t = x
        acc = delta_t + discount * lam * not_done_t * acc
        return acc, acc

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(delta[0]), (delta, not_done), reverse=True)
    return advantages, advantages + v_t


def lambda_returns(r_t, v_tp1, terminated_t, truncated_t, discount, lam):
    """TD(lambda) returns (Sutton and Barto 2018, section 12.1), by a reverse scan; inputs [T],
    returns [T]. With v_tp1 = max_a Q(s_{t+1}, a) these are Peng's Q(lambda) targets (Peng and
    Williams 1996), as PQN uses them:

        G_t = r_t + discount * (1 - terminated_t) * (v_tp1 + lam * (1 - done_t) * (G_{t+1} - v_tp1))

    i.e. a (1 - lam, lam) mix of bootstrapping now and following the trace; G_{T-1}
    bootstraps fully. lam = 0 gives the one-step TD(0) targets, lam = 1 the discounted sum of
    rewards to the episode's (or the sequence's) end plus its bootstrap.
    """
    not_done = 1.0 - jnp.maximum(terminated_t, truncated_t)

    def backward(g_next, x):
        r, v_next, term, alive = x
        g = r + discount * (1.0 - term) * (v_next + lam * alive * (g_next - v_next))
        return g, g

    _, returns = jax.lax.scan(backward, v_tp1[-1], (r_t, v_tp1, terminated_t, not_done), reverse=True)
    return returns


def n_step_returns(r_t, v_tp1, terminated_t, truncated_t, discount, n: int):
    """n-step returns (Sutton and Barto 2018, section 7.1); inputs [T], returns [T]:

        G_t = r_t + discount * r_{t+1} + ... + discount^(m-1) * r_{t+m-1}
              + discount^m * v_tp1_{t+m-1}   (no bootstrap where step t+m-1 terminated)

    with m = n, or fewer where the episode or the sequence ends first. n = 1 gives the TD(0)
    targets; n >= T, the Monte-Carlo returns to the end plus its bootstrap. `n` is static:
    n - 1 shifted passes, no loop in the program.
    """
    if n < 1:
        raise ValueError(f"n-step returns need n >= 1, got {n}")
    cut = jnp.maximum(terminated_t, truncated_t).at[-1].set(1.0)  # where the trace stops
    keep = discount * (1.0 - terminated_t)
    g = r_t + keep * v_tp1
    for _ in range(n - 1):
        g_next = jnp.concatenate([g[1:], g[-1:]])  # G_{t+1} of one step fewer (the last: never used)
        g = r_t + keep * jnp.where(cut > 0, v_tp1, g_next)
    return g


def bootstrap_index(terminated_t, truncated_t):
    """int32[]: the step of a sequence [n] whose next observation its n-step target values:
    the first step that ended its episode, else the last."""
    n = terminated_t.shape[0]
    if n == 1:
        return jnp.zeros((), jnp.int32)
    done = jnp.maximum(terminated_t, truncated_t)[:-1] > 0
    return jnp.where(jnp.any(done), jnp.argmax(done), n - 1).astype(jnp.int32)


def n_step_target(r_t, terminated_t, truncated_t, discount):
    """What an n-step target needs from ONE sampled sequence of n consecutive steps of an env
    (inputs [n], n static): (the discounted reward sum, the bootstrap's discount, the index of
    the step whose next observation it bootstraps from), so that

        G = reward_sum + bootstrap_discount * v(next_obs[index])

    equals `n_step_returns(...)[0]` with that v. The sum runs to the first step that ended its
    episode, or to the last: m = index + 1 steps, reward_sum = sum_{k<m} discount^k r_k, and
    bootstrap_discount = discount^m, or 0 where step `index` terminated (a truncation
    bootstraps from the true final observation). Only one next observation is read and
    valued, not n: the replay ring gathers that one (`bootstrap_index` chooses it).
    """
    n = r_t.shape[0]
    index = bootstrap_index(terminated_t, truncated_t)
    k = jnp.arange(n)
    powers = discount ** k.astype(jnp.float32)
    reward_sum = jnp.sum(jnp.where(k <= index, powers * r_t, 0.0))
    bootstrap = discount ** (index + 1).astype(jnp.float32) * (1.0 - terminated_t[index])
    return reward_sum, bootstrap, index


def over_envs(fn, *series, **constants):
    """`fn` (one of the above) over [T, N] inputs, env by env: a vmap over axis 1."""
    return jax.vmap(lambda *xs: fn(*xs, **constants), in_axes=1, out_axes=1)(*series)


def bootstrap_values(value_fn, obs, next_obs, truncated, episode_steps: int):
    """The values the returns bootstrap from: (V(obs_t), V(next_obs_t)), both [T, N], from
    about (T + 2) / T value passes, not 2.

    obs, next_obs: [T, N, ...] (as the value network takes them); truncated: [T, N];
    episode_steps: the fewest agent steps from a reset to a time-limit truncation.
    next_obs[t] is obs[t + 1] unless step t ended its episode (obs[t + 1] is then the next
    episode's start), so one pass over obs and the last next_obs gives every next value but
    those of ended steps. Terminal steps never use theirs (the returns multiply it by 0);
    truncated steps need V of their final observation. Two truncations of one env before the
    last step are `episode_steps` apart, so when T - 2 < episode_steps each env has at most
    one: one row per env [N] holds them all. Otherwise (unrolls longer than episodes) a full
    pass over next_obs runs. The choice is static: no conditional in the program.
    """
    values = value_fn(jnp.concatenate([obs, next_obs[-1:]], axis=0))  # [T + 1, N]
    v_t, v_next = values[:-1], values[1:]
    steps = obs.shape[0]
    if steps == 1:
        return v_t, v_next
    if steps - 2 >= episode_steps:
        return v_t, value_fn(next_obs)
    trunc = truncated[:-1] > 0  # the last step's next value is already V(next_obs[-1])
    row = jnp.argmax(trunc, axis=0)  # each env's truncated step (0 where none)
    col = jnp.arange(trunc.shape[1])
    v_final = value_fn(next_obs[row, col])
    return v_t, v_next.at[row, col].set(jnp.where(trunc[row, col], v_final, v_next[row, col]))
