"""The replay loop (off-policy agents: SAC, TD3, DDPG, DQN, FastTD3, FastSAC): one step of
every env -> observation statistics -> `step_ring.add` (write) -> a scan of
`grad_updates_per_step` x (`step_ring.sample` (read) -> `agent.update`; an agent may take
several gradient steps' batches per call, `Agent.updates_per_call`). Writing before reading
keeps the donated replay ring updated in place (read-then-write makes XLA copy it).

Its state (`ReplayState`): the ring (`sim/core/step_ring.py`: each observation stored once),
filled before training by `prefill_iterations` steps of random actions, and each env's
`carry` where the agent keeps one (FastTD3's exploration noise scales), reset at episode
starts. A checkpoint may leave the ring out (a resume refills it). An agent whose config's
`steps_per_sample` n > 1 gets samples of n consecutive steps of one env."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Optional

import jax
import jax.numpy as jnp
from flax import struct

from sim.core.contract import Step
from envs.wrappers import update_stats
from sim.core import buffer, metrics, rollout, step_ring
from sim.core.loops.base import LoopContext, all_episodic, as_reset
from sim.core.memory import Part
from sim.core.state import count_steps


@struct.dataclass
class ReplayState:
    ring: step_ring.StepRing
    carry: Any = None  # the agent's per-env state [B, ...] (None where it keeps none)


@dataclasses.dataclass(frozen=True)
class ReplayLoop:
    context: LoopContext
    row: step_ring.Row  # one replay row of zeros
    ring_sizes: dict  # capacity, num_envs, interval (step_ring.init's)
    prefill_iterations: int  # random-action iterations before training

    splits_over_cores: ClassVar[bool] = False  # one step of every env per iteration: too little to split
    work_sizes: ClassVar[tuple[str, ...]] = ("batch_size", "max_replay_size")
    droppable: ClassVar[Optional[str]] = "replay buffer"
    start = staticmethod(as_reset)

    @classmethod
    def make(cls, context: LoopContext) -> "ReplayLoop":
        """Binds the ring's sizes and checks that it fits before anything compiles: fails with
        the largest capacity that fits (memory.TooLarge), not mid-run with OOM."""
        dev = context.dev
        row = example_row(context.agent, context.spec)
        sizes = dict(capacity=dev.agent_config.max_replay_size, num_envs=dev.num_envs,
                     interval=max(1, context.spec.episode_length // context.run.action_repeat))
        step_ring.check_fits(row, **sizes)
        return cls(context, row, sizes, dev.prefill_iterations)

    def init(self, key: jax.Array) -> ReplayState:
        carry = None if self.context.agent.carry is None else self.context.agent.carry(self.context.dev.num_envs)
        return ReplayState(ring=step_ring.init(self.row, **self.ring_sizes), carry=carry)

    def droppable_mask(self, loop_state: ReplayState):
        """The ring may be left out of checkpoints; the agent's carry never is."""
        mark = lambda flag: lambda _: flag  # noqa: E731
        return ReplayState(ring=jax.tree.map(mark(True), loop_state.ring),
                           carry=jax.tree.map(mark(False), loop_state.carry))

    # Left out with the envs, the ring goes too: its newest rows continue the envs' episodes
    # (a resume refills it, as without the buffer).
    episodic_mask = staticmethod(all_episodic)

    def collect(self, state, key: jax.Array, random_actions: bool):
        """One step of every env, stored in the replay ring (write first, see module doc)."""
        ctx = self.context
        loop: ReplayState = state.loop
        out = rollout.unroll(ctx.env, ctx.agent, state.agent, state.obs_stats, state.env, loop.carry,
                             ctx.device_key(key), 1, random_actions=random_actions)
        data: Step = jax.tree.map(lambda x: x[0], out.steps)
        obs_stats = state.obs_stats
        if ctx.dev.agent_config.normalize_observations:
            obs_stats = update_stats(obs_stats, data.obs, ctx.axis)
        steps = count_steps(state.env_steps, ctx.run.num_envs * ctx.run.action_repeat)
        loop = loop.replace(ring=step_ring.add(loop.ring, data), carry=out.carry)
        return state.replace(env=out.env, obs_stats=obs_stats, loop=loop, env_steps=steps), data

    def iteration(self, state):
        ctx = self.context
        hp = ctx.dev.agent_config
        key, collect_key, update_key = jax.random.split(state.key, 3)
        state, data = self.collect(state, collect_key, random_actions=False)
        ring = state.loop.ring

        def sample(step_key):
            sample_key, learn_key = jax.random.split(step_key)
            return step_ring.sample(ring, ctx.device_key(sample_key), hp.batch_size, hp.steps_per_sample), learn_key

        # The batches are drawn before the gradient steps that read them (the ring does not change
        # in between), as many at once as `presample_chunks` allows: one gather of G x M rows costs
        # about what one of M rows does on a TPU, where G gathers inside the scan cost G times that.
        # Each gradient step gets the batch and key it would get drawn alone.
        steps, k = hp.grad_updates_per_step, ctx.agent.updates_per_call
        one = jax.eval_shape(lambda r: step_ring.sample(r, jax.random.PRNGKey(0), hp.batch_size, hp.steps_per_sample),
                             ring)
        chunks = presample_chunks(steps // k, k * buffer.transition_bytes(one))
        keys = jax.random.split(update_key, steps)
        keys = keys.reshape((chunks, steps // (chunks * k), k) + keys.shape[1:])

        def gradient_steps(agent_state, chunk_keys):  # chunk_keys [calls, k, 2]
            batches, learn_keys = jax.vmap(jax.vmap(sample))(chunk_keys)
            if k == 1:
                batches, learn_keys = jax.tree.map(lambda x: x[:, 0], (batches, learn_keys))
            return jax.lax.scan(lambda s, xs: ctx.agent.update(s, state.obs_stats, *xs), agent_state,
                                (batches, learn_keys))

        if chunks == 1:
            agent_state, losses = gradient_steps(state.agent, keys[0])
        else:
            agent_state, losses = jax.lax.scan(gradient_steps, state.agent, keys)
            losses = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), losses)
        new = state.replace(agent=agent_state, key=key, iteration=state.iteration + 1)
        return new, metrics.iteration(losses, data)

    def prefill(self, state):
        """Fills the replay ring with `prefill_iterations` steps of random actions."""

        def body(state, _):
            key, collect_key = jax.random.split(state.key)
            state, _ = self.collect(state.replace(key=key), collect_key, random_actions=True)
            return state, None

        state, _ = jax.lax.scan(body, state, None, length=self.prefill_iterations)
        return state

    def memory(self, template, per_device) -> tuple[list, tuple]:
        """The ring; a batch of every env sizes the epoch's working memory."""
        hp = self.context.run.agent_config
        ring = Part("the replay buffer", per_device(template.loop.ring), (("max_replay_size", hp.max_replay_size),))
        return [ring], (("batch_size", hp.batch_size), ("num_envs", self.context.run.num_envs))


PRESAMPLE_BYTES = 1 << 28  # at most this many bytes of batches drawn ahead of their gradient steps


def presample_chunks(calls: int, call_bytes: int, budget: Optional[int] = None) -> int:
    """How many parts an iteration's `calls` update calls are drawn in: the fewest, dividing
    `calls`, whose batches (`call_bytes` each) fit in `budget`; `calls` (one call's batches at a
    time) where none does. `budget` None: `PRESAMPLE_BYTES`."""
    budget = PRESAMPLE_BYTES if budget is None else budget
    for chunks in range(1, calls + 1):
        if calls % chunks == 0 and (calls // chunks) * call_bytes <= budget:
            return chunks
    return calls


def example_row(agent, spec) -> step_ring.Row:
    """One replay row of zeros, its action as the agent stores it (e.g. int32 for discrete)."""
    _, acted = jax.eval_shape(lambda key: agent.explore(key, 1), jax.random.PRNGKey(0))
    action = jax.tree.map(lambda s: jnp.zeros(s.shape[1:], s.dtype), acted)
    return step_ring.example_row(jnp.zeros(spec.obs_shape, jnp.float32), action)
