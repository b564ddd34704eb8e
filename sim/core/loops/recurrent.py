"""The recurrent loop (recurrent on-policy agents: PPO-RNN): the unroll loop's iteration,
with each env's recurrent state (the agent's carry) as the loop's state, carried from one
unroll to the next and reset where an episode starts. The update gets a `Sequence`: the
unrolls' steps, each trajectory's recurrent state when its unroll began, and the episode
starts, so it can replay every trajectory through the network (truncated backpropagation
through time over the unroll)."""

from __future__ import annotations

import dataclasses

import jax

from sim.core.contract import Sequence
from sim.core import rollout
from sim.core.loops.base import all_episodic
from sim.core.loops.unroll import UnrollLoop, trajectories
from sim.core.memory import Part


@dataclasses.dataclass(frozen=True)
class RecurrentLoop(UnrollLoop):
    episodic_mask = staticmethod(all_episodic)  # each env's recurrent state, of its current episode

    def init(self, key: jax.Array):
        return self.context.agent.carry(self.context.dev.num_envs)

    def collect(self, state, key: jax.Array):
        """The unroll loop's collection with each env's recurrent state threaded through and
        advanced; the update gets the `Sequence`."""
        ctx = self.context

        def one_unroll(carry, unroll_key):
            env_state, memory = carry
            out = rollout.unroll(ctx.env, ctx.agent, state.agent, state.obs_stats, env_state, memory, unroll_key,
                                 self.length)
            return (out.env, out.carry), Sequence(steps=out.steps, carry0=memory, start=out.start)

        unroll_keys = jax.random.split(ctx.device_key(key), self.unrolls)
        (env_state, carry), seq = jax.lax.scan(one_unroll, (state.env, state.loop), unroll_keys)
        # Each (unroll, env) pair is one trajectory with the recurrent state it began from:
        # carries [U, B, ...] -> [U * B, ...] in the trajectories' order.
        steps, start = trajectories((seq.steps, seq.start))
        carry0 = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), seq.carry0)
        return (env_state, carry), Sequence(steps=steps, start=start, carry0=carry0), steps

    def memory(self, template, per_device) -> tuple[list, tuple]:
        """The envs' recurrent states beside the unroll loop's working memory."""
        parts, work = super().memory(template, per_device)
        carry = Part("the recurrent states", per_device(template.loop), (("num_envs", self.context.run.num_envs),))
        return [*parts, carry], work
