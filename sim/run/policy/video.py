"""Offscreen video of one deterministic episode, on a headless machine.

The episode runs on device in one jitted `lax.scan` that returns only what drawing needs
(classic tasks: their physics vector; MuJoCo-based tasks: qpos/qvel per step); frames are
then drawn on the host:

- classic tasks (envs/classic): their own numpy `render_frame(physics) -> uint8 [H, W, 3]`;
  no system package needed.
- Brax and Playground tasks: MuJoCo's offscreen renderer, which needs an OpenGL context.
  Without a display that is OSMesa (software; Debian/Ubuntu package `libosmesa6`), picked
  by `use_offscreen_gl` (MUJOCO_GL=osmesa unless MUJOCO_GL is already set, e.g. to `egl` on
  a GPU machine). MuJoCo reads MUJOCO_GL when first imported, so `train.py play ... --video`
  calls it before any environment is built.

Frames are encoded to H.264 mp4 with PyAV (`av`, whose wheel ships FFmpeg's libraries; no
ffmpeg binary needed).
"""

from __future__ import annotations

import os
import sys
from fractions import Fraction

import av
import jax
import numpy as np

import envs
from sim.core.contract import fresh_carry
from sim.core.evaluation import full_precision
from sim.run import disk


# The env families whose frames MuJoCo's renderer draws (classic tasks draw their own).
DRAWN_BY_MUJOCO = ("brax", "playground", "robots")


def use_offscreen_gl() -> None:
    """Picks OSMesa for MuJoCo unless MUJOCO_GL is set; call before MuJoCo is imported."""
    if "mujoco" not in sys.modules:
        os.environ.setdefault("MUJOCO_GL", "osmesa")


class VideoError(Exception):
    """Rendering or encoding is impossible here: printed as one line, exit code 2."""


def check_renderer(env: str) -> None:
    """Before anything is built for `--video` of an env MuJoCo draws (Brax's, Playground's):
    picks the offscreen GL and imports MuJoCo, which loads its GL library on import (where
    libOSMesa is missing, PyOpenGL fails inside `import mujoco`); that failure is the video's
    one-line VideoError, not a traceback from the env's construction, and leaves MUJOCO_GL as
    it found it. Classic tasks draw their own frames: nothing to check."""
    if envs.family(env) not in DRAWN_BY_MUJOCO:
        return
    before = {name: os.environ.get(name) for name in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    use_offscreen_gl()
    try:
        import mujoco  # noqa: F401  (imported here: MuJoCo reads MUJOCO_GL, set just above, when first imported)
    except Exception as err:  # PyOpenGL's AttributeError or ImportError, MuJoCo's RuntimeError for a bad MUJOCO_GL
        gl = os.environ.get("MUJOCO_GL")
        for name, value in before.items():  # a caller that goes on (a test) imports MuJoCo as it would have
            if value is None:
                os.environ.pop(name, None)
        raise VideoError(f"--video: MuJoCo cannot load its offscreen renderer "
                         f"(MUJOCO_GL={gl!r}): {_one_line(err)}; install the system "
                         f"package libosmesa6 and set MUJOCO_GL=osmesa (or egl on a GPU machine)") from None


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:200]}"


def _source(env):
    """(extract, draw, dt) for an env: extract(physics) -> small pytree kept per step (on
    device); draw(list of host pytrees) -> list of uint8 [H, W, 3] frames; dt: seconds per
    inner env step, or None."""
    base = env.unwrapped
    if hasattr(base, "render_frame"):
        dt = getattr(base, "tau", None) or getattr(base, "dt", None)
        return (lambda physics: physics), (lambda states: [base.render_frame(s) for s in states]), dt
    if hasattr(base, "brax_env"):
        raw = base.brax_env
        return ((lambda physics: (physics.pipeline_state.q, physics.pipeline_state.qd)),
                (lambda states: _mujoco_frames(raw.sys.mj_model, states)), float(raw.dt))
    if hasattr(base, "playground_env"):
        raw = base.playground_env
        return ((lambda physics: (physics.data.qpos, physics.data.qvel)),
                (lambda states: _mujoco_frames(raw.mj_model, states)), float(raw.dt))
    raise VideoError(f"--video: env {base.name!r} has no renderer")


def _mujoco_frames(model, states, width: int = 320, height: int = 240) -> list[np.ndarray]:
    """Draws (qpos, qvel) states with MuJoCo's offscreen renderer, following the model's
    "track" camera when it has one (Brax's locomotion models do), else the free camera."""
    import mujoco  # imported here: MuJoCo reads MUJOCO_GL (set by use_offscreen_gl) when first imported

    width, height = min(width, model.vis.global_.offwidth), min(height, model.vis.global_.offheight)
    try:
        renderer = mujoco.Renderer(model, height=height, width=width)
    except Exception as err:  # no GL: missing libOSMesa, or MuJoCo imported with another MUJOCO_GL
        raise VideoError(f"--video: MuJoCo cannot render offscreen (MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}): "
                         f"{_one_line(err)}; install the system package libosmesa6 and set "
                         f"MUJOCO_GL=osmesa (or egl on a GPU machine)") from None
    camera = "track" if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "track") >= 0 else -1
    data = mujoco.MjData(model)
    frames = []
    try:
        for qpos, qvel in states:
            data.qpos[:], data.qvel[:] = qpos, qvel
            mujoco.mj_forward(model, data)
            renderer.update_scene(data, camera=camera)
            frames.append(renderer.render().copy())
    finally:
        renderer.close()
    return frames


def render_episode(engine, agent_state, obs_stats, key) -> tuple[list[np.ndarray], float, float]:
    """Runs one deterministic episode of `engine.eval_env` (up to its time limit) and draws it.

    Returns (frames: uint8 [H, W, 3] each, the first state and one per agent step up to the
    episode's end; the episode's return; frames per second of real time).
    """
    env, agent = engine.eval_env, engine.agent
    extract, draw, dt = _source(env)
    repeat = getattr(env, "repeat", 1)
    steps = -(-env.spec.episode_length // repeat)

    @jax.jit
    @full_precision
    def run(agent_state, obs_stats, key):
        state = jax.vmap(env.reset)(key[None])  # a batch of one: the agent acts on [B, obs]
        first = extract(jax.tree.map(lambda x: x[0], state.physics))

        def body(carry, _):
            state, memory = carry
            action, _, memory = agent.act(agent_state, obs_stats, state.obs, key, True, memory)
            nxt = jax.vmap(env.step)(state, action)
            kept = extract(jax.tree.map(lambda x: x[0], nxt.physics))
            return (nxt, memory), (kept, nxt.done[0], nxt.reward[0])

        _, (trajectory, done, reward) = jax.lax.scan(body, (state, fresh_carry(agent, 1)), None, length=steps)
        return first, trajectory, done, reward

    first, trajectory, done, reward = jax.device_get(run(agent_state, obs_stats, key))
    # The env does not auto-reset: keep the steps up to the first end of the episode.
    length = int(np.argmax(done > 0)) + 1 if np.any(done > 0) else steps
    states = [first] + [jax.tree.map(lambda x: x[t], trajectory) for t in range(length)]
    fps = 1.0 / (dt * repeat) if dt else 30.0
    return draw(states), float(np.sum(reward[:length])), fps


def write_mp4(path: str, frames: list[np.ndarray], fps: float) -> str:
    """Encodes uint8 [H, W, 3] frames as an H.264 mp4 (yuv420p, playable everywhere); the
    file appears whole or not at all (written beside it, then renamed)."""
    if not frames:
        raise VideoError("--video: no frames to write")
    h, w = frames[0].shape[:2]
    h2, w2 = h + h % 2, w + w % 2  # yuv420p needs even sizes

    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp.mp4")
    rate = Fraction(round(fps * 1000), 1000).limit_denominator(1000) if fps > 0 else Fraction(30)
    # A full disk or an I/O error (PyAV's errors are OSErrors with FFmpeg's errno) leaves
    # neither the file nor its temporary.
    with disk.writing(path, cleanup=(tmp,)):
        os.makedirs(directory, exist_ok=True)
        _encode(av, tmp, frames, rate, h, w, h2, w2)
        os.replace(tmp, path)
    return path


def _encode(av, tmp: str, frames, rate, h: int, w: int, h2: int, w2: int) -> None:
    with av.open(tmp, mode="w", format="mp4") as container:
        codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
        stream = container.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = w2, h2, "yuv420p"
        for frame in frames:
            image = np.zeros((h2, w2, 3), np.uint8)
            image[:h, :w] = np.asarray(frame, np.uint8)[..., :3]
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
