"""The CPU LAPACK deadlock's fixes side by side (envs/cpu_linalg.py): what each costs.

    .venv/bin/python benchmarks/cpu_linalg.py [--rounds 2] [--quick]

Modes, each in its own subprocess (FUSEDRL_CPU_LINALG is read when `envs` is imported):
- unrolled: Cholesky and triangular solves lowered to plain XLA ops (the default);
- pool: jaxlib's LAPACK kernels with a one-thread intra-op pool (PJRT_NPROC=1).
("off", LAPACK on the default pool, is the configuration that deadlocks: not timed.)
Rows: raw MJX stepping of ant (1024 envs) and humanoid (4096 envs) by
benchmarks/env_throughput.py, and PPO training steps/s of ant (1024 envs) by the
benchmarks/scaling.py worker. Rounds alternate the modes so load drifts hit both alike;
each cell is the best of its rounds. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks import common  # noqa: E402

MODES = ("unrolled", "pool")


def rows(quick: bool) -> list[tuple[str, list[str]]]:
    steps = "10" if quick else "20"
    out = [("ant mjx 1024 envs, raw steps/s",
            ["benchmarks/env_throughput.py", "--env", "ant", "--backend", "mjx", "--num-envs", "1024",
             "--steps", steps, "--repeats", "3"])]
    if not quick:
        out.append(("humanoid mjx 4096 envs, raw steps/s",
                    ["benchmarks/env_throughput.py", "--env", "humanoid", "--backend", "mjx", "--num-envs", "4096",
                     "--steps", "10", "--repeats", "2"]))
    out.append(("ant mjx 1024 envs, PPO training steps/s",
                ["benchmarks/scaling.py", "--worker", "--n", "1", "--total-envs", "1024", "--env", "ant",
                 "--agent", "ppo", "--epochs", "2", "--iterations", "1" if quick else "2"]))
    return out


def measure(mode: str, command: list[str]) -> tuple[float, float]:
    """(steps/s, compile seconds) of one subprocess run in `mode`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_NPROC", "NPROC")}
    env.update(FUSEDRL_CPU_LINALG=mode, JAX_PLATFORMS="cpu")
    _, text = common.run_process([sys.executable, *command], env)
    result = common.read_result(text)
    if result is not None:
        return result["sps"], result["compile_s"]
    sps = float(re.search(r"steps_per_s=([\d,]+)", text).group(1).replace(",", ""))
    return sps, float(re.search(r"compile_s=([\d.]+)", text).group(1))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="ant only, shorter runs")
    args = p.parse_args(argv)
    best: dict = {}
    for r in range(args.rounds):
        for name, command in rows(args.quick):
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                sps, compile_s = measure(mode, command)
                old = best.get((name, mode), (0.0, float("inf")))
                best[(name, mode)] = (max(old[0], sps), min(old[1], compile_s))
                print(f"round {r + 1}: {name} [{mode}]: {sps:,.0f} steps/s, compile {compile_s:.1f}s", flush=True)
    print(f"\n| {os.cpu_count()}-core CPU | " + " | ".join(MODES) + " | unrolled / pool |")
    print("|---|" + "---|" * (len(MODES) + 1))
    for name, _ in rows(args.quick):
        cells = [best[(name, m)] for m in MODES]
        print(f"| {name} | " + " | ".join(f"{s:,.0f} (compile {c:.0f}s)" for s, c in cells)
              + f" | {cells[0][0] / cells[1][0]:.2f} |")


if __name__ == "__main__":
    main()
