"""The unroll loop (on-policy agents: PPO, PQN): `unrolls_per_iteration` unrolls of
`unroll_length` steps of every env -> observation statistics -> one `agent.update` on the
whole [T, U * B] batch of trajectories. Nothing of its own in the state."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from envs.wrappers import update_stats
from sim.core import metrics, rollout
from sim.core.state import count_steps


def trajectories(tree):
    """Unrolls [U, T, B, ...] -> [T, U * B, ...]: each (unroll, env) pair is one trajectory."""
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape((x.shape[1], -1) + x.shape[3:]), tree)


class UnrollLoop:
    name = "unroll"
    prefill = None  # nothing runs before training
    keeps_buffer = False  # no replay ring in the state
    splits_over_cores = True  # a physics env's run splits its envs over a CPU host's cores
    work_sizes = ("num_minibatches", "batch_size", "unroll_length")  # what sizes an iteration's work

    def setup(self, core) -> None:
        pass

    def init(self, core, key) -> dict:
        return {}

    def collect(self, core, state, key):
        """(the state fields it advanced, what the update learns from, the steps [T, U * B])
        of `unrolls_per_iteration` unrolls of every env from `key`."""

        def one_unroll(env_state, unroll_key):
            return rollout.unroll(core.env, core.agent, state.agent, state.obs_stats, env_state, unroll_key,
                                  core.dev.agent_config.unroll_length)

        unroll_keys = jax.random.split(core.device_key(key), core.dev.unrolls_per_iteration)
        env_state, data = jax.lax.scan(one_unroll, state.env, unroll_keys)
        data = trajectories(data)
        return {"env": env_state}, data, data

    def iteration(self, core, state):
        """collect -> observation statistics -> one update on the whole batch."""
        key, rollout_key, update_key = jax.random.split(state.key, 3)
        advanced, batch, steps = self.collect(core, state, rollout_key)
        obs_stats = state.obs_stats
        if core.dev.agent_config.normalize_observations:
            obs_stats = update_stats(obs_stats, steps.obs, core.axis)
        agent_state, losses = core.agent.update(state.agent, obs_stats, batch, update_key)
        new = state.replace(agent=agent_state, obs_stats=obs_stats, key=key, iteration=state.iteration + 1,
                            env_steps=count_steps(state.env_steps, core.cfg.steps_per_iteration), **advanced)
        return new, metrics.iteration(jax.tree.map(lambda v: v[None], losses), steps)

    def memory(self, core, template, per_device) -> tuple[list, tuple]:
        """No part of its own; an iteration's rollout, num-minibatches x batch-size x
        unroll-length steps, sizes the epoch's working memory."""
        hp = core.cfg.agent_config
        return [], (("num_minibatches", hp.num_minibatches), ("batch_size", hp.batch_size),
                    ("unroll_length", hp.unroll_length))
