"""`train.py play RUN_DIR` and `train.py export RUN_DIR FILE`: load a run's newest checkpoint's
policy (never its replay ring), evaluate it on device, test it under other physics, film one
episode, or write it to a file for a robot."""

from __future__ import annotations

import json
import os
import tempfile

import jax
import numpy as np

from sim.core.contract import fresh_carry
from envs.robot_tasks import ROBOT_TASKS
from envs.sim2real import SettingError
from envs.wrappers import init_stats
from sim.run.checkpoints import checkpoint
from sim.run.policy import export as exporter, video
from sim.run.populations import population
from sim.run.build import build_evaluation
from sim.run.commands import ArgumentError, ExportCommand, PlayCommand, check_member, velocity_command
from sim.run.config import ConfigError
from sim.run.metrics import to_python
from sim.run.plots import read_metrics
from sim.run.checkpoints.resume import newest_good
from sim.run.settings import robustness_setting


def load_policy(path: str, cfg, evaluation, key, member: int | None = None):
    """(agent state, observation statistics) of checkpoint `path`, on one device.

    Reads only those two parts (never a replay buffer). A population's checkpoint has a leading
    member axis: `member`'s slice is taken. A multi-device run's checkpoint has a device axis
    on every leaf, with identical parameters on each device: device 0's copy is taken, so any
    run plays on any number of devices.
    """
    meta = checkpoint.read_meta(path)
    checkpoint.check_identity(path, meta, checkpoint.config_dict(cfg))
    values = checkpoint.load_leaves(path, meta, (".agent", ".obs_stats"))
    templates = {"agent": jax.eval_shape(evaluation.agent.init, key),
                 "obs_stats": jax.eval_shape(lambda: init_stats(evaluation.spec.obs_shape))}
    out = {}
    for part, template in templates.items():
        flat, treedef = jax.tree.flatten_with_path(template)
        leaves = []
        for key_path, leaf in flat:
            name = f".{part}{jax.tree_util.keystr(key_path)}"
            value = values.get(name)
            if value is not None and member is not None:
                value = value[member]
            if value is None and name.startswith(checkpoint.HP):  # written before every one was kept
                value = np.asarray(getattr(evaluation.cfg.hp, name[len(checkpoint.HP):]))
            if value is not None and value.ndim == leaf.ndim + 1 and value.shape[1:] == tuple(leaf.shape):
                value = value[0]  # device 0 of a multi-device run
            if value is None or value.shape != tuple(leaf.shape) or value.dtype != leaf.dtype:
                got = "absent" if value is None else f"{value.dtype}{list(value.shape)}"
                raise checkpoint.CheckpointError(f"checkpoint {path} does not match this config: {name} is {got} "
                                                 f"there, {leaf.dtype}{list(leaf.shape)} here")
            leaves.append(jax.device_put(value))
        out[part] = jax.tree.unflatten(treedef, leaves)
    return out["agent"], out["obs_stats"], meta


def run_policy(run_dir: str, member_given, num_eval_envs, log, flag: str, command=None):
    """(the run's config for its (chosen member's) single run, the evaluation side built for
    it, the policy's agent state and observation statistics, the checkpoint's meta and path,
    the member (None: not a population), the evaluation key)."""
    if not checkpoint.list_checkpoints(run_dir):
        raise checkpoint.CheckpointError(f"{flag}: {run_dir} has no checkpoint (written after epochs, at the end of "
                                         f"a run and on a stop signal)")
    cfg = checkpoint.load_run_config(run_dir)
    check_member(member_given, cfg.population_size)
    if num_eval_envs is not None:
        cfg = cfg.replace(num_eval_envs=num_eval_envs)
    if command is not None:  # the robot env's own option (envs/robots.py), given as its config entries are
        task = ROBOT_TASKS.get(cfg.env)
        if task is None or not task.command:
            joystick = ", ".join(n for n, t in ROBOT_TASKS.items() if t.command)
            raise ConfigError("command", f"env {cfg.env} takes no velocity command (Playground's joystick robots do: "
                                         f"{joystick})")
        cfg = cfg.replace(env_config=cfg.env_config + ("command=" + json.dumps(list(velocity_command(command))),))
    member = None
    if cfg.population_size > 1:  # a population's member plays as the single run it is
        member = member_given if member_given is not None else best_member(cfg, run_dir)
        chosen = population.members(cfg)[member]
        log(f"member {member} of {cfg.population_size} (seed {chosen.seed}, {chosen.label})"
            + (" (the best by final evaluation; --member K chooses another)" if member_given is None else ""))
        cfg = population.member_config(cfg, chosen)
    # One device, and no loop (no replay ring): a run trained on many devices with a large
    # buffer plays anywhere.
    cfg = cfg.replace(devices=1)
    evaluation = build_evaluation(cfg)
    init_key, eval_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    agent_state, obs_stats, meta, path = newest_good(
        run_dir, lambda path: (*load_policy(path, cfg, evaluation, init_key, member), path), log, flag,
        flag.strip("-") + "ing")
    return cfg, evaluation, agent_state, obs_stats, meta, path, member, eval_key


def play(command: PlayCommand, log=print) -> dict:
    """`train.py play RUN_DIR`: `num_eval_envs` deterministic episodes (one per env, in
    parallel, on device) with the policy of the run's newest checkpoint; logs and returns the
    mean/std return; optionally the return under other physics (`--robustness`) and a video."""
    command.validate()
    if command.video:  # before any env is built: MuJoCo reads MUJOCO_GL on import
        video.check_renderer(checkpoint.load_run_config(command.run_dir).env)
    cfg, evaluation, agent_state, obs_stats, meta, path, member, eval_key = run_policy(
        command.run_dir, command.member, command.num_eval_envs, log, "play", command.command)
    if command.sim2sim:  # checked before anything compiles
        from sim.run.policy import sim2sim  # imports MuJoCo, which reads MUJOCO_GL on import: after play chose it

        sim2sim.check(cfg.env)
    result = to_python(jax.device_get(evaluation.evaluate_policy(agent_state, obs_stats, eval_key)))
    result.update(checkpoint=path, epoch=meta["epoch"], env_steps=meta["env_steps"], episodes=cfg.num_eval_envs,
                  member=member)
    log(f"{cfg.env} / {cfg.agent_def.name}, checkpoint of epoch {meta['epoch']} ({meta['env_steps']:,} env steps): "
        f"return {result['episode_return']:.2f} +- {result['episode_return_std']:.2f} over {cfg.num_eval_envs} "
        f"deterministic episodes (min {result['episode_return_min']:.2f}, max {result['episode_return_max']:.2f}, "
        f"mean length {result['episode_length']:.1f})")
    if command.robustness:
        result["robustness"] = robustness(command.robustness, evaluation, agent_state, obs_stats, eval_key, result,
                                          log)
    if command.sim2sim:
        given = velocity_command(command.command) if command.command is not None else sim2sim.DEFAULT_COMMAND
        with tempfile.TemporaryDirectory() as folder:
            policy = os.path.join(folder, "policy.onnx")
            export_policy(policy, evaluation, agent_state, obs_stats, eval_key, log=lambda _: None, flag="sim2sim")
            result["sim2sim"] = sim2sim.run(sim2sim.onnx_policy(policy), evaluation, given, log=log)
    if command.video:
        frames, episode_return, fps = video.render_episode(evaluation, agent_state, obs_stats,
                                                           jax.random.fold_in(eval_key, 1))
        video.write_mp4(command.video, frames, fps)
        result.update(video=os.path.abspath(command.video), video_frames=len(frames), video_return=episode_return)
        log(f"video: {len(frames)} frames ({frames[0].shape[1]}x{frames[0].shape[0]}, {fps:.0f} fps), "
            f"episode return {episode_return:.2f} -> {command.video}")
    return result


def export(command: ExportCommand, log=print) -> dict:
    """`train.py export RUN_DIR FILE`: the policy of the run's newest checkpoint written to
    FILE and checked against the JAX policy."""
    command.validate()
    cfg, evaluation, agent_state, obs_stats, meta, path, member, eval_key = run_policy(
        command.run_dir, command.member, None, log, "export")
    log(f"{cfg.env} / {cfg.agent_def.name}, checkpoint of epoch {meta['epoch']} ({meta['env_steps']:,} env steps)")
    return dict(export_policy(command.path, evaluation, agent_state, obs_stats, eval_key, log), checkpoint=path,
                member=member)


def best_member(cfg, run_dir: str) -> int:
    """The member with the best final evaluation: summary.json's, else from metrics.jsonl;
    member 0 when neither says."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            best = json.load(f).get("best_member")
    except (OSError, ValueError):
        path = os.path.join(run_dir, "metrics.jsonl")
        best = population.summary(cfg, read_metrics(path))["best_member"] if os.path.exists(path) else None
    return 0 if best is None else int(best)


def robustness(settings, evaluation, agent_state, obs_stats, key, nominal: dict, log=print) -> list[dict]:
    """The policy's return under each `--robustness` setting (the same episodes' keys as the
    nominal evaluation), logged as a table after the nominal row."""
    rows = [{"setting": "nominal", **{k: nominal[k] for k in ("episode_return", "episode_return_std")}}]
    try:
        outs = evaluation.evaluate_settings([robustness_setting(s) for s in settings], agent_state, obs_stats, key)
    except SettingError as err:
        raise ConfigError("robustness", str(err)) from None
    rows += [{"setting": s, **to_python(jax.device_get(out))} for s, out in zip(settings, outs)]
    width = max(len(r["setting"]) for r in rows)
    log(f"{'physics':<{width}}  return")
    for r in rows:
        gap = "" if r is rows[0] else f"  ({r['episode_return'] - rows[0]['episode_return']:+.2f})"
        log(f"{r['setting']:<{width}}  {r['episode_return']:.2f} +- {r['episode_return_std']:.2f}{gap}")
    return rows[1:]


def export_policy(path: str, engine, agent_state, obs_stats, key, log=print, flag: str = "FILE") -> dict:
    """Writes the policy to `path` (sim/run/policy/export.py) and checks the file's actions against the
    JAX policy's on 1,000 observations drawn around the run's observation statistics. A policy
    the exporter cannot write is the error of `flag` (export's FILE, play's --sim2sim)."""
    error = ArgumentError if flag.isupper() else ConfigError
    try:
        traced = exporter.write(path, engine, agent_state, obs_stats)
    except exporter.ExportError as err:
        raise error(flag, str(err)) from None
    except OSError as err:
        raise error(flag, f"cannot write {path}: {err.strerror or err}") from None
    obs = obs_stats.mean + obs_stats.std * jax.random.normal(key, (1000,) + engine.spec.obs_shape)
    agent = engine.agent
    want = np.asarray(jax.jit(lambda o: agent.act(agent_state, obs_stats, o, key, True, fresh_carry(agent, 1000))[0])(obs))
    out = {"path": os.path.abspath(path), "ops": len(traced["program"])}
    try:
        got = exporter.run_file(path, np.asarray(obs))
    except ImportError:
        log(f"exported the policy to {path} ({out['ops']} ops); not checked: onnxruntime is not installed")
        return out
    out["max_abs_diff"] = float(np.max(np.abs(np.asarray(got, np.float64) - want))) if want.size else 0.0
    log(f"exported the policy to {path} ({out['ops']} ops): on 1,000 observations its actions differ from the "
        f"JAX policy's by at most {out['max_abs_diff']:.2e}")
    return out
