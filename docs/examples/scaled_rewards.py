"""A worked example of adding a loop: the unroll loop, with rewards divided by the running
standard deviation of each env's discounted return (the reward normalisation of many PPO
implementations). The loop owns its state: each env's discounted return so far and the
running statistics of those returns, carried in `TrainState.loop` from one iteration to the
next, counted by the memory check, kept by checkpoints (resume is bitwise), copied with a
diverged population member's envs. An agent chooses it by declaring its iteration kind.

In the package it would be sim/core/loops/scaled.py, `SCALED` a kind in sim/core/contract.py and one
line in sim/core/loops/__init__.py's LOOPS; tests/test_docs.py registers it from here and
trains PPO with it.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from sim.core.contract import AgentDef, Kind
from agents.config import agent_config
from agents.ppo import PPOConfig, make_ppo
from envs.wrappers import RunningStats, init_stats, update_stats
from sim.core.loops import LOOPS
from sim.core.loops.unroll import UnrollLoop
from sim.core.memory import Part

SCALED = Kind("scaled_unroll")


@struct.dataclass
class ReturnScale:
    returns: jax.Array  # [B] each env's discounted return so far in its episode
    stats: RunningStats  # of those returns, every step's (a scalar's statistics)


@dataclasses.dataclass(frozen=True)
class ScaledUnrollLoop(UnrollLoop):
    """The unroll loop; the update sees each reward divided by the returns' running std."""

    def init(self, key: jax.Array) -> ReturnScale:
        return ReturnScale(returns=jnp.zeros((self.context.dev.num_envs,), jnp.float32), stats=init_stats(()))

    def collect(self, state, key: jax.Array):
        (env_state, _), batch, steps = super().collect(state, key)
        gamma = state.agent.hp.discounting
        own: ReturnScale = state.loop
        # [T, U * B] steps: the U unrolls of every env one after another, env by env.
        per_env = steps.reward.reshape(steps.reward.shape[0], -1, own.returns.shape[0])

        def step(g, x):
            reward, done = x
            g = gamma * g + reward
            return g * (1.0 - done), g

        done = steps.episode_done.reshape(per_env.shape)
        moved = jnp.swapaxes(per_env, 0, 1).reshape((-1,) + per_env.shape[2:])  # unroll-major, then time
        g, seen = jax.lax.scan(step, own.returns, (moved, jnp.swapaxes(done, 0, 1).reshape(moved.shape)))
        stats = update_stats(own.stats, seen.reshape(-1), self.context.axis)
        batch = batch.replace(reward=batch.reward / stats.std)
        return (env_state, ReturnScale(returns=g, stats=stats)), batch, steps

    def memory(self, template, per_device):
        parts, work = super().memory(template, per_device)
        return [*parts, Part("the return statistics", per_device(template.loop), (("num_envs", self.context.run.num_envs),))], work


@agent_config
class ScaledPPOConfig(PPOConfig):
    """PPO's hyper-parameters, trained on the scaled-rewards loop."""

    kind = SCALED


AGENT = AgentDef(name="ppo_scaled", about="PPO on rewards scaled by the returns' running std (a worked example)",
                 config=ScaledPPOConfig, make=make_ppo, actions=("continuous", "discrete"))


def register() -> None:
    """What its one line in sim/core/loops/__init__.py would do."""
    LOOPS[SCALED] = ScaledUnrollLoop
