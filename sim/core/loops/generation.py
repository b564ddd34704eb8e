"""The generation loop (ES, ARS): one iteration is one generation. The agent draws a
population of perturbed policies; every member plays one episode on each of its
num_envs / population_size envs, from fresh resets, each env's return counted up to its
episode's first end; the members' fitness (their envs' mean return) goes back to the agent's
update, which moves the policy (`sim.core.contract.Generation`). On n devices each device plays the
episodes of its own members (population_size / n of them: the envs split over the devices
member by member) and gathers every member's fitness, so the update is the same everywhere.
It keeps no state of its own (`TrainState.loop` is None)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import jax
import jax.numpy as jnp

from sim.core.contract import Generation, Step
from sim.core.loops.base import LoopContext, advanced, as_reset, nothing_droppable


@dataclasses.dataclass(frozen=True)
class GenerationLoop:
    context: LoopContext
    members: int  # perturbed policies of a generation, all devices together
    local: int  # of them, those this device plays
    steps: int  # agent steps of an episode

    splits_over_cores: ClassVar[bool] = True
    work_sizes: ClassVar[tuple[str, ...]] = ("num_envs", "episode_length")
    droppable: ClassVar[Optional[str]] = None
    prefill_iterations: ClassVar[int] = 0
    droppable_mask = staticmethod(nothing_droppable)
    episodic_mask = staticmethod(nothing_droppable)  # its state is None
    start = staticmethod(as_reset)

    @classmethod
    def make(cls, context: LoopContext) -> "GenerationLoop":
        run, dev = context.run, context.dev
        members = run.agent_config.population_size
        per_member = run.num_envs // members
        return cls(context, members, dev.num_envs // per_member, -(-context.spec.episode_length // run.action_repeat))

    def init(self, key: jax.Array):
        return None

    def prefill(self, state):
        return state

    def play(self, state, key: jax.Array, policies, act):
        """(fitness [members], (env state, steps)) of one episode per env under this device's members."""
        ctx, local = self.context, self.local
        if ctx.axis is not None:  # this device's members
            first = jax.lax.axis_index(ctx.axis) * local
            policies = jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, first, local), policies)
        num_envs = ctx.dev.num_envs
        env_state = jax.vmap(ctx.env.reset)(jax.random.split(ctx.device_key(key), num_envs))
        per_member = num_envs // local
        # Ended episodes restart from spare starts where the env keeps them (no reset on the
        # per-step path); what follows an episode's end is not counted.
        step = getattr(ctx.env, "step_batch", None) or jax.vmap(ctx.env.step)

        def body(carry, _):
            env_state, total, alive = carry
            obs = env_state.obs.reshape((local, per_member) + env_state.obs.shape[1:])
            action = jax.vmap(act, in_axes=(0, None, 0))(policies, state.obs_stats, obs)
            nxt = step(env_state, action.reshape((num_envs,) + action.shape[2:]))
            total = total + alive * nxt.reward
            return (nxt, total, alive * (1.0 - nxt.done)), env_state.obs

        zeros = jnp.zeros((num_envs,), jnp.float32)
        (env_state, total, _), obs = jax.lax.scan(body, (env_state, zeros, jnp.ones_like(zeros)), None,
                                                  length=self.steps)
        fitness = jnp.mean(total.reshape(local, per_member), axis=1)
        if ctx.axis is not None:
            fitness = jax.lax.all_gather(fitness, ctx.axis, tiled=True)
        ones = jnp.ones_like(zeros)  # every env's episode counted once, its return up to its first end
        record = Step(obs=obs, next_obs=None, reward=None, terminated=None, truncated=None, episode_done=ones,
                      last_return=total, acted=None)
        return fitness, (env_state, record)

    def iteration(self, state):
        """One generation: the members' episodes inside the agent's update -> observation statistics."""
        ctx = self.context
        key, play_key, update_key = jax.random.split(state.key, 3)
        data = Generation(self.members, lambda policies, act: self.play(state, play_key, policies, act))
        agent_state, losses, (env_state, record) = ctx.agent.update(state.agent, state.obs_stats, data, update_key)
        return advanced(ctx, state, key, agent_state, losses, env_state, record)

    def memory(self, template, per_device) -> tuple[list, tuple]:
        """No part of its own; the episodes' observations (num-envs x episode-length steps) size
        the working memory."""
        run = self.context.run
        return [], (("num_envs", run.num_envs), ("episode_length", self.steps * run.action_repeat))
