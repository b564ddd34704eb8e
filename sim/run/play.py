"""`train.py --play RUN_DIR`: load a run's newest checkpoint, evaluate its policy on device,
and optionally film one episode (`--video out.mp4`)."""

from __future__ import annotations

import os

import numpy as np

from sim.run import checkpoint, population


def load_policy(path: str, cfg, evaluation, key, member: int | None = None):
    """(agent state, observation statistics) of checkpoint `path`, on one device.

    Reads only those two parts (never a replay buffer). A population's checkpoint has a leading
    member axis: `member`'s slice is taken. A multi-device run's checkpoint has a device axis
    on every leaf, with identical parameters on each device: device 0's copy is taken, so any
    run plays on any number of devices.
    """
    import jax

    from envs.wrappers import init_stats

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


def play(cfg, run_dir: str, log=print) -> dict:
    """Runs `cfg.num_eval_envs` deterministic episodes (one per env, in parallel, on device)
    with the policy of the newest checkpoint of `run_dir`; logs and returns mean/std return."""
    import jax

    from sim.run.config import build_evaluation
    from sim.run.metrics import to_python

    if not checkpoint.list_checkpoints(run_dir):
        raise checkpoint.CheckpointError(f"--play: {run_dir} has no checkpoint (written after epochs, at the end of "
                                         f"a run and on a stop signal)")
    if cfg.video:
        from sim.run import video

        video.use_offscreen_gl()  # before any env is built: MuJoCo reads it on import
    member = None
    if cfg.population_size > 1:  # a population's member plays as the single run it is
        member = cfg.member if cfg.member is not None else best_member(cfg, run_dir)
        chosen = population.members(cfg)[member]
        log(f"member {member} of {cfg.population_size} (seed {chosen.seed}, {chosen.label})"
            + (" (the best by final evaluation; --member K chooses another)" if cfg.member is None else ""))
        cfg = population.member_config(cfg, chosen)
    # One device, and no loop (no replay ring): a run trained on many devices with a large
    # buffer plays anywhere.
    play_cfg = cfg.replace(devices=1)
    engine = build_evaluation(play_cfg)
    init_key, eval_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    agent_state, obs_stats, meta, path = checkpoint.newest_good(
        run_dir, lambda path: (*load_policy(path, play_cfg, engine, init_key, member), path), log, "--play", "playing")

    result = to_python(jax.device_get(engine.evaluate_policy(agent_state, obs_stats, eval_key)))
    result.update(checkpoint=path, epoch=meta["epoch"], env_steps=meta["env_steps"], episodes=cfg.num_eval_envs,
                  member=member)
    log(f"{cfg.env} / {cfg.agent_def.name}, checkpoint of epoch {meta['epoch']} ({meta['env_steps']:,} env steps): "
        f"return {result['episode_return']:.2f} +- {result['episode_return_std']:.2f} over {cfg.num_eval_envs} "
        f"deterministic episodes (min {result['episode_return_min']:.2f}, max {result['episode_return_max']:.2f}, "
        f"mean length {result['episode_length']:.1f})")
    if cfg.export:
        result["export"] = export_policy(cfg.export, engine, agent_state, obs_stats, eval_key, log)
    if cfg.robustness:
        result["robustness"] = robustness(cfg, engine, agent_state, obs_stats, eval_key, result, log)
    if cfg.video:
        frames, episode_return, fps = video.render_episode(engine, agent_state, obs_stats,
                                                           jax.random.fold_in(eval_key, 1))
        video.write_mp4(cfg.video, frames, fps)
        result.update(video=os.path.abspath(cfg.video), video_frames=len(frames), video_return=episode_return)
        log(f"video: {len(frames)} frames ({frames[0].shape[1]}x{frames[0].shape[0]}, {fps:.0f} fps), "
            f"episode return {episode_return:.2f} -> {cfg.video}")
    return result


def best_member(cfg, run_dir: str) -> int:
    """The member with the best final evaluation: summary.json's, else from metrics.jsonl;
    member 0 when neither says."""
    import json

    from sim.run.plots import read_metrics

    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            best = json.load(f).get("best_member")
    except (OSError, ValueError):
        path = os.path.join(run_dir, "metrics.jsonl")
        best = population.summary(cfg, read_metrics(path))["best_member"] if os.path.exists(path) else None
    return 0 if best is None else int(best)


def robustness(cfg, engine, agent_state, obs_stats, key, nominal: dict, log=print) -> list[dict]:
    """The policy's return under each `--robustness` setting (the same episodes' keys as the
    nominal evaluation), logged as a table after the nominal row."""
    import jax

    from envs.sim2real import SettingError
    from sim.run.config import ConfigError, robustness_setting
    from sim.run.metrics import to_python

    rows = [{"setting": "nominal", **{k: nominal[k] for k in ("episode_return", "episode_return_std")}}]
    try:
        outs = engine.evaluate_settings([robustness_setting(s) for s in cfg.robustness], agent_state, obs_stats, key)
    except SettingError as err:
        raise ConfigError("robustness", str(err)) from None
    rows += [{"setting": s, **to_python(jax.device_get(out))} for s, out in zip(cfg.robustness, outs)]
    width = max(len(r["setting"]) for r in rows)
    log(f"{'physics':<{width}}  return")
    for r in rows:
        gap = "" if r is rows[0] else f"  ({r['episode_return'] - rows[0]['episode_return']:+.2f})"
        log(f"{r['setting']:<{width}}  {r['episode_return']:.2f} +- {r['episode_return_std']:.2f}{gap}")
    return rows[1:]


def export_policy(path: str, engine, agent_state, obs_stats, key, log=print) -> dict:
    """Writes the policy to `path` (sim/run/export.py) and checks the file's actions against the
    JAX policy's on 1,000 observations drawn around the run's observation statistics."""
    import jax

    from agents.base import fresh_carry
    from sim.run import export
    from sim.run.config import ConfigError

    try:
        traced = export.write(path, engine, agent_state, obs_stats)
    except export.ExportError as err:
        raise ConfigError("export", str(err)) from None
    except OSError as err:
        raise ConfigError("export", f"cannot write {path}: {err.strerror or err}") from None
    obs = obs_stats.mean + obs_stats.std * jax.random.normal(key, (1000,) + engine.spec.obs_shape)
    agent = engine.agent
    want = np.asarray(jax.jit(lambda o: agent.act(agent_state, obs_stats, o, key, True, fresh_carry(agent, 1000))[0])(obs))
    out = {"path": os.path.abspath(path), "ops": len(traced["program"])}
    try:
        got = export.run_file(path, np.asarray(obs))
    except ImportError:
        log(f"exported the policy to {path} ({out['ops']} ops); not checked: onnxruntime is not installed")
        return out
    out["max_abs_diff"] = float(np.max(np.abs(np.asarray(got, np.float64) - want))) if want.size else 0.0
    log(f"exported the policy to {path} ({out['ops']} ops): on 1,000 observations its actions differ from the "
        f"JAX policy's by at most {out['max_abs_diff']:.2e}")
    return out
