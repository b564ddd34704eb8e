"""What a run's compile is made of: each program traced and compiled alone, one after the
other, against the physics alone.

    python benchmarks/compile_profile.py [--env humanoid] [--num-envs 4096] [--set NAME=VALUE ...]
        [--programs starts,init,renew,epoch,evaluate,physics] [--precision highest] [--json PATH]

Builds train.py's run for `--env` (its defaults, with `--num-envs` and any `--set`), the
compile cache off, and for each program prints the seconds its tracing (Python, JAX) and its
compile (XLA) took, and the size of its StableHLO text. `physics` is the raw physics of
`benchmarks/common.py` (`jit(scan(vmap(step)))`, random actions, no auto-reset), the least a
program holding the env's step compiles. train.py compiles its programs side by side in threads;
here they go one at a time, so each figure is that program's alone. `--precision` is the run's
`--matmul-precision` (the physics traced under it too), to see what it costs the compile.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

import jax  # noqa: E402

import envs  # noqa: E402
from benchmarks import common  # noqa: E402
from sim.run.config import defaults_for  # noqa: E402


def timed_compile(lower) -> dict:
    """{trace_s, compile_s, hlo_lines} of one program: `lower()` gives its jax Lowered."""
    t0 = time.perf_counter()
    lowered = lower()
    t1 = time.perf_counter()
    lowered.compile()
    t2 = time.perf_counter()
    return {"trace_s": t1 - t0, "compile_s": t2 - t1, "hlo_lines": lowered.as_text().count("\n")}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="humanoid")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="other config fields")
    p.add_argument("--programs", default="starts,init,renew,epoch,evaluate,physics")
    p.add_argument("--precision", default="highest", choices=("default", "high", "highest"))
    p.add_argument("--json", default=None, help="append one JSON line per program")
    a = p.parse_args(argv)
    from sim.run.build import build_engine

    jax.config.update("jax_enable_compilation_cache", False)
    cfg = defaults_for(a.env).replace(num_envs=a.num_envs, progress=False, compile_cache="off",
                                      matmul_precision=a.precision, **dict(common.parse_set(a.set))).validate()
    t0 = time.perf_counter()
    engine = build_engine(cfg)
    print(f"built the envs and the agent in {time.perf_counter() - t0:.1f}s", flush=True)
    key = jax.random.PRNGKey(0)
    template = jax.eval_shape(engine.init, key)
    starts = jax.eval_shape(engine.starts, key)
    programs = {
        "starts": lambda: engine.starts.lower(key),
        "init": lambda: engine.init_from.lower(key, starts),
        "renew": lambda: engine.renew.lower(template, starts),
        "epoch": lambda: engine.epoch.lower(template),
        "evaluate": lambda: engine.evaluate.lower(template, key),
    }
    for name in a.programs.split(","):
        if name == "physics":
            env = envs.make(cfg.env, cfg.backend, episode_length=cfg.episode_length)
            t = time.perf_counter()
            rate = common.physics_limit(env, cfg.num_envs, 10, 1, key, precision=a.precision)
            figures = {"compile_s": rate.compile_s, "wall_s": time.perf_counter() - t}
        else:
            figures = timed_compile(programs[name])
        record = {"env": cfg.env, "num_envs": cfg.num_envs, "program": name, "platform": jax.devices()[0].platform,
                  "set": a.set, "precision": a.precision, **figures}
        common.emit(record, a.json)


if __name__ == "__main__":
    main()
