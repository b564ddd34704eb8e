"""Dynamics parameters are traced data: each env of a batch steps under its own, an episode
restart keeps them, and new values run through the program compiled for the old ones."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.wrappers import AutoReset, EpisodeStats
from tests.helpers import needs

# One parameter per env that its dynamics reads, scaled in the third env of a batch of three.
CLASSIC = {"cartpole": "gravity", "acrobot": "gravity", "pendulum": "g", "mountain_car_continuous": "power",
           "cartpole_no_vel": "masspole"}


def batch_of_three(env, name: str, scale: float = 3.0):
    """Params [3, ...]: the defaults twice, then `name` scaled by `scale`."""
    default = env.default_params()
    changed = dict(default, **{name: default[name] * scale})
    return jax.tree.map(lambda *x: jnp.stack(x), default, default, changed)


def actions(env, steps: int, batch: int, key=jax.random.PRNGKey(1)):
    """Random actions [steps, batch, ...], the same for every env of the batch."""
    if env.spec.discrete:
        acts = jax.random.randint(key, (steps, 1), 0, env.spec.num_actions)
    else:
        low, high = np.asarray(env.spec.action_low), np.asarray(env.spec.action_high)
        acts = jax.random.uniform(key, (steps, 1, *env.spec.action_shape), minval=low, maxval=high)
    return jnp.repeat(acts, batch, axis=1)


def run(env, params, acts, traces=None):
    """(observations [T, B, ...], final params) of B envs reset from one key, under params
    [B, ...] (None: each env's defaults); `traces` counts the traces of the program."""

    def body(state, action):
        state = jax.vmap(env.step)(state, action)
        return state, state.obs

    @jax.jit
    def go(params, acts):
        if traces is not None:
            traces.append(1)
        keys = jnp.broadcast_to(jax.random.PRNGKey(0), (acts.shape[1], 2))
        state = jax.vmap(env.reset)(keys, params) if params is not None else jax.vmap(env.reset)(keys)
        final, obs = jax.lax.scan(body, state, acts)
        return obs, final.params

    return go(params, acts) if traces is None else go


@pytest.mark.parametrize("name", sorted(CLASSIC))
def test_classic_envs_step_each_under_its_own_parameters(name):
    env = envs.make(name, episode_length=1000)
    params = batch_of_three(env, CLASSIC[name])
    acts = actions(env, 20, 3)
    obs, kept = run(env, params, acts)
    unset, _ = run(env, None, acts)
    # The defaults are what a reset without any takes (to rounding: there XLA may fold them as constants).
    np.testing.assert_allclose(obs[:, 0], unset[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(obs[:, 0], obs[:, 1])
    assert not np.allclose(obs[:, 2], obs[:, 0]), "the scaled parameter changed nothing"
    jax.tree.map(np.testing.assert_array_equal, kept, params)


def test_new_parameter_values_reuse_the_compiled_program():
    env = envs.make("cartpole")
    traces = []
    go = run(env, None, None, traces)
    acts = actions(env, 5, 3)
    a, _ = go(batch_of_three(env, "gravity", 2.0), acts)
    b, _ = go(batch_of_three(env, "gravity", 5.0), acts)
    assert len(traces) == 1, "other parameter values retraced the program"
    np.testing.assert_array_equal(a[:, 0], b[:, 0])
    assert not np.allclose(a[:, 2], b[:, 2])


@pytest.mark.parametrize("spares", [True, False])
def test_an_episode_restart_keeps_the_envs_parameters(spares):
    """Through AutoReset's two paths (spare starts and their renewal, or a reset at each step), the
    parameters of each env survive its episodes' ends, and its restarts run under them."""
    env = AutoReset(EpisodeStats(envs.make("cartpole", episode_length=30)), spares=spares)
    params = batch_of_three(env, "gravity", 4.0)

    @jax.jit
    def go(params):
        state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 3), params)

        def body(s, k):
            s = env.step_batch(s, jax.random.randint(k, (3,), 0, 2))
            fresh = jax.vmap(env.reset)(jax.random.split(k, 3), params)  # made under each env's own
            return env.renew(s, fresh), s.info["episode_done"]

        return jax.lax.scan(body, state, jax.random.split(jax.random.PRNGKey(1), 200))

    final, done = go(params)
    assert done[:, 2].sum() > done[:, 0].sum() >= 5  # stronger gravity: shorter episodes, restarted under it
    jax.tree.map(np.testing.assert_array_equal, final.params, params)
    spare = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(2), 3), params)
    jax.tree.map(np.testing.assert_array_equal, spare.params, params)


@pytest.mark.parametrize("name,backend", [("inverted_pendulum", "mjx"),
                                          pytest.param("inverted_pendulum", "positional", marks=pytest.mark.slow)])
def test_brax_envs_trace_their_backends_model_fields(name, backend):
    from envs.brax import MODEL_FIELDS

    env = envs.make(name, backend=backend, episode_length=1000)
    default = env.default_params()
    assert set(default) == set(MODEL_FIELDS[backend])
    gravity = "opt.gravity" if backend == "mjx" else "gravity"
    assert default[gravity].shape == (3,) and float(default[gravity][2]) < 0
    params = batch_of_three(env, gravity, 3.0)
    acts = actions(env, 8, 3)
    obs, _ = run(env, params, acts)
    np.testing.assert_array_equal(obs[:, 0], obs[:, 1])
    assert not np.allclose(obs[:, 2], obs[:, 0], atol=1e-4), "3x gravity changed nothing"
    # The env's own model is its own again after tracing: concrete values, the defaults.
    jax.tree.map(np.testing.assert_array_equal, env.default_params(), default)


@needs("gymnax")
def test_gymnax_keeps_its_env_params_with_the_floating_ones_traced():
    env = envs.make("gymnax/CartPole-v1")
    default = env.default_params()
    assert {"gravity", "masspole", "force_mag"} <= set(default)
    assert "max_steps_in_episode" not in default  # an integer: stays a constant
    acts = actions(env, 10, 3)
    obs, _ = run(env, batch_of_three(env, "gravity", 3.0), acts)
    np.testing.assert_array_equal(obs[:, 0], obs[:, 1])
    assert not np.allclose(obs[:, 2], obs[:, 0])


@needs("playground")
def test_playground_envs_trace_their_mjx_model_fields():
    from envs.playground import MODEL_FIELDS

    env = envs.make("CartpoleBalance", episode_length=1000)
    default = env.default_params()
    assert set(default) == set(MODEL_FIELDS)
    acts = actions(env, 8, 3)
    obs, _ = run(env, batch_of_three(env, "body_mass", 5.0), acts)
    np.testing.assert_array_equal(obs[:, 0], obs[:, 1])
    assert not np.allclose(obs[:, 2], obs[:, 0], atol=1e-5), "5x masses changed nothing"
