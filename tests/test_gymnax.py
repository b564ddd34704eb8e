"""gymnax's environments behind the one env API (the `gymnax` extra, gymnax 1.0.x)."""

import importlib.metadata

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs import gymnax as gx
from sim.run.config import defaults_for
from tests.helpers import needs, small_config

needs_gymnax = needs("gymnax")
NAMES = [name for name, _, _ in envs.GYMNAX_ENVS]


@needs_gymnax
def test_every_gymnax_env_but_the_downloading_one_is_registered_as_it_declares_itself():
    import gymnax

    assert set(NAMES) == {f"gymnax/{n}" for n in gymnax.registered_envs} - {"gymnax/MNISTBandit-bsuite"}
    for name, actions, limit in envs.GYMNAX_ENVS:
        env, params = gymnax.make(name.removeprefix("gymnax/"))
        assert hasattr(env.action_space(params), "n") == (actions == "discrete"), name
        assert params.max_steps_in_episode == limit, name
        assert defaults_for(name).episode_length == limit  # the env's own time limit is the default


def step_all(env, steps):
    keys = jax.random.split(jax.random.PRNGKey(0), 3)

    def action(key):
        if env.spec.discrete:
            return jax.random.randint(key, (), 0, env.spec.num_actions)
        return jax.random.uniform(key, env.spec.action_shape, minval=jnp.asarray(env.spec.action_low),
                                  maxval=jnp.asarray(env.spec.action_high))

    @jax.jit
    def run(keys):
        def body(states, key):
            states = jax.vmap(env.step)(states, jax.vmap(action)(jax.random.split(key, len(keys))))
            return states, (states.reward, states.terminated, states.truncated)

        return jax.lax.scan(body, jax.vmap(env.reset)(keys), jax.random.split(keys[0], steps))

    return run(keys)


@needs_gymnax
@pytest.mark.parametrize("name", ["gymnax/CartPole-v1", "gymnax/Breakout-MinAtar", "gymnax/Pendulum-v1",
                                  "gymnax/FrozenLake-misc"])
def test_gymnax_envs_reset_and_step_under_jit_vmap(name):
    check_env(name)


@needs_gymnax
@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_every_gymnax_env_resets_and_steps_under_jit_vmap(name):
    check_env(name)


def check_env(name):
    env = envs.make(name, episode_length=6)
    state, (reward, terminated, truncated) = step_all(env, 6)
    assert state.obs.shape == (3,) + env.spec.obs_shape and state.obs.dtype == jnp.float32
    assert reward.shape == terminated.shape == truncated.shape == (6, 3)
    assert bool(jnp.all(jnp.isfinite(reward)))
    # our time limit truncates; gymnax's own is lifted, so `terminated` is a termination only
    np.testing.assert_array_equal(np.asarray(truncated[-1]), 1.0)
    assert not np.asarray(truncated[:-1]).any()


@needs_gymnax
def test_gymnax_time_limit_is_a_truncation_not_a_termination():
    env = envs.make("gymnax/Pendulum-v1", episode_length=3)  # pendulum never terminates
    state = env.reset(jax.random.PRNGKey(0))
    for _ in range(3):
        state = env.step(state, jnp.zeros((1,)))
    assert float(state.truncated) == 1.0 and float(state.terminated) == 0.0
    long = envs.make("gymnax/Pendulum-v1", episode_length=400)  # longer than gymnax's own 200
    _, (_, terminated, truncated) = step_all(long, 250)
    assert not np.asarray(terminated).any() and not np.asarray(truncated).any()


def test_another_gymnax_version_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0.9")
    with pytest.raises(ValueError) as err:
        gx.check_version()
    assert str(err.value) == ("gymnax 0.0.9 is installed; this trainer supports gymnax 1.0.x, whose step returns "
                              "terminated and truncated apart: pip install 'fusedrl[gymnax]'")
    monkeypatch.setattr(envs, "installed", lambda family: True)
    with pytest.raises(ValueError, match="gymnax 0.0.9 is installed"):
        envs.check("gymnax/CartPole-v1")


def test_without_the_extra_its_envs_say_how_to_install_it(monkeypatch):
    monkeypatch.setattr(envs, "installed", lambda family: family != "gymnax")
    assert not set(NAMES) & set(envs.names()) and set(NAMES) <= set(envs.names(include_missing=True))
    with pytest.raises(ValueError, match=r"env 'gymnax/Catch-bsuite': .*pip install 'fusedrl\[gymnax\]'"):
        envs.check("gymnax/Catch-bsuite")


@needs_gymnax
@pytest.mark.parametrize("env, agent", [("gymnax/CartPole-v1", "ppo"), ("gymnax/Pendulum-v1", "sac"),
                                        ("gymnax/Catch-bsuite", "dqn")])
def test_a_gymnax_env_trains_end_to_end(tmp_path, env, agent):
    from sim.run.trainer import train

    record = train(small_config(env, agent, epochs=2), run_dir=str(tmp_path), log=lambda *a: None)
    assert record["epoch"] == 2 and np.isfinite(record["eval/episode_return"])
    assert all(np.isfinite(v) for k, v in record.items() if k.startswith("loss/"))
