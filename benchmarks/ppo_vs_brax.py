"""Our PPO against Brax's PPO trainer, same env, backend, num_envs and hyper-parameters.

    .venv/bin/python benchmarks/ppo_vs_brax.py [--env ant] [--backend positional] [--tuned]
        [--num-envs 256] [--total-steps 400000] [--epochs 6] [--unroll-length 5]
        [--batch-size 256] [--num-minibatches 8] [--num-updates-per-batch 4]
        [--devices 1] [--order ours,brax] [--only ours|brax] [--matmul-dtype float32 [bfloat16]]
        [--json PATH]

`--tuned` takes the sizes not given from the env's own config (train.py's defaults) instead
of the small ones shown; `--json` also writes the figures to a file (benchmarks/suite.py).

One process runs, one after the other: (1) the raw simulation limit, i.e. the jitted
`scan(vmap(step))` of random actions of benchmarks/env_throughput.py on the same env, backend
and num_envs (one device); (2) our trainer, `sim.core.engine.Engine` on `defaults_for(env)` with
the flags applied, driven as `train.train` drives it; (3) `brax.training.agents.ppo.train.
train` with the same numbers (networks, sizes and activation are taken from our config, so
both sides build the same MLPs); then the raw simulation again. It prints one row per side:
setup+compile seconds, training env steps/s (wall clock), training env steps per CPU-second
of this process, final eval return, and the ratio ours/brax; ours as a fraction of the raw
simulation limit (the better of its two measurements).

How training steps/s is measured, the same way on both sides:
- Both runs are split into the same `--epochs` programs of the same number of iterations
  (total steps are rounded up to whole epochs of whole iterations). Training steps/s is the
  env steps of epochs 2..E over their wall time, so neither side's first-call cost counts.
  Env steps are those each trainer itself counts (our state's `env_steps`, Brax's step
  counter), so a trainer that runs more or fewer steps than configured is still timed
  right; ours warns when an epoch's steps differ from the config's `steps_per_epoch`.
  The per-epoch rates are printed too: on a shared machine they show how steady it was.
- CPU-seconds (`time.process_time`, all threads of this process) are counted over the same
  epochs. Other processes on the machine stretch wall time much more than this process's
  CPU time, so the CPU-time ratio is the steadier comparison when the load moves; on an idle
  machine the two agree up to how many cores each side keeps busy.
- Ours: compiled ahead of time (env/agent init, lower and compile of the epoch and eval
  programs: the setup+compile column), then each epoch call is timed until its metrics are
  on the host; one evaluation after the last epoch, not timed as training.
- Brax: its trainer compiles its epoch program on its first call and evaluates after every
  epoch (`num_evals = epochs + 1`, the first evaluation before any training). The benchmark
  timestamps each `progress_fn` call (wall and CPU); the time between two calls is one
  training epoch plus one evaluation, and each evaluation's own wall and CPU time is
  measured by wrapping `Evaluator.run_evaluation` for the run (Brax's `eval/epoch_eval_time`
  agrees) and subtracted. What remains also holds Brax's small host-side work between
  epochs (reading the step counter, un-replicating the params), part of its training loop.
  Brax's own `training/sps` of its last epoch is printed beside it.
- Brax's setup+compile: the wall time from calling its trainer to the end of its first epoch
  and the evaluation after it, less the run time of that epoch (the mean steady epoch) and of
  two evaluations (each taken equal to the last one), so every compilation stays counted,
  the evaluation program's included (Brax compiles it twice: the state it donates changes
  weak types after the first call).

Brax 0.14.2 calls `jax.device_put_replicated`, which JAX 0.10 removed; `brax_compat()`
supplies a drop-in for the Brax runs only (removed again afterwards).

`--devices N` (CPU) splits the host into N XLA devices (`--xla_force_host_platform_device_
count`) before JAX starts; ours then shards its envs over them and Brax's pmap uses all of
them. XLA runs the physics of one device on one thread, so on a multi-core CPU this is how
either trainer gets more than one core into the simulation.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import re
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root


def set_host_devices(argv=None) -> None:
    """Applies `--devices N` as N host XLA devices; must run before JAX is imported."""
    argv = sys.argv[1:] if argv is None else argv
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--devices", type=int, default=1)
    n = pre.parse_known_args(argv)[0].devices
    if n > 1 and "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()


if __name__ == "__main__":
    set_host_devices()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import env_throughput  # noqa: E402
from sim.run.config import defaults_for  # noqa: E402

# ---------------------------------------------------------------------------------------
# Shared with benchmarks/sac_vs_brax.py


@contextlib.contextmanager
def brax_compat(axis_name: str = "i"):
    """Supplies `jax.device_put_replicated` (removed in JAX 0.10) while Brax's trainer runs.

    Drop-in: each leaf is stacked once per device and put on a NamedSharding whose leading
    axis is split over the devices. The mesh axis is named like the trainer's pmap axis
    (Brax's `_PMAP_AXIS_NAME`, "i"): JAX 0.10's pmap returns NamedSharding(Mesh(devices,
    (axis_name,)), P(axis_name)), so the replicated state then has exactly the sharding of
    the epoch program's own outputs. Any other axis name is a different sharding, and Brax's
    epoch program would compile a second time on its second call (measured: +30 s on ant).
    Removed again on exit; our code never sees it.
    """
    if hasattr(jax, "device_put_replicated"):
        yield
        return
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    def device_put_replicated(x, devices):
        devices = list(devices)
        sharding = NamedSharding(Mesh(np.array(devices), (axis_name,)), PartitionSpec(axis_name))
        return jax.tree.map(lambda v: jax.device_put(jnp.stack([jnp.asarray(v)] * len(devices)), sharding), x)

    jax.device_put_replicated = device_put_replicated
    try:
        yield
    finally:
        del jax.device_put_replicated


def brax_env(name: str, backend: str):
    """Brax's raw env (its trainer adds its own episode and auto-reset wrappers)."""
    from brax import envs as brax_envs

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning)
        return brax_envs.get_environment(name, backend=backend)


def brax_activation(name: str):
    import flax.linen as nn

    return {"swish": nn.swish, "tanh": nn.tanh, "relu": nn.relu, "elu": nn.elu}[name]


def raw_sim_sps(env: str, backend: str, num_envs: int, steps: int = 100, repeats: int = 3) -> float:
    """Env steps/s of benchmarks/env_throughput.py (jit(scan(vmap(step))), random actions)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        env_throughput.main(["--env", env, "--backend", backend, "--num-envs", str(num_envs),
                             "--steps", str(steps), "--repeats", str(repeats)])
    line = out.getvalue().strip().splitlines()[-1]
    print(f"  raw simulation: {line} (load {load():.2f})", flush=True)
    return float(re.search(r"steps_per_s=([\d,]+)", line).group(1).replace(",", ""))


def load() -> float:
    return os.getloadavg()[0]


def clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def summarize(walls: list[float], cpus: list[float], steps: list[int]) -> dict:
    """Steady rates over epochs 2..E (all epochs when there is only one); `steps` are the env
    steps each epoch really took, as the trainer itself counts them."""
    steady = slice(1, None) if len(walls) > 1 else slice(None)
    wall, cpu, done = sum(walls[steady]), sum(cpus[steady]), sum(steps[steady])
    n = len(walls[steady])
    return {"sps": done / wall, "cpu_sps": done / cpu, "epoch_s": wall / n, "epochs_timed": n,
            "per_epoch_sps": [k / w for k, w in zip(steps, walls)], "env_steps": sum(steps)}


class BraxClock:
    """Brax `progress_fn` recording (wall, cpu, step, metrics) of every call, plus the wall and
    CPU time of every evaluation (see `timed_evaluations`)."""

    def __init__(self):
        self.start = clocks()
        self.calls: list[tuple[float, float, int, dict]] = []
        self.evals: list[tuple[float, float]] = []

    def __call__(self, step, metrics):
        wall, cpu = clocks()
        self.calls.append((wall, cpu, int(step), {k: float(np.asarray(v)) for k, v in metrics.items()
                                                  if np.size(v) == 1}))

    @contextlib.contextmanager
    def timed_evaluations(self):
        """Wraps Brax's `Evaluator.run_evaluation` for this run to time each evaluation."""
        from brax.training import acting

        original = acting.Evaluator.run_evaluation

        @functools.wraps(original)
        def timed(evaluator, *args, **kwargs):
            w0, c0 = clocks()
            out = original(evaluator, *args, **kwargs)
            w1, c1 = clocks()
            self.evals.append((w1 - w0, c1 - c0))
            return out

        acting.Evaluator.run_evaluation = timed
        try:
            yield
        finally:
            acting.Evaluator.run_evaluation = original

    def timing(self) -> dict:
        """calls[0] follows the evaluation before any training (Brax runs one when
        num_evals > 1); each later call follows one training epoch and one evaluation."""
        assert len(self.evals) == len(self.calls), (len(self.evals), len(self.calls))
        walls = [self.calls[i][0] - self.calls[i - 1][0] - self.evals[i][0] for i in range(1, len(self.calls))]
        cpus = [self.calls[i][1] - self.calls[i - 1][1] - self.evals[i][1] for i in range(1, len(self.calls))]
        steps = [self.calls[i][2] - self.calls[i - 1][2] for i in range(1, len(self.calls))]
        result = summarize(walls, cpus, steps)
        eval_s = self.evals[-1][0]
        result["compile_s"] = (self.calls[1][0] - self.start[0]) - result["epoch_s"] - 2 * eval_s
        result["eval_s"] = eval_s
        final = self.calls[-1][3]
        result["brax_last_sps"] = final.get("training/sps", float("nan"))
        result["return"] = final.get("eval/episode_reward", float("nan"))
        return result


def run_ours(cfg) -> dict:
    """Our engine, driven as train.train drives it (AOT compile, epoch calls, final eval)."""
    from sim.core.engine import Engine
    from sim.core.state import read_steps

    start = clocks()
    engine = Engine(cfg)
    init_key, eval_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    state = engine.init(init_key)
    if cfg.loop.keeps_buffer and cfg.prefill_iterations:
        state = engine.prefill(state)
    epoch = engine.epoch.lower(state).compile()
    evaluate = engine.evaluate.lower(state, eval_key).compile()
    jax.block_until_ready(state)
    compile_s = clocks()[0] - start[0]
    print(f"  ours: setup+compile {compile_s:.1f}s on {engine.num_devices} device(s) (load {load():.2f})", flush=True)
    walls, cpus, steps = [], [], []
    for _ in range(cfg.num_epochs):
        before = read_steps(state.env_steps)
        w0, c0 = clocks()
        state, metrics = epoch(state)
        jax.device_get(metrics)
        w1, c1 = clocks()
        walls.append(w1 - w0)
        cpus.append(c1 - c0)
        steps.append(read_steps(metrics["env_steps"]) - before)  # what the engine did, not what cfg promised
    if steps[0] != cfg.steps_per_epoch:
        print(f"  ours: WARNING an epoch ran {steps[0]:,} env steps, the config promises {cfg.steps_per_epoch:,} "
              f"(rates below use the steps really run)", flush=True)
    w0 = clocks()[0]
    evaluation = jax.device_get(evaluate(state, jax.random.fold_in(eval_key, cfg.num_epochs)))
    result = summarize(walls, cpus, steps)
    result["env_steps"] += cfg.prefill_steps  # counted like Brax counts them
    result.update(compile_s=compile_s, eval_s=clocks()[0] - w0,
                  **{"return": float(np.asarray(evaluation["eval/episode_return"]))}, **peak_memory())
    return result


def peak_memory() -> dict:
    """The peak memory so far: the device allocator's where it reports one (GPUs), else this
    process's peak resident set (CPU: programs, buffers and everything else)."""
    import resource

    stats = jax.local_devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        return {"peak_memory_gib": stats["peak_bytes_in_use"] / 2**30, "peak_memory_of": "device"}
    return {"peak_memory_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "peak_memory_of": "process"}


def report(rows: list[tuple[str, dict]], sim: float, extra_cols=()) -> None:
    """Prints the table: rows of (name, result dict)."""
    for _, r in rows:
        r["of_sim"] = r["sps"] / sim
    cols = [("setup+compile s", "compile_s", "{:.1f}"), ("train steps/s", "sps", "{:,.0f}"),
            ("steps/CPU-s", "cpu_sps", "{:,.0f}"), *extra_cols, ("of raw sim", "of_sim", "{:.2f}"),
            ("epoch s", "epoch_s", "{:.2f}"), ("eval return", "return", "{:.2f}")]
    width = max(6, *(len(name) + 1 for name, _ in rows))
    print(f"{'':<{width}}" + "".join(f"{name:>17}" for name, _, _ in cols))
    for name, r in rows:
        print(f"{name:<{width}}" + "".join(f"{fmt.format(r[key]):>17}" for _, key, fmt in cols))
    for name, r in rows:
        rates = ", ".join(f"{x:,.0f}" for x in r["per_epoch_sps"])
        print(f"{name} steps/s per epoch (first not counted): {rates}; load {r['load'][0]:.2f} -> {r['load'][1]:.2f}")
    b = dict(rows).get("brax")
    for name, a in rows:
        if b is not None and name != "brax":
            print(f"ratio {name}/brax: {a['sps'] / b['sps']:.2f}x training steps/s (wall), "
                  f"{a['cpu_sps'] / b['cpu_sps']:.2f}x steps per CPU-second")


def run_sides(cfg, order: list[str], runners: dict, sim_args: tuple, sim_steps: int) -> tuple[list, float]:
    """Raw sim, the trainers in `order`, raw sim again; returns (rows, best raw sim)."""
    sims = [raw_sim_sps(*sim_args, steps=sim_steps)]
    rows = []
    for name in order:
        before = load()
        result = runners[name](cfg)
        result["load"] = (before, load())
        rows.append((name, result))
        extra = f"; Brax's own training/sps of its last epoch: {result['brax_last_sps']:,.0f}" if name == "brax" else ""
        print(f"  {name}: {result['sps']:,.0f} steps/s, eval return {result['return']:.2f} after "
              f"{result['env_steps']:,} training env steps{extra} "
              f"(load {load():.2f})", flush=True)
    sims.append(raw_sim_sps(*sim_args, steps=sim_steps))
    print()
    print(f"raw simulation limit: {max(sims):,.0f} env steps/s (best of {', '.join(f'{s:,.0f}' for s in sims)}; "
          f"{sim_args[0]}, {sim_args[1]}, {sim_args[2]} envs, one device)")
    return rows, max(sims)


def round_total(cfg, total_steps: int) -> int:
    """Total steps rounded up to whole epochs of whole iterations (both trainers then agree)."""
    spi = cfg.steps_per_iteration
    iters = -(-(total_steps - cfg.prefill_steps) // spi)
    per_epoch = -(-max(iters, 1) // cfg.epochs)
    return cfg.prefill_steps + cfg.epochs * per_epoch * spi


def header(cfg) -> str:
    return (f"device={jax.devices()[0].platform} x{jax.device_count()} (trainers use {cfg.devices or 1}); "
            f"load {load():.2f}")


def parse_order(text: str, matmul_dtypes=("float32",)) -> list[str]:
    """The sides in run order; "ours" stands for one run of our trainer per matmul dtype."""
    order = [x.strip() for x in text.split(",") if x.strip()]
    if sorted(order) != ["brax", "ours"] and order not in (["ours"], ["brax"]):
        raise SystemExit(f"--order: expected 'ours,brax', 'brax,ours', 'ours' or 'brax', got {text!r}")
    return [n for side in order for n in ([OURS_NAMES[d] for d in matmul_dtypes] if side == "ours" else [side])]


OURS_NAMES = {"float32": "ours", "bfloat16": "ours-bf16"}


def write_json(path: str | None, cfg, rows: list, sim: float) -> None:
    """The run's settings, each side's figures and the raw simulation limit, as JSON."""
    if path:
        settings = {k: v for k, v in cfg.flat().items() if isinstance(v, (int, float, str, bool, type(None)))}
        with open(path, "w") as f:
            json.dump({"config": settings, "sides": dict(rows), "raw_sim_sps": sim}, f, indent=1, default=float)


def add_shared_args(p: argparse.ArgumentParser) -> None:
    """--json and --matmul-dtype, the flags both trainer comparisons take."""
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    p.add_argument("--matmul-dtype", nargs="+", choices=tuple(OURS_NAMES), default=["float32"],
                   help="our networks' hidden-layer matmul dtype (train.py --matmul-dtype); several values run our "
                        "trainer once each, as 'ours' (float32) and 'ours-bf16'. Brax's networks multiply in float32.")


def ours_runners(matmul_dtypes) -> dict:
    """{side name: runner}: our trainer once per matmul dtype."""
    def runner(dtype):
        return lambda cfg: run_ours(cfg.replace(matmul_dtype=dtype))

    return {OURS_NAMES[d]: runner(d) for d in matmul_dtypes}


# ---------------------------------------------------------------------------------------


def run_brax_ppo(cfg) -> dict:
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as brax_ppo

    env = brax_env(cfg.env, cfg.backend)
    network_factory = functools.partial(ppo_networks.make_ppo_networks,
                                        policy_hidden_layer_sizes=tuple(cfg.hp.policy_hidden_sizes),
                                        value_hidden_layer_sizes=tuple(cfg.hp.value_hidden_sizes),
                                        activation=brax_activation(cfg.hp.activation))
    clock = BraxClock()
    with brax_compat(brax_ppo._PMAP_AXIS_NAME), clock.timed_evaluations():
        clock.start = clocks()
        brax_ppo.train(
            environment=env, num_timesteps=cfg.total_steps, max_devices_per_host=cfg.devices,
            num_envs=cfg.num_envs, episode_length=cfg.episode_length, action_repeat=cfg.action_repeat,
            learning_rate=cfg.hp.learning_rate, entropy_cost=cfg.hp.entropy_cost, discounting=cfg.hp.discounting,
            unroll_length=cfg.hp.unroll_length, batch_size=cfg.hp.batch_size, num_minibatches=cfg.hp.num_minibatches,
            num_updates_per_batch=cfg.hp.num_updates_per_batch, normalize_observations=cfg.hp.normalize_observations,
            reward_scaling=cfg.hp.reward_scaling, clipping_epsilon=cfg.hp.clipping_epsilon, gae_lambda=cfg.hp.gae_lambda,
            max_grad_norm=cfg.hp.max_grad_norm, normalize_advantage=cfg.hp.normalize_advantage,
            vf_loss_coefficient=cfg.hp.value_loss_coef, network_factory=network_factory, seed=cfg.seed,
            num_evals=cfg.epochs + 1, num_eval_envs=cfg.num_eval_envs, deterministic_eval=True,
            progress_fn=clock)
    return clock.timing()


SMALL = dict(num_envs=256, unroll_length=5, batch_size=256, num_minibatches=8, num_updates_per_batch=4)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="ant")
    p.add_argument("--backend", default="positional")
    p.add_argument("--tuned", action="store_true",
                   help="the env's own tuned sizes (train.py's defaults: Brax's published config) for every size "
                        "flag not given, instead of the small defaults below")
    p.add_argument("--num-envs", type=int, default=None, help=f"default: {SMALL['num_envs']}")
    p.add_argument("--total-steps", type=int, default=400_000,
                   help="rounded up to whole epochs of whole iterations")
    p.add_argument("--epochs", type=int, default=6, help="epoch programs per run (the first is not timed)")
    for name in ("unroll_length", "batch_size", "num_minibatches", "num_updates_per_batch"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None, help=f"default: {SMALL[name]}")
    p.add_argument("--discounting", type=float, default=None, help="default: the env's tuned value")
    p.add_argument("--learning-rate", type=float, default=None, help="default: the env's tuned value")
    p.add_argument("--entropy-cost", type=float, default=None, help="default: the env's tuned value")
    p.add_argument("--reward-scaling", type=float, default=None, help="default: the env's tuned value")
    p.add_argument("--episode-length", type=int, default=None, help="default: the env's tuned value")
    p.add_argument("--normalize-observations", type=int, choices=(0, 1), default=None,
                   help="default: the env's tuned value")
    p.add_argument("--num-eval-envs", type=int, default=64, help="episodes per evaluation (both sides)")
    p.add_argument("--devices", type=int, default=1,
                   help="CPU: split the host into this many XLA devices; both trainers use all of them")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sim-steps", type=int, default=100, help="scan length of the raw simulation timing")
    p.add_argument("--order", default="ours,brax", help="which trainer runs first: ours,brax or brax,ours")
    p.add_argument("--only", choices=("ours", "brax"), default=None, help="run one trainer (and the raw sim)")
    add_shared_args(p)
    args = p.parse_args(argv)

    overrides = {k: v for k, v in dict(
        discounting=args.discounting, learning_rate=args.learning_rate, entropy_cost=args.entropy_cost,
        reward_scaling=args.reward_scaling, episode_length=args.episode_length,
        normalize_observations=None if args.normalize_observations is None else bool(args.normalize_observations),
    ).items() if v is not None}
    base = defaults_for(args.env, "ppo")
    sizes = {k: getattr(args, k) for k in SMALL if getattr(args, k) is not None}
    if not args.tuned:
        sizes = {**SMALL, **sizes}
    cfg = base.replace(backend=args.backend, epochs=args.epochs, eval_every=0, progress=False,
                       num_eval_envs=args.num_eval_envs, seed=args.seed, devices=args.devices, **sizes, **overrides)
    cfg = cfg.replace(total_steps=round_total(cfg, args.total_steps)).validate()

    print(f"ppo_vs_brax: env={cfg.env} backend={cfg.backend} num_envs={cfg.num_envs} total_steps={cfg.total_steps:,} "
          f"({cfg.epochs} epochs x {cfg.iterations_per_epoch} iterations x {cfg.steps_per_iteration:,} steps) "
          f"unroll={cfg.hp.unroll_length} batch={cfg.hp.batch_size} minibatches={cfg.hp.num_minibatches} "
          f"updates/batch={cfg.hp.num_updates_per_batch} discounting={cfg.hp.discounting} lr={cfg.hp.learning_rate} "
          f"entropy={cfg.hp.entropy_cost} reward_scaling={cfg.hp.reward_scaling} normalize_obs={cfg.hp.normalize_observations} "
          f"episode_length={cfg.episode_length} policy={cfg.hp.policy_hidden_sizes} value={cfg.hp.value_hidden_sizes} "
          f"{cfg.hp.activation}; {header(cfg)}", flush=True)
    order = parse_order(args.only or args.order, args.matmul_dtype)
    rows, sim = run_sides(cfg, order, {**ours_runners(args.matmul_dtype), "brax": run_brax_ppo},
                          (cfg.env, cfg.backend, cfg.num_envs), args.sim_steps)
    report(rows, sim)
    write_json(args.json, cfg, rows, sim)


if __name__ == "__main__":
    main()
