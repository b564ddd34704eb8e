"""What the default checkpoints cost: seconds per checkpoint against seconds per epoch, for a
run as train.py would start it.

    .venv/bin/python benchmarks/checkpoint_cost.py --env humanoid --num-envs 4096
    .venv/bin/python benchmarks/checkpoint_cost.py --env pendulum --agent sac
    .venv/bin/python benchmarks/checkpoint_cost.py --job humanoid-ppo --job pendulum-sac --json out.json

Any train.py flags choose the run (its env's and agent's defaults, the device count train.py
would pick). The script builds the run's programs and initial state (the replay prefill
included), times one call of the compiled epoch program, then writes `--saves` checkpoints of
that state into a temporary run directory (on the disk of `--dir`), each as the trainer writes
them: the replay buffer included where `--checkpoint-buffer auto` includes it, fsynced, the
oldest rotated out. It prints the checkpoint's size, the seconds of each write, their share of
an epoch, and what the default (`--checkpoint-every` unset) makes of it: a checkpoint every k
epochs, k the fewest that keeps checkpoints under the CHECKPOINT_SHARE (sim/run/checkpoints/saving.py) of the
training time (`sim/run/trainer.py`), and the share that leaves.

`--sizes` only prints a checkpoint's size with the envs' states and without them
(`--checkpoint-envs off`), from the state's shapes: nothing is compiled, run or written.

    .venv/bin/python benchmarks/checkpoint_cost.py --sizes --env G1JoystickFlatTerrain --devices 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks import common  # noqa: E402

JOBS = {
    "humanoid-ppo": ["--env", "humanoid", "--num-envs", "4096"],  # the README's headline job
    "pendulum-sac": ["--env", "pendulum", "--agent", "sac"],  # the default SAC job and its ring
    # the same with Brax's SAC ring size: a buffer whose checkpoint costs more than 1% of an epoch
    "pendulum-sac-1m": ["--env", "pendulum", "--agent", "sac", "--max-replay-size", "1048576"],
}


def measure(argv: list[str], saves: int, directory: str) -> dict:
    import jax

    import train
    from sim.run.build import build_engine
    from sim.run.checkpoints import checkpoint
    from sim.run import devices
    from sim.run.config import ConfigError
    from sim.run.checkpoints.saving import CHECKPOINT_SHARE

    cfg = train.parse_config(argv)
    try:
        devices.initialize(cfg)  # the device count train.py would use, before JAX starts
    except ConfigError as err:
        raise SystemExit(f"error: {err}")
    engine = build_engine(cfg)
    init_key = jax.random.PRNGKey(cfg.seed)
    t0 = time.perf_counter()
    state = engine.init(init_key)
    if cfg.prefill_iterations:
        state = engine.prefill(state)
    jax.block_until_ready(state)
    epoch = engine.epoch.lower(engine.template(init_key)).compile()
    build_s = time.perf_counter() - t0
    (state, _), epoch_s = common.timed(epoch, state)
    run_dir = tempfile.mkdtemp(prefix="checkpoint_cost_", dir=directory)
    try:
        droppable = engine.droppable_paths(state)
        with_buffer = checkpoint.droppable_fits(state, droppable, run_dir, cfg.checkpoints.keep_checkpoints)
        leave_out = frozenset() if with_buffer else droppable

        def save(epoch):
            checkpoint.save(run_dir, state, epoch=epoch, env_steps=0, config=checkpoint.config_dict(cfg),
                            leave_out=leave_out, keep=cfg.checkpoints.keep_checkpoints)

        times = [common.timed(save, k + 1)[1] for k in range(saves)]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    save_s = sorted(times)[len(times) // 2]  # the median write
    every = max(1, math.ceil(save_s / (CHECKPOINT_SHARE * epoch_s)))
    return {"command": "train.py " + " ".join(argv), "devices": engine.num_devices,
            "platform": jax.devices()[0].platform, "steps_per_epoch": cfg.steps_per_epoch, "epochs": cfg.num_epochs,
            "checkpoint_bytes": checkpoint.state_bytes(state, leave_out),
            "buffer_bytes": checkpoint.droppable_bytes(state, droppable) if with_buffer else 0, "build_s": build_s,
            "epoch_s": epoch_s, "save_s": times, "save_s_median": save_s, "share_every_epoch": save_s / epoch_s,
            "default_every": every, "share_default": save_s / (every * epoch_s)}


def sizes(argv: list[str]) -> dict:
    """A checkpoint's bytes with every env's state and without (`--checkpoint-envs off`), from
    the state's shapes (`engine.template`)."""
    import train
    from sim.run.build import build_engine
    from sim.run.checkpoints import checkpoint
    from sim.run.populations import population

    cfg = train.parse_config(argv)
    engine = build_engine(cfg)
    template = engine.template(population.keys(cfg)[0])
    return {"command": "train.py " + " ".join(argv), "num_envs": cfg.num_envs,
            "checkpoint_bytes": checkpoint.state_bytes(template, frozenset()),
            "without_envs_bytes": checkpoint.state_bytes(template, engine.episode_paths(template))}


def report(r: dict) -> str:
    from sim.core.memory import size

    buffer = f", {size(r['buffer_bytes'])} of it the replay buffer" if r["buffer_bytes"] else ""
    return (f"{r['command']}  ({r['devices']} {r['platform']} device(s), {r['steps_per_epoch']:,} env steps an epoch)\n"
            f"  checkpoint {size(r['checkpoint_bytes'])}{buffer}; writes "
            f"{', '.join(f'{t:.3f}' for t in r['save_s'])} s (median {r['save_s_median']:.3f} s)\n"
            f"  epoch {r['epoch_s']:.2f} s: a checkpoint every epoch would take {r['share_every_epoch']:.2%} of the "
            f"training time; the default writes one every {r['default_every']} epoch(s): {r['share_default']:.2%}")


def main(args=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--job", action="append", choices=sorted(JOBS),
                   help="a named job (repeatable), each measured in a process of its own")
    p.add_argument("--saves", type=int, default=3, help="checkpoints written and timed")
    p.add_argument("--dir", default=".", help="where the temporary run directory goes (the disk measured)")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--sizes", action="store_true", help="only the checkpoint's size with and without the envs' "
                                                        "states, from the state's shapes")
    known, flags = p.parse_known_args(args)
    if known.sizes:
        from sim.core.memory import size

        result = sizes(flags or JOBS["humanoid-ppo"])
        print(f"{result['command']}  ({result['num_envs']:,} envs): checkpoint {size(result['checkpoint_bytes'])}, "
              f"{size(result['without_envs_bytes'])} with --checkpoint-envs off", flush=True)
        results = [result]
    elif known.job:  # one process per job: each has its own device count, set before JAX starts
        import subprocess

        results = []
        for job in known.job:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                subprocess.run([sys.executable, __file__, "--saves", str(known.saves), "--dir", known.dir, "--json",
                                out.name, *JOBS[job]], check=True)
                results += json.load(open(out.name))
    else:
        result = measure(flags or JOBS["humanoid-ppo"], known.saves, known.dir)
        print(report(result), flush=True)
        results = [result]
    if known.json:
        with open(known.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
