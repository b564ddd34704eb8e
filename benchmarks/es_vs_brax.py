"""Our ES and ARS against Brax's own `es` and `ars` trainers: same env, backend, population,
network and hyper-parameters, the same number of generations, side by side in one process.

    .venv/bin/python benchmarks/es_vs_brax.py [--agent es|ars] [--env inverted_pendulum]
        [--backend positional] [--population-size 64] [--generations 16] [--epochs 4]
        [--episode-length 1000] [--order ours,brax] [--only ours|brax] [--json FILE]

A generation is every member playing one episode of `--episode-length` steps on its own env
(ES: `--population-size` members; ARS: `--population-size / 2` directions, both signs), so both
sides compute population x episode-length env steps per generation: that is what "training
steps/s" counts on both sides (Brax's own counter, `num_env_steps`, counts only the steps before
each episode's end; its figure at the end is printed beside). Ours runs `--generations` in
`--epochs` epoch programs (steps/s over epochs 2..E, as benchmarks/ppo_vs_brax.py times);
Brax's trainer evaluates after every generation here (its progress function is called once a
generation) and is stopped after `--generations`; its evaluations' time is taken out of its
generations' (benchmarks/versus.py's clock); its first two generations are not counted (the
first compiles, and so does the second: the initial state's step counter is typed unlike its
epoch program's output, which Brax's own training/sps shows too) and make its setup+compile.
Both final evaluations: deterministic episodes on `--num-eval-envs` envs.

Differences kept: ARS's actions are the linear output tanh-squashed to the bounds here, Brax's
unsquashed; Brax's ES counts only active steps in its budget.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from benchmarks import versus  # noqa: E402
from sim.run.config import defaults_for  # noqa: E402


class Stop(Exception):
    """Raised by the progress function once Brax's trainer has run its generations."""


def run_brax(cfg, generations: int) -> dict:
    from brax.training.agents.ars import networks as ars_networks
    from brax.training.agents.ars import train as brax_ars
    from brax.training.agents.es import networks as es_networks
    from brax.training.agents.es import train as brax_es

    hp, pop, length = cfg.agent_config, cfg.agent_config.population_size, cfg.episode_length
    env = versus.brax_env(cfg.env, cfg.backend)
    clock = versus.BraxClock()
    computed = pop * length  # env steps one generation computes

    def progress(step, metrics):
        clock(step, metrics)
        if sum(c[2] > 0 for c in clock.calls) >= generations:  # (ES evaluates once before training, at step 0)
            raise Stop

    # A budget never reached, evaluated at every step: the progress function follows every generation.
    never = 10**12
    common = dict(environment=env, num_timesteps=never, episode_length=length, num_eval_envs=cfg.num_eval_envs,
                  seed=cfg.seed, normalize_observations=hp.normalize_observations, num_evals=never,
                  progress_fn=progress)
    if cfg.agent == "es":
        factory = functools.partial(es_networks.make_es_networks, hidden_layer_sizes=tuple(hp.policy_hidden_sizes),
                                    activation=versus.brax_activation(hp.activation))
        trainer, own = brax_es, dict(population_size=pop, learning_rate=hp.learning_rate,
                                     fitness_shaping=brax_es.FitnessShaping[hp.fitness_shaping.upper()],
                                     perturbation_std=hp.perturbation_std, l2coeff=hp.l2coeff, deterministic_eval=True,
                                     network_factory=factory)
    else:
        trainer, own = brax_ars, dict(number_of_directions=pop // 2, top_directions=hp.top_directions,
                                      step_size=hp.learning_rate, exploration_noise_std=hp.exploration_noise_std,
                                      network_factory=ars_networks.make_policy_network)
    with versus.brax_compat(), clock.timed_evaluations():
        clock.start = versus.clocks()
        try:
            trainer.train(**common, **own)
        except Stop:
            pass
    # Each call follows one evaluation (evals[i] is the one before calls[i]); those at step > 0 follow
    # one generation each; the first generation compiles and is not counted.
    calls, evals = clock.calls, clock.evals
    gens = [i for i, c in enumerate(calls) if c[2] > 0]
    before = [(clock.start if i == 0 else calls[i - 1]) for i in gens]
    walls = [calls[i][0] - b[0] - evals[i][0] for i, b in zip(gens, before)]
    cpus = [calls[i][1] - b[1] - evals[i][1] for i, b in zip(gens, before)]
    # Its second generation compiles its epoch again (the first state's step counter is typed unlike the
    # epoch's own output, as Brax's own training/sps shows): the first two are not counted.
    skip = 2 if len(walls) > 2 else 1 if len(walls) > 1 else 0
    steady, steady_cpu = walls[skip:], cpus[skip:]
    first = calls[gens[skip - 1]][0] - clock.start[0] - sum(e[0] for e in evals[:gens[skip - 1] + 1]) if skip else 0.0
    return {"sps": computed * len(steady) / sum(steady), "cpu_sps": computed * len(steady_cpu) / sum(steady_cpu),
            "epoch_s": sum(steady) / len(steady), "per_epoch_sps": [computed / w for w in walls],
            "compile_s": first - skip * sum(steady) / len(steady), "eval_s": evals[-1][0],
            "env_steps": computed * len(gens), "generations": len(gens),
            "brax_counted_steps": calls[-1][2], "brax_last_sps": calls[-1][3].get("training/sps", float("nan")),
            "return": calls[-1][3].get("eval/episode_reward", float("nan"))}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agent", default="es", choices=("es", "ars"))
    p.add_argument("--env", default="inverted_pendulum")
    p.add_argument("--backend", default="positional")
    p.add_argument("--population-size", type=int, default=None, help="default: the agent's value for the env")
    p.add_argument("--generations", type=int, default=16, help="generations per side (a multiple of --epochs)")
    p.add_argument("--episode-length", type=int, default=None, help="default: the env's")
    versus.add_shared_args(p)
    p.set_defaults(epochs=4)
    args = p.parse_args(argv)
    if args.generations % args.epochs:
        raise SystemExit(f"--generations {args.generations} must be a multiple of --epochs {args.epochs}")

    base = defaults_for(args.env, args.agent)
    pop = args.population_size or base.agent_config.population_size
    length = args.episode_length or base.episode_length
    top = {"top_directions": min(base.agent_config.top_directions, pop // 2)} if args.agent == "ars" else {}
    cfg = base.replace(backend=args.backend, num_envs=pop, population_size=pop, episode_length=length, **top,
                       total_steps=args.generations * pop * length, epochs=args.epochs, eval_every=0, progress=False,
                       num_eval_envs=args.num_eval_envs, seed=args.seed, devices=1).validate()
    hp = cfg.agent_config
    print(f"es_vs_brax: agent={cfg.agent} env={cfg.env} backend={cfg.backend} population={pop} (one env each) "
          f"episode_length={length} generations={args.generations} ({cfg.epochs} epochs) lr={hp.learning_rate} "
          f"normalize_obs={hp.normalize_observations}; {versus.header(cfg)}", flush=True)
    versus.compare(cfg, args, lambda c: run_brax(c, args.generations),
                   [("generations", "generations", "{:.0f}")], derived=lambda c, f: f.setdefault(
                       "generations", c.total_steps // (pop * length)))


if __name__ == "__main__":
    main()
