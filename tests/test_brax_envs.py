"""Brax and MuJoCo Playground environments through the functional `Env` API.

Each check builds one jitted program: vmapped reset, then a `lax.scan` of vmapped steps with
random actions (one compile per env/backend pair, which on CPU costs seconds to tens of
seconds). The default set covers a few quick pairs; `-m slow` runs every env x backend.
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from tests.helpers import needs

BATCH, STEPS, EPISODE_LENGTH = 4, 6, 5


def _rollout(env, seed=0):
    """Returns (reset state, final state, per-step (reward, terminated, truncated, steps)),
    each per-step array [STEPS, BATCH]."""

    def body(state, key):
        low, high = np.asarray(env.spec.action_low), np.asarray(env.spec.action_high)
        action = jax.random.uniform(key, (BATCH, *env.spec.action_shape), minval=low, maxval=high)
        state = jax.vmap(env.step)(state, action)
        return state, (state.reward, state.terminated, state.truncated, state.steps)

    @jax.jit
    def run(key):
        reset_key, step_key = jax.random.split(key)
        state0 = jax.vmap(env.reset)(jax.random.split(reset_key, BATCH))
        state, per_step = jax.lax.scan(body, state0, jax.random.split(step_key, STEPS))
        return state0, state, per_step

    return run(jax.random.PRNGKey(seed))


def _check_env(env):
    spec = env.spec
    assert not spec.discrete and spec.episode_length == EPISODE_LENGTH
    assert len(spec.obs_shape) == 1 and spec.action_shape == (spec.action_size,)
    assert spec.action_low == (-1.0,) * spec.action_size and spec.action_high == (1.0,) * spec.action_size
    state0, state, (reward, terminated, truncated, steps) = _rollout(env)
    for s in (state0, state):
        assert s.obs.shape == (BATCH, *spec.obs_shape) and s.obs.dtype == jnp.float32
        assert bool(jnp.isfinite(s.obs).all())
        assert s.info == {}
    for x in (reward, terminated, truncated):
        assert x.shape == (STEPS, BATCH) and x.dtype == jnp.float32
    assert bool(jnp.isfinite(reward).all())
    assert set(np.unique(np.asarray(terminated))) <= {0.0, 1.0}
    # No auto-reset here: steps count on, truncated is set from step EPISODE_LENGTH onwards.
    np.testing.assert_array_equal(np.asarray(steps[:, 0]), np.arange(1, STEPS + 1))
    np.testing.assert_array_equal(np.asarray(truncated), (np.asarray(steps) >= EPISODE_LENGTH).astype(np.float32))
    assert not np.asarray(truncated[: EPISODE_LENGTH - 1]).any() and np.asarray(truncated[EPISODE_LENGTH - 1]).all()
    # Floating leaves of Brax's own state are float32 after reset and after step alike.
    for x in jax.tree.leaves(state.physics):
        if jnp.issubdtype(x.dtype, jnp.floating):
            assert x.dtype == jnp.float32


# swimmer is the only env with fluid drag, i.e. the only one through `_shim_fluid_clip`; ant on
# its default backend (MJX, 27 s to compile) runs with `-m slow`, MJX by default on the pendulum.
FAST = [pytest.param("inverted_pendulum", "positional", id="inverted_pendulum-positional"),
        pytest.param("inverted_pendulum", "mjx", id="inverted_pendulum-mjx"),
        pytest.param("ant", None, marks=pytest.mark.slow, id="ant-default"),
        pytest.param("swimmer", None, id="swimmer-default")]


@pytest.mark.parametrize("name,backend", FAST)
def test_brax_fast(name, backend):
    env = envs.make(name, backend=backend, episode_length=EPISODE_LENGTH)
    assert env.backend == (backend or envs.default_backend(name))
    _check_env(env)


def test_brax_registry_and_hashing():
    assert envs.backends("swimmer") == ("generalized",) and envs.default_backend("swimmer") == "generalized"
    assert all(envs.default_backend(n) == "mjx" for n in envs.BRAX_ENVS if n != "swimmer")
    with pytest.raises(ValueError, match="valid backends"):
        envs.make("swimmer", backend="mjx")
    a = envs.make("reacher", backend="spring", episode_length=7)
    b = envs.make("reacher", backend="spring", episode_length=7)
    c = envs.make("reacher", backend="spring", episode_length=8)
    assert a == b and hash(a) == hash(b) and a != c
    assert a.spec.obs_shape == (11,) and a.spec.action_shape == (2,)


MATRIX = [(n, b) for n in envs.BRAX_ENVS for b in envs.backends(n)]


@pytest.mark.slow
@pytest.mark.parametrize("name,backend", MATRIX, ids=[f"{n}-{b}" for n, b in MATRIX])
def test_brax_matrix(name, backend):
    _check_env(envs.make(name, backend=backend, episode_length=EPISODE_LENGTH))


def test_playground_missing_package_message(monkeypatch):
    import envs.playground as pg

    monkeypatch.setitem(sys.modules, "mujoco_playground", None)  # makes the import fail
    with pytest.raises(ImportError, match=r"pip install 'fusedrl\[playground\]'"):
        pg.make_playground_env("CartpoleBalance")


@needs("playground")
def test_playground_cartpole_balance():
    assert envs.make("CartpoleBalance").spec.episode_length == 1000  # from its config
    env = envs.make("CartpoleBalance", episode_length=EPISODE_LENGTH)
    assert env.spec.obs_shape == (5,) and env.spec.action_shape == (1,)
    _check_env(env)


@needs("playground")
def test_every_dm_control_task_playground_offers_is_an_env(monkeypatch):
    from mujoco_playground._src import dm_control_suite

    assert set(envs.PLAYGROUND_ENVS) == set(dm_control_suite.ALL_ENVS)
    assert set(envs.PLAYGROUND_ENVS) <= set(envs.names())
    monkeypatch.setattr(envs, "installed", lambda family: family != "playground")  # as without the extra
    assert not set(envs.PLAYGROUND_ENVS) & set(envs.names())
    assert set(envs.PLAYGROUND_ENVS) <= set(envs.names(include_missing=True))
    with pytest.raises(ValueError, match=r"env 'CheetahRun': .*pip install 'fusedrl\[playground\]'"):
        envs.check("CheetahRun")
    with pytest.raises(ValueError, match=r"unknown env 'cheeta'; .*playground\]' for 25 more"):
        envs.check("cheeta")


@needs("playground")
@pytest.mark.parametrize("name", ["PointMass", "ReacherEasy"])
def test_playground_tasks_step(name):
    _check_env(envs.make(name, episode_length=EPISODE_LENGTH))


@needs("playground")
@pytest.mark.slow
@pytest.mark.parametrize("name", envs.PLAYGROUND_ENVS)
def test_playground_matrix(name):
    _check_env(envs.make(name, episode_length=EPISODE_LENGTH))


def test_building_a_brax_env_without_warp_prints_nothing_of_it():
    """MJX prints "Failed to import warp" on import where warp-lang is missing (the `playground`
    extra brings it); the JAX implementation used here needs none of it: the user sees nothing."""
    script = ("import sys; sys.modules['warp'] = None\n"  # as where warp-lang is not installed
              "import envs\nenvs.make('inverted_pendulum', backend='positional')\nprint('built')")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert proc.returncode == 0 and proc.stdout.strip() == "built", proc.stdout + proc.stderr[-2000:]
    assert "warp" not in proc.stderr.lower()
