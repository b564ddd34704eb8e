"""The headline figures, side by side in one run: one JSON file and one markdown table.

    .venv/bin/python benchmarks/suite.py [--quick] [--out benchmarks/results/<machine>.md]
        [--purejaxrl DIR --purejaxrl-python PYTHON] [--only LINE ...]

Lines (each its own process, one after the other, nothing else should run):
- `humanoid` and `ant`: our PPO on MJX physics with the env's own config (Brax's published
  one; `ppo_vs_brax.py --tuned --only ours`): training env steps/s, the physics limit (raw
  `jit(scan(vmap(step)))` steps/s of the same env and env count, random actions, the better
  of a measurement before and after training), their ratio, compile seconds, the eval return
  after the line's fixed budget and the peak memory (the device allocator's on a GPU, the
  process's resident set on a CPU).
- `ppo-vs-brax`, `sac-vs-brax`: our trainer and `brax.training`'s on the same env, backend and
  config (benchmarks/ppo_vs_brax.py, sac_vs_brax.py): both sides' steps/s and their ratio.
- `fasttd3`, `fastsac`: those agents alone with their own configs (`sac_vs_brax.py --agent
  AGENT --only ours`): training env steps/s, gradient steps/s, the physics limit, the return.
- `go1-vs-playground`, `g1-vs-playground` (the `robots` extra): our PPO and Playground's own
  pipeline (its env, its Brax training wrapper and the task's randomiser, Brax's PPO) on
  Go1JoystickFlatTerrain and G1JoystickFlatTerrain with Playground's published config (8,192
  envs; `ppo_vs_brax.py --tuned`).
- `population`: the default cartpole job with 8 seeds as one program (`--num-seeds 8`)
  against 8 processes one after the other (benchmarks/population.py): wall-clock of whole
  processes.
- `purejaxrl` (with --purejaxrl): PureJaxRL's CartPole PPO over 8 seeds against ours with
  its settings (benchmarks/population.py).

`--quick` shrinks every line to finish within about 10 minutes on a 2-core CPU (fewer envs
and smaller batches than the published configs: the table says which); the full size is
meant for one GPU, about 10 minutes. `--lease` keeps the full size's configs (envs, batches,
networks) but runs fewer steps, for a GPU lent by the quarter hour: `ppo-vs-brax` is then
the mission's example, humanoid on MJX at 4,096 envs (`train.py --env humanoid --num-envs
4096`) against Brax's PPO with the same numbers, and the lines are meant to be run a few at a
time with `--only`. The table's header names the machine and the sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
PY = sys.executable


def ppo_line(env: str, quick: bool, lease: bool = False) -> list[str]:
    """Our PPO on `env` (MJX) with its own config; the quick size keeps the unroll length
    and passes per batch but takes 128 envs and 4 minibatches of 128 trajectories."""
    size = (["--num-envs", "128", "--batch-size", "128", "--num-minibatches", "4", "--total-steps", "61440",
             "--epochs", "3"] if quick else
            ["--num-envs", "4096", "--total-steps", "4000000" if lease else "10000000", "--epochs", "5"])
    return ["ppo_vs_brax.py", "--env", env, "--backend", "mjx", "--tuned", "--only", "ours", "--num-eval-envs",
            "16" if quick else "128", "--sim-steps", "20" if quick else "100", *size]


def robot_line(env: str, quick: bool, lease: bool = False) -> list[str]:
    """Our PPO against Playground's own pipeline (its env, Brax training wrapper and randomiser,
    Brax's PPO) on a robot with its published config (8,192 envs, unroll 20); the quick size
    keeps unroll and passes but takes 128 envs, batch x minibatches = envs."""
    size = (["--num-envs", "128", "--batch-size", "16", "--num-minibatches", "8", "--total-steps",
             "40960" if env.startswith("Go1") else "20480", "--epochs", "2", "--num-eval-envs", "16",
             "--sim-steps", "20"] if quick else
            ["--total-steps", "3932160" if lease else "20000000", "--epochs", "4" if lease else "5"])
    return ["ppo_vs_brax.py", "--env", env, "--backend", "mjx", "--tuned", *size]


def lines(quick: bool, lease: bool = False) -> dict[str, list[str]]:
    """Each line's benchmark script and flags."""
    robots = {"go1-vs-playground": robot_line("Go1JoystickFlatTerrain", quick, lease),
              "g1-vs-playground": robot_line("G1JoystickFlatTerrain", quick, lease)}
    if lease:
        return {
            "humanoid": ppo_line("humanoid", False, lease),
            "ant": ppo_line("ant", False, lease),
            # 4 epochs of 3 iterations of 327,680 steps (1,024 x 32 trajectories of 10 steps)
            "ppo-vs-brax": ["ppo_vs_brax.py", "--env", "humanoid", "--backend", "mjx", "--tuned", "--num-envs", "4096",
                            "--total-steps", "3932160", "--epochs", "4"],
            "sac-vs-brax": ["sac_vs_brax.py", "--env", "ant", "--backend", "mjx", "--total-steps", "150000",
                            "--epochs", "5"],
            "fasttd3": fast_line("fasttd3", False, lease),
            "fastsac": fast_line("fastsac", False, lease),
            "population": ["population"],
            **robots,
        }
    return {
        "humanoid": ppo_line("humanoid", quick),
        "ant": ppo_line("ant", quick),
        "ppo-vs-brax": (["ppo_vs_brax.py", "--env", "ant", "--backend", "positional", "--total-steps", "102400",
                         "--epochs", "3", "--num-eval-envs", "16", "--sim-steps", "20"] if quick else
                        ["ppo_vs_brax.py", "--env", "ant", "--backend", "mjx", "--tuned", "--num-envs", "4096",
                         "--total-steps", "5000000", "--epochs", "5"]),
        "sac-vs-brax": (["sac_vs_brax.py", "--env", "inverted_pendulum", "--backend", "positional", "--num-envs",
                         "64", "--grad-updates-per-step", "16", "--batch-size", "256", "--min-replay-size", "2048",
                         "--total-steps", "12288", "--epochs", "3", "--num-eval-envs", "16", "--sim-steps", "20"]
                        if quick else
                        ["sac_vs_brax.py", "--env", "ant", "--backend", "mjx", "--total-steps", "300000", "--epochs",
                         "5"]),
        "fasttd3": fast_line("fasttd3", quick),
        "fastsac": fast_line("fastsac", quick),
        "population": ["population"],
        **robots,
    }


def fast_line(agent: str, quick: bool, lease: bool = False) -> list[str]:
    """FastTD3 or FastSAC alone (no Brax peer): the full size is its own config for Brax's
    humanoid on MJX (1024 envs, batches of 32,768 or 8,192, a 10.5M-row ring); the quick
    one 64 envs of the positional inverted pendulum, batches of 1,024."""
    return (["sac_vs_brax.py", "--agent", agent, "--only", "ours", "--env", "inverted_pendulum", "--backend",
             "positional", "--num-envs", "64", "--batch-size", "1024", "--grad-updates-per-step", "2",
             "--min-replay-size", "2048", "--total-steps", "12288", "--epochs", "3", "--num-eval-envs", "16",
             "--sim-steps", "20"] if quick else
            ["sac_vs_brax.py", "--agent", agent, "--only", "ours", "--env", "humanoid", "--backend", "mjx",
             "--total-steps", "1000000" if lease else "3000000", "--epochs", "5", "--num-eval-envs", "128"])


def run_script(name: str, argv: list[str], work: str, log) -> dict:
    """One line's benchmark in its own process; its JSON figures."""
    out = os.path.join(work, f"{name}.json")
    cmd = [PY, os.path.join(ROOT, "benchmarks", argv[0]), *argv[1:], "--json", out]
    print(f"[{name}] {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    # The child's output goes to the log and this process's output as it comes, so that a
    # line stopped from outside (a lease running out) still leaves what it printed.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    tail = []
    for line in proc.stdout:
        log.write(line)
        log.flush()
        print(f"  {line}", end="", flush=True)
        tail = (tail + [line])[-40:]
    if proc.wait() != 0:
        error = "".join(tail)[-2000:]
        print(f"[{name}] failed ({proc.returncode})", flush=True)
        return {"failed": proc.returncode, "error": error}
    result = json.load(open(out))
    result["wall_s"] = time.perf_counter() - t0
    print(f"[{name}] done in {result['wall_s']:.0f}s", flush=True)
    return result


def run_population(work: str, purejaxrl: str | None, purejaxrl_python: str) -> dict:
    from benchmarks import population

    env = dict(os.environ)
    job = os.path.join(work, "population")
    os.makedirs(job)
    label, flags, seeds = population.JOBS[0]
    print(f"[population] {label}, {seeds} seeds", flush=True)
    out = {"population": population.one_program_vs_processes(flags, seeds, job, env)}
    if purejaxrl:
        print("[purejaxrl] its CartPole PPO, 8 seeds, against ours", flush=True)
        out["purejaxrl"] = population.against_purejaxrl(purejaxrl, purejaxrl_python, 8, work, env)
    return out


def machine() -> str:
    """What the lines run on, asked of a child process: this one never starts a JAX backend
    (on a GPU it would hold memory the lines need)."""
    code = ("import jax, os, platform; d = jax.devices()[0]; print(f'{jax.device_count()} x '"
            "f'{getattr(d, \"device_kind\", d.platform)} ({d.platform}), {os.cpu_count()} CPU cores, '"
            "f'{platform.machine()}, JAX {jax.__version__}')")
    return subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def table(results: dict, quick: bool, lease: bool = False) -> str:
    rows = ["| line | env, backend, envs | train steps/s | physics limit | of limit | compile s | eval return "
            "(env steps) | peak memory | vs Brax |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in results.items():
        if name in ("population", "purejaxrl") or "failed" in r:
            continue
        c, sim = r["config"], r["raw_sim_sps"]
        brax = r["sides"].get("brax")
        for side, s in r["sides"].items():
            ratio = f"{s['sps'] / brax['sps']:.2f}x" if brax and side != "brax" else ""
            memory = f"{s['peak_memory_gib']:.2f} GiB ({s['peak_memory_of']})" if "peak_memory_gib" in s else ""
            rows.append(f"| {name}: {side} | {c['env']}, {c['backend']}, {c['num_envs']} | {s['sps']:,.0f} | "
                        f"{sim:,.0f} | {s['sps'] / sim:.2f} | {s['compile_s']:.1f} | {s['return']:.1f} "
                        f"({s['env_steps']:,}) | {memory} | {ratio} |")
    failed = [f"- {name} failed: {r['error'].strip().splitlines()[-1] if r['error'].strip() else r['failed']}"
              for name, r in results.items() if "failed" in r]
    text = "\n".join(rows) + "\n"
    if "population" in results and "failed" not in results["population"]:
        p = results["population"]["population"]
        text += (f"\nPopulation, the default cartpole job: {p['seeds']} seeds as one program {p['population_s']:.1f} s "
                 f"(compile {p['population_compile_s']:.1f}, train {p['population_train_s']:.1f}) against "
                 f"{p['seeds']} processes {p['separate_s']:.1f} s: {p['speedup']:.2f}x; final eval "
                 f"{p['population_final']:.1f} / {p['separate_final']:.1f}.\n")
        if "purejaxrl" in results["population"]:
            theirs, ours = results["population"]["purejaxrl"]["purejaxrl"], results["population"]["purejaxrl"]["ours"]
            text += (f"\nPureJaxRL CartPole PPO, 8 seeds, its settings: {theirs['wall_s']:.1f} s (compile "
                     f"{theirs['compile_s']:.1f}, train {theirs['train_s']:.1f}), ours {ours['wall_s']:.1f} s (compile "
                     f"{ours['compile_s']:.1f}, train {ours['train_s']:.1f}): "
                     f"{theirs['wall_s'] / ours['wall_s']:.2f}x.\n")
    if failed:
        text += "\n" + "\n".join(failed) + "\n"
    size = ("quick: 128 envs for humanoid and ant (4 minibatches of 128 trajectories, the published unroll "
            "length and passes), small ppo/sac-vs-brax runs on positional physics" if quick else
            "lease: the published configs (4096 envs for PPO), fewer steps (see the lines)" if lease else
            "full: 4096 envs, the published configs")
    return f"Size {size}. Columns: see benchmarks/suite.py.\n\n" + text


def summary_record(name: str, argv: list[str], result: dict) -> dict | None:
    """One line's record: our training env steps/s against the peer's (Brax's, where the line
    has one), their ratio, ours of the physics limit, both compile seconds; None if it failed."""
    if "failed" in result:
        return None
    sides, raw = result["sides"], result["raw_sim_sps"]
    ours = next(s for side, s in sides.items() if side != "brax")
    peer = sides.get("brax")
    return {"case": name, "ours": ours["sps"], "peer": peer["sps"] if peer else None, "unit": "training env steps/s",
            "ratio": ours["sps"] / peer["sps"] if peer else None, "of_raw_physics": ours["sps"] / raw,
            "raw_physics": raw, "peer_raw_physics": peer.get("raw_sim_xla_sps", raw) if peer else None,
            "compile_s": ours["compile_s"], "peer_compile_s": peer["compile_s"] if peer else None,
            "return": ours["return"], "peer_return": peer["return"] if peer else None,
            "date": time.strftime("%Y-%m-%d"), "command": " ".join(["python", "benchmarks/" + argv[0], *argv[1:]])}


def append_summary(path: str, name: str, argv: list[str], result: dict) -> None:
    record = summary_record(name, argv, result)
    if record is not None:
        with open(path, "a") as f:
            f.write(json.dumps(record, default=float) + "\n")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="about 10 minutes on a 2-core CPU")
    size.add_argument("--lease", action="store_true", help="the full configs with fewer steps, for a lent GPU")
    p.add_argument("--out", default=None, help="markdown table (default: benchmarks/results/<machine>.md); the "
                                               "JSON file goes beside it")
    p.add_argument("--only", nargs="+", default=None, help="run these lines only")
    p.add_argument("--summary", default=None, help="also append one JSON record per line run to this file (case, "
                                                   "ours, peer, unit, ratio, of_raw_physics, compile_s, date, command)")
    p.add_argument("--purejaxrl", help="a checkout of PureJaxRL's repository (adds its line)")
    p.add_argument("--purejaxrl-python", default=PY, help="a Python with PureJaxRL's dependencies")
    args = p.parse_args(argv)
    todo = lines(args.quick, args.lease)
    unknown = set(args.only or ()) - set(todo)
    if unknown:
        raise SystemExit(f"--only: unknown line(s) {sorted(unknown)}; choose from {sorted(todo)}")
    about = machine()
    tag = ("cpu_quick" if args.quick else "cpu") if "(cpu)" in about else about.split(" x ")[1].split(" (")[0]
    out = args.out or os.path.join(ROOT, "benchmarks", "results", f"suite_{tag.lower().replace(' ', '_')}.md")
    start = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory(prefix="suite_") as work, open(os.path.splitext(out)[0] + ".log", "w") as log:
        for name, argv_ in todo.items():
            if args.only and name not in args.only:
                continue
            if name == "population":
                results[name] = run_population(work, args.purejaxrl, args.purejaxrl_python)
            else:
                results[name] = run_script(name, argv_, work, log)
                if args.summary:
                    append_summary(args.summary, name, argv_, results[name])
    text = (f"<!-- {' '.join(['benchmarks/suite.py', *(argv if argv is not None else sys.argv[1:])])}; "
            f"{time.strftime('%Y-%m-%d')}; {time.perf_counter() - start:.0f} s -->\n"
            f"# Benchmark suite on {about}\n\n" + table(results, args.quick, args.lease))
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    with open(os.path.splitext(out)[0] + ".json", "w") as f:
        json.dump({"machine": about, "quick": args.quick, "lease": args.lease, "lines": {k: v for k, v in todo.items()},
                   "results": results}, f, indent=1, default=float)


if __name__ == "__main__":
    main()
