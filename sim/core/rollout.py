"""Vectorised env x policy unrolls with `lax.scan`, and on-device evaluation."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from sim.core.contract import Agent, Step, fresh_carry, restart
from envs.base import Env, EnvState


class Unrolled(NamedTuple):
    """What `unroll` returns: the envs and the agent's per-env state after it, and what
    happened, time-major [T, B]: the `Step`s and `start` (1.0 where obs[t] began an episode)."""

    env: EnvState
    carry: Any  # the agent's per-env state (None where it keeps none)
    steps: Step
    start: jax.Array


def unroll(env: Env, agent: Agent, agent_state, obs_stats, env_state: EnvState, carry, key: jax.Array, length: int,
           random_actions: bool = False) -> Unrolled:
    """Steps a batch of auto-resetting envs `length` times with the agent's stochastic policy.

    env_state: batched [B]; carry: the agent's per-env state [B, ...] (None where it keeps
    none), reset where an episode starts. Each `Step` records what the agent saw and did (its
    `acted` record), what the env returned, and the episode statistics (episode_done,
    last_return) for logging. `random_actions`: the agent's uniform `explore` actions instead
    of its policy (replay prefill).
    """
    # Batched stepping where the env offers it (AutoReset: ended episodes restart from spare
    # start states, renewed between epochs, instead of a reset at every step).
    step = getattr(env, "step_batch", None) or jax.vmap(env.step)

    def body(loop_carry, step_key):
        state, memory = loop_carry
        start = (state.steps == 0).astype(jnp.float32)
        if random_actions:
            env_action, acted = agent.explore(step_key, state.obs.shape[0])
        else:
            env_action, acted, memory = agent.act(agent_state, obs_stats, state.obs, step_key, False,
                                                  restart(agent, memory, start))
        nxt = step(state, env_action)
        record = Step(obs=state.obs, next_obs=nxt.info["final_obs"], reward=nxt.reward, terminated=nxt.terminated,
                      truncated=nxt.truncated, episode_done=nxt.info["episode_done"],
                      last_return=nxt.info["last_return"], acted=acted)
        return (nxt, memory), (record, start)

    (env_state, carry), (steps, start) = jax.lax.scan(body, (env_state, carry), jax.random.split(key, length))
    return Unrolled(env=env_state, carry=carry, steps=steps, start=start)


def evaluate(env: Env, agent: Agent, agent_state, obs_stats, key: jax.Array, num_envs: int) -> dict:
    """Runs one deterministic episode on each of `num_envs` fresh envs (no auto-reset).

    `env` is the un-reset-wrapped env (with action repeat). Returns mean/std/min/max of
    the undiscounted episode returns and the mean episode length.
    """
    state = jax.vmap(env.reset)(jax.random.split(key, num_envs))
    steps = -(-env.spec.episode_length // getattr(env, "repeat", 1))

    def body(carry, _):
        state, total, length, alive, memory = carry
        action, _, memory = agent.act(agent_state, obs_stats, state.obs, key, True, memory)
        nxt = jax.vmap(env.step)(state, action)
        # Envs that already ended keep stepping (no auto-reset) but count nothing more.
        total = total + jnp.where(alive > 0, nxt.reward, 0.0)
        length = length + alive
        alive = alive * (1.0 - nxt.done)
        return (nxt, total, length, alive, memory), None

    zeros = jnp.zeros((num_envs,), jnp.float32)
    start = (state, zeros, zeros, jnp.ones_like(zeros), fresh_carry(agent, num_envs))
    (_, total, length, _, _), _ = jax.lax.scan(body, start, None, length=steps)
    return {"episode_return": jnp.mean(total), "episode_return_std": jnp.std(total),
            "episode_return_min": jnp.min(total), "episode_return_max": jnp.max(total),
            "episode_length": jnp.mean(length)}
