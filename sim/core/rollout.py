"""Vectorised env x policy unrolls with `lax.scan`, and on-device evaluation."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from sim.core.contract import Agent, Step, fresh_carry, restart
from envs.base import Env, EnvState


def members_as_one_batch(step):
    """`step` (a batch [B] of envs -> [B]) which, vmapped over a population's M members, steps
    their M*B envs as one batch [M*B] instead of a vmap of a vmap: on a TPU a doubly-batched
    MJX step (its gathers and scatters with two batch dims) ran at half the rate of the same
    envs in one batch (benchmarks/results/tpu_v5e/population.md). Same values either way. No
    reverse-mode derivative: differentiable unrolls keep the plain `step`."""
    merged = jax.custom_batching.custom_vmap(step)

    @merged.def_vmap
    def as_one_batch(axis_size, in_batched, *args):
        full = [jax.tree.map(lambda x, b: x if b else jnp.broadcast_to(x, (axis_size, *x.shape)), a, batched)
                for a, batched in zip(args, in_batched)]
        flat = jax.tree.map(lambda x: x.reshape((x.shape[0] * x.shape[1], *x.shape[2:])), full)
        out = merged(*flat)  # itself batchable again (a population inside another vmap)
        out = jax.tree.map(lambda x: x.reshape((axis_size, x.shape[0] // axis_size, *x.shape[1:])), out)
        return out, jax.tree.map(lambda _: True, out)

    return merged


class Unrolled(NamedTuple):
    """What `unroll` returns: the envs and the agent's per-env state after it, and what
    happened, time-major [T, B]: the `Step`s and `start` (1.0 where obs[t] began an episode)."""

    env: EnvState
    carry: Any  # the agent's per-env state (None where it keeps none)
    steps: Step
    start: jax.Array


def unroll(env: Env, agent: Agent, agent_state, obs_stats, env_state: EnvState, carry, key: jax.Array, length: int,
           random_actions: bool = False, differentiable: bool = False) -> Unrolled:
    """Steps a batch of auto-resetting envs `length` times with the agent's stochastic policy.

    env_state: batched [B]; carry: the agent's per-env state [B, ...] (None where it keeps
    none), reset where an episode starts. Each `Step` records what the agent saw and did (its
    `acted` record), what the env returned, and the episode statistics (episode_done,
    last_return) for logging. `random_actions`: the agent's uniform `explore` actions instead
    of its policy (replay prefill). `differentiable`: the unroll is differentiated (its env
    step stays a plain vmap under a population's vmap).
    """
    # Batched stepping where the env offers it (AutoReset: ended episodes restart from spare
    # start states, renewed between epochs, instead of a reset at every step).
    step = getattr(env, "step_batch", None) or jax.vmap(env.step)
    step = step if differentiable else members_as_one_batch(step)

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
    step = members_as_one_batch(jax.vmap(env.step))

    def body(carry, _):
        state, total, length, alive, memory = carry
        action, _, memory = agent.act(agent_state, obs_stats, state.obs, key, True, memory)
        nxt = step(state, action)
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
