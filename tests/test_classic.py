"""The pure-JAX classic control tasks against Gymnasium's reference implementations.

Every oracle comparison copies Gymnasium's physical state into ours first, so float32 (ours)
vs float64 (Gymnasium) rounding cannot grow chaotically; a separate short free-running test
checks the two trajectories also stay together without re-syncing.
"""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs

GYM_IDS = {
    "cartpole": "CartPole-v1",
    "acrobot": "Acrobot-v1",
    "pendulum": "Pendulum-v1",
    "mountain_car_continuous": "MountainCarContinuous-v0",
}
NAMES = list(GYM_IDS)
ATOL = RTOL = 1e-5


@pytest.fixture(autouse=True)
def _quiet_gym():
    # Out-of-bounds continuous actions are deliberate (they exercise the clipping).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _policy(name, rng, gym_state):
    """Random actions; for mountain car a noisy bang-bang that pumps energy to reach the goal."""
    if name == "cartpole":
        return int(rng.integers(2))
    if name == "acrobot":
        return int(rng.integers(3))
    if name == "pendulum":
        return rng.uniform(-3.0, 3.0, (1,)).astype(np.float32)  # beyond +-2: tests the clip
    direction = 1.0 if gym_state[1] >= 0 else -1.0
    return (direction * rng.uniform(0.5, 1.6, (1,))).astype(np.float32)  # beyond +-1 sometimes


def _physics(gym_state):
    return jnp.asarray(np.asarray(gym_state, np.float64), jnp.float32)


def _check(ours, gobs, grew, gterm, gtrunc, where, atol=ATOL, rtol=RTOL):
    np.testing.assert_allclose(np.asarray(ours.obs), gobs, atol=atol, rtol=rtol, err_msg=f"obs {where}")
    np.testing.assert_allclose(float(ours.reward), float(grew), atol=atol, rtol=rtol, err_msg=f"reward {where}")
    assert bool(ours.terminated) == bool(gterm), f"terminated {where}"
    assert bool(ours.truncated) == bool(gtrunc), f"truncated {where}"


# The number of steps to run per task and the episode endings it must meet on the way.
ORACLE_STEPS = {"cartpole": 400, "acrobot": 1100, "pendulum": 450, "mountain_car_continuous": 400}
MUST_SEE = {
    "cartpole": "terminated",
    "acrobot": "truncated",
    "pendulum": "truncated",
    "mountain_car_continuous": "terminated",
}


@pytest.mark.parametrize("name", NAMES)
def test_oracle_resynced_every_step(name):
    genv = gym.make(GYM_IDS[name])  # keeps Gymnasium's TimeLimit
    env = envs.make(name)
    step = jax.jit(env.step)
    rng = np.random.default_rng(0)
    key = jax.random.PRNGKey(0)
    seen = {"terminated": 0, "truncated": 0}

    gobs, _ = genv.reset(seed=0)
    state = env.reset(key)
    for t in range(ORACLE_STEPS[name]):
        gstate = np.array(genv.unwrapped.state)
        action = _policy(name, rng, gstate)
        state = step(state.replace(physics=_physics(gstate)), jnp.asarray(action))
        gobs, grew, gterm, gtrunc, _ = genv.step(action)
        _check(state, gobs, grew, gterm, gtrunc, f"{name} step {t}")
        if gterm or gtrunc:
            seen["terminated"] += bool(gterm)
            seen["truncated"] += bool(gtrunc)
            gobs, _ = genv.reset(seed=t + 1)
            key, sub = jax.random.split(key)
            state = env.reset(sub)
    assert seen[MUST_SEE[name]] >= 1, seen


@pytest.mark.parametrize("name", NAMES)
def test_oracle_free_running(name):
    """50 steps without re-syncing after reset: float32 stays close to Gymnasium's float64."""
    genv = gym.make(GYM_IDS[name])
    env = envs.make(name)
    step = jax.jit(env.step)
    rng = np.random.default_rng(1)
    gobs, _ = genv.reset(seed=1)
    state = env.reset(jax.random.PRNGKey(1)).replace(physics=_physics(genv.unwrapped.state), obs=jnp.asarray(gobs))
    for t in range(50):
        action = _policy(name, rng, np.asarray(state.physics))
        state = step(state, jnp.asarray(action))
        gobs, grew, gterm, gtrunc, _ = genv.step(action)
        _check(state, gobs, grew, gterm, gtrunc, f"{name} free step {t}", atol=1e-3, rtol=1e-3)
        if gterm or gtrunc:
            gobs, _ = genv.reset(seed=100 + t)
            state = env.reset(jax.random.PRNGKey(t)).replace(physics=_physics(genv.unwrapped.state), obs=jnp.asarray(gobs))


def _random_states(name, rng, n):
    """Broad states (beyond the usual ranges) to hit every clip, wrap and termination branch."""
    u = rng.uniform
    if name == "cartpole":
        cols = [u(-2.6, 2.6, n), u(-3, 3, n), u(-0.25, 0.25, n), u(-3, 3, n)]
    elif name == "acrobot":
        cols = [u(-math.pi, math.pi, n), u(-math.pi, math.pi, n), u(-4 * math.pi, 4 * math.pi, n), u(-9 * math.pi, 9 * math.pi, n)]
    elif name == "pendulum":
        cols = [u(-2 * math.pi, 2 * math.pi, n), u(-8, 8, n)]
    else:
        cols = [u(-1.2, 0.6, n), u(-0.07, 0.07, n)]
        cols[0][:20] = u(-1.2, -1.15, 20)  # next to the left wall, moving into it
        cols[1][:20] = u(-0.07, -0.05, 20)
    return np.stack(cols, axis=1).astype(np.float32)


# Float32 tolerance for one step from a scattered state. Acrobot's RK4 step from velocities
# near its bounds (|dtheta2| ~ 9 pi) loses ~5e-5 relative in float32 through the dtheta**2
# terms; the float64 run below shows the formulas themselves match to float32 rounding.
RANDOM_STATE_TOL = {"acrobot": 1e-4}


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])
@pytest.mark.parametrize("name", NAMES)
def test_oracle_random_states(name, x64):
    """One step from 500 scattered states each, batched through vmap on our side.

    With x64 the same code runs in float64 (only its output is rounded to float32), which
    isolates formula mistakes from float32 rounding: it must agree to ~1e-6.
    """
    genv = gym.make(GYM_IDS[name]).unwrapped
    genv.reset(seed=2)
    env = envs.make(name)
    rng = np.random.default_rng(2)
    n = 500
    physics = _random_states(name, rng, n)
    if env.spec.discrete:
        actions = rng.integers(env.spec.num_actions, size=n).astype(np.int32)
    else:
        actions = rng.uniform(-2 * env.spec.action_high[0], 2 * env.spec.action_high[0], (n, 1)).astype(np.float32)
    states = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(2), n))
    with jax.enable_x64(x64):
        dtype = jnp.float64 if x64 else jnp.float32
        ours = jax.jit(jax.vmap(env.step))(states.replace(physics=jnp.asarray(physics, dtype)), jnp.asarray(actions, actions.dtype))
    ours = jax.tree.map(np.asarray, ours)
    tol = 1e-6 if x64 else RANDOM_STATE_TOL.get(name, ATOL)
    terms = []
    for i in range(n):
        genv.state = physics[i].astype(np.float64)
        genv.steps_beyond_terminated = None  # cartpole: a fresh transition, not a step past termination
        action = int(actions[i]) if env.spec.discrete else actions[i]
        gobs, grew, gterm, _, _ = genv.step(action)
        one = jax.tree.map(lambda x: x[i], ours)
        _check(one, gobs, grew, gterm, False, f"{name} state {physics[i]} action {action}", atol=tol, rtol=tol)
        terms.append(bool(gterm))
    if name != "pendulum":  # pendulum never terminates
        assert 0 < sum(terms) < n, "want both terminal and non-terminal transitions"


def test_acrobot_goal_state_terminates():
    genv = gym.make("Acrobot-v1").unwrapped
    genv.reset(seed=0)
    env = envs.make("acrobot")
    cases = [  # (state, Gymnasium's terminated after one step with zero torque)
        ([math.pi, 0.0, 0.0, 0.0], True),  # straight up
        ([0.0, 0.0, 0.0, 0.0], False),  # hanging down
        ([2.1, 0.0, 0.0, 0.0], False),  # just short of the goal height
        ([2.2, 0.0, 0.0, 0.0], True),  # just past it
        ([-2.3, 0.2, 0.0, 0.0], True),
    ]
    for s, want in cases:
        genv.state = np.array(s)
        gobs, grew, gterm, _, _ = genv.step(1)
        ours = env.step(env.reset(jax.random.PRNGKey(0)).replace(physics=jnp.asarray(s, jnp.float32)), jnp.int32(1))
        assert bool(gterm) == want
        _check(ours, gobs, grew, gterm, False, f"acrobot from {s}")
        assert float(ours.reward) == (0.0 if want else -1.0)


@pytest.mark.parametrize("name", NAMES)
def test_truncated_exactly_at_episode_length(name):
    env = envs.make(name)
    length = env.spec.episode_length
    action = jnp.int32(0) if env.spec.discrete else jnp.zeros((1,), jnp.float32)

    def body(state, _):
        state = env.step(state, action)
        return state, (state.truncated, state.steps)

    _, (truncated, steps) = jax.jit(lambda s: jax.lax.scan(body, s, None, length=length))(env.reset(jax.random.PRNGKey(0)))
    truncated = np.asarray(truncated)
    assert truncated[:-1].sum() == 0 and truncated[-1] == 1.0
    np.testing.assert_array_equal(np.asarray(steps), np.arange(1, length + 1))


RESET_RANGES = {  # Gymnasium's reset distributions, per physics component
    "cartpole": [(-0.05, 0.05)] * 4,
    "acrobot": [(-0.1, 0.1)] * 4,
    "pendulum": [(-math.pi, math.pi), (-1.0, 1.0)],
    "mountain_car_continuous": [(-0.6, -0.4), (0.0, 0.0)],
}


@pytest.mark.parametrize("name", NAMES)
def test_reset_distribution(name):
    env = envs.make(name)
    states = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(3), 4096))
    physics = np.asarray(states.physics)
    genv = gym.make(GYM_IDS[name]).unwrapped
    gym_physics = np.array([np.asarray(genv.reset(seed=s) and genv.state, np.float64) for s in range(200)])
    for i, (lo, hi) in enumerate(RESET_RANGES[name]):
        for sample in (physics[:, i], gym_physics[:, i]):
            assert sample.min() >= lo - 1e-6 and sample.max() <= hi + 1e-6, (i, sample.min(), sample.max())
        if hi > lo:  # ours fills the range, roughly uniformly
            width = hi - lo
            assert physics[:, i].min() < lo + 0.01 * width and physics[:, i].max() > hi - 0.01 * width
            assert abs(physics[:, i].mean() - (lo + hi) / 2) < 0.03 * width
    # The reset observation is the one Gymnasium would give from the same physical state.
    for i in range(5):
        genv.state = physics[i].astype(np.float64)
        gobs = genv._get_obs() if hasattr(genv, "_get_obs") else genv._get_ob() if hasattr(genv, "_get_ob") else genv.state
        np.testing.assert_allclose(np.asarray(states.obs[i]), np.asarray(gobs, np.float32), atol=ATOL)
    assert states.obs.dtype == jnp.float32 and states.steps.dtype == jnp.int32


@pytest.mark.parametrize("name", NAMES)
def test_jit_scan_vmap_1024_envs(name):
    env = envs.make(name)
    spec = env.spec
    num_envs, num_steps = 1024, 100

    def sample_actions(key):
        if spec.discrete:
            return jax.random.randint(key, (num_envs,), 0, spec.num_actions, jnp.int32)
        lo, hi = 1.5 * jnp.asarray(spec.action_low), 1.5 * jnp.asarray(spec.action_high)
        return jax.random.uniform(key, (num_envs, *spec.action_shape), jnp.float32, lo, hi)

    def body(carry, _):
        state, key = carry
        key, sub = jax.random.split(key)
        state = jax.vmap(env.step)(state, sample_actions(sub))
        return (state, key), (state.obs, state.reward, state.terminated, state.truncated)

    @jax.jit
    def rollout(key):
        k0, k1 = jax.random.split(key)
        state = jax.vmap(env.reset)(jax.random.split(k0, num_envs))
        return jax.lax.scan(body, (state, k1), None, length=num_steps)

    (final, _), (obs, reward, terminated, truncated) = rollout(jax.random.PRNGKey(4))
    assert obs.shape == (num_steps, num_envs, *spec.obs_shape) and obs.dtype == jnp.float32
    for x in (reward, terminated, truncated):
        assert x.shape == (num_steps, num_envs) and x.dtype == jnp.float32
    assert final.steps.shape == (num_envs,) and int(final.steps[0]) == num_steps
    assert np.isfinite(np.asarray(obs)).all() and np.isfinite(np.asarray(reward)).all()


@pytest.mark.parametrize("name", NAMES)
def test_spec_matches_gymnasium(name):
    env = envs.make(name)
    genv = gym.make(GYM_IDS[name])
    spec = env.spec
    assert env.name == name
    assert spec.obs_shape == genv.observation_space.shape
    assert spec.episode_length == gym.spec(GYM_IDS[name]).max_episode_steps
    if isinstance(genv.action_space, gym.spaces.Discrete):
        assert spec.discrete and spec.num_actions == genv.action_space.n and spec.action_size == spec.num_actions
        assert spec.action_shape is None
    else:
        assert not spec.discrete and spec.num_actions is None
        assert spec.action_shape == genv.action_space.shape == (1,)
        assert spec.action_low == tuple(float(x) for x in genv.action_space.low)
        assert spec.action_high == tuple(float(x) for x in genv.action_space.high)


@pytest.mark.parametrize("name", NAMES)
def test_static_hashable_overrides_and_render(name):
    env = envs.make(name)
    assert hash(env) == hash(envs.make(name)) and env == envs.make(name)
    shorter = envs.make(name, episode_length=7)
    assert shorter.spec.episode_length == 7 and shorter != env
    state = env.reset(jax.random.PRNGKey(5))
    frame = env.render_frame(state.physics)
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    assert (frame != 255).any(), "something is drawn"


def test_physical_overrides():
    heavy = envs.make("pendulum", g=9.81)
    assert heavy.g == 9.81 and heavy.spec == envs.make("pendulum").spec
    genv = gym.make("Pendulum-v1", g=9.81).unwrapped
    genv.reset(seed=0)
    genv.state = np.array([1.0, 0.5])
    gobs, grew, *_ = genv.step(np.array([0.3], np.float32))
    ours = heavy.step(heavy.reset(jax.random.PRNGKey(0)).replace(physics=jnp.asarray([1.0, 0.5], jnp.float32)), jnp.asarray([0.3], jnp.float32))
    _check(ours, gobs, grew, False, False, "pendulum g=9.81")


@pytest.mark.parametrize("name, full, seen", [("cartpole_no_vel", "cartpole", [0, 2]),
                                              ("pendulum_no_vel", "pendulum", [0, 1])])
def test_a_no_velocity_variant_is_its_task_with_the_velocities_unseen(name, full, seen):
    """Same physics, rewards and ends as the full task, step by step; the observation keeps
    the positions only; agents start from the full task's tuned settings."""
    from sim.run.config import defaults_for

    partial, whole = envs.make(name), envs.make(full)
    assert partial.spec.obs_shape == (len(seen),) and partial.spec.episode_length == whole.spec.episode_length
    assert envs.family(name) == "classic" and partial.spec.discrete == whole.spec.discrete
    keys = jax.random.split(jax.random.PRNGKey(0), 64)
    a, b = jax.vmap(partial.reset)(keys), jax.vmap(whole.reset)(keys)
    step_a, step_b = jax.jit(jax.vmap(partial.step)), jax.jit(jax.vmap(whole.step))
    rng = np.random.default_rng(0)
    for _ in range(60):
        np.testing.assert_array_equal(a.obs, b.obs[:, seen])
        np.testing.assert_array_equal(a.physics, b.physics)
        action = (rng.integers(0, 2, 64).astype(np.int32) if whole.spec.discrete
                  else rng.uniform(-2, 2, (64, 1)).astype(np.float32))
        a, b = step_a(a, action), step_b(b, action)
        np.testing.assert_array_equal(a.reward, b.reward)
        np.testing.assert_array_equal(a.terminated, b.terminated)
    for agent in ("ppo", "sac") if not whole.spec.discrete else ("ppo", "dqn"):
        assert defaults_for(name, agent).replace(env=full) == defaults_for(full, agent)
