"""PPO's update alone, on a synthetic batch shaped like an env's: to compare revisions of it.

    .venv/bin/python benchmarks/ppo_update.py [--env humanoid] [--num-envs 4096] [--repeats 2]
        [--set NAME=VALUE ...]

Builds PPO for the env's spec and own config (train.py's defaults, `--num-envs` and `--set`
applied) on one device, fills one iteration's batch ([unroll_length, trajectories]) with
normal observations, the initial policy's own actions and log-probabilities, normal rewards
and 1% terminations, and times `agent.update` jitted as the engine traces it, best of
`--repeats` calls. No physics runs, so a revision's update can be timed in a minute or two:
run it from two checkouts, alternating, to compare them side by side.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import envs  # noqa: E402
from sim.core.contract import Step  # noqa: E402
from benchmarks import common  # noqa: E402
from envs.wrappers import init_stats  # noqa: E402
from sim.core.evaluation import full_precision, make_agent  # noqa: E402
from sim.run.build import core_spec
from sim.run.config import defaults_for  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="humanoid")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="other config fields")
    a = p.parse_args(argv)
    cfg = defaults_for(a.env).replace(num_envs=a.num_envs, devices=1, **dict(common.parse_set(a.set))).validate()
    if cfg.agent != "ppo":
        p.error("--env: this benchmark times PPO's update")
    spec = envs.make(cfg.env, cfg.backend, episode_length=cfg.episode_length).spec
    agent = make_agent(core_spec(cfg), spec)
    steps, trajectories = cfg.agent_config.unroll_length, cfg.steps_per_iteration // (cfg.agent_config.unroll_length * cfg.action_repeat)
    keys = jax.random.split(jax.random.PRNGKey(0), 6)
    state = jax.jit(full_precision(agent.init))(keys[0])
    stats = init_stats(spec.obs_shape)
    obs = jax.random.normal(keys[1], (steps, trajectories) + spec.obs_shape)
    _, acted, _ = jax.jit(jax.vmap(lambda o, k: agent.act(state, stats, o, k, False, None)))(obs, jax.random.split(keys[2], steps))
    zeros = jnp.zeros((steps, trajectories))
    data = Step(obs=obs, next_obs=jnp.roll(obs, -1, axis=0), reward=jax.random.normal(keys[3], zeros.shape),
                terminated=(jax.random.uniform(keys[4], zeros.shape) < 0.01).astype(jnp.float32), truncated=zeros,
                episode_done=zeros, last_return=zeros, acted=acted)
    update = jax.jit(full_precision(agent.update))
    _, first = common.timed(update, state, stats, data, keys[5])
    best = common.best_of(update, a.repeats, state, stats, data, keys[5])
    gradient_steps = cfg.agent_config.num_updates_per_batch * cfg.agent_config.num_minibatches
    print(f"{cfg.env} PPO update: {steps * trajectories:,} rows, {gradient_steps} gradient steps of "
          f"{steps * trajectories // cfg.agent_config.num_minibatches:,} rows: {best:.2f} s best of {a.repeats} "
          f"({best / gradient_steps * 1e3:.1f} ms per gradient step; first call, compile included, {first:.1f} s)")


if __name__ == "__main__":
    main()
