"""The replay loop (off-policy agents: SAC, TD3, DDPG, DQN, FastTD3, FastSAC): one step of
every env -> observation statistics -> `step_ring.add` (write) -> a scan of
`grad_updates_per_step` x (`step_ring.sample` (read) -> `agent.update`; an agent may take
several gradient steps' batches per call, `Agent.updates_per_call`). Writing before reading
keeps the donated replay ring updated in place (read-then-write makes XLA copy it). Its part
of the state: the ring (`sim/core/step_ring.py`: each observation stored once), filled
before training by `prefill_iterations` steps of random actions, and each env's `carry`
where the agent keeps one (FastTD3's exploration noise scales), reset at episode starts. An
agent whose config's `steps_per_sample` n > 1 gets samples of n consecutive steps of one env."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from agents.base import Step
from envs.wrappers import update_stats
from sim.core import metrics, rollout, step_ring
from sim.core.state import count_steps


class ReplayLoop:
    name = "replay"
    keeps_buffer = True  # the replay ring is the loop's part of the state
    splits_over_cores = False  # one step of every env per iteration: too little to split
    work_sizes = ("batch_size", "max_replay_size")  # what sizes an iteration's work

    def setup(self, core) -> None:
        """The ring's row (`core.example_row`), checked to fit before compiling: fail with
        the largest capacity that fits (memory.TooLarge), not mid-run with OOM."""
        core.example_row = example_row(core.agent, core.spec)
        core.ring_sizes = dict(capacity=core.dev.agent_config.max_replay_size, num_envs=core.dev.num_envs,
                               interval=truncation_interval(core))
        step_ring.check_fits(core.example_row, **core.ring_sizes)

    def init(self, core, key) -> dict:
        part = {"buffer": step_ring.init(core.example_row, **core.ring_sizes)}
        if core.agent.carry is not None:
            part["carry"] = core.agent.carry(core.dev.num_envs)
        return part

    def collect(self, core, state, key: jax.Array, random_actions: bool):
        """One step of every env, stored in the replay ring (write first, see module doc)."""
        out = rollout.unroll(core.env, core.agent, state.agent, state.obs_stats, state.env, core.device_key(key), 1,
                             random_actions=random_actions, carry=state.carry)
        (env_state, carry), (data, _) = out if state.carry is not None else ((out[0], None), (out[1], None))
        data: Step = jax.tree.map(lambda x: x[0], data)
        obs_stats = state.obs_stats
        if core.dev.agent_config.normalize_observations:
            obs_stats = update_stats(obs_stats, data.obs, core.axis)
        steps = count_steps(state.env_steps, core.cfg.num_envs * core.cfg.action_repeat)
        return state.replace(env=env_state, carry=carry, obs_stats=obs_stats, buffer=step_ring.add(state.buffer, data),
                             env_steps=steps), data

    def iteration(self, core, state):
        dev = core.dev
        key, collect_key, update_key = jax.random.split(state.key, 3)
        state, data = self.collect(core, state, collect_key, random_actions=False)

        n = dev.agent_config.steps_per_sample

        def sample(step_key):
            sample_key, learn_key = jax.random.split(step_key)
            return step_ring.sample(state.buffer, core.device_key(sample_key), dev.agent_config.batch_size,
                                    n), learn_key

        # One call per gradient step, or per `updates_per_call` of them (k batches at once).
        k = core.agent.updates_per_call
        keys = jax.random.split(update_key, dev.agent_config.grad_updates_per_step)
        if k > 1:
            keys = keys.reshape((-1, k) + keys.shape[1:])

        def gradient_step(agent_state, step_key):
            batch, learn_key = jax.vmap(sample)(step_key) if k > 1 else sample(step_key)
            return core.agent.update(agent_state, state.obs_stats, batch, learn_key)

        agent_state, losses = jax.lax.scan(gradient_step, state.agent, keys)
        new = state.replace(agent=agent_state, key=key, iteration=state.iteration + 1)
        return new, metrics.iteration(losses, data)

    def prefill(self, core, state):
        """Fills the replay ring with `prefill_iterations` steps of random actions."""

        def body(state, _):
            key, collect_key = jax.random.split(state.key)
            state, _ = self.collect(core, state.replace(key=key), collect_key, random_actions=True)
            return state, None

        state, _ = jax.lax.scan(body, state, None, length=core.dev.prefill_iterations)
        return state

    def memory(self, core, template, per_device) -> tuple[list, tuple]:
        """The ring; a batch of every env sizes the epoch's working memory."""
        from sim.core.memory import Part

        hp = core.cfg.agent_config
        ring = Part("the replay buffer", per_device(template.buffer), (("max_replay_size", hp.max_replay_size),))
        return [ring], (("batch_size", hp.batch_size), ("num_envs", core.cfg.num_envs))


def example_row(agent, spec) -> step_ring.Row:
    """One replay row of zeros, its action as the agent stores it (e.g. int32 for discrete)."""
    _, acted = jax.eval_shape(lambda key: agent.explore(key, 1), jax.random.PRNGKey(0))
    action = jax.tree.map(lambda s: jnp.zeros(s.shape[1:], s.dtype), acted)
    return step_ring.example_row(jnp.zeros(spec.obs_shape, jnp.float32), action)


def truncation_interval(core) -> int:
    """Ring steps an env takes at least from one truncation to the next: its time limit, in
    inner env steps, over the action repeat."""
    return max(1, core.spec.episode_length // core.cfg.action_repeat)
