"""Checkpoints: the whole TrainState, atomic writes, bitwise resume, clear errors."""

import json
import importlib.util
import os
import shutil
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sim.run.checkpoints import checkpoint
from tests.helpers import count_lowerings, small_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Keys of a metrics record that measure time, not training.
TIMING = ("sps", "train_s", "wall_s")


def quiet(*args):
    pass


def run_train(cfg, run_dir, **kwargs):
    from sim.run.trainer import train

    return train(cfg, run_dir=str(run_dir), log=quiet, **kwargs)


def read_jsonl(path):
    return [json.loads(line) for line in open(path)]


def training_only(record):
    return {k: v for k, v in record.items() if k not in TIMING and not k.startswith("perf/")}


def final_leaves(run_dir):
    path = checkpoint.latest(str(run_dir))
    return checkpoint.load_leaves(path, checkpoint.read_meta(path))


def assert_same_leaves(a: dict, b: dict):
    assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), f"{name} differs"


# fasttd3: n-step rows and per-env noise scales; crossq: batch statistics beside its parameters;
# shac: the differentiable loop's staggered envs, a critic and its target beside the policy;
# ars: the generation loop (its members' episodes restart from fresh resets each generation)
# bc_rnn: the teacher's probability decaying with the student's updates, its recurrent state;
# evosax: a strategy's own state (SNES's mean, step sizes and counters)
@pytest.mark.parametrize("env, agent", [("cartpole", "ppo"), ("pendulum", "sac"), ("cartpole_no_vel", "ppo_rnn"),
                                        ("pendulum", "fasttd3"), ("pendulum", "crossq"), ("pendulum", "shac"),
                                        ("cartpole", "ars"), ("cartpole", "bc_rnn"), ("cartpole", "evosax")])
def test_resume_equals_one_go_bitwise(tmp_path, env, agent):
    budget = {"total_steps": 4 * 8 * 50} if agent in ("ars", "evosax") else {}  # 4 generations of 8 envs' 50-step episodes
    cfg = small_config(env, agent, epochs=4, eval_every=1, checkpoint_every=1, **budget)
    assert cfg.num_epochs == 4
    run_train(cfg, tmp_path / "one_go")

    # 3 epochs, then "killed" after writing epoch 3's metrics but before its checkpoint
    # (plus a torn line): the resume goes back to epoch 2 and drops what came after.
    split = tmp_path / "split"
    run_train(cfg, split, stop_after=3)
    assert [e for e, _ in checkpoint.list_checkpoints(str(split))] == [2, 3]  # keeps the newest 2
    shutil.rmtree(split / "checkpoints" / "epoch_000003")
    with open(split / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 4, "env_st')
    with count_lowerings() as counts:
        record = run_train(cfg.replace(resume=str(split)), None)
    assert counts.get("jit(_epoch)") == 1, counts  # the resumed run compiles its epoch once too

    assert_same_leaves(final_leaves(tmp_path / "one_go"), final_leaves(split))
    one_go, resumed = read_jsonl(tmp_path / "one_go" / "metrics.jsonl"), read_jsonl(split / "metrics.jsonl")
    assert [r["epoch"] for r in resumed] == [1, 2, 3, 4]
    assert [r["env_steps"] for r in resumed] == [r["env_steps"] for r in one_go]
    assert [training_only(r) for r in resumed] == [training_only(r) for r in one_go]
    assert record["epoch"] == 4 and (split / "curve.png").stat().st_size > 0


def test_checkpoint_holds_the_whole_state_with_exact_dtypes(tmp_path):
    cfg = small_config("pendulum", "sac", epochs=2)
    run_train(cfg, tmp_path)
    path = checkpoint.latest(str(tmp_path))
    meta = checkpoint.read_meta(path)
    leaves = {e["path"]: e for e in meta["leaves"]}
    assert {p.split(".")[1].split("[")[0] for p in leaves} == {"agent", "env", "obs_stats", "key", "iteration",
                                                                "env_steps", "loop"}
    # the hyper-parameters travel in the agent state, as float32 leaves
    assert leaves[".agent.hp.learning_rate"]["dtype"] == "float32" and leaves[".agent.hp.tau"]["shape"] == []
    assert leaves[".key"]["dtype"] == "uint32" and leaves[".key"]["shape"] == [2]
    assert leaves[".iteration"]["dtype"] == "int32" and leaves[".iteration"]["shape"] == []
    assert meta["left_out"] == [] and meta["epoch"] == 2 and meta["env_steps"] == cfg.prefill_steps + 2 * cfg.steps_per_epoch
    assert meta["config"]["env"] == "pendulum" and meta["config"]["agent"] == "sac"
    values = checkpoint.load_leaves(path, meta)
    assert int(values[".iteration"]) == 2 * cfg.iterations_per_epoch
    assert int(values[".env_steps"][1]) == meta["env_steps"]  # the state's own count


def test_resume_without_the_buffer_refills_it(tmp_path):
    cfg = small_config("pendulum", "sac", epochs=4, checkpoint_buffer="off")
    run_train(cfg, tmp_path, stop_after=2)
    meta = checkpoint.read_meta(checkpoint.latest(str(tmp_path)))
    assert meta["left_out"] and all(p.startswith(".loop.ring") for p in meta["left_out"])
    assert not any(e["path"] in meta["left_out"] or e["path"].startswith(".loop.ring") for e in meta["leaves"])
    messages = []
    from sim.run.trainer import train

    record = train(cfg.replace(resume=str(tmp_path)), log=messages.append)
    assert record["epoch"] == 4 and any("refilling" in m for m in messages)
    said = [m for m in messages if m.startswith("checkpoints leave out")]
    assert len(said) == 1 and said[0].endswith("replay buffer (--checkpoint-buffer off)"), said


@pytest.mark.parametrize("env, agent, loop_out", [("cartpole", "ppo", ""), ("cartpole_no_vel", "ppo_rnn", ".loop"),
                                                   ("pendulum", "sac", ".loop")])
def test_checkpoints_without_the_envs_are_small_and_resume_on_new_episodes(tmp_path, env, agent, loop_out):
    """--checkpoint-envs off: a checkpoint holds the agent, the statistics and the counters but
    no env state (nor a recurrent state, nor a replay ring, which continue the envs' episodes);
    a resume takes them as the run first started, says so, and trains to the end."""
    from sim.run.trainer import train

    whole = small_config(env, agent, epochs=4, checkpoint_every=1)
    run_train(whole, tmp_path / "whole", stop_after=2)
    cfg = whole.replace(checkpoint_envs="off")
    messages = []
    train(cfg, run_dir=str(tmp_path / "lean"), log=messages.append, stop_after=2)
    meta = checkpoint.read_meta(checkpoint.latest(str(tmp_path / "lean")))
    saved = {e["path"] for e in meta["leaves"]}
    assert meta["left_out"] and all(p.startswith((".env.",) + ((loop_out,) if loop_out else ())) for p in meta["left_out"])
    assert any(p.startswith(".env.") for p in meta["left_out"]) and not any(p.startswith(".env.") for p in saved)
    assert bool(loop_out) == any(p.startswith(".loop") for p in meta["left_out"]) and not any(
        p.startswith(".loop") for p in saved)
    everything = checkpoint.read_meta(checkpoint.latest(str(tmp_path / "whole")))
    assert {e["path"] for e in everything["leaves"]} == saved | set(meta["left_out"])
    lean = checkpoint.load_leaves(checkpoint.latest(str(tmp_path / "lean")), meta)
    assert_same_leaves(lean, {k: v for k, v in final_leaves(tmp_path / "whole").items() if k in saved})
    said = [m for m in messages if m.startswith("checkpoints leave out the envs' states")]
    assert len(said) == 1 and "--checkpoint-envs off" in said[0], messages
    assert ("replay buffer" in said[0]) == (agent == "sac")

    messages = []
    record = train(cfg.replace(resume=str(tmp_path / "lean")), log=messages.append)
    assert record["epoch"] == 4 and np.isfinite(record["eval/episode_return"])
    assert any("holds no env states (written with --checkpoint-envs off): every env starts a new episode" in m
               for m in messages), messages
    assert any("refilling" in m for m in messages) == (agent == "sac")


def test_the_envs_left_out_cannot_keep_the_buffer():
    from sim.run.config import ConfigError

    cfg = small_config("pendulum", "sac")
    bad = cfg.replace(checkpoint_buffer="on", checkpoint_envs="off")
    with pytest.raises(ConfigError, match="--checkpoint-envs off leaves out"):
        bad.validate()


def test_a_ring_saved_in_an_earlier_layout_is_refilled_on_resume(tmp_path, monkeypatch):
    """A checkpoint whose replay ring was stored as other arrays (before rows wider than a TPU
    tile were split, sim/core/buffer.py) resumes with its ring refilled, saying so."""
    from sim.core import buffer
    from sim.run.trainer import train

    cfg = small_config("pendulum", "sac", epochs=4)
    monkeypatch.setattr(buffer, "TILE", 4)  # pendulum's row of 6 floats stored as 4 + 2 columns
    run_train(cfg, tmp_path, stop_after=2)
    meta = checkpoint.read_meta(checkpoint.latest(str(tmp_path)))
    assert not meta["left_out"] and [e["shape"][1] for e in meta["leaves"]
                                     if e["path"].startswith(".loop.ring.rows.data")] == [4, 2, 1]
    monkeypatch.setattr(buffer, "TILE", 128)  # one array of 6 columns now
    messages = []
    record = train(cfg.replace(resume=str(tmp_path)), log=messages.append)
    assert record["epoch"] == 4
    assert any("holds its replay buffer in an earlier version's layout: refilling" in m for m in messages), messages


def test_a_checkpoint_written_before_env_parameters_were_traced_resumes_under_the_defaults(tmp_path):
    """Such a checkpoint has no `.env.params` leaves: the resume takes the env's defaults,
    says so in one line, and then goes on exactly as the run that wrote them (whose envs had
    those defaults)."""
    cfg = small_config("cartpole", epochs=4)
    run_train(cfg, tmp_path / "one_go")
    split = tmp_path / "split"
    run_train(cfg, split, stop_after=2)
    path = checkpoint.latest(str(split))
    meta_file = os.path.join(path, "meta.json")
    meta = json.load(open(meta_file))
    kept = [e for e in meta["leaves"] if not e["path"].startswith(checkpoint.ENV_PARAMS)]
    assert len(kept) == len(meta["leaves"]) - 5  # gravity, masscart, masspole, length, force_mag
    json.dump(dict(meta, leaves=kept), open(meta_file, "w"))
    messages = []
    from sim.run.trainer import train

    train(cfg.replace(resume=str(split)), log=messages.append)
    assert sum("no env parameters" in m for m in messages) == 1, messages
    assert_same_leaves(final_leaves(tmp_path / "one_go"), final_leaves(split))


def test_a_checkpoint_of_the_earlier_format_is_refused_in_one_line(tmp_path):
    """Checkpoints written before agents kept their hyper-parameters (and the env-step count)
    in the state (format 1) cannot resume: one line says so and what to do."""
    cfg = small_config("cartpole", epochs=1)
    run_train(cfg, tmp_path)
    path = checkpoint.latest(str(tmp_path))
    meta_file = os.path.join(path, "meta.json")
    meta = json.load(open(meta_file))
    json.dump(dict(meta, format=1), open(meta_file, "w"))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--resume", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "earlier version" in lines[0] and "format 1" in lines[0] and "Traceback" not in proc.stderr


def test_resume_with_a_larger_budget_trains_longer(tmp_path):
    cfg = small_config("cartpole", epochs=4)
    run_train(cfg, tmp_path)
    messages = []
    from sim.run.trainer import train

    assert train(cfg.replace(resume=str(tmp_path)), log=messages.append) == {}
    assert any("nothing to train" in m for m in messages)
    record = run_train(cfg.replace(resume=str(tmp_path), total_steps=2 * cfg.total_steps), None)
    # the epoch count and env steps go on; the new config's epochs are 8 / 4 = 2 iterations long
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert [r["env_steps"] for r in records] == [128, 256, 384, 512, 768, 1024] and record["env_steps"] == 1024


def _tiny_state():
    return {"w": jnp.arange(6, dtype=jnp.float32).reshape(2, 3), "key": jax.random.PRNGKey(3),
            "step": jnp.asarray(7, jnp.int32), "h": jnp.ones((4,), jnp.bfloat16)}


def test_kill_during_write_leaves_the_previous_checkpoint(tmp_path):
    config = {"env": "cartpole", "agent": "ppo", "backend": None}
    checkpoint.save(str(tmp_path), _tiny_state(), epoch=1, env_steps=10, config=config)
    # A second save that is SIGKILLed half way through writing its state file: the writer
    # wraps each leaf's bytes in memoryview() just before writing them; the third one dies.
    script = f"""
import os, signal, sys
sys.path.insert(0, {ROOT!r})
from sim.run.checkpoints import checkpoint
from tests.test_checkpoint import _tiny_state

calls = []

def dying_memoryview(raw):
    calls.append(1)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return memoryview(raw)

checkpoint.memoryview = dying_memoryview
checkpoint.save({str(tmp_path)!r}, _tiny_state(), epoch=2, env_steps=20, config={config!r})
"""
    proc = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, JAX_PLATFORMS="cpu"), cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    root = tmp_path / "checkpoints"
    torn = [name for name in os.listdir(root) if name.startswith(".tmp-")]
    assert torn and (root / torn[0] / "state.bin").exists()  # the torn write is there...
    path = checkpoint.latest(str(tmp_path))
    assert path.endswith("epoch_000001")  # ...and ignored
    template = jax.eval_shape(_tiny_state)
    state, meta = checkpoint.restore(path, template, config)
    assert_same_leaves({k: np.asarray(v) for k, v in state.items()},
                       {k: np.asarray(v) for k, v in _tiny_state().items()})
    assert state["h"].dtype == jnp.bfloat16 and state["key"].dtype == jnp.uint32
    checkpoint.save(str(tmp_path), _tiny_state(), epoch=2, env_steps=20, config=config)
    assert not any(name.startswith(".tmp-") for name in os.listdir(root))  # cleaned by the next save


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    config = {"env": "cartpole", "agent": "ppo", "backend": None}
    path = checkpoint.save(str(tmp_path), _tiny_state(), epoch=1, env_steps=10, config=config)
    template = jax.eval_shape(_tiny_state)
    data = bytearray(open(os.path.join(path, "state.bin"), "rb").read())
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF  # a flipped byte inside the arrays
    for content in (bytes(flipped), bytes(data[: len(data) // 2])):
        with open(os.path.join(path, "state.bin"), "wb") as f:
            f.write(content)
        with pytest.raises(checkpoint.CheckpointError, match="is corrupt"):
            checkpoint.restore(path, template, config)
    with open(os.path.join(path, "meta.json"), "w") as f:
        f.write('{"format": 1, "leav')
    with pytest.raises(checkpoint.CheckpointError, match="corrupt: meta.json unreadable"):
        checkpoint.restore(path, template, config)


def test_checkpoint_of_another_config_is_a_clear_error(tmp_path):
    cfg = small_config("cartpole", epochs=2)
    run_train(cfg, tmp_path)
    other = cfg.replace(resume=str(tmp_path), policy_hidden_sizes=(32, 32))
    with count_lowerings() as counts:  # told before any program compiles
        with pytest.raises(checkpoint.CheckpointError,
                           match=r"does not match this config: \.agent.*policy_hidden_sizes \[64, 64\] -> \[32, 32\]"):
            run_train(other, None)
        with pytest.raises(checkpoint.CheckpointError, match="from another run: env 'cartpole' there, 'acrobot' here"):
            run_train(cfg.replace(resume=str(tmp_path), env="acrobot"), None)
    assert not any(name in counts for name in ("jit(_epoch)", "jit(_init_stacked)", "jit(_starts_stacked)", "jit(_renew)", "jit(_evaluate)")), counts


def _cli(*args, timeout=600):
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=os.path.join(ROOT, ".jax_cache"))
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)


def test_cli_errors_are_one_line_exit_2(tmp_path):
    cfg = small_config("cartpole", epochs=2)
    run_train(cfg, tmp_path)
    cases = [(["--resume", str(tmp_path), "--env", "acrobot"], "from another run"),
             (["--resume", str(tmp_path / "nope")], "--resume:"),
             (["play", str(tmp_path / "nope")], "RUN_DIR:"),
             (["play", str(tmp_path), "--video", "/no/such/dir/x.mp4"], "--video: /no/such/dir/x.mp4"),
             (["export", str(tmp_path), "policy.txt"], "FILE: must be an .onnx or .npz file"),
             (["--play", str(tmp_path)], "--play: playing is a command now: python train.py play RUN_DIR"),
             (["--video", "x.mp4"], "--video: an option of the play command"),
             (["play", str(tmp_path), "--command", "1,0"], "--command: must be VX,VY,YAW"),
             (["play", str(tmp_path), "--command", "1,0,0"], "--command: env cartpole takes no velocity command"),
             (["--env", "cartpole", "--domain-randomization"], "--domain-randomization: env cartpole has no"),
             (["--env", "ant", "--env-config", "no_such_argument=1"], "--env-config: Brax env 'ant' takes no argument"),
             (["--env", "cartpole", "--env-config", "x"], "--env-config: 'x' is not KEY=VALUE")]
    if importlib.util.find_spec("onnxruntime") is not None:
        cases.append((["play", str(tmp_path), "--sim2sim"], "--sim2sim: env cartpole declares no observation"))
    for args, text in cases:
        proc = _cli(*args)
        _, err = proc.communicate(timeout=600)
        lines = [line for line in err.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1, err
        assert lines[0].startswith("error:") and text in lines[0] and "Traceback" not in err


def test_two_device_run_resumes_bitwise_and_plays_on_one(tmp_path):
    # Two CPU devices exist only if XLA is told so before JAX starts: a fresh process.
    script = f"""
import dataclasses, sys
sys.path.insert(0, {ROOT!r})
import jax
from tests.helpers import small_config
from tests.test_checkpoint import assert_same_leaves, final_leaves, quiet
from sim.run.trainer import train
from sim.run.commands import PlayCommand
from sim.run.policy.play import play
assert len(jax.devices()) == 2
cfg = small_config("cartpole", devices=2, epochs=4)
train(cfg, run_dir={str(tmp_path / "one_go")!r}, log=quiet)
train(cfg, run_dir={str(tmp_path / "split")!r}, log=quiet, stop_after=2)
train(cfg.replace(resume={str(tmp_path / "split")!r}), log=quiet)
leaves = final_leaves({str(tmp_path / "split")!r})
assert leaves[".key"].shape == (2, 2)  # the device-stacked state
assert_same_leaves(final_leaves({str(tmp_path / "one_go")!r}), leaves)
result = play(PlayCommand({str(tmp_path / "split")!r}), log=quiet)
assert result["epoch"] == cfg.num_epochs == 4 and result["episode_return"] > 0
print("OK")
"""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_COMPILATION_CACHE_DIR=os.path.join(ROOT, ".jax_cache"))
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
