"""The recurrent loop (recurrent on-policy agents: PPO-RNN): the unroll loop's iteration,
with each env's recurrent state carried in the training state (`TrainState.carry`) from one
unroll to the next, reset where an episode starts. The update gets a `Sequence`: the
unrolls' steps, each trajectory's recurrent state when its unroll began, and the episode
starts, so it can replay every trajectory through the network (truncated backpropagation
through time over the unroll)."""

from __future__ import annotations

import jax

from agents.base import Sequence
from sim.core import rollout
from sim.core.loops.unroll import UnrollLoop, trajectories


class RecurrentLoop(UnrollLoop):
    name = "recurrent"

    def init(self, core, key) -> dict:
        return {"carry": core.agent.carry(core.dev.num_envs)}

    def collect(self, core, state, key):
        """The unroll loop's collection with each env's recurrent state threaded through and
        advanced; the update gets the `Sequence`."""

        def one_unroll(carry, unroll_key):
            env_state, memory = carry
            (env_state, after), (data, start) = rollout.unroll(
                core.env, core.agent, state.agent, state.obs_stats, env_state, unroll_key, core.dev.agent_config.unroll_length,
                carry=memory)
            return (env_state, after), Sequence(steps=data, carry0=memory, start=start)

        unroll_keys = jax.random.split(core.device_key(key), core.dev.unrolls_per_iteration)
        (env_state, carry), seq = jax.lax.scan(one_unroll, (state.env, state.carry), unroll_keys)
        # Each (unroll, env) pair is one trajectory with the recurrent state it began from:
        # carries [U, B, ...] -> [U * B, ...] in the trajectories' order.
        steps, start = trajectories((seq.steps, seq.start))
        carry0 = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), seq.carry0)
        return {"env": env_state, "carry": carry}, Sequence(steps=steps, start=start, carry0=carry0), steps

    def memory(self, core, template, per_device) -> tuple[list, tuple]:
        """The envs' recurrent states beside the unroll loop's working memory."""
        from sim.core.memory import Part

        parts, work = super().memory(core, template, per_device)
        return [*parts, Part("the recurrent states", per_device(template.carry), (("num_envs", core.cfg.num_envs),))], work
