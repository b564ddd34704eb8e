"""Brax's PPO against ours, one difference at a time: the same config and seeds, each arm
switching on one of Brax's ways (agents/ppo.py) or all of them, each arm one program of
`--seeds` members (`train.py --num-seeds`).

    .venv/bin/python benchmarks/ppo_ablation.py --env CartpoleBalance --seeds 3 \
        --flags "--num-envs 256 --batch-size 256 --num-minibatches 8 --total-steps 1228800 --epochs 4" \
        [--arms ours,trajectories,per-minibatch,masked,estimator,brax,unclipped,peer] [--out benchmarks/results/NAME]

Arms: `ours` (the env's defaults: humanoid's recompute advantages in every minibatch),
`trajectories` (`--trajectory-minibatches`), `per-minibatch` (`--gae-per-minibatch`:
trajectories, advantages recomputed in each), `masked` (`--no-bootstrap-truncation`),
`estimator` (`--advantage-estimator brax`), `brax` (all four), `unclipped` (`--obs-clip None`:
normalised observations not clipped, as Brax's), and `peer`: Brax's own PPO trainer (for a
Playground task in Playground's own pipeline, `benchmarks/versus.py`) with the same config,
one run per seed, in this process.
Figures per arm: each seed's evaluation returns at every epoch, their mean and standard
deviation at the last; `<out>.json` keeps the curves, `<out>.md` the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks.common import member_curves, run_process, write_table  # noqa: E402
from sim.run.populations.population import is_config_line  # noqa: E402

ARMS = {
    "ours": [],
    "trajectories": ["--trajectory-minibatches"],
    "per-minibatch": ["--gae-per-minibatch"],
    "masked": ["--no-bootstrap-truncation"],
    "estimator": ["--advantage-estimator", "brax"],
    "brax": ["--gae-per-minibatch", "--no-bootstrap-truncation", "--advantage-estimator", "brax"],
    "unclipped": ["--obs-clip", "None"],
    "peer": [],  # Brax's trainer itself (run_peer)
}


def run_peer(env: str, seeds: int, flags: list[str]) -> dict:
    """Brax's PPO with the config train.py builds from `flags`, seeds seed .. seed + seeds - 1
    (the seeds of a population's members). JAX's persistent compilation cache is turned on
    (train.py's directory) where nothing has chosen one, so that every seed after the first, and
    a later process on the same machine, reads Brax's programs from it (humanoid's: 215 s each
    compiled on a TPU); its compile seconds are then a cache's."""
    import jax

    from benchmarks.ppo_vs_brax import run_brax_ppo
    from sim.run import compile_cache
    from sim.run.cli import parse_config

    if not jax.config.jax_compilation_cache_dir:
        compile_cache.enable("auto")

    cfg = parse_config(["--env", env, *flags])
    curves, wall = {}, 0.0
    for member in range(seeds):
        seed = cfg.seed + member
        print(f"[peer] Brax's PPO, seed {seed}", flush=True)
        timing = run_brax_ppo(cfg.replace(seed=seed).validate())
        curves[str(member)] = [list(point) for point in timing["curve"]]
        wall += timing["epoch_s"] * timing["epochs_timed"] + timing["compile_s"]
    finals = [curve[-1][1] for _, curve in sorted(curves.items())]
    out = {"flags": ["(Brax's trainer)"], "wall_s": wall, "curves": curves, "final": finals,
           "mean": statistics.fmean(finals), "std": statistics.stdev(finals) if len(finals) > 1 else 0.0}
    print(f"[peer] final {', '.join(f'{x:.1f}' for x in finals)}: mean {out['mean']:.1f}", flush=True)
    return out


def run_arm(name: str, env: str, seeds: int, flags: list[str], work: str) -> dict:
    run_dir = os.path.join(work, name)
    cmd = [sys.executable, "train.py", "--env", env, "--num-seeds", str(seeds), "--run-dir", run_dir,
           "--no-progress", *flags, *ARMS[name]]
    print(f"[{name}] {shlex.join(cmd[1:])}", flush=True)
    wall, _ = run_process(cmd, timeout=6 * 3600)
    curves = member_curves(run_dir)
    finals = [curve[-1][1] for _, curve in sorted(curves.items())]
    out = {"flags": ARMS[name], "wall_s": wall, "curves": {str(m): c for m, c in curves.items()}, "final": finals,
           "mean": statistics.fmean(finals), "std": statistics.stdev(finals) if len(finals) > 1 else 0.0}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:  # the training side of each evaluation
        for row in map(json.loads, f):
            if row.get("train/episode_return") is not None and not is_config_line(row):
                print(f"[{name}] seed {row.get('member', 0)} at {row['env_steps']:,}: training episode return "
                      f"{row['train/episode_return']:.1f}, entropy {row.get('loss/entropy') or float('nan'):.2f}",
                      flush=True)
    for member, curve in sorted(curves.items()):
        print(f"[{name}] seed {member}: " + ", ".join(f"{step:,}: {ret:.1f}" for step, ret in curve), flush=True)
    print(f"[{name}] final {', '.join(f'{x:.1f}' for x in finals)}: mean {out['mean']:.1f} (wall {wall:.0f} s)",
          flush=True)
    return out


def table(results: dict) -> str:
    rows = ["| arm | flags | final evaluation per seed | mean | std |", "| --- | --- | --- | ---: | ---: |"]
    for name, r in results.items():
        rows.append(f"| {name} | `{' '.join(r['flags']) or '(defaults)'}` | "
                    f"{', '.join(f'{x:.1f}' for x in r['final'])} | {r['mean']:.1f} | {r['std']:.1f} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="CartpoleBalance")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--flags", default="", help="train.py flags every arm shares")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--out", default=None, help="<out>.md and <out>.json")
    a = p.parse_args(argv)
    arms = [x for x in a.arms.split(",") if x]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        raise SystemExit(f"--arms: unknown {unknown}; choose from {', '.join(ARMS)}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="ppo_ablation_") as work:
        for name in arms:
            if name == "peer":
                results[name] = run_peer(a.env, a.seeds, shlex.split(a.flags))
            else:
                results[name] = run_arm(name, a.env, a.seeds, shlex.split(a.flags), work)
    text = table(results)
    print(text)
    if a.out:
        command = shlex.join(["benchmarks/ppo_ablation.py", *(argv if argv is not None else sys.argv[1:])])
        write_table(a.out, command, text)
        with open(a.out + ".json", "w") as f:
            json.dump({"env": a.env, "seeds": a.seeds, "flags": a.flags, "arms": results}, f, indent=1)


if __name__ == "__main__":
    main()
