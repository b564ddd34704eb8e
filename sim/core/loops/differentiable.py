"""The differentiable loop (APG, SHAC): every env steps `horizon_length` times under the
policy, and the agent's update differentiates what it learns from those steps (their
rewards, a value at their end) through the env's own step, back to the policy's parameters:
the unroll runs inside the agent's gradient (`sim.core.contract.Differentiable`). The envs then
continue from where the unroll left them; episodes start at staggered times (each env's step
counter drawn in [0, episode length) at the start) so their resets do not line up across
envs. It keeps no state of its own (`TrainState.loop` is None)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import jax

import envs
from sim.core.contract import ConfigError, Differentiable
from sim.core import rollout
from sim.core.loops.base import LoopContext, advanced, nothing_droppable


@dataclasses.dataclass(frozen=True)
class DifferentiableLoop:
    context: LoopContext
    length: int  # steps of each unroll (the horizon)

    splits_over_cores: ClassVar[bool] = True
    work_sizes: ClassVar[tuple[str, ...]] = ("num_envs", "horizon_length")
    droppable: ClassVar[Optional[str]] = None
    prefill_iterations: ClassVar[int] = 0
    droppable_mask = staticmethod(nothing_droppable)
    episodic_mask = staticmethod(nothing_droppable)  # its state is None

    @classmethod
    def make(cls, context: LoopContext) -> "DifferentiableLoop":
        """Refuses, before anything is traced, an env whose step runs a loop JAX cannot
        differentiate (whether or not the agent's loss would reach it: Brax's MJX inverted
        pendulum rewards 1 per step alive, so APG's gradient would skip the loop and be 0)."""
        iterations = context.env.unwrapped.solver_loop()
        if iterations is not None:
            raise ConfigError(*_refusal(context.env.unwrapped, f"a loop of up to {iterations} iterations"))
        return cls(context, context.dev.agent_config.horizon_length)

    def init(self, key: jax.Array):
        return None

    def start(self, env_state, key: jax.Array):
        """The envs' first episodes cut short at random: step counters drawn in [0, episode length)."""
        episode = self.context.spec.episode_length
        steps = jax.random.randint(key, env_state.steps.shape, 0, max(episode, 1), env_state.steps.dtype)
        return env_state.replace(steps=steps)

    def prefill(self, state):
        return state

    def iteration(self, state):
        """The unroll inside the agent's gradient -> observation statistics of its steps."""
        ctx = self.context
        key, unroll_key, update_key = jax.random.split(state.key, 3)
        unroll_key = ctx.device_key(unroll_key)

        def unroll(agent_state):
            out = rollout.unroll(ctx.env, ctx.agent, agent_state, state.obs_stats, state.env, None, unroll_key,
                                 self.length, differentiable=True)
            return out.steps, (out.env, out.steps)

        try:
            agent_state, losses, (env_state, steps) = ctx.agent.update(state.agent, state.obs_stats,
                                                                       Differentiable(unroll), update_key)
        except ValueError as err:  # raised while tracing: nothing has run
            if "Reverse-mode differentiation does not work for lax.while_loop" not in str(err):
                raise
            raise ConfigError(*_refusal(ctx.env.unwrapped, "a loop")) from None
        return advanced(ctx, state, key, agent_state, losses, env_state, steps)

    def memory(self, template, per_device) -> tuple[list, tuple]:
        """No part of its own; the unroll, kept for the backward pass (every step's env state),
        sizes the working memory: num-envs x horizon-length steps."""
        run = self.context.run
        return [], (("num_envs", run.num_envs), ("horizon_length", run.agent_config.horizon_length))


def _refusal(env, loop: str) -> tuple[str, str]:
    """(flag, message) of an env whose step runs `loop` JAX cannot differentiate: --backend
    where the env has physics without it (Brax's own pipelines), else --env."""
    others = [b for b in envs.backends(env.name) if b not in ("mjx", *envs.NOT_DIFFERENTIABLE)]
    instead = (f"use Brax's own physics (--backend {', '.join(others)})" if others else
               "choose an env whose MJX model solves its constraints in one iteration (Brax's ant, CartpoleSwingup)")
    return ("backend" if others else "env",
            f"the agent takes gradients through the env's step, and {env.name}'s physics runs {loop} JAX cannot "
            f"differentiate (MJX's constraint solver, where the model asks for more than one iteration); {instead}")
