"""Sim-to-real: physics drawn per env at each reset and fixed within an episode, noisy and
delayed observation and action, the privileged parts a critic reads and a policy never does,
the robustness evaluation of `play`, and the flags' one-line errors."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from sim.core.contract import ConfigError
from envs.sim2real import SimToReal, UnknownParam, list_params, parse_noise, parse_ranges
from envs.wrappers import AutoReset, EpisodeStats
from tests.helpers import small_config

KEY = jax.random.PRNGKey(0)


def test_ranges_parse_and_bad_ones_say_what_to_write():
    assert parse_ranges(["friction=0.5:1.5", "mass=1.2"]) == (("friction", 0.5, 1.5), ("mass", 1.2, 1.2))
    for bad, says in [("friction", "is not NAME=LOW:HIGH"), ("mass=a:b", "is not NAME"), ("mass=1:2:3", "is not"),
                      ("mass=2:1", "0 <= LOW <= HIGH"), ("mass=-1:1", "0 <= LOW"), ("mass=nan", "finite")]:
        with pytest.raises(ValueError, match=says):
            parse_ranges([bad])
    with pytest.raises(ValueError, match="given twice"):
        parse_ranges(["m=1:2", "m=1"])


def test_names_resolve_to_the_env_fields_and_unknown_ones_list_them():
    assert list_params(envs.make("pendulum")) == ("g", "m", "l")
    with pytest.raises(UnknownParam, match=r"pendulum has no dynamics parameter 'friction' \(its names: g, m, l\)"):
        SimToReal(envs.make("pendulum"), (("friction", 0.5, 1.5),))


@pytest.mark.parametrize("spares", [False, True])
def test_a_randomised_parameter_differs_across_envs_and_stays_fixed_within_an_episode(spares):
    base = envs.make("pendulum", episode_length=20)
    env = AutoReset(EpisodeStats(SimToReal(base, (("m", 0.5, 1.5), ("l", 0.8, 1.2)))), spares=spares,
                    fresh_params=True)
    n = 6
    state = jax.vmap(env.reset)(jax.random.split(KEY, n))
    step = jax.jit(jax.vmap(env.step) if not spares else env.step_batch)
    renew = jax.jit(lambda s, k: env.renew(s, jax.vmap(env.reset)(jax.random.split(k, n))))
    masses, ends = [np.asarray(state.params["factors"]["m"])], []
    for k in jax.random.split(jax.random.PRNGKey(7), 50):
        state = renew(step(state, jnp.ones((n, 1))), k)
        masses.append(np.asarray(state.params["factors"]["m"]))
        ends.append(np.asarray(state.done))
    masses, ends = np.array(masses), np.array(ends)
    assert len(set(masses[0].round(6))) == n and ((masses >= 0.5) & (masses <= 1.5)).all()
    # The nominal value times the factor is what the physics steps with.
    np.testing.assert_allclose(state.params["model"]["m"], base.default_params()["m"] * state.params["factors"]["m"])
    np.testing.assert_allclose(state.params["model"]["g"], base.default_params()["g"])  # not randomised
    for t in range(50):  # a factor changes exactly where an episode ended (time limit: every 20 steps)
        np.testing.assert_array_equal(masses[t + 1] != masses[t], ends[t] > 0)
    assert ends.sum() == 2 * n


def test_the_observation_parts_noise_and_factors():
    base = envs.make("pendulum")
    env = SimToReal(base, (("m", 0.5, 1.5),), obs_noise=0.3)
    assert env.spec.obs_parts == (("state", 3), ("privileged_state", 3), ("dynamics", 1))
    states = jax.vmap(env.reset)(jax.random.split(KEY, 2000))
    states = jax.vmap(env.step)(states, jnp.zeros((2000, 1)))
    noise = states.obs[:, :3] - states.obs[:, 3:6]
    assert abs(float(jnp.std(noise)) - 0.3) < 0.02 and abs(float(jnp.mean(noise))) < 0.02
    np.testing.assert_array_equal(states.obs[:, 6], states.params["factors"]["m"])
    # The clean part is the env's own observation under the drawn physics.
    plain = SimToReal(base, (("m", 0.5, 1.5),))
    obs = jax.vmap(plain.step)(jax.vmap(plain.reset)(jax.random.split(KEY, 3)), jnp.ones((3, 1))).obs
    np.testing.assert_array_equal(obs[:, :3], obs[:, 3:6])


def test_noise_per_slice_of_the_state():
    assert parse_noise(0.05) == parse_noise("0.05") == ((0, None, 0.05),)
    assert parse_noise(("0:2=0.01", "2:=0.1", ":1=0")) == ((0, 2, 0.01), (2, None, 0.1), (0, 1, 0.0))
    assert parse_noise(("0",)) == parse_noise(()) == ()
    for bad, says in [("a", "is not STD"), ("2=0.1", "is not STD"), ("3:1=0.1", "START < STOP"), ("0:1=-1", ">= 0")]:
        with pytest.raises(ValueError, match=says):
            parse_noise((bad,))
    env = SimToReal(envs.make("pendulum"), obs_noise=parse_noise(("0.3", ":1=0", "2:=0.1")))
    states = jax.vmap(env.step)(jax.vmap(env.reset)(jax.random.split(KEY, 2000)), jnp.zeros((2000, 1)))
    std = np.std(np.asarray(states.obs[:, :3] - states.obs[:, 3:6]), axis=0)
    assert std[0] == 0 and abs(std[1] - 0.3) < 0.02 and abs(std[2] - 0.1) < 0.01, std


def test_a_push_kicks_the_root_horizontally_at_its_rate():
    base = envs.make("inverted_pendulum", "mjx")
    lift = base.push_map()  # the cart's slider: its one dof along x
    np.testing.assert_array_equal(lift, [[1, 0], [0, 0]])
    env = SimToReal(base, push=(2.0, 4))
    n = 4000
    states = jax.jit(jax.vmap(env.reset))(jax.random.split(KEY, n))
    qvel = states.physics.pipeline_state.qvel
    push = jax.jit(jax.vmap(env._push))  # one program for every kick below
    kicked = push(states.physics, jax.random.split(jax.random.PRNGKey(1), n))
    kick = np.asarray(kicked.pipeline_state.qvel - qvel)
    assert (kick[:, 1] == 0).all() and (np.abs(kick[:, 0]) <= 2.0).all()
    assert abs((kick[:, 0] != 0).mean() - 0.25) < 0.03 and np.abs(kick[:, 0]).max() > 1.5
    # Through the wrapper's step: the pushed envs move differently from the same envs unpushed.
    plain = SimToReal(base, push=None)
    a = jax.jit(jax.vmap(env.step))(states, jnp.zeros((n, 1)))
    b = jax.jit(jax.vmap(plain.step))(states.replace(info={}), jnp.zeros((n, 1)))
    moved = np.abs(np.asarray(a.physics.pipeline_state.qvel - b.physics.pipeline_state.qvel)).max(axis=1) > 1e-6
    assert abs(moved.mean() - 0.25) < 0.03
    assert not np.array_equal(a.info["push_key"], states.info["push_key"])
    # A robustness setting's own top speed (`--robustness push=SPEED`), 0 for the unpushed ones.
    from envs.sim2real import Bounded

    for top in (0.0, 4.0):
        bounded = Bounded(SimToReal(base, push=(1.0, 4)), {"push": (jnp.float32(top), jnp.float32(top))})
        pushed = jax.jit(jax.vmap(bounded.reset))(jax.random.split(KEY, n))
        kick = push(pushed.physics, jax.random.split(jax.random.PRNGKey(1), n), pushed.info["push_speed"])
        kick = np.abs(np.asarray(kick.pipeline_state.qvel - pushed.physics.pipeline_state.qvel))[:, 0]
        assert kick.max() <= top and (kick.max() > 3.0 if top else not kick.any())


def test_an_action_delay_applies_the_action_chosen_k_steps_before():
    base = envs.make("pendulum")
    delayed = SimToReal(base, action_delay=2)
    state = delayed.reset(KEY)
    inner = base.reset(jax.random.split(KEY, 3)[1])  # the inner reset's key
    actions = jnp.linspace(-2, 2, 8)[:, None]
    applied = jnp.concatenate([jnp.zeros((2, 1)), actions[:-2]])
    for a, b in zip(actions, applied):
        state, inner = delayed.step(state, a), base.step(inner, b)
        np.testing.assert_array_equal(state.obs[3:6], inner.obs)
        assert float(state.reward) == float(inner.reward)


def test_an_episode_start_clears_the_queue():
    env = SimToReal(envs.make("pendulum", episode_length=3), action_delay=2)
    state = env.reset(KEY)
    for _ in range(3):
        state = env.step(state, jnp.ones(1))
    assert float(state.done) == 1.0 and not state.info["action_queue"].any()


@pytest.mark.parametrize("agent", ["ppo", "sac", "fasttd3"])
def test_the_privileged_critic_reads_the_privileged_parts_and_the_policy_never_does(agent):
    from sim.run.build import build_engine

    cfg = small_config("pendulum", agent, randomize=("m=0.5:1.5", "l=0.5:1.5"), obs_noise=0.1,
                       privileged_critic=True)
    engine = build_engine(cfg)
    parts = dict(engine.spec.obs_parts)
    assert parts == {"state": 3, "privileged_state": 3, "dynamics": 2} and engine.env.spec == engine.eval_env.spec
    state = engine.agent.init(KEY, engine.hp)
    names = {jax.tree_util.keystr(path): leaf.shape for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]}
    first = {k: v for k, v in names.items() if "Dense_0" in k and "kernel" in k and "opt" not in k
             and "target" not in k}
    actor = [v for k, v in first.items() if "policy" in k]
    critic = [v for k, v in first.items() if "policy" not in k]
    kernels = first
    assert actor and critic
    assert all(s[-2] == 3 for s in actor), kernels  # "state" alone
    assert all(s[-2] in (5, 5 + 1) for s in critic), kernels  # privileged_state + dynamics (+ the action)
    # The policy inside the compiled evaluation acts the same whatever the privileged parts hold.
    from envs.wrappers import init_stats

    stats = init_stats(engine.spec.obs_shape)

    def act(obs):
        return engine.agent.act(state, stats, obs, KEY, True, None)

    obs = 1e-3 * jax.random.normal(KEY, (4, 8))  # within the fresh statistics' clip (their std is 1e-3)
    a, _, _ = act(obs)
    b, _, _ = act(obs.at[:, 3:].set(2e-3))
    np.testing.assert_array_equal(a, b)
    c, _, _ = act(obs.at[:, 0].add(1e-3))
    assert not np.allclose(a, c)


def test_flags_give_one_line_errors():
    from sim.run.build import build_engine

    cases = [
        (dict(randomize=("friction=1:2",)), "--randomize: pendulum has no dynamics parameter 'friction'"),
        (dict(randomize=("m=2:1",)), "--randomize: 'm=2:1': factors must be finite"),
        (dict(privileged_critic=True), "--privileged-critic: the observation has no privileged part"),
        (dict(obs_noise=-1.0), "--obs-noise: '-1.0': the std must be finite and >= 0"),
        (dict(obs_noise=("0.1", "2:5=0.2")), "--obs-noise: 2:5 is past the observation's state, which has 3 entries"),
        (dict(push=1.0), "--push: pushes need MuJoCo physics"),
        (dict(push=1.0, push_every=0), "--push-every: must be >= 1"),
        (dict(action_delay=-1), "--action-delay: must be >= 0"),
    ]
    for overrides, says in cases:
        with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
            build_engine(small_config("pendulum", "sac", **overrides))
    with pytest.raises(TypeError, match="--agent dqn has no field privileged_critic"):  # its flag: not dqn's
        small_config("cartpole", "dqn", privileged_critic=True)
    with pytest.raises(ConfigError, match="drop --critic-obs"):
        small_config("pendulum", "sac", privileged_critic=True, critic_obs="state").validate()


def test_randomize_reads_a_file_of_entries(tmp_path):
    from sim.run.settings import randomize_ranges

    path = tmp_path / "physics.txt"
    path.write_text("m=0.5:1.5  # the pole's mass\nl=0.9:1.1\n")
    assert randomize_ranges((str(path), "g=1:1.1")) == (("m", 0.5, 1.5), ("l", 0.9, 1.1), ("g", 1.0, 1.1))


def test_a_randomised_run_trains_and_play_reports_each_physics_setting(tmp_path, capsys):
    import train

    run = str(tmp_path / "run")
    flags = ["--env", "pendulum", "--agent", "sac", "--num-envs", "4", "--total-steps", "512", "--epochs", "2",
             "--num-eval-envs", "4", "--no-progress", "--batch-size", "16", "--min-replay-size", "64",
             "--policy-hidden-sizes", "16", "16", "--value-hidden-sizes", "16", "16",
             "--randomize", "m=0.5:1.5", "l=0.8:1.2", "--obs-noise", "0.05", "--action-delay", "1",
             "--privileged-critic", "--run-dir", run]
    assert train.main(flags) == 0
    config = json.load(open(f"{run}/config.json"))
    assert config["randomize"] == ["m=0.5:1.5", "l=0.8:1.2"] and config["privileged_critic"]
    capsys.readouterr()
    policy = str(tmp_path / "policy.npz")
    assert train.main(["play", run, "--robustness", "m=2", "m=0.3,l=1.5", "l=0.5:1.5"]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.splitlines()[-4:]]
    assert rows == ["nominal", "m=2", "m=0.3,l=1.5", "l=0.5:1.5"], out
    assert train.main(["export", run, policy]) == 0
    out = capsys.readouterr().out
    assert "exported the policy to" in out and "differ from the JAX policy's by at most" in out
    from sim.run.policy.export import numpy_policy

    assert numpy_policy(policy)(np.zeros((5, 8), np.float32)).shape == (5, 1)
    assert train.main(["play", run, "--robustness", "friction=2"]) == 2
    assert "--robustness: pendulum has no dynamics parameter 'friction'" in capsys.readouterr().err
    assert train.main(["play", run, "--robustness", "push=1"]) == 2
    assert "--robustness: pushes need MuJoCo physics" in capsys.readouterr().err
