"""train.py as a user runs it: flags, one-line errors with exit code 2, run outputs."""

import json
import os
import re
import subprocess
import sys

import pytest

from sim.run.config import ConfigError, defaults_for
from tests.helpers import needs, small_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_train(*args, timeout=600):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.parametrize("args, flag", [
    (["--env", "antt"], "--env"),
    (["--env", "ant", "--backend", "mjxx"], "--backend"),
    (["--agent", "a2c"], "--agent"),
    (["--num-envs", "7"], "--num-envs"),
    (["--num-envs", "0"], "--num-envs"),
    (["--num-envs", "abc"], "--num-envs"),
    (["--discounting", "1.5"], "--discounting"),
    (["--learning-rate", "-1"], "--learning-rate"),
    (["--no-such-flag", "1"], "--no-such-flag"),
    (["--env", "cartpole", "--agent", "sac"], "--agent"),
    (["--env", "pendulum", "--agent", "sac", "--buffer-size", str(10**13)], "--max-replay-size"),
    (["--devices", "64"], "--devices"),
    (["--num-processes", "2"], "--coordinator"),
    (["--env", "pendulum", "--agent", "ddpg", "--policy-delay", "2"], "--policy-delay"),  # a TD3 trick
    (["--env", "pendulum", "--agent", "pqn"], "--agent"),  # pqn needs discrete actions
    (["--env", "cartpole", "--agent", "apg"], "--agent"),  # gradients through continuous actions only
    (["--env", "pendulum", "--agent", "shac", "--critic-minibatches", "7"], "--critic-minibatches"),
    # MJX's inverted pendulum solves its constraints in a while loop: found while tracing
    (["--env", "inverted_pendulum", "--backend", "mjx", "--agent", "shac", "--num-envs", "4", "--horizon-length", "2",
      "--critic-minibatches", "2", "--num-eval-envs", "2"], "--backend"),
    (["--env", "cartpole", "--agent", "bc"], "--teacher"),  # a student needs its teacher
    (["--env", "cartpole", "--agent", "bc", "--teacher", "/no/such/run"], "--teacher"),
    (["--env", "cartpole", "--agent", "bc", "--teacher-decay", "1.5", "--teacher", "."], "--teacher-decay"),
    (["--env", "cartpole", "--agent", "ppo", "--buffer-size", "1000"], "--buffer-size"),  # not a replay agent
    (["--env", "cartpole", "--checkpoint-buffer", "on"], "--checkpoint-buffer"),  # nor is this run's
    (["--env", "pendulum", "--agent", "sac", "--checkpoint-buffer", "on", "--checkpoint-envs", "off"],
     "--checkpoint-buffer"),  # the ring goes with the envs
    (["--checkpoint-envs", "some"], "--checkpoint-envs"),
    (["--env", "cartpole", "--agent", "dqn", "--entropy-cost", "0.1"], "--entropy-cost"),
    (["--obs-clip", "0"], "--obs-clip"),
    (["--env", "pendulum", "--agent", "sac", "--obs-clip", "-1"], "--obs-clip"),
])
def test_bad_input_is_one_line_exit_2(args, flag):
    proc = run_train(*args)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and flag in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("agent", ["ppo", "sac"])
def test_obs_clip_flag_parses_none_and_numbers(agent):
    """--obs-clip None: normalised observations are not clipped; a number is the bound; the
    default, 5, is what every earlier run used."""
    from sim.run.cli import parse_config

    flags = ["--env", "pendulum", "--agent", agent]
    assert parse_config(flags).agent_config.obs_clip == 5.0
    assert parse_config([*flags, "--obs-clip", "None"]).agent_config.obs_clip is None
    assert parse_config([*flags, "--obs-clip", "10"]).agent_config.obs_clip == 10.0


def test_humanoid_ppo_recomputes_advantages_per_minibatch_by_default():
    """Humanoid's published config was tuned with advantages recomputed in every minibatch
    (Brax's PPO); the chip ablation (benchmarks/results/tpu_v5e/ppo_humanoid_ablation.md) showed
    it stalls without. Other envs keep advantages once per batch; the flag turns it off."""
    from sim.run.cli import parse_config

    assert parse_config(["--env", "humanoid"]).agent_config.gae_per_minibatch is True
    assert parse_config(["--env", "humanoid", "--no-gae-per-minibatch"]).agent_config.gae_per_minibatch is False
    assert parse_config(["--env", "ant"]).agent_config.gae_per_minibatch is False


def test_go1_joystick_ppo_recomputes_advantages_per_minibatch_by_default():
    """Go1's joystick config, as it walked when trained on the chip (benchmarks/results/go1_walk/),
    recomputes advantages in every minibatch; the other robots keep once per batch."""
    from sim.run.config import defaults_for

    for name in ("Go1JoystickFlatTerrain", "Go1JoystickRoughTerrain"):
        assert defaults_for(name, "ppo").agent_config.gae_per_minibatch is True, name
    assert defaults_for("G1JoystickFlatTerrain", "ppo").agent_config.gae_per_minibatch is False
    assert defaults_for("Go1Getup", "ppo").agent_config.gae_per_minibatch is False


def test_help_lists_every_field_with_its_docstring():
    proc = run_train("--help")
    assert proc.returncode == 0
    for flag in ("--num-minibatches", "--unroll-length", "--num-updates-per-batch", "--reward-scaling",
                 "--entropy-cost", "--clipping-epsilon", "--gae-lambda", "--max-grad-norm", "--action-repeat",
                 "--eval-every"):
        assert flag in proc.stdout
    assert "Trajectories per minibatch" in proc.stdout and "--buffer-size" not in proc.stdout


def test_help_after_agent_shows_its_flags_and_env_defaults():
    """`--agent X --help`: X's own flags with the chosen env's defaults, and no other agent's."""
    def flag_default(text, flag):
        flat = " ".join(line.strip(" \u2502") for line in text.splitlines())
        return re.search(re.escape(flag) + r" [A-Z]+ .*?\(default: ([^)]*)\)", flat).group(1)

    sac = run_train("--env", "pendulum", "--agent", "sac", "--help")
    assert sac.returncode == 0
    for flag in ("--buffer-size", "--grad-updates-per-step", "--tau", "--init-alpha", "--batch-size"):
        assert flag in sac.stdout, flag
    assert "--unroll-length" not in sac.stdout and "--policy-delay" not in sac.stdout
    assert "Transitions per gradient step" in sac.stdout
    assert flag_default(sac.stdout, "--learning-rate") == "0.001"  # pendulum's SAC default
    ddpg = run_train("--env", "pendulum", "--agent", "ddpg", "--help")
    assert "--exploration-noise" in ddpg.stdout and "--policy-delay" not in ddpg.stdout
    assert "--target-noise" not in ddpg.stdout
    dqn = run_train("--env", "cartpole", "--agent", "dqn", "--help")
    assert "--epsilon-decay" in dqn.stdout and "--policy-hidden-sizes" not in dqn.stdout


def test_env_defaults_follow_brax_configs():
    humanoid = defaults_for("humanoid")
    hp = humanoid.agent_config
    assert (humanoid.num_envs, hp.unroll_length, hp.batch_size, hp.num_minibatches, hp.num_updates_per_batch,
            hp.reward_scaling, hp.discounting, hp.learning_rate, hp.entropy_cost,
            hp.normalize_observations) == (2048, 10, 1024, 32, 8, 0.1, 0.97, 3e-4, 1e-3, True)
    for env in ("ant", "humanoid", "cartpole", "pendulum", "inverted_pendulum"):
        defaults_for(env).validate()


# MuJoCo Playground's training-config keys, by our flag names
PLAYGROUND_KEYS = {"num_timesteps": "total_steps", "reward_scaling": "reward_scaling", "episode_length": "episode_length",
                   "normalize_observations": "normalize_observations", "action_repeat": "action_repeat",
                   "unroll_length": "unroll_length", "num_minibatches": "num_minibatches",
                   "num_updates_per_batch": "num_updates_per_batch", "discounting": "discounting",
                   "learning_rate": "learning_rate", "entropy_cost": "entropy_cost", "num_envs": "num_envs",
                   "batch_size": "batch_size", "grad_updates_per_step": "grad_updates_per_step",
                   "max_replay_size": "max_replay_size", "min_replay_size": "min_replay_size"}


@pytest.mark.parametrize("agent, function", [("ppo", "brax_ppo_config"), ("sac", "brax_sac_config")])
@needs("playground")
def test_dm_control_defaults_are_playgrounds_published_configs(agent, function):
    import envs
    from mujoco_playground.config import dm_control_suite_params

    for name in envs.PLAYGROUND_ENVS:
        published = getattr(dm_control_suite_params, function)(name)
        flat = defaults_for(name, agent).flat()
        for key, value in published.items():
            if key in PLAYGROUND_KEYS:
                assert flat[PLAYGROUND_KEYS[key]] == value, (name, key)
        layer_norm = published.get("network_factory", {}).get("q_network_layer_norm")
        if layer_norm is not None:
            assert flat["q_network_layer_norm"] == layer_norm, name
        defaults_for(name, agent).validate()


def test_validation_suggests_divisible_num_envs():
    with pytest.raises(ConfigError, match="--num-envs 4 or 8"):
        small_config(num_envs=7, batch_size=8, num_minibatches=2).validate()


def test_train_writes_config_and_metrics(tmp_path):
    run_dir = tmp_path / "run"
    flags = ["--env", "cartpole", "--total-steps", "2048", "--num-envs", "8", "--batch-size", "8",
             "--num-minibatches", "4", "--unroll-length", "16", "--epochs", "2", "--eval-every", "0",
             "--num-eval-envs", "4", "--run-dir", str(run_dir), "--compile-cache", str(tmp_path / "cache")]
    proc = run_train(*flags)
    assert proc.returncode == 0, proc.stderr
    config = json.loads((run_dir / "config.json").read_text())
    assert config["env"] == "cartpole" and config["num_envs"] == 8
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records] == [1024, 2048]
    assert all(r["sps"] > 0 and "loss/total" in r and "wall_s" in r for r in records)
    # eval-every 0: only the last epoch evaluates
    assert "eval/episode_return" not in records[0] and "eval/episode_return" in records[-1]
    assert "compiled in" in proc.stdout and "steps/s" in proc.stderr
    # each start-up stage is reported, with whether the compile cache had the program
    assert re.search(r"compiled the epoch program in [\d.]+s \(compile cache miss\)", proc.stdout), proc.stdout
    assert "compiled the evaluate program" in proc.stdout and "memory: " in proc.stdout

    # A second fresh run into the same directory is refused, touching nothing...
    before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    again = run_train("--env", "cartpole", "--run-dir", str(run_dir))
    assert again.returncode == 2 and "Traceback" not in again.stderr
    lines = [line for line in again.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"--resume {run_dir}" in lines[0] and "--overwrite" in lines[0], again.stderr
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == before
    # ...and --overwrite starts over in it, keeping files that are not the run's; the same
    # config's programs now come from the compile cache.
    (run_dir / "notes.txt").write_text("mine")
    (run_dir / "metrics.jsonl").write_text('{"epoch": 9, "env_steps": 1}\n')
    over = run_train(*flags, "--overwrite")
    assert over.returncode == 0, over.stderr
    assert [json.loads(line)["env_steps"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()] == [1024,
                                                                                                           2048]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir())[-1] == "epoch_000002"  # (and epoch 1's, when
    # it cost under 1% of the training time)
    assert (run_dir / "notes.txt").read_text() == "mine"
    assert "compiled the epoch program" in over.stdout and "(compile cache hit)" in over.stdout, over.stdout


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="--devices 2 on a CPU host needs two cores")
def test_devices_splits_a_cpu_host_into_that_many_devices(tmp_path):
    # No XLA_FLAGS: train.py itself makes the CPU two XLA devices and shards over them.
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--env", "cartpole", "--devices", "2",
                           "--total-steps", "1024", "--num-envs", "8", "--batch-size", "8", "--num-minibatches", "2",
                           "--unroll-length", "8", "--epochs", "2", "--num-eval-envs", "4", "--checkpoint-every", "-1",
                           "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=dict(env, JAX_PLATFORMS="cpu"))
    assert proc.returncode == 0, proc.stderr
    assert "8 envs on 2 cpu device(s)" in proc.stdout
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["devices"] == 2


# (70 s: two train.py processes on a physics env. Its parts run by default, quicker: the count
# chosen (test_parallel.py's test_a_cpu_host_trains_on_as_many_cores_as_divide_the_run), the
# count a resume reads (test_a_resume_continues_on_the_device_count_its_run_trained_on), and
# train.py splitting the host into devices (test_devices_splits_a_cpu_host_into_that_many_devices).)
@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_by_default_a_cpu_host_trains_a_physics_env_on_its_cores_and_a_resume_keeps_the_count(tmp_path):
    from sim.run import devices as parallel

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    flags = ["--env", "inverted_pendulum", "--backend", "positional", "--num-envs", "8", "--batch-size", "8",
             "--num-minibatches", "2", "--unroll-length", "8", "--num-eval-envs", "4", "--episode-length", "50",
             "--checkpoint-every", "1", "--run-dir", str(tmp_path / "run")]
    want = parallel.default_devices(small_config("inverted_pendulum", num_envs=8, batch_size=8))
    first = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *flags, "--total-steps", "1024",
                            "--epochs", "2"], capture_output=True, text=True, timeout=600, cwd=ROOT,
                           env=dict(env, JAX_PLATFORMS="cpu"))
    assert first.returncode == 0, first.stderr
    assert want >= 2 and f"8 envs on {want} cpu device(s)" in first.stdout
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["devices"] is None and config["derived"]["devices"] == want
    resumed = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--resume", str(tmp_path / "run"),
                              "--total-steps", "2048", "--epochs", "4"], capture_output=True, text=True, timeout=600,
                             cwd=ROOT, env=dict(env, JAX_PLATFORMS="cpu"))
    assert resumed.returncode == 0, resumed.stderr
    assert f"on {want} cpu device(s)" in resumed.stdout and "epoch 4" in resumed.stdout, resumed.stdout


def test_list_envs_names_each_env_with_family_actions_and_backends(capsys):
    import envs
    import train as cli

    assert cli.main(["--list-envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["env", "family", "actions", "default", "backend", "backends", "own", "randomiser"]
    rows = {line.split()[0]: line.split() for line in lines[1:] if not line.startswith("*")}
    assert set(rows) == set(envs.names(include_missing=True))
    marked = {name for name, row in rows.items() if row[-1] == "yes"}
    assert marked == {name for name in rows if envs.has_domain_randomizer(name)} and "Go1JoystickFlatTerrain" in marked
    assert rows["cartpole"][1:4] == ["classic", "discrete", "jax"]
    assert rows["ant"][1:4] == ["brax", "continuous", "mjx"]
    for name in ("cartpole", "acrobot", "pendulum"):  # the registry's action space is the env's own
        assert (rows[name][2] == "discrete") == envs.make(name).spec.discrete


def test_print_config_prints_the_resolved_config_and_compiles_nothing(capsys):
    import train as cli

    assert cli.main(["--env", "pendulum", "--agent", "sac", "--num-envs", "32", "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    want = defaults_for("pendulum", "sac").replace(num_envs=32).to_dict()
    assert printed == want  # the env's defaults, then the flag on top
    assert "print_config" not in printed and printed["grad_updates_per_step"] == 8  # a command flag, not config
