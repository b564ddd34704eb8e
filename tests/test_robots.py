"""MuJoCo Playground's locomotion and manipulation robots (envs/robots.py): registered under
Playground's names, assets from the `robots` extra's wheels (checked, never fetched), each
task's published PPO config as its defaults.

Building a robot task compiles its MuJoCo model and its MJX step (tens of seconds on a CPU):
the default `extras` run steps the cheapest task of each kind of robot, `-m slow` every task."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import envs
from agents.defaults.ppo import DEFAULTS
from envs.playground import load_registry
from envs.robot_tasks import ROBOT_TASKS
from sim.run.config import defaults_for
from tests.helpers import needs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH, STEPS, EPISODE_LENGTH = 2, 3, 5
# The cheapest task of each kind of robot (quadruped, humanoid, arm, hand) in the default
# `extras` run (each took 30-80 s on a 2-core CPU beside other tests; the others run with -m slow).
CHEAPEST = {"BarkourJoystick", "H1InplaceGaitTracking", "PandaPickCube", "LeapCubeRotateZAxis"}


def test_robot_names_without_the_extra_name_it(monkeypatch):
    monkeypatch.setattr(envs, "installed", lambda family: family != "robots")  # as without the extra
    assert not set(envs.ROBOT_ENVS) & set(envs.names())
    assert set(envs.ROBOT_ENVS) <= set(envs.names(include_missing=True))
    with pytest.raises(ValueError, match=r"env 'Go1JoystickFlatTerrain': .*pip install 'fusedrl\[robots\]'"):
        envs.check("Go1JoystickFlatTerrain")
    assert envs.family("LeapCubeReorient") == "robots"


def test_a_robot_name_without_the_extra_is_one_line_and_exit_2():
    script = ("import envs; envs.installed = lambda family: family != 'robots'\n"
              "import sys; sys.argv = ['train.py', '--env', 'G1JoystickFlatTerrain']\n"
              "import runpy; runpy.run_path('train.py', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "fusedrl[robots]" in lines[0] and "Traceback" not in proc.stderr, proc.stderr


@needs("robots")
def test_every_robot_task_playground_offers_is_an_env():
    from mujoco_playground._src import locomotion, manipulation

    assert set(envs.ROBOT_LOCOMOTION) == set(locomotion.ALL_ENVS)
    assert set(envs.ROBOT_MANIPULATION) == set(manipulation.ALL_ENVS)
    assert set(envs.ROBOT_ENVS) <= set(envs.names())
    for name, task in ROBOT_TASKS.items():  # the table's copy of each task's config
        config = (locomotion if name in envs.ROBOT_LOCOMOTION else manipulation).get_default_config(name)
        assert (task.episode_length, task.action_repeat) == (config.episode_length, config.action_repeat), name
        assert envs.backends(name) == (("mjx", "warp") if "impl" in config else ("mjx",)), name
        assert defaults_for(name, "sac").episode_length == task.episode_length


def _ours(playground_config) -> dict:
    """Playground's Brax PPO config in this project's names (the fields it sets)."""
    c, net = playground_config, playground_config.network_factory
    ours = dict(num_envs=c.num_envs, total_steps=c.num_timesteps, episode_length=c.episode_length,
                action_repeat=c.action_repeat, unroll_length=c.unroll_length, batch_size=c.batch_size,
                num_minibatches=c.num_minibatches, num_updates_per_batch=c.num_updates_per_batch,
                learning_rate=c.learning_rate, entropy_cost=c.entropy_cost, discounting=c.discounting,
                reward_scaling=c.reward_scaling, normalize_observations=c.normalize_observations,
                max_grad_norm=c.get("max_grad_norm"), clipping_epsilon=c.get("clipping_epsilon", 0.3),
                num_eval_envs=c.get("num_eval_envs", 128),
                policy_hidden_sizes=tuple(net.policy_hidden_layer_sizes),
                value_hidden_sizes=tuple(net.value_hidden_layer_sizes),
                privileged_critic=net.value_obs_key == "privileged_state")
    assert net.policy_obs_key == "state" and net.value_obs_key in ("state", "privileged_state")
    return ours


@needs("robots")
@pytest.mark.parametrize("name", envs.ROBOT_ENVS)
def test_ppo_defaults_are_playgrounds_published_config(name):
    load_registry()  # imports MJX quietly, before Playground's configs
    from mujoco_playground.config import locomotion_params, manipulation_params

    params = locomotion_params if name in envs.ROBOT_LOCOMOTION else manipulation_params
    expected = _ours(params.brax_ppo_config(name))
    config = defaults_for(name, "ppo")
    ours = {k: getattr(config, k) if hasattr(config, k) else getattr(config.agent_config, k) for k in expected}
    assert ours == expected


def test_the_privileged_critic_is_on_where_playgrounds_critic_reads_privileged_state():
    for name in ("Go1JoystickFlatTerrain", "G1JoystickFlatTerrain", "T1JoystickRoughTerrain", "LeapCubeReorient"):
        config = defaults_for(name, "ppo")
        assert config.agent_config.privileged_critic and config.num_envs == 8192, name
    assert not defaults_for("PandaPickCube", "ppo").agent_config.privileged_critic  # its critic reads "state"


@needs("robots")
def test_assets_that_differ_from_the_checked_ones_refuse_to_build(monkeypatch):
    import envs.robots as robots

    monkeypatch.setitem(robots.ASSET_DIGESTS, "unitree_go1", "0" * 64)
    with pytest.raises(ValueError, match=r"env 'Go1Getup': the robot assets in .*unitree_go1 are not the files"):
        robots.make_robot_env("Go1Getup")


@needs("robots")
def test_the_installed_wheels_match_the_recorded_digests():
    import envs.robots as robots

    folders = robots._wheel_folders()
    assert {f for task in envs.ROBOT_ENVS for f in robots.ROBOT_TASKS[task].folders} <= set(folders)
    for name, expected in robots.ASSET_DIGESTS.items():
        assert robots.folder_digest(folders[name]) == expected, name


@needs("robots")
def test_a_robot_builds_with_no_network_access(tmp_path):
    """Every socket refused, and any git command, with an empty cache (the links made anew):
    the task builds (its model loaded, its reset traced), and Playground's Menagerie clone is
    never reached."""
    script = """
import socket, subprocess
def refuse(*args, **kwargs):
    raise AssertionError("network access attempted")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse
popen = subprocess.Popen.__init__
def no_git(self, args, *rest, **kwargs):
    if "git" in (args if isinstance(args, str) else " ".join(map(str, args))):
        raise AssertionError("git run")
    popen(self, args, *rest, **kwargs)
subprocess.Popen.__init__ = no_git
import envs
env = envs.make("Go1Getup", episode_length=5)
print("built", env.spec.obs_parts)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env=dict(os.environ, JAX_PLATFORMS="cpu", XDG_CACHE_HOME=str(tmp_path)))
    assert proc.returncode == 0 and "built" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert (tmp_path / "fusedrl").is_dir()


def _check_robot(name):
    """Builds, resets and steps `name`; its rollout program, fed its own final state, runs
    again without compiling anew (Playground's own state turns some metrics weakly typed after
    a step, which costs a second compile of any program that carries it: the env layer keeps
    every leaf's type)."""
    env = envs.make(name, episode_length=EPISODE_LENGTH)
    spec = env.spec
    assert ("privileged_state" in dict(spec.obs_parts)) == ROBOT_TASKS[name].privileged
    assert dict(spec.obs_parts).get("state", spec.obs_shape[0]) > 0 and spec.action_low == (-1.0,) * spec.action_size

    @jax.jit
    def run(state, key):
        def body(state, key):
            action = jax.random.uniform(key, (BATCH, spec.action_size), minval=-1.0, maxval=1.0)
            state = jax.vmap(env.step)(state, action)
            return state, (state.obs, state.reward)

        return jax.lax.scan(body, state, jax.random.split(key, STEPS))

    state = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), BATCH))
    for seed in (1, 2):
        state, (obs, reward) = run(state, jax.random.PRNGKey(seed))
        assert obs.shape == (STEPS, BATCH, *spec.obs_shape) and reward.shape == (STEPS, BATCH)
        assert np.isfinite(np.asarray(obs)).all() and np.isfinite(np.asarray(reward)).all()
    assert run._cache_size() == 1


@needs("robots")
@pytest.mark.parametrize("name", sorted(CHEAPEST))
def test_the_cheapest_task_of_each_robot_steps(name):
    _check_robot(name)


@needs("robots")
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(envs.ROBOT_ENVS) - CHEAPEST))
def test_every_robot_task_steps(name):
    _check_robot(name)


@needs("robots")
def test_materialized_tree_levels_leave_the_physics_as_it_was(monkeypatch):
    """envs/mjx_levels.py only stops XLA recomputing MJX's body-tree levels: PandaPickCube (the
    deepest chain, where it made MJX's kinematics 98% of a step) follows the same trajectory
    to float tolerance with it and with MJX as it is."""
    from mujoco.mjx._src import scan

    env = envs.make("PandaPickCube", episode_length=50)
    actions = jax.random.uniform(jax.random.PRNGKey(3), (10, BATCH, env.spec.action_size), minval=-1.0, maxval=1.0)

    def rollout():  # a new function each time: traced anew with the body_tree in force
        def run(key):
            state = jax.vmap(env.reset)(jax.random.split(key, BATCH))
            return jax.lax.scan(lambda s, a: (jax.vmap(env.step)(s, a),) * 2, state, actions)[1].obs

        return np.asarray(jax.jit(run)(jax.random.PRNGKey(0)))

    assert getattr(scan.body_tree, "unpatched", None) is not None  # envs applied it
    materialized = rollout()
    monkeypatch.setattr(scan, "body_tree", scan.body_tree.unpatched)
    fused = rollout()
    assert np.isfinite(materialized).all()
    np.testing.assert_allclose(materialized, fused, rtol=1e-4, atol=1e-4)
