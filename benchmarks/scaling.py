"""Data-parallel scaling: training steps/s on 1, 2, 4 devices, weak and strong.

    .venv/bin/python benchmarks/scaling.py [--env cartpole] [--agent ppo] [--envs-per-device 256]
        [--devices 1 2 4] [--epochs 3] [--cpu] [--as-configured] [--set NAME=VALUE ...]

Weak scaling keeps `--envs-per-device` on every device (total envs grow with n); strong
scaling keeps the total at `envs-per-device * max(devices)` envs split over n devices.
`--as-configured` instead runs the env's own config (train.py's defaults, `--set` applied)
on each device count: what the default device count of a CPU host is chosen from.
Every device count runs in its own subprocess (the device count is fixed when JAX starts);
with `--cpu`, N host devices are forced with XLA_FLAGS: one per core splits the CPU as
train.py's `--devices N` does. Each line: compile seconds and the best training steps/s over
the timed epochs (compile excluded); efficiency is relative to 1 device.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import common  # noqa: E402


def worker(args) -> None:
    import jax

    from sim.run.config import defaults_for
    from sim.run.build import build_engine

    cfg = defaults_for(args.env, args.agent).replace(**dict(common.parse_set(args.set)))
    if args.as_configured:
        cfg = cfg.replace(devices=args.n, progress=False, total_steps=10**12, epochs=10**6)
    else:
        per_iter = cfg.agent_config.batch_size * cfg.agent_config.num_minibatches
        cfg = cfg.replace(num_envs=args.total_envs, devices=args.n, progress=False,
                          batch_size=max(args.total_envs, per_iter) // cfg.agent_config.num_minibatches if args.agent == "ppo"
                          else cfg.agent_config.batch_size,
                          total_steps=10**12, epochs=10**6)
    cfg = cfg.replace(total_steps=cfg.steps_per_iteration * args.iterations * args.epochs,
                              epochs=args.epochs).validate()
    engine = build_engine(cfg)
    state = engine.init(jax.random.PRNGKey(0))
    if cfg.loop.droppable is not None:
        state = engine.prefill(state)
    epoch, compile_s = common.timed(lambda: engine.epoch.lower(state).compile())
    best, _ = common.best_epoch(epoch, state, cfg.num_epochs)
    common.print_result({"devices": args.n, "total_envs": cfg.num_envs, "compile_s": compile_s,
                         "sps": cfg.steps_per_epoch / best, "platform": jax.devices()[0].platform})


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="cartpole")
    p.add_argument("--agent", default="ppo")
    p.add_argument("--envs-per-device", type=int, default=256)
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--epochs", type=int, default=3, help="timed epochs (the best one counts)")
    p.add_argument("--iterations", type=int, default=4, help="training iterations per epoch")
    p.add_argument("--cpu", action="store_true", help="force N CPU host devices for each run")
    p.add_argument("--as-configured", action="store_true",
                   help="strong scaling of the env's own config (train.py's defaults with --set applied) over "
                        "--devices, instead of the weak/strong runs of --envs-per-device")
    p.add_argument("--set", nargs="+", default=None, metavar="NAME=VALUE",
                   help="config fields to change, e.g. num_envs=256 batch_size=256 backend=positional")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--total-envs", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)

    rows = []
    modes = ("configured",) if args.as_configured else ("weak", "strong")
    for mode in modes:
        for n in args.devices:
            total = args.envs_per_device * (n if mode == "weak" else max(args.devices))
            env = dict(os.environ)
            if args.cpu:
                env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={n}")
            cmd = [sys.executable, __file__, "--worker", "--n", str(n), "--total-envs", str(total), "--env", args.env,
                   "--agent", args.agent, "--epochs", str(args.epochs), "--iterations", str(args.iterations)]
            cmd += (["--as-configured"] if args.as_configured else []) + (["--set", *args.set] if args.set else [])
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
            result = common.read_result(proc.stdout)
            if proc.returncode or result is None:
                print(f"{mode} n={n}: failed\n{proc.stderr[-2000:]}")
                continue
            rows.append(dict(result, mode=mode))
    print(f"{'mode':<7}{'devices':>8}{'envs':>8}{'compile_s':>11}{'steps/s':>12}{'efficiency':>12}  platform")
    for mode in modes:
        base = next((r["sps"] for r in rows if r["mode"] == mode and r["devices"] == 1), None)
        for r in (r for r in rows if r["mode"] == mode):
            # weak: per-device throughput vs one device; strong and configured: speed-up / n
            eff = r["sps"] / (base * r["devices"]) if base else float("nan")
            print(f"{mode:<7}{r['devices']:>8}{r['total_envs']:>8}{r['compile_s']:>11.1f}{r['sps']:>12,.0f}"
                  f"{eff:>12.2f}  {r['platform']}")


if __name__ == "__main__":
    main()
