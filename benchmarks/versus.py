"""Our trainer against a `brax.training` trainer: what benchmarks/ppo_vs_brax.py and
sac_vs_brax.py share (how both sides are timed: ppo_vs_brax.py's docstring).

`compare` runs a comparison from its parsed flags: the physics limit, the sides in
`--order`, the physics limit again, then the table and `--json`. Brax's side runs through
`run_brax`, the one place that supplies what Brax's trainers need from this JAX
(`brax_compat`) and reads their figures (`BraxClock`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import envs
from benchmarks import common
from envs import tpu_gather, tpu_linalg

OURS_NAMES = {"float32": "ours", "bfloat16": "ours-bf16", "default": "ours-default"}


def add_shared_args(p: argparse.ArgumentParser) -> None:
    """The flags both trainer comparisons take."""
    p.add_argument("--epochs", type=int, default=6, help="epoch programs per run (the first is not timed)")
    p.add_argument("--num-eval-envs", type=int, default=64, help="episodes per evaluation (both sides)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sim-steps", type=int, default=100, help="scan length of the raw simulation timing (0: none)")
    p.add_argument("--order", default="ours,brax", help="which trainer runs first: ours,brax or brax,ours")
    p.add_argument("--only", choices=("ours", "brax"), default=None, help="run one trainer (and the raw sim)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    p.add_argument("--matmul-dtype", nargs="+", choices=tuple(OURS_NAMES), default=["float32"],
                   help="our networks' hidden-layer matmul dtype (train.py --matmul-dtype); several values run our "
                        "trainer once each, as 'ours' (float32), 'ours-bf16' and 'ours-default'. Brax's networks multiply at "
                        "the platform's default precision (float32 on a CPU, one bfloat16 pass on a TPU).")


def compare(cfg, args, peer, extra_cols=(), derived=None) -> None:
    """The physics limit, each side of `--only` or `--order` (ours once per `--matmul-dtype`,
    Brax's by `peer(cfg)`), the physics limit again; prints the table and writes `--json`.
    `derived(cfg, figures)` adds a comparison's own figures to each side's (`extra_cols`)."""
    order = parse_order(args.only or args.order, args.matmul_dtype)
    rows, sim = run_sides(cfg, order, {**ours_runners(args.matmul_dtype), "brax": peer}, args.sim_steps)
    for _, figures in rows:
        if derived is not None:
            derived(cfg, figures)
    report(rows, sim, extra_cols)
    write_json(args.json, cfg, rows, sim)


# ---- Brax's side ----


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


def brax_env(name: str, backend: str | None):
    """Brax's raw env (its trainer adds its own episode and auto-reset wrappers), on `backend`
    or, None, on the backend ours runs `name` on by default (the same physics either side)."""
    from brax import envs as brax_envs

    backend = envs.check(name, backend)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning)
        return brax_envs.get_environment(name, backend=backend)


def brax_activation(name: str):
    import flax.linen as nn

    return {"swish": nn.swish, "tanh": nn.tanh, "relu": nn.relu, "elu": nn.elu}[name]


def playground_pipeline(cfg) -> dict:
    """For a Playground task (DM Control Suite or robot): Playground's own pipeline as its
    training script runs it, the trainer's arguments: its env (loaded by Playground's registry,
    MJX's JAX implementation, the run's config overrides), its Brax training wrapper and, where
    the run randomises with the task's own randomiser, that randomiser. {} for a Brax env."""
    import envs

    if envs.family(cfg.env) not in ("playground", "robots"):
        return {}
    from mujoco_playground import wrapper  # the optional playground extra (this benchmark's Playground rows)

    ours = envs.make(cfg.env, cfg.backend, **dict(envs.parse_env_config(cfg.env_config)))
    out = {"environment": ours.playground_env, "wrap_env_fn": wrapper.wrap_for_brax_training}
    if cfg.sim2real.domain_randomization:
        out["randomization_fn"] = ours.task_randomizer
    return out


def run_brax(trainer, cfg, network_factory, **own) -> dict:
    """One timed run of a `brax.training` trainer module (`agents.ppo.train`, `agents.sac.train`)
    on cfg's env: the settings every Brax trainer takes, from `cfg`, and the trainer's `own`.
    A Playground task runs in Playground's own pipeline (`playground_pipeline`).

    Brax PPO's `training/sps` counts `num_resets_per_eval` epochs' env steps per timed epoch
    (its default 0 counts one); its last value, divided by that count, is `brax_last_sps`."""
    pipeline = playground_pipeline(cfg)
    env = pipeline.pop("environment", None) or brax_env(cfg.env, cfg.backend)
    own = {**pipeline, **own}
    clock = BraxClock()
    with brax_compat(trainer._PMAP_AXIS_NAME), clock.timed_evaluations(), peer_lowering():
        clock.start = clocks()
        trainer.train(
            environment=env, num_timesteps=cfg.total_steps, num_envs=cfg.num_envs, episode_length=cfg.episode_length,
            action_repeat=cfg.action_repeat, learning_rate=cfg.agent_config.learning_rate, discounting=cfg.agent_config.discounting,
            batch_size=cfg.agent_config.batch_size, normalize_observations=cfg.agent_config.normalize_observations,
            reward_scaling=cfg.agent_config.reward_scaling, seed=cfg.seed, num_evals=cfg.epochs + 1,
            num_eval_envs=cfg.num_eval_envs, deterministic_eval=True, network_factory=network_factory,
            progress_fn=clock, **own)
    return clock.timing(sps_counts=max(own.get("num_resets_per_eval", 0), 1))


class BraxClock:
    """Brax `progress_fn` recording (wall, cpu, step, metrics) of every call, plus the wall and
    CPU time of every evaluation (see `timed_evaluations`); each evaluation's return is printed
    as it comes."""

    def __init__(self):
        self.start = clocks()
        self.calls: list[tuple[float, float, int, dict]] = []
        self.evals: list[tuple[float, float]] = []

    def __call__(self, step, metrics):
        wall, cpu = clocks()
        self.calls.append((wall, cpu, int(step), {k: float(np.asarray(v)) for k, v in metrics.items()
                                                  if np.size(v) == 1}))
        if "eval/episode_reward" in self.calls[-1][3]:  # as it comes: a run cut short keeps its curve in the log
            print(f"  brax: {int(step):,} env steps, eval return {self.calls[-1][3]['eval/episode_reward']:.1f} "
                  f"({wall - self.start[0]:.0f} s)", flush=True)

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

    def timing(self, sps_counts: int = 1) -> dict:
        """calls[0] follows the evaluation before any training (Brax runs one when
        num_evals > 1); each later call follows one training epoch and one evaluation.
        `sps_counts`: the epochs Brax's `training/sps` counts for each one it times."""
        assert len(self.evals) == len(self.calls), (len(self.evals), len(self.calls))
        walls = [self.calls[i][0] - self.calls[i - 1][0] - self.evals[i][0] for i in range(1, len(self.calls))]
        cpus = [self.calls[i][1] - self.calls[i - 1][1] - self.evals[i][1] for i in range(1, len(self.calls))]
        steps = [self.calls[i][2] - self.calls[i - 1][2] for i in range(1, len(self.calls))]
        result = summarize(walls, cpus, steps)
        eval_s = self.evals[-1][0]
        result["compile_s"] = (self.calls[1][0] - self.start[0]) - result["epoch_s"] - 2 * eval_s
        result["eval_s"] = eval_s
        final = self.calls[-1][3]
        result["brax_last_sps"] = final.get("training/sps", float("nan")) / sps_counts
        result["return"] = final.get("eval/episode_reward", float("nan"))
        result["curve"] = [(step, m["eval/episode_reward"]) for _, _, step, m in self.calls if "eval/episode_reward" in m]
        return result


# ---- our side ----


def ours_runners(matmul_dtypes) -> dict:
    """{side name: runner}: our trainer once per matmul dtype."""
    def runner(dtype):
        return lambda cfg: run_ours(cfg.replace(matmul_dtype=dtype))

    return {OURS_NAMES[d]: runner(d) for d in matmul_dtypes}


def run_ours(cfg) -> dict:
    """Our engine, driven as train.train drives it (AOT compile, epoch calls, final eval)."""
    from sim.run.build import build_engine
    from sim.core.state import read_steps

    start = clocks()
    engine = build_engine(cfg)
    init_key, eval_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    state = engine.init(init_key)
    if cfg.prefill_iterations:
        state = engine.prefill(state)
    epoch = engine.epoch.lower(state).compile()
    evaluate = engine.evaluate.lower(state, eval_key).compile()
    jax.block_until_ready(state)
    compile_s = clocks()[0] - start[0]
    side = OURS_NAMES.get(cfg.agent_config.matmul_dtype, "ours")
    print(f"  {side}: setup+compile {compile_s:.1f}s on {engine.num_devices} device(s) (load {load():.2f})", flush=True)
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


# ---- both sides ----


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


@contextlib.contextmanager
def peer_lowering():
    """A peer as its users run it: its TPU programs traced in the body lowered by XLA, not by
    envs/tpu_linalg.py and envs/tpu_gather.py (no effect elsewhere)."""
    with tpu_linalg.xla_lowering(), tpu_gather.xla_lowering():
        yield


def raw_sim_sps(cfg, steps: int, repeats: int = 3, xla: bool = False) -> float:
    """The physics limit of cfg's env, backend and num_envs on one device, printed as
    benchmarks/env_throughput.py prints it, at the matmul precision of cfg's run; `xla`: as a
    peer runs it on a TPU, with XLA's own linear algebra (`peer_lowering`) at the platform's
    default precision."""
    backend = envs.check(cfg.env, cfg.backend)
    precision = "default" if xla else cfg.hosts.matmul_precision
    with peer_lowering() if xla else contextlib.nullcontext():
        rate = common.physics_limit(envs.make(cfg.env, backend=backend), cfg.num_envs, steps, repeats,
                                    jax.random.PRNGKey(0), precision=precision)
    what = "raw simulation, XLA's linear algebra" if xla else "raw simulation"
    print(f"  {what}: {common.physics_line(cfg.env, backend, cfg.num_envs, steps, rate)} "
          f"(load {load():.2f})", flush=True)
    return rate.steps_per_s


def run_sides(cfg, order: list[str], runners: dict, sim_steps: int) -> tuple[list, float]:
    """Raw sim, the trainers in `order`, raw sim again; returns (rows, best raw sim).
    `sim_steps` 0: no raw sim (its compiles saved where a lent machine's time is short; the
    best raw sim is then NaN and "of raw sim" with it)."""
    sims = [raw_sim_sps(cfg, sim_steps)] if sim_steps else []
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
    if not sim_steps:
        print("\nraw simulation limit: not measured (--sim-steps 0)")
        return rows, float("nan")
    sims.append(raw_sim_sps(cfg, sim_steps))
    if "brax" in order and jax.devices()[0].platform == "tpu":  # the peer's physics limit, as its users have it
        dict(rows)["brax"]["raw_sim_xla_sps"] = raw_sim_sps(cfg, sim_steps, xla=True)
    print()
    print(f"raw simulation limit: {max(sims):,.0f} env steps/s (best of {', '.join(f'{s:,.0f}' for s in sims)}; "
          f"{cfg.env}, {cfg.backend}, {cfg.num_envs} envs, one device)")
    return rows, max(sims)


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


def round_total(cfg, total_steps: int) -> int:
    """Total steps rounded up to whole epochs of whole iterations (both trainers then agree)."""
    spi = cfg.steps_per_iteration
    iters = -(-(total_steps - cfg.prefill_steps) // spi)
    per_epoch = -(-max(iters, 1) // cfg.epochs)
    return cfg.prefill_steps + cfg.epochs * per_epoch * spi


def header(cfg) -> str:
    return (f"device={jax.devices()[0].platform} x{jax.device_count()} (trainers use {cfg.hosts.devices or 1}); "
            f"load {load():.2f}")


def parse_order(text: str, matmul_dtypes=("float32",)) -> list[str]:
    """The sides in run order; "ours" stands for one run of our trainer per matmul dtype."""
    order = [x.strip() for x in text.split(",") if x.strip()]
    if sorted(order) != ["brax", "ours"] and order not in (["ours"], ["brax"]):
        raise SystemExit(f"--order: expected 'ours,brax', 'brax,ours', 'ours' or 'brax', got {text!r}")
    return [n for side in order for n in ([OURS_NAMES[d] for d in matmul_dtypes] if side == "ours" else [side])]


def write_json(path: str | None, cfg, rows: list, sim: float) -> None:
    """The run's settings, each side's figures and the raw simulation limit, as JSON."""
    if path:
        settings = {k: v for k, v in cfg.flat().items() if isinstance(v, (int, float, str, bool, type(None)))}
        with open(path, "w") as f:
            json.dump({"config": settings, "sides": dict(rows), "raw_sim_sps": sim}, f, indent=1, default=float)
