"""The replay loop (off-policy agents: SAC, TD3, DDPG, DQN): one step of every env ->
observation statistics -> `buffer.add` (write) -> a scan of `grad_updates_per_step` x
(`buffer.sample` (read) -> `agent.update`; an agent may take several gradient steps' batches
per call, `Agent.updates_per_call`). Writing before reading keeps the donated replay ring
updated in place (read-then-write makes XLA copy it). Its part of the state: the ring,
filled before training by `prefill_iterations` steps of random actions, and each env's
`carry` where the agent keeps one (FastTD3's exploration noise scales), reset at episode
starts. An agent with `steps_per_sample` n > 1 gets sequences of n consecutive steps of
one env (`buffer.sample_sequences`), with `truncated` stored in the ring."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from agents.base import Step, Transition
from envs.wrappers import update_stats
from sim.core import buffer, metrics, rollout
from sim.core.state import count_steps


class ReplayLoop:
    name = "replay"
    keeps_buffer = True  # the replay ring is the loop's part of the state
    splits_over_cores = False  # one step of every env per iteration: too little to split
    work_sizes = ("batch_size", "max_replay_size")  # what sizes an iteration's work

    def setup(self, core) -> None:
        """The ring's row (`core.example_transition`), checked to fit before compiling: fail
        with the largest capacity that fits (memory.TooLarge), not mid-run with OOM."""
        core.example_transition = example_transition(core.agent, core.spec)
        buffer.check_fits(core.example_transition, core.dev.agent_config.max_replay_size)

    def init(self, core, key) -> dict:
        part = {"buffer": buffer.init(core.example_transition, core.dev.agent_config.max_replay_size)}
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
        row = Transition.of(data, truncated=core.example_transition.truncated is not None)
        return state.replace(env=env_state, carry=carry, obs_stats=obs_stats, buffer=buffer.add(state.buffer, row),
                             env_steps=steps), data

    def iteration(self, core, state):
        dev = core.dev
        key, collect_key, update_key = jax.random.split(state.key, 3)
        state, data = self.collect(core, state, collect_key, random_actions=False)

        n = core.agent.steps_per_sample

        def sample(step_key):
            sample_key, learn_key = jax.random.split(step_key)
            if n > 1:
                return buffer.sample_sequences(state.buffer, core.device_key(sample_key), dev.agent_config.batch_size,
                                               n, stride=dev.num_envs), learn_key
            return buffer.sample(state.buffer, core.device_key(sample_key), dev.agent_config.batch_size), learn_key

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


def example_transition(agent, spec) -> Transition:
    """One replay row of zeros, its action as the agent stores it (e.g. int32 for discrete)."""
    obs = jnp.zeros(spec.obs_shape, jnp.float32)
    _, acted = jax.eval_shape(lambda key: agent.explore(key, 1), jax.random.PRNGKey(0))
    action = jax.tree.map(lambda s: jnp.zeros(s.shape[1:], s.dtype), acted)
    scalar = jnp.zeros((), jnp.float32)
    return Transition(obs=obs, action=action, reward=scalar, terminated=scalar, next_obs=obs,
                      truncated=scalar if agent.steps_per_sample > 1 else None)
