"""Training speed of this checkout against another revision, side by side in one run.

Checks out `--base` into a temporary git worktree and runs the same `train.py` commands from
both trees, alternating (base, this) for `--rounds` rounds so that machine noise hits both
alike; prints each run's training steps/s (compile excluded) and final eval return, then the
best of the rounds per tree and their ratio. Both trees run with this checkout's Python.

    python benchmarks/compare_revisions.py --base 4c908ed
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = {"cartpole ppo": ["--env", "cartpole"], "pendulum sac": ["--env", "pendulum", "--agent", "sac"],
            "pendulum td3": ["--env", "pendulum", "--agent", "td3"],
            "ant ppo": ["--env", "ant", "--backend", "positional", "--num-envs", "256", "--batch-size", "256",
                        "--num-minibatches", "8", "--unroll-length", "5", "--total-steps", "204800", "--epochs", "2",
                        "--eval-every", "0", "--num-eval-envs", "16"],
            "humanoid ppo": ["--env", "humanoid", "--num-envs", "128", "--batch-size", "128", "--num-minibatches", "8",
                             "--unroll-length", "10", "--total-steps", "102400", "--epochs", "2", "--eval-every", "0",
                             "--num-eval-envs", "16"],
            "cartpole pqn": ["--env", "cartpole", "--agent", "pqn"],
            # FastTD3's Playground recipe on Brax humanoid, envs, batch and ring cut by 8
            # (benchmarks/wallclock.py's scaling): a 10,240-step ring of 244-float observations
            "humanoid fasttd3": ["--env", "humanoid", "--agent", "fasttd3", "--num-envs", "128", "--batch-size", "4096",
                                 "--max-replay-size", "1310720", "--min-replay-size", "1280", "--total-steps", "6400",
                                 "--epochs", "2", "--eval-every", "0", "--num-eval-envs", "16"],
            # TD3 and SAC on pendulum with small networks (64x64 swish, one env, batch 256), where a
            # per-iteration overhead shows that the default 256-wide networks hide
            "pendulum td3 small": ["--env", "pendulum", "--agent", "td3", "--num-envs", "1", "--batch-size", "256",
                                   "--policy-hidden-sizes", "64", "64", "--value-hidden-sizes", "64", "64",
                                   "--activation", "swish", "--learning-rate", "1e-3", "--tau", "0.01",
                                   "--grad-updates-per-step", "1", "--total-steps", "20000"],
            "pendulum sac small": ["--env", "pendulum", "--agent", "sac", "--num-envs", "1", "--batch-size", "256",
                                   "--policy-hidden-sizes", "64", "64", "--value-hidden-sizes", "64", "64",
                                   "--activation", "swish", "--learning-rate", "1e-3", "--tau", "0.01",
                                   "--grad-updates-per-step", "1", "--total-steps", "20000"]}
DEFAULT = ["cartpole ppo", "pendulum sac", "pendulum td3", "pendulum td3 small", "pendulum sac small"]


def run(tree: str, args: list[str]) -> tuple[int | None, str, str]:
    """(training steps/s, final eval return, the memory check's peak per device) of one
    train.py run in `tree`."""
    run_dir = tempfile.mkdtemp(prefix="compare-")
    try:
        # One device in both trees: a default that picks the device count would compare layouts.
        proc = subprocess.run([sys.executable, os.path.join(tree, "train.py"), *args, "--devices", "1",
                               "--run-dir", run_dir, "--overwrite", "--no-progress", "--checkpoint-every", "-1"],
                              capture_output=True, text=True, cwd=tree, env=dict(os.environ, JAX_PLATFORMS="cpu"),
                              check=False)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    sps = re.search(r"\(([\d,]+) steps/s\)", proc.stdout)
    final = re.search(r"final eval return (\S+)", proc.stdout)
    memory = re.search(r"memory: (.+?) per device at the peak", proc.stdout)
    if not sps:
        return None, (proc.stderr.strip().splitlines() or ["failed"])[-1], "?"
    return int(sps.group(1).replace(",", "")), final.group(1) if final else "?", memory.group(1) if memory else "?"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the revision to compare against (a commit, tag or branch)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--only", nargs="*", default=DEFAULT, choices=list(COMMANDS))
    a = p.parse_args(argv)
    base = tempfile.mkdtemp(prefix="base-")
    subprocess.run(["git", "worktree", "add", "-q", "--detach", base, a.base], cwd=ROOT, check=True)
    trees = {"base": base, "this": ROOT}
    best: dict[tuple[str, str], int] = {}
    try:
        for rnd in range(a.rounds):
            for name in a.only:
                for label, tree in trees.items():
                    sps, final, memory = run(tree, COMMANDS[name])
                    print(f"round {rnd + 1} {name:16s} {label:5s} {sps or 0:>10,} steps/s  final eval {final}  "
                          f"peak memory {memory}", flush=True)
                    if sps:
                        best[(name, label)] = max(best.get((name, label), 0), sps)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", base], cwd=ROOT, check=False)
    print(f"\nbest of {a.rounds} rounds, {a.base} (base) vs this checkout:")
    for name in a.only:
        b, t = best.get((name, "base")), best.get((name, "this"))
        ratio = f"{t / b:.3f}" if b and t else "n/a"
        print(f"  {name:16s} base {b or 0:>10,}  this {t or 0:>10,}  ratio {ratio}")


if __name__ == "__main__":
    main()
