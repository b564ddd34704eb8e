"""What each program of a training run holds, read from its lowered StableHLO (nothing is
compiled or run): its size, its loops, its gathers, and its copies of the physics, counted as
the call sites of the Cholesky factorization of MJX's constraint solver (a copy of an MJX
env's step or reset holds two or three) with the leading dimension of the batch each
factorizes. Beside them, the raw physics
step and reset of the same envs. On a TPU a program's compile grows with the physics it holds
(a raw step took 35-49 s there), so this is where a run's compile seconds come from.

    .venv/bin/python benchmarks/program_census.py --env humanoid --backend mjx --num-envs 64 \
        [train.py flags ...] [--out benchmarks/results/NAME]   (writes NAME.md)
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

import jax  # noqa: E402

from benchmarks import common  # noqa: E402

CHOLESKY = re.compile(r"call @_?cholesky\w*\(%\w+\) : \(tensor<(\d+)x")


def census(text: str) -> dict:
    """Size, loops, gathers and Cholesky sites {batch: count} of one program's StableHLO."""
    sites = collections.Counter(int(b) for b in CHOLESKY.findall(text))
    return {"lines": text.count("\n"), "while": text.count("stablehlo.while"), "gather": text.count("stablehlo.gather"),
            "cholesky": dict(sorted(sites.items()))}


def lowerings(flags: list[str]) -> dict:
    """{name: () -> lowered StableHLO text} of the run's init, epoch and evaluate programs and
    of the raw physics (a 10-step scan of the step, and the reset) of the same env and envs."""
    import envs
    from sim.run.build import build_engine
    from train import parse_config

    cfg = parse_config(flags)
    engine = build_engine(cfg)
    init_key, eval_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    template = engine.template(init_key)
    env = envs.make(cfg.env, backend=envs.check(cfg.env, cfg.backend))
    n = cfg.num_envs

    def reset(key):
        return jax.vmap(env.reset)(jax.random.split(key, n))

    def raw(state, key):
        def body(s, k):
            return jax.vmap(env.step)(s, common.random_actions(env.spec, k, n)), None
        return jax.lax.scan(body, state, jax.random.split(key, 10))[0]

    states = jax.eval_shape(reset, init_key)
    starts = jax.eval_shape(engine.starts, init_key)
    return {"starts": lambda: engine.starts.lower(init_key).as_text(),
            "init": lambda: engine.init_from.lower(init_key, starts).as_text(),
            "epoch": lambda: engine.epoch.lower(template).as_text(),
            "evaluate": lambda: engine.evaluate.lower(template, eval_key).as_text(),
            "raw step (scan of 10)": lambda: jax.jit(raw).lower(states, init_key).as_text(),
            "raw reset": lambda: jax.jit(reset).lower(init_key).as_text()}


def table(flags: list[str]) -> str:
    rows = ["| program | StableHLO lines | while loops | gathers | Cholesky sites (batch: count) |",
            "| --- | ---: | ---: | ---: | --- |"]
    for name, lower in lowerings(flags).items():
        c = census(lower())
        sites = ", ".join(f"{b}: {k}" for b, k in c["cholesky"].items()) or "none"
        rows.append(f"| {name} | {c['lines']:,} | {c['while']} | {c['gather']} | {sites} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="also write the table to OUT.md")
    args, flags = p.parse_known_args(argv)
    text = table(flags)
    print(text)
    if args.out:
        command = " ".join(["benchmarks/program_census.py", *(argv if argv is not None else sys.argv[1:])])
        common.write_table(args.out, command, text)


if __name__ == "__main__":
    main()
