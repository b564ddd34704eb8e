"""The unroll loop (on-policy agents: PPO, PQN): `unrolls_per_iteration` unrolls of
`unroll_length` steps of every env -> observation statistics -> one `agent.update` on the
whole [T, U * B] batch of trajectories. It keeps no state of its own (`TrainState.loop` is None)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import jax
import jax.numpy as jnp

from envs.wrappers import update_stats
from sim.core import metrics, rollout
from sim.core.loops.base import LoopContext, as_reset, nothing_droppable
from sim.core.state import count_steps


def trajectories(tree):
    """Unrolls [U, T, B, ...] -> [T, U * B, ...]: each (unroll, env) pair is one trajectory."""
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape((x.shape[1], -1) + x.shape[3:]), tree)


@dataclasses.dataclass(frozen=True)
class UnrollLoop:
    context: LoopContext
    unrolls: int  # sequential unrolls of every env per iteration
    length: int  # steps of each unroll

    splits_over_cores: ClassVar[bool] = True  # a physics env's run splits its envs over a CPU host's cores
    work_sizes: ClassVar[tuple[str, ...]] = ("num_minibatches", "batch_size", "unroll_length")
    droppable: ClassVar[Optional[str]] = None
    prefill_iterations: ClassVar[int] = 0  # nothing runs before training
    droppable_mask = staticmethod(nothing_droppable)
    episodic_mask = staticmethod(nothing_droppable)  # its state is None
    start = staticmethod(as_reset)

    @classmethod
    def make(cls, context: LoopContext) -> "UnrollLoop":
        hp = context.dev.agent_config
        return cls(context, hp.unrolls_per_iteration(context.dev.num_envs), hp.unroll_length)

    def init(self, key: jax.Array):
        return None

    def prefill(self, state):
        return state

    def collect(self, state, key: jax.Array):
        """(the envs and the loop's state after the unrolls, what the update learns from, the
        steps [T, U * B]) of `unrolls` unrolls of every env from `key`."""
        ctx = self.context

        def one_unroll(env_state, unroll_key):
            out = rollout.unroll(ctx.env, ctx.agent, state.agent, state.obs_stats, env_state, None, unroll_key,
                                 self.length)
            return out.env, out.steps

        unroll_keys = jax.random.split(ctx.device_key(key), self.unrolls)
        env_state, steps = jax.lax.scan(one_unroll, state.env, unroll_keys)
        steps = trajectories(steps)
        return (env_state, None), steps, steps

    def iteration(self, state):
        """collect -> observation statistics -> one update on the whole batch."""
        ctx = self.context
        key, rollout_key, update_key = jax.random.split(state.key, 3)
        (env_state, loop_state), batch, steps = self.collect(state, rollout_key)
        obs_stats = state.obs_stats
        if ctx.dev.agent_config.normalize_observations:
            obs_stats = update_stats(obs_stats, steps.obs, ctx.axis)
        agent_state, losses = ctx.agent.update(state.agent, obs_stats, batch, update_key)
        new = state.replace(agent=agent_state, obs_stats=obs_stats, key=key, iteration=state.iteration + 1,
                            env_steps=count_steps(state.env_steps, ctx.run.steps_per_iteration), env=env_state,
                            loop=loop_state)
        return new, metrics.iteration(jax.tree.map(lambda v: v[None], losses), steps)

    def memory(self, template, per_device) -> tuple[list, tuple]:
        """No part of its own; an iteration's rollout, num-minibatches x batch-size x
        unroll-length steps, sizes the epoch's working memory."""
        hp = self.context.run.agent_config
        return [], (("num_minibatches", hp.num_minibatches), ("batch_size", hp.batch_size),
                    ("unroll_length", hp.unroll_length))
