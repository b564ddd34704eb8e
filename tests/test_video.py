"""play and its --video: deterministic evaluation of a saved policy, and an mp4 that decodes."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from envs.wrappers import init_stats
from sim.run.checkpoints import checkpoint
from sim.run.build import build_engine
from tests.helpers import needs, small_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def decode(path):
    """(frames uint8 [H, W, 3], frames per second) of a video file."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        fps = float(stream.average_rate)
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    return frames, fps


def assert_not_blank(frames):
    assert frames and all(f.dtype == np.uint8 and f.ndim == 3 and f.shape[2] == 3 for f in frames)
    for f in frames:
        assert f.std() > 5 and len(np.unique(f.reshape(-1, 3), axis=0)) > 2  # a picture, not a flat colour
    # something moves
    assert any(np.abs(f.astype(int) - frames[0].astype(int)).mean() > 0.01 for f in frames[1:])


def fake_run(run_dir, cfg):
    """A run directory with config.json and a checkpoint of a fresh (untrained) agent,
    without compiling the env's init: playing reads only the agent and obs statistics."""
    engine = build_engine(cfg)
    key = jax.random.PRNGKey(cfg.seed)
    template = jax.eval_shape(engine.init, key)
    state = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), template)
    state = state.replace(agent=engine.agent.init(key))
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(dict(cfg.to_dict(), run_dir=str(run_dir)), f)
    checkpoint.save(str(run_dir), state, epoch=1, env_steps=0, config=checkpoint.config_dict(cfg))


def test_play_evaluates_and_films_a_trained_classic_run(tmp_path):
    from sim.run.commands import PlayCommand
    from sim.run.policy.play import play
    from sim.run.trainer import train

    cfg = small_config("cartpole", epochs=2, episode_length=40)
    train(cfg, run_dir=str(tmp_path / "run"), log=lambda *a: None)
    messages = []
    video = tmp_path / "out" / "cartpole.mp4"
    video.parent.mkdir()
    result = play(PlayCommand(str(tmp_path / "run"), video=str(video), num_eval_envs=6), log=messages.append)
    assert result["episodes"] == 6 and result["epoch"] == 2 and np.isfinite(result["episode_return_std"])
    assert "+-" in messages[0] and "over 6 deterministic episodes" in messages[0]
    frames, fps = decode(video)
    # the first state and one frame per step up to the episode's end (cartpole: +1 reward a step)
    assert len(frames) == result["video_frames"] == int(round(result["video_return"])) + 1
    assert frames[0].shape == (200, 300, 3) and fps == pytest.approx(50)
    assert_not_blank(frames)


@pytest.mark.parametrize("name", ["acrobot", "pendulum", "mountain_car_continuous"])
def test_every_classic_env_draws_an_episode(name):
    from sim.run.policy.video import render_episode

    cfg = small_config(name, episode_length=12)
    engine = build_engine(cfg)
    agent_state = engine.agent.init(jax.random.PRNGKey(0))
    frames, _, fps = render_episode(engine, agent_state, init_stats(engine.spec.obs_shape), jax.random.PRNGKey(1))
    assert len(frames) == 13 and fps > 0  # none of these ends before its time limit of 12 steps
    assert_not_blank(frames)


@needs("osmesa")
def test_brax_env_films_offscreen_through_osmesa(tmp_path):
    cfg = small_config("inverted_pendulum", backend="generalized", episode_length=25, num_eval_envs=2)
    fake_run(tmp_path / "run", cfg)
    video = tmp_path / "pendulum.mp4"
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")}
    env.update(JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=os.path.join(ROOT, ".jax_cache"))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "play", str(tmp_path / "run"),
                           "--video", str(video)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "over 2 deterministic episodes" in proc.stdout and "video:" in proc.stdout
    frames, fps = decode(video)
    assert 2 <= len(frames) <= 26 and frames[0].shape == (240, 320, 3) and fps > 0
    assert_not_blank(frames)


def test_write_mp4_pads_odd_sizes_and_decodes(tmp_path):
    from sim.run.policy.video import write_mp4

    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (31, 45, 3), dtype=np.uint8) for _ in range(5)]
    write_mp4(str(tmp_path / "odd.mp4"), frames, fps=12.5)
    decoded, fps = decode(tmp_path / "odd.mp4")
    assert len(decoded) == 5 and decoded[0].shape == (32, 46, 3) and fps == pytest.approx(12.5)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp.mp4")]
