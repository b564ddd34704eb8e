"""Returns and advantages: the targets agents learn from, one trajectory at a time.

Every function here takes ONE env's time series, arrays of shape [T] (time first), and is
written for the caller to `jax.vmap` over envs (and members): `over_envs` does it for the
usual [T, N] layout. Their inputs are rlax's, with one difference that an auto-resetting
unroll needs (the value each step bootstraps from is given per step, not read off the next
step's value, which after an episode's end belongs to the next episode):

- `r_t`: the reward of step t.
- `v_t`: the value of the observation step t acted on.
- `v_tp1`: the value of the observation step t produced, i.e. of the pre-reset final
  observation where step t ended its episode (a state-value, or max_a Q for Q-learning).
- `discount_t`: the discount of what follows step t: gamma, or 0 where step t reached a
  terminal state (nothing is bootstrapped from it).
- `lambda_t`: how far the trace goes on past step t, in [0, 1]: 0 where step t ended its
  episode (terminated, or truncated by a time limit: then the return bootstraps from `v_tp1`
  as if the episode went on, but no trace crosses into the next episode).
`episode_discounts` makes both from an unroll's terminated and truncated flags. Per-step
discounts and trace coefficients are what off-policy corrections multiply into (V-trace's
truncated importance weights, Retrace's traces); the sequence's last step bootstraps from
its own `v_tp1`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from sim.core.contract import bootstrap_index


def episode_discounts(terminated_t, truncated_t, discount, lam=1.0):
    """(discount_t, lambda_t) [T] of an unroll's steps: `discount` but 0 after a termination,
    and `lam` but 0 after any episode end (see the module docstring)."""
    return discount * (1.0 - terminated_t), lam * (1.0 - jnp.maximum(terminated_t, truncated_t))


def _reverse_scan(step, init, xs):
    return jax.lax.scan(lambda acc, x: (step(acc, x),) * 2, init, xs, reverse=True)[1]


def gae(r_t, v_t, v_tp1, discount_t, lambda_t, mask_t=None):
    """Generalised advantage estimation (arXiv:1506.02438), by a reverse scan. Inputs [T];
    returns (advantages [T], value targets [T] = advantages + v_t):

        delta_t = (r_t + discount_t * v_tp1 - v_t) * mask_t
        A_t     = delta_t + discount_t * lambda_t * A_{t+1},   A_T = 0

    lambda_t = 1 (within episodes) gives the Monte-Carlo advantage (bootstrapped at the
    sequence's end), 0 the one-step TD error. The targets equal `lambda_returns` of the same
    inputs. `mask_t` (default 1) zeroes the TD error of a step: Brax's PPO masks truncated
    steps (1 - truncated_t), which then learn nothing (advantage 0, target v_t) instead of
    bootstrapping from their final observation."""
    delta = r_t + discount_t * v_tp1 - v_t
    if mask_t is not None:
        delta = delta * mask_t
    advantages = _reverse_scan(lambda acc, x: x[0] + x[1] * acc, jnp.zeros_like(delta[0]),
                               (delta, discount_t * lambda_t))
    return advantages, advantages + v_t


def one_step_then_gae(r_t, v_t, v_tp1, discount_t, lambda_t, going_on_t, mask_t=None):
    """Brax PPO's advantages: the one-step return bootstrapped from the next step's
    lambda-return, less the value. Inputs [T] as `gae`'s, and `going_on_t`: 1 where step t did
    not end its episode, 0 where it did. Returns (advantages [T], value targets [T] = GAE's):

        A'_t = (r_t + discount_t * vs_{t+1} - v_t) * mask_t = delta_t + discount_t * c_t * A_{t+1}

    with vs_{t+1} = v_{t+1} + A_{t+1} (GAE's target), c_t = going_on_t but 0 at the sequence's
    last step (which bootstraps from v_tp1): GAE with no lambda on its first step."""
    advantages, targets = gae(r_t, v_t, v_tp1, discount_t, lambda_t, mask_t)
    delta = r_t + discount_t * v_tp1 - v_t
    if mask_t is not None:
        delta = delta * mask_t
    following = jnp.concatenate([advantages[1:], jnp.zeros_like(advantages[:1])])
    return delta + discount_t * going_on_t.at[-1].set(0.0) * following, targets


def lambda_returns(r_t, v_tp1, discount_t, lambda_t):
    """TD(lambda) returns (Sutton and Barto 2018, section 12.1), by a reverse scan; inputs [T],
    returns [T]. With v_tp1 = max_a Q(s_{t+1}, a) these are Peng's Q(lambda) targets, as PQN
    uses them:

        G_t = r_t + discount_t * ((1 - lambda_t) * v_tp1 + lambda_t * G_{t+1}),   G_T = v_tp1[T - 1]

    lambda_t = 0 gives the one-step TD(0) targets, 1 (within episodes) the discounted sum of
    rewards to the episode's (or the sequence's) end plus its bootstrap."""
    return _reverse_scan(lambda g, x: x[0] + x[1] * ((1.0 - x[3]) * x[2] + x[3] * g), v_tp1[-1],
                         (r_t, discount_t, v_tp1, lambda_t))


def n_step_returns(r_t, v_tp1, discount_t, lambda_t, n: int):
    """n-step returns (Sutton and Barto 2018, section 7.1); inputs [T], returns [T]:

        G_t = r_t + discount_t r_{t+1} + ... + discount_t...discount_{t+m-2} r_{t+m-1}
              + discount_t...discount_{t+m-1} v_tp1_{t+m-1}

    with m = n, or fewer where the trace stops first (lambda_t = 0: an episode's end) or the
    sequence ends. lambda_t in (0, 1) mixes, at each step, the bootstrap and the rest of the
    sum (rlax's n_step_bootstrapped_returns). n = 1 gives the TD(0) targets; n >= T, the
    Monte-Carlo returns to the end plus its bootstrap. `n` is static: n - 1 shifted passes,
    no loop in the program."""
    if n < 1:
        raise ValueError(f"n-step returns need n >= 1, got {n}")
    trace = lambda_t.at[-1].set(0.0)  # the sequence's last step bootstraps
    g = r_t + discount_t * v_tp1
    for _ in range(n - 1):
        g_next = jnp.concatenate([g[1:], g[-1:]])  # G_{t+1} of one step fewer (the last: never used)
        g = r_t + discount_t * ((1.0 - trace) * v_tp1 + trace * g_next)
    return g


def vtrace(r_t, v_t, v_tp1, discount_t, lambda_t, rho_t, clip_rho: float = 1.0, clip_pg_rho: float = 1.0):
    """V-trace (arXiv:1802.01561, "IMPALA"): value targets and policy-gradient advantages of a
    behaviour policy's steps for a target policy; inputs [T], `rho_t` the importance ratios
    pi(a_t|x_t) / mu(a_t|x_t). Returns (targets vs_t [T], pg_advantages [T]):

        delta_t  = min(clip_rho, rho_t) * (r_t + discount_t * v_tp1 - v_t)
        vs_t     = v_t + delta_t + discount_t * c_t * (vs_{t+1} - v_{t+1}),   c_t = lambda_t * min(1, rho_t)
        pg_adv_t = min(clip_pg_rho, rho_t) * (r_t + discount_t * ((1 - lambda_t) * v_tp1 + lambda_t * vs_{t+1}) - v_t)

    the trace stopping where lambda_t = 0 (an episode's end: its bootstrap is v_tp1) and at
    the sequence's end. On-policy (rho = 1, clip thresholds >= 1) vs_t are the lambda-returns
    and pg_adv_t the GAE advantages of the same inputs."""
    rho_c = jnp.minimum(clip_rho, rho_t)
    c_t = lambda_t * jnp.minimum(1.0, rho_t)
    delta = rho_c * (r_t + discount_t * v_tp1 - v_t)
    corrections = _reverse_scan(lambda acc, x: x[0] + x[1] * acc, jnp.zeros_like(delta[0]), (delta, discount_t * c_t))
    vs = v_t + corrections
    trace = lambda_t.at[-1].set(0.0)
    vs_next = jnp.concatenate([vs[1:], v_tp1[-1:]])
    q = r_t + discount_t * ((1.0 - trace) * v_tp1 + trace * vs_next)
    return vs, jnp.minimum(clip_pg_rho, rho_t) * (q - v_t)


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
