"""Our PPO against Brax's PPO trainer, same env, backend, num_envs and hyper-parameters.

    .venv/bin/python benchmarks/ppo_vs_brax.py [--env ant] [--backend positional] [--tuned]
        [--num-envs 256] [--total-steps 400000] [--epochs 6] [--unroll-length 5]
        [--batch-size 256] [--num-minibatches 8] [--num-updates-per-batch 4]
        [--devices 1] [--order ours,brax] [--only ours|brax] [--matmul-dtype float32 [bfloat16]]
        [--json PATH]

`--tuned` takes the sizes not given from the env's own config (train.py's defaults) instead
of the small ones shown; `--json` also writes the figures to a file (benchmarks/suite.py).

One process runs, one after the other: (1) the raw simulation limit, i.e. the jitted
`scan(vmap(step))` of random actions (`benchmarks.common.physics_limit`, as
benchmarks/env_throughput.py prints it) on the same env, backend and num_envs (one device);
(2) our trainer, `sim.core.engine.Engine` on `defaults_for(env)` with the flags applied,
driven as `train.train` drives it; (3) `brax.training.agents.ppo.train.
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
  Brax's own `training/sps` of its last epoch is printed beside it (per epoch it times:
  Brax counts `num_resets_per_eval` epochs' steps in each, `versus.run_brax`).
- Brax's setup+compile: the wall time from calling its trainer to the end of its first epoch
  and the evaluation after it, less the run time of that epoch (the mean steady epoch) and of
  two evaluations (each taken equal to the last one), so every compilation stays counted,
  the evaluation program's included (Brax compiles it twice: the state it donates changes
  weak types after the first call).

Brax 0.14.2 calls `jax.device_put_replicated`, which JAX 0.10 removed; `versus.brax_compat()`
supplies a drop-in for the Brax runs only (removed again afterwards).

`--devices N` (CPU) splits the host into N XLA devices (`--xla_force_host_platform_device_
count`) before JAX starts; ours then shards its envs over them and Brax's pmap uses all of
them. XLA runs the physics of one device on one thread, so on a multi-core CPU this is how
either trainer gets more than one core into the simulation.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

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

from benchmarks import versus  # noqa: E402
from sim.run.config import defaults_for  # noqa: E402


def run_brax_ppo(cfg) -> dict:
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as brax_ppo

    # A structured observation (Playground's robots): the policy reads "state" (Brax's default
    # key), the critic "privileged_state" where ours is privileged (Playground's value_obs_key).
    keys = dict(value_obs_key="privileged_state") if getattr(cfg.agent_config, "privileged_critic", False) else {}
    network_factory = functools.partial(ppo_networks.make_ppo_networks,
                                        policy_hidden_layer_sizes=tuple(cfg.agent_config.policy_hidden_sizes),
                                        value_hidden_layer_sizes=tuple(cfg.agent_config.value_hidden_sizes),
                                        activation=versus.brax_activation(cfg.agent_config.activation), **keys)
    hp = cfg.agent_config
    return versus.run_brax(
        brax_ppo, cfg, network_factory, max_devices_per_host=cfg.hosts.devices, entropy_cost=hp.entropy_cost,
        unroll_length=hp.unroll_length, num_minibatches=hp.num_minibatches,
        num_updates_per_batch=hp.num_updates_per_batch, clipping_epsilon=hp.clipping_epsilon,
        gae_lambda=hp.gae_lambda, max_grad_norm=hp.max_grad_norm, normalize_advantage=hp.normalize_advantage,
        vf_loss_coefficient=hp.value_loss_coef)


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
    for name in ("unroll_length", "batch_size", "num_minibatches", "num_updates_per_batch"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None, help=f"default: {SMALL[name]}")
    p.add_argument("--discounting", type=float, default=None, help="default: the env's tuned value")
    p.add_argument("--learning-rate", type=float, default=None, help="default: the env's tuned value")
    p.add_argument("--entropy-cost", type=float, default=None, help="default: the env's tuned value")
    p.add_argument("--reward-scaling", type=float, default=None, help="default: the env's tuned value")
    p.add_argument("--episode-length", type=int, default=None, help="default: the env's tuned value")
    p.add_argument("--normalize-observations", type=int, choices=(0, 1), default=None,
                   help="default: the env's tuned value")
    p.add_argument("--devices", type=int, default=1,
                   help="CPU: split the host into this many XLA devices; both trainers use all of them")
    versus.add_shared_args(p)
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
    cfg = cfg.replace(total_steps=versus.round_total(cfg, args.total_steps)).validate()

    print(f"ppo_vs_brax: env={cfg.env} backend={cfg.backend} num_envs={cfg.num_envs} total_steps={cfg.total_steps:,} "
          f"({cfg.epochs} epochs x {cfg.iterations_per_epoch} iterations x {cfg.steps_per_iteration:,} steps) "
          f"unroll={cfg.agent_config.unroll_length} batch={cfg.agent_config.batch_size} minibatches={cfg.agent_config.num_minibatches} "
          f"updates/batch={cfg.agent_config.num_updates_per_batch} discounting={cfg.agent_config.discounting} lr={cfg.agent_config.learning_rate} "
          f"entropy={cfg.agent_config.entropy_cost} reward_scaling={cfg.agent_config.reward_scaling} normalize_obs={cfg.agent_config.normalize_observations} "
          f"episode_length={cfg.episode_length} policy={cfg.agent_config.policy_hidden_sizes} value={cfg.agent_config.value_hidden_sizes} "
          f"{cfg.agent_config.activation}; {versus.header(cfg)}", flush=True)
    versus.compare(cfg, args, run_brax_ppo)


if __name__ == "__main__":
    main()
