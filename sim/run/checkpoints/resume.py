"""A resume: the newest good checkpoint of a run directory restored into the run's state (a
corrupt one passed over for the one before it), the command line's hyper-parameters put in
(unless PBT evolved them), a replay ring the checkpoint left out refilled."""

from __future__ import annotations

import jax
import numpy as np

from sim.run.checkpoints.checkpoint import (
    ENV_PARAMS,
    CheckpointError,
    CorruptCheckpoint,
    check_compatible,
    config_dict,
    flatten,
    list_checkpoints,
    place,
    read_meta,
    restore,
    stale,
)


def current_hp(restored, hp):
    """The hyper-parameters `hp` (a run's, or a population's [M]) in the restored ones' shapes
    and shardings (a multi-device state has a device axis after the population's)."""

    def broadcast(old, new):
        new = np.asarray(new)
        new = new.reshape(new.shape + (1,) * (len(old.shape) - new.ndim))
        return place(np.broadcast_to(new, old.shape), getattr(old, "sharding", None))

    return jax.tree.map(broadcast, restored, hp)


def resume_state(engine, cfg, run_dir: str, init_key, log=print):
    """(TrainState, meta, path) of the newest good checkpoint of `run_dir` for the run's config
    `cfg` and its `engine`.

    A corrupt checkpoint (torn or failing its checksums: a disk fault, or a copy cut short) is
    passed over, with one line saying so, for the one before it; a checkpoint of another
    config is an error, not passed over. Nothing is compiled when the checkpoint holds the
    whole state: the template comes from `jax.eval_shape`. A checkpoint written without the
    replay ring (or what else its loop let it leave out) gets a fresh one, refilled by the
    loop's prefill; one written without the envs' states (--checkpoint-envs off) starts them
    as the run first did (so that neither resume is bitwise exact).
    """
    return newest_good(run_dir, lambda path: (*_resume_from(engine, cfg, path, init_key, log), path), log, "--resume",
                       "resuming")


def check_resume(cfg, run_dir: str, template, droppable: frozenset = frozenset()) -> None:
    """Raises CheckpointError when the checkpoint a resume of `run_dir` reads is of another run
    or config: from its meta.json and the state's shapes (`template`, `engine.template`; a
    ring in an earlier layout at the `droppable` paths is refilled, not an error), so that a
    wrong command line is told before the programs compile, not after. `resume_state` checks
    the checkpoint it loads again, as it may fall back to an older one."""

    def check(path):
        meta = read_meta(path)
        check_compatible(path, meta, template, config_dict(cfg), ignore=stale(meta, template, droppable))

    newest_good(run_dir, check, lambda *a: None, "--resume", "resuming")


def newest_good(run_dir: str, load, log, flag: str, doing: str):
    """`load(path)` of the newest checkpoint of `run_dir` that is not corrupt: a corrupt one is
    passed over, with one line saying so, for the one before it; other errors (a checkpoint of
    another config) are raised as they are."""
    found = [path for _, path in reversed(list_checkpoints(run_dir))]
    if not found:
        raise CheckpointError(f"{flag}: {run_dir} has no checkpoint (written after epochs, at the end of a run and "
                              f"on a stop signal)")
    for newer, path in enumerate(found):
        try:
            return load(path)
        except CorruptCheckpoint as err:
            if newer == len(found) - 1:
                many = f"its {len(found)} checkpoints are all corrupt; " if len(found) > 1 else ""
                raise CorruptCheckpoint(f"{flag}: {many}{err}") from None
            log(f"{err}; {doing} from the one before it, {found[newer + 1]}")


def _resume_from(engine, cfg, path: str, init_key, log):
    meta = read_meta(path)
    template = engine.template(init_key)  # with its shardings on several devices
    droppable = engine.droppable_paths(template)
    earlier = stale(meta, template, droppable)  # a ring of an earlier layout
    check_compatible(path, meta, template, config_dict(cfg), ignore=earlier)  # before running anything
    left_out = set(meta.get("left_out", ()))
    refill = bool(left_out & droppable) or bool(earlier)
    new_episodes = bool(left_out & engine.episode_paths(template))  # written with --checkpoint-envs off
    saved = {e["path"] for e in meta["leaves"]}
    defaults = [p for p, _ in flatten(template) if p.startswith(ENV_PARAMS) and p not in saved and not new_episodes]
    if refill or defaults or new_episodes:
        # concrete: its fresh, empty buffer, its envs' start states or their defaults are kept
        template = engine.init(init_key)
    if defaults:
        log(f"checkpoint {path} has no env parameters (written before they were traced): the envs resume under "
            f"their defaults")
    state, meta = restore(path, template, config_dict(cfg), ignore=earlier)
    # Hyper-parameters given on the command line of a resume win over the checkpoint's, except
    # under --pbt: there the state's values are the ones the run has evolved.
    if not cfg.pbt.enabled:
        state = state.replace(agent=state.agent.replace(hp=current_hp(state.agent.hp, engine.hp)))
    if new_episodes:
        log(f"checkpoint {path} holds no env states (written with --checkpoint-envs off): every env starts a new "
            f"episode from the run's first start states (this resume is not bitwise identical to an uninterrupted run)")
    if refill:
        held = f"holds its {engine.loop.droppable} in an earlier version's layout" if earlier else \
            f"has no {engine.loop.droppable}"
        log(f"checkpoint {path} {held}: refilling {cfg.prefill_steps:,} transitions with random actions (this "
            f"resume is not bitwise identical to an uninterrupted run)")
        if engine.loop.prefill_iterations:
            state = engine.prefill(state)
    return state, meta
