"""Distillation (bc, bc_rnn): where the teacher reads its observation in the student's, DAgger's
mixture and labels, the losses, a recurrent student learning cartpole from a PPO teacher
while seeing no velocities, and a student that plays and exports without its teacher."""

import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sim.core.contract import Budget, ConfigError
from agents.bc import BCConfig, make_bc
from envs.base import EnvSpec
from sim.run.policy import teacher as teachers
from sim.run.config import defaults_for
from sim.run.trainer import train
from tests.helpers import small_config, teacher_dir


def _spec(obs_shape=(4,), parts=(), discrete=True):
    if discrete:
        return EnvSpec(obs_shape=obs_shape, discrete=True, episode_length=10, num_actions=2, obs_parts=parts)
    return EnvSpec(obs_shape=obs_shape, discrete=False, episode_length=10, action_shape=(2,), action_low=(-1.0, 0.0),
                   action_high=(1.0, 4.0), obs_parts=parts)


def _teacher(spec):
    return teachers.Teacher("", "", "teacher_env", "ppo", spec, None)


def test_the_teacher_reads_its_parts_by_name_or_the_clean_state():
    privileged = _spec((6,), (("privileged_state", 4), ("state", 2)))
    # a teacher of a plain array reads the student's clean part
    np.testing.assert_array_equal(teachers.inputs(_teacher(_spec((4,))), privileged), [0, 1, 2, 3])
    # the same array: the whole observation
    np.testing.assert_array_equal(teachers.inputs(_teacher(_spec((4,))), _spec((4,))), [0, 1, 2, 3])
    # named parts, in the teacher's order, wherever the student lays them out
    teacher = _teacher(_spec((6,), (("state", 2), ("privileged_state", 4))))
    np.testing.assert_array_equal(teachers.inputs(teacher, privileged), [4, 5, 0, 1, 2, 3])


@pytest.mark.parametrize("teacher, student, says", [
    (_spec((4,)), _spec((2,)), "does not hold"),  # cartpole's teacher on cartpole_no_vel
    (_spec((6,), (("state", 2), ("dynamics", 4))), _spec((6,), (("state", 2), ("privileged_state", 4))), "does not hold"),
    (_spec((4,)), _spec((4,), discrete=False), "2 discrete actions and this env 2 continuous actions"),
])
def test_a_student_env_without_the_teachers_inputs_is_refused_naming_the_flag(teacher, student, says):
    with pytest.raises(ConfigError, match=says) as err:
        teachers.inputs(_teacher(teacher), student)
    assert err.value.flag == "teacher"


@pytest.fixture(scope="module")
def cartpole_teacher(tmp_path_factory):
    """A PPO teacher that solves cartpole (its defaults, 500k env steps)."""
    path = tmp_path_factory.mktemp("teacher")
    cfg = defaults_for("cartpole", "ppo").replace(progress=False, epochs=4, num_eval_envs=64).validate()
    record = train(cfg, run_dir=str(path), log=lambda *a: None)
    assert record["eval/episode_return"] >= 475
    return str(path), record["eval/episode_return"]


def test_dagger_acts_as_the_teacher_with_its_probability_and_labels_every_step_with_its_action(cartpole_teacher):
    path, _ = cartpole_teacher
    spec = _spec((6,), (("privileged_state", 4), ("state", 2)))
    obs = jax.random.normal(jax.random.PRNGKey(0), (512, 6))
    loaded = teachers.load(path)
    theirs = loaded.act(obs[:, :4])
    for fraction in (1.0, 0.0, 0.5):
        agent = make_bc(BCConfig(teacher=path, teacher_fraction=fraction, normalize_observations=False), spec,
                        budget=Budget(1, teacher=teachers.Source(path)))
        state = agent.init(jax.random.PRNGKey(1))
        action, acted, _ = agent.act(state, None, obs, jax.random.PRNGKey(2), False, None)
        mine, none, _ = agent.act(state, None, obs, jax.random.PRNGKey(2), True, None)
        assert none is None  # evaluation never reads the teacher
        np.testing.assert_array_equal(acted.label, theirs)
        turn = np.asarray(acted.teacher) > 0
        np.testing.assert_array_equal(np.asarray(action)[turn], np.asarray(theirs)[turn])
        np.testing.assert_array_equal(np.asarray(action)[~turn], np.asarray(mine)[~turn])
        assert abs(turn.mean() - fraction) < 0.07
    # after an update the teacher's probability has decayed by --teacher-decay
    agent = make_bc(BCConfig(teacher=path, teacher_fraction=1.0, teacher_decay=0.25, normalize_observations=False),
                    spec, budget=Budget(1, teacher=teachers.Source(path)))
    state = agent.init(jax.random.PRNGKey(1))  # one update done: its 4 passes of 4 minibatches
    state = state.replace(opt_state=state.opt_state._replace(count=jnp.asarray(16, jnp.int32)))
    _, acted, _ = agent.act(state, None, obs, jax.random.PRNGKey(3), False, None)
    assert abs(float(jnp.mean(acted.teacher)) - 0.25) < 0.06


def test_a_student_traced_again_finds_its_teacher_whole(cartpole_teacher):
    """The agent keeps the teacher's policy from its first trace; a second trace of the same
    agent (a recompile: another shape, a cleared cache) must find no value of the first in it."""
    path, _ = cartpole_teacher
    spec = _spec((6,), (("privileged_state", 4), ("state", 2)))
    agent = make_bc(BCConfig(teacher=path, normalize_observations=False), spec,
                    budget=Budget(1, teacher=teachers.Source(path)))
    state = agent.init(jax.random.PRNGKey(1))
    act = lambda state, obs: agent.act(state, None, obs, jax.random.PRNGKey(2), False, None)[1].label  # noqa: E731
    for batch in (8, 16):  # two shapes: two traces
        labels = jax.jit(act)(state, jnp.ones((batch, 6)))
        np.testing.assert_array_equal(labels, teachers.load(path).act(jnp.ones((batch, 4))))


def test_the_continuous_label_is_the_teachers_action_in_the_bounds_unit_interval(monkeypatch):
    """A continuous student's target: the teacher's env action mapped from [low, high] to [-1, 1]
    (where the student's tanh output lives), clipped."""
    import agents.bc as bc

    spec = _spec((4,), discrete=False)
    agent = make_bc(BCConfig(teacher="unused", teacher_fraction=1.0, normalize_observations=False), spec,
                    budget=Budget(1, teacher=teachers.Source("unused")))
    fixed = jnp.asarray([[1.0, 0.0], [-1.0, 4.0], [0.0, 2.0], [3.0, -1.0]])
    monkeypatch.setattr(teachers, "load", lambda path: teachers.Teacher("", "", "t", "ppo", spec, lambda obs: fixed))
    action, acted, _ = agent.act(agent.init(jax.random.PRNGKey(0)), None, jnp.zeros((4, 4)), jax.random.PRNGKey(1),
                                 False, None)
    np.testing.assert_allclose(acted.label, [[1.0, -1.0], [-1.0, 1.0], [0.0, 0.0], [1.0, -1.0]])
    np.testing.assert_allclose(action, fixed)  # the teacher acted everywhere
    assert bc.BCActed is type(acted)


def test_a_student_built_without_its_teacher_acts_deterministically_and_refuses_to_sample():
    """Play and export build the agent with no teacher (Budget.teacher None): its deterministic
    act needs none; sampling the teacher's mixture says what is missing, naming --teacher."""
    agent = make_bc(BCConfig(teacher="", normalize_observations=False), _spec((4,)))
    state = agent.init(jax.random.PRNGKey(0))
    assert agent.act(state, None, jnp.zeros((2, 4)), jax.random.PRNGKey(1), True, None)[1] is None
    with pytest.raises(ConfigError, match="without its teacher") as err:
        agent.act(state, None, jnp.zeros((2, 4)), jax.random.PRNGKey(1), False, None)
    assert err.value.flag == "teacher"


def test_a_recurrent_student_without_velocities_learns_cartpole_from_its_teacher_and_plays_without_it(
        cartpole_teacher, tmp_path):
    """The teacher reads cartpole_privileged's full state; the bc_rnn student only [x, theta]
    (cartpole_no_vel's observation). Its evaluation is within 10% of the teacher's; play and
    export need no teacher."""
    from sim.run.commands import PlayCommand
    from sim.run.policy.play import play

    path, teacher_return = cartpole_teacher
    cfg = defaults_for("cartpole_privileged", "bc_rnn").replace(teacher=path, progress=False, epochs=4,
                                                                 num_eval_envs=64).validate()
    run = tmp_path / "student"
    record = train(cfg, run_dir=str(run), log=lambda *a: None)
    evals = [json.loads(line)["eval/episode_return"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert record["eval/episode_return"] >= 0.9 * teacher_return, evals
    gone = path + "_gone"
    os.rename(path, gone)
    try:
        played = play(PlayCommand(run_dir=str(run), num_eval_envs=16), log=lambda *a: None)
    finally:
        os.rename(gone, path)
    assert played["episode_return"] >= 0.9 * teacher_return


def test_a_feed_forward_student_exports_without_its_teacher(tmp_path):
    from sim.run.commands import ExportCommand
    from sim.run.policy.play import export

    teacher = teacher_dir("pendulum")
    cfg = small_config("pendulum", "bc", epochs=1)
    run = tmp_path / "student"
    train(cfg.validate(), run_dir=str(run), log=lambda *a: None)
    copy = str(tmp_path / "teacher")
    shutil.move(teacher, copy)
    try:
        out = export(ExportCommand(run_dir=str(run), path=str(tmp_path / "student.npz")), log=lambda *a: None)
    finally:
        shutil.move(copy, teacher)
    assert out["ops"] > 0 and os.path.getsize(tmp_path / "student.npz") > 0
