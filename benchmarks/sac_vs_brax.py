"""Our SAC against Brax's SAC trainer, same env, backend, num_envs and hyper-parameters.

    .venv/bin/python benchmarks/sac_vs_brax.py [--agent sac] [--env inverted_pendulum] [--backend positional]
        [--num-envs 128] [--batch-size 512] [--grad-updates-per-step 64]
        [--max-replay-size 1048576] [--min-replay-size 8192] [--total-steps 40000] [--epochs 6]
        [--order ours,brax] [--only ours|brax] [--matmul-dtype float32 [bfloat16]]

One process runs, one after the other: the raw simulation limit (`benchmarks.common.
physics_limit`, as benchmarks/env_throughput.py prints it, on the same env, backend and
num_envs), our trainer (`sim.core.engine.Engine` on `defaults_for(env, "sac")` with the flags
applied, driven as `train.train` drives it) and `brax.training.agents.sac.train.train` with
the same numbers (hidden sizes and activation from our config; Brax's SAC takes one size list for
both the policy and the Q networks, so the two must agree). Prints per side: setup+compile
seconds, training env steps/s (wall clock and per CPU-second), gradient steps/s (env
steps/s / num_envs * grad_updates_per_step), final eval return, and the ratio ours/brax.

`--agent fasttd3` or `fastsac` times those agents (with `--only ours`: Brax has neither) with
their own config for the env, the flags given applied: the same figures, gradient steps/s
included, so the suite's lines for them read like SAC's.

`--matmul-dtype float32 bfloat16` runs our trainer twice, as "ours" (float32) and "ours-bf16"
(train.py's `--matmul-dtype bfloat16`: the hidden-to-hidden matmuls, forward and backward,
multiply in bfloat16 and sum in float32), each against the same Brax run (float32).

Timing follows benchmarks/ppo_vs_brax.py (see its docstring; both run through
benchmarks/versus.py): both runs have the same `--epochs` programs of the same iterations,
after the same random-action prefill of `min_replay_size` steps; training steps/s counts
epochs 2..E. Brax's `progress_fn` timestamps less its measured evaluation times give its
epoch times; its first interval also holds the replay prefill (compile and run), which lands
in its setup+compile figure, as our prefill lands in ours (run before the epoch program is
compiled, as `train.train` does).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks import versus  # noqa: E402
from sim.run.config import defaults_for  # noqa: E402


def run_brax_sac(cfg) -> dict:
    from brax.training.agents.sac import networks as sac_networks
    from brax.training.agents.sac import train as brax_sac

    network_factory = functools.partial(sac_networks.make_sac_networks,
                                        hidden_layer_sizes=tuple(cfg.agent_config.policy_hidden_sizes),
                                        activation=versus.brax_activation(cfg.agent_config.activation))
    return versus.run_brax(brax_sac, cfg, network_factory, tau=cfg.agent_config.tau, min_replay_size=cfg.agent_config.min_replay_size,
                           max_replay_size=cfg.agent_config.max_replay_size, grad_updates_per_step=cfg.agent_config.grad_updates_per_step)


def grad_sps(cfg, figures: dict) -> None:
    """Gradient steps/s: env steps/s over num_envs (iterations/s) times the updates per iteration."""
    figures["grad_sps"] = figures["sps"] / cfg.num_envs * cfg.agent_config.grad_updates_per_step


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agent", default="sac", choices=("sac", "fasttd3", "fastsac"),
                   help="our agent; fasttd3 and fastsac have no Brax peer (use --only ours)")
    p.add_argument("--env", default="inverted_pendulum")
    p.add_argument("--backend", default="positional")
    p.add_argument("--num-envs", type=int, default=None, help="default: the agent's value for the env (SAC: 128)")
    p.add_argument("--batch-size", type=int, default=None, help="default: the agent's value for the env (SAC: 512)")
    p.add_argument("--grad-updates-per-step", type=int, default=None,
                   help="default: the agent's value for the env (SAC: 64)")
    p.add_argument("--max-replay-size", type=int, default=None, help="default: the env's tuned value (2^20)")
    p.add_argument("--min-replay-size", type=int, default=None, help="default: the agent's value for the env (SAC: 8192)")
    p.add_argument("--hidden-sizes", type=int, nargs="+", default=None,
                   help="policy and Q hidden sizes (default: the env's tuned values; SAC's must agree: 256 256)")
    p.add_argument("--total-steps", type=int, default=40_000,
                   help="including the prefill; rounded up to whole epochs of whole iterations")
    versus.add_shared_args(p)
    args = p.parse_args(argv)

    base = defaults_for(args.env, args.agent)
    hidden = tuple(args.hidden_sizes) if args.hidden_sizes else tuple(base.agent_config.policy_hidden_sizes)
    given = {"num_envs": args.num_envs, "batch_size": args.batch_size, "grad_updates_per_step": args.grad_updates_per_step,
             "min_replay_size": args.min_replay_size, "max_replay_size": args.max_replay_size}
    overrides = {k: v for k, v in given.items() if v is not None}
    if args.agent == "sac" or args.hidden_sizes:  # Brax's SAC takes one size list for both networks
        overrides.update(policy_hidden_sizes=hidden, value_hidden_sizes=hidden)
    cfg = base.replace(backend=args.backend, epochs=args.epochs, eval_every=0, progress=False,
                       num_eval_envs=args.num_eval_envs, seed=args.seed, **overrides)
    cfg = cfg.replace(total_steps=versus.round_total(cfg, args.total_steps)).validate()

    print(f"sac_vs_brax: agent={args.agent} env={cfg.env} backend={cfg.backend} num_envs={cfg.num_envs} total_steps={cfg.total_steps:,} "
          f"(prefill {cfg.prefill_steps:,} + {cfg.epochs} epochs x {cfg.iterations_per_epoch} iterations x "
          f"{cfg.steps_per_iteration} steps) batch={cfg.agent_config.batch_size} grad_updates/step={cfg.agent_config.grad_updates_per_step} "
          f"replay={cfg.agent_config.max_replay_size:,} min_replay={cfg.agent_config.min_replay_size:,} "
          f"hidden={cfg.agent_config.policy_hidden_sizes}/{cfg.agent_config.value_hidden_sizes} {cfg.agent_config.activation} "
          f"lr={cfg.agent_config.learning_rate} discounting={cfg.agent_config.discounting} reward_scaling={cfg.agent_config.reward_scaling} tau={cfg.agent_config.tau} "
          f"normalize_obs={cfg.agent_config.normalize_observations} episode_length={cfg.episode_length}; {versus.header(cfg)}", flush=True)

    versus.compare(cfg, args, run_brax_sac, [("grad steps/s", "grad_sps", "{:,.0f}")], grad_sps)


if __name__ == "__main__":
    main()
