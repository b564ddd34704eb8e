"""Start-up of train.py commands, cold and warm: no hang, and what the compile cache saves.

    .venv/bin/python benchmarks/startup.py [--starts 10] [--timeout 900]
        [--command "--env humanoid --num-envs 4096"] [--command "--env ant --num-envs 1024"] ...

Each start is a fresh process doing what train.py does before its first epoch: build the envs
and the agent, compile every program (init, epoch, evaluate) and check their memory, build the
initial state; then it runs one evaluation (`--num-eval-envs` whole episodes of the physics,
through the compiled evaluate program). Cold starts use `--compile-cache off`; warm starts
share one cache directory, primed by one untimed start. A start that does not finish within
`--timeout` seconds counts as a hang (as does one the run's own stall watchdog ends). Prints a
line per start and a markdown table: hangs, compile seconds (median, min-max) cold and warm,
their ratio, and the whole start's seconds.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import common  # noqa: E402

DEFAULT_COMMANDS = ("--env cartpole", "--env ant --num-envs 1024", "--env humanoid --num-envs 4096")


def worker(flags: list[str]) -> None:
    """One start of `train.py flags`, up to and including one evaluation; prints RESULT json."""
    import jax

    from sim.run import compile_cache
    from sim.run.build import build_engine
    from sim.run.watchdog import Watchdog
    from sim.run.trainer import _compile
    from train import parse_config

    t0 = time.perf_counter()
    cfg = parse_config(flags)
    compile_cache.enable(cfg.run.compile_cache)
    dog = Watchdog(lambda *a: print(*a, file=sys.stderr), cfg.run.stall_timeout)
    engine = build_engine(cfg)
    init_key, eval_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    t1 = time.perf_counter()
    with compile_cache.watch() as cache:
        programs = _compile(engine, init_key, engine.template(init_key), eval_key, fresh=True, watchdog=dog,
                            log=lambda *a: None)
    t2 = time.perf_counter()
    state = programs["init"](init_key, programs["starts"](init_key))
    if "prefill" in programs:
        state = programs["prefill"](state)
    jax.block_until_ready(state)
    t3 = time.perf_counter()
    ret = float(programs["evaluate"](state, eval_key)["eval/episode_return"])
    t4 = time.perf_counter()
    dog.close()
    common.print_result({"compile_s": t2 - t1, "build_s": t1 - t0, "init_s": t3 - t2, "eval_s": t4 - t3,
                         "total_s": t4 - t0, "cache": cache, "eval_return": ret})


def start(flags: list[str], cache: str, timeout: float) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--worker", "--", *flags, "--compile-cache", cache]
    t = time.perf_counter()
    try:
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu")))
    except subprocess.TimeoutExpired:
        return {"hang": True, "wall_s": time.perf_counter() - t}
    result = common.read_result(proc.stdout)
    if result is None:
        stalled = proc.returncode == 4
        if not stalled:
            raise SystemExit(f"start failed ({proc.returncode}): {' '.join(flags)}\n{proc.stderr[-3000:]}")
        return {"hang": True, "wall_s": time.perf_counter() - t}
    return dict(result, hang=False, wall_s=time.perf_counter() - t)


def summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--worker" in argv:
        return worker(argv[argv.index("--") + 1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--command", action="append", help="train.py flags of one command (repeatable)")
    p.add_argument("--starts", type=int, default=10, help="cold starts and warm starts of each command")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds after which a start counts as hung")
    args = p.parse_args(argv)
    commands = args.command or list(DEFAULT_COMMANDS)
    rows = []
    for text in commands:
        flags = shlex.split(text)
        with tempfile.TemporaryDirectory(prefix="fusedrl-cache-") as cache:
            start(flags, cache, args.timeout)  # primes the warm starts' cache
            runs = {"cold": [], "warm": []}
            for i in range(args.starts):
                for kind in ("cold", "warm"):  # interleaved: load drifts hit both alike
                    r = start(flags, "off" if kind == "cold" else cache, args.timeout)
                    runs[kind].append(r)
                    what = "HANG" if r["hang"] else (f"compile {r['compile_s']:.1f}s, start {r['total_s']:.1f}s, "
                                                     f"cache {r['cache']['hits']}/{r['cache']['requests']} hits, "
                                                     f"eval return {r['eval_return']:.1f}")
                    print(f"{text} [{kind} {i + 1}]: {what} (process {r['wall_s']:.1f}s)", flush=True)
        ok = {k: [r for r in v if not r["hang"]] for k, v in runs.items()}
        cold = [r["compile_s"] for r in ok["cold"]]
        warm = [r["compile_s"] for r in ok["warm"]]
        ratio = statistics.median(warm) / statistics.median(cold) if cold and warm else float("nan")
        rows.append((text, sum(r["hang"] for v in runs.values() for r in v), 2 * args.starts, summary(cold),
                     summary(warm), ratio, summary([r["wall_s"] for r in ok["cold"]]),
                     summary([r["wall_s"] for r in ok["warm"]])))
    print(f"\n| command ({os.cpu_count()}-core CPU) | hangs / starts | compile s cold | compile s warm | warm / cold "
          f"| process s cold | process s warm |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| `{row[0]}` | {row[1]} / {row[2]} | {row[3]} | {row[4]} | {row[5]:.2f} | {row[6]} | {row[7]} |")


if __name__ == "__main__":
    main()
