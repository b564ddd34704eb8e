"""The recurrent loop (recurrent on-policy agents: PPO-RNN): the unroll loop's iteration,
with each env's recurrent state carried in the training state (`TrainState.carry`) from one
unroll to the next, reset where an episode starts. The update gets a `Sequence`: the
unrolls' steps, each trajectory's recurrent state when its unroll began, and the episode
starts, so it can replay every trajectory through the network (truncated backpropagation
through time over the unroll)."""

from __future__ import annotations

import jax

from agents.base import Sequence
from envs.wrappers import update_stats
from sim.core import metrics, rollout
from sim.core.loops.unroll import UnrollLoop, trajectories
from sim.core.state import count_steps


class RecurrentLoop(UnrollLoop):
    name = "recurrent"

    def init(self, core, key) -> dict:
        return {"carry": core.agent.carry(core.dev.num_envs)}

    def iteration(self, core, state):
        dev = core.dev
        key, rollout_key, update_key = jax.random.split(state.key, 3)

        def one_unroll(carry, unroll_key):
            env_state, memory = carry
            (env_state, after), (data, start) = rollout.unroll(
                core.env, core.agent, state.agent, state.obs_stats, env_state, unroll_key, dev.hp.unroll_length,
                carry=memory)
            return (env_state, after), Sequence(steps=data, carry0=memory, start=start)

        unroll_keys = jax.random.split(core.device_key(rollout_key), dev.unrolls_per_iteration)
        (env_state, carry), seq = jax.lax.scan(one_unroll, (state.env, state.carry), unroll_keys)
        # Each (unroll, env) pair is one trajectory with the recurrent state it began from:
        # carries [U, B, ...] -> [U * B, ...] in the trajectories' order.
        steps, start = trajectories((seq.steps, seq.start))
        seq = Sequence(steps=steps, start=start, carry0=jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]),
                                                                     seq.carry0))
        obs_stats = state.obs_stats
        if dev.hp.normalize_observations:
            obs_stats = update_stats(obs_stats, seq.steps.obs, core.axis)
        agent_state, losses = core.agent.update(state.agent, obs_stats, seq, update_key)
        new = state.replace(agent=agent_state, env=env_state, carry=carry, obs_stats=obs_stats, key=key,
                            iteration=state.iteration + 1,
                            env_steps=count_steps(state.env_steps, core.cfg.steps_per_iteration))
        return new, metrics.iteration(jax.tree.map(lambda v: v[None], losses), seq.steps)

    def memory(self, core, template, per_device) -> tuple[list, tuple]:
        """The envs' recurrent states beside the unroll loop's working memory."""
        from sim.core.memory import Part

        parts, work = super().memory(core, template, per_device)
        return [*parts, Part("the recurrent states", per_device(template.carry), (("num_envs", core.cfg.num_envs),))], work
