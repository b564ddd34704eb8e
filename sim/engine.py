"""The engine: (env, agent, config) -> ONE compiled, donated epoch program.

    epoch = jit(run_epoch, donate_argnums=0)
    run_epoch(state) = lax.scan(iteration, state, length=iterations_per_epoch)

On-policy iteration: `unrolls_per_iteration` unrolls of `unroll_length` steps over all envs
-> observation statistics -> agent.update (GAE, epochs x minibatches).
Off-policy iteration: one step of all envs -> observation statistics -> buffer.add (write)
-> scan of `grad_updates_per_step` x (buffer.sample (read) -> agent.update). Writing before
reading keeps the donated replay ring updated in place (read-then-write makes XLA copy it).

The whole TrainState is donated at this outermost jit and returned FIRST, in the same
structure, so every input buffer aliases its own output buffer; the host receives only a
small dict of scalars per epoch.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

import envs
from envs.base import EnvState
from envs.wrappers import ActionRepeat, AutoReset, EpisodeStats, RunningStats, init_stats, update_stats
from agents.offpolicy import example_transition
from sim import buffer, donation, rollout
from sim.config import Config


@struct.dataclass
class TrainState:
    """Everything a run carries from one epoch to the next (and into a checkpoint)."""

    agent: Any  # params, optimizer state (+ targets, temperature)
    env: EnvState  # batched over num_envs
    obs_stats: RunningStats
    key: jax.Array  # uint32[2]
    iteration: jax.Array  # int32 training iterations done
    buffer: Any = None  # off-policy replay ring


def make_agent(cfg: Config, spec):
    if cfg.agent == "ppo":
        from agents.ppo import make_ppo

        return make_ppo(cfg, spec)
    if cfg.agent == "sac":
        from agents.sac import make_sac

        return make_sac(cfg, spec)
    from agents.td3 import make_td3

    return make_td3(cfg, spec)


class Engine:
    """Builds the environments, the agent and the compiled programs for one config."""

    def __init__(self, cfg: Config):
        self.cfg = cfg.validate()
        base = envs.make(cfg.env, cfg.backend, episode_length=cfg.episode_length)
        if cfg.action_repeat > 1:
            base = ActionRepeat(base, cfg.action_repeat)
        self.eval_env = base
        self.env = AutoReset(EpisodeStats(base))
        self.spec = base.spec
        self.agent = make_agent(cfg, self.spec)
        if cfg.is_off_policy:
            self.example_transition = example_transition(self.spec)
            # Fail before compiling, with the largest capacity that fits, not mid-run with OOM.
            buffer.check_fits(self.example_transition, cfg.max_replay_size)
            self.prefill = donation.jit_in_place(self._prefill, out_index=None)
        # Donated state returned first, leaf for leaf: each buffer aliases its own new value.
        self.epoch = donation.jit_in_place(self._epoch)
        self.evaluate = jax.jit(self._evaluate)
        self.init = jax.jit(self._init)

    # ---- programs ----
    def _init(self, key: jax.Array) -> TrainState:
        key, agent_key, env_key = jax.random.split(key, 3)
        env_state = jax.vmap(self.env.reset)(jax.random.split(env_key, self.cfg.num_envs))
        replay = buffer.init(self.example_transition, self.cfg.max_replay_size) if self.cfg.is_off_policy else None
        return TrainState(
            agent=self.agent.init(agent_key),
            env=env_state,
            obs_stats=init_stats(self.spec.obs_shape),
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            buffer=replay,
        )

    def _iteration(self, state: TrainState, _):
        if self.cfg.is_off_policy:
            return self._off_policy_iteration(state)
        cfg = self.cfg
        key, rollout_key, update_key = jax.random.split(state.key, 3)

        def one_unroll(env_state, unroll_key):
            return rollout.unroll(self.env, self.agent, state.agent, state.obs_stats, env_state, unroll_key,
                                  cfg.unroll_length)

        env_state, data = jax.lax.scan(one_unroll, state.env, jax.random.split(rollout_key, cfg.unrolls_per_iteration))
        # [U, T, B, ...] -> [T, U * B, ...]: each (unroll, env) pair is one trajectory.
        data = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape((x.shape[1], -1) + x.shape[3:]), data)
        obs_stats = update_stats(state.obs_stats, data["obs"]) if cfg.normalize_observations else state.obs_stats
        agent_state, losses = self.agent.update(state.agent, obs_stats, data, update_key)
        metrics = {f"loss/{k}": v for k, v in losses.items()}
        metrics.update(rollout.episode_summary(data))
        new = state.replace(agent=agent_state, env=env_state, obs_stats=obs_stats, key=key,
                            iteration=state.iteration + 1)
        return new, metrics

    def _collect(self, state: TrainState, key: jax.Array, random_actions: bool):
        """One step of every env, stored in the replay ring (write first, see module doc)."""
        env_state, data = rollout.unroll(self.env, self.agent, state.agent, state.obs_stats, state.env, key, 1,
                                         random_actions=random_actions)
        data = jax.tree.map(lambda x: x[0], data)
        obs_stats = update_stats(state.obs_stats, data["obs"]) if self.cfg.normalize_observations else state.obs_stats
        rows = {k: data[k] for k in self.example_transition}
        return state.replace(env=env_state, obs_stats=obs_stats, buffer=buffer.add(state.buffer, rows)), data

    def _off_policy_iteration(self, state: TrainState):
        cfg = self.cfg
        key, collect_key, update_key = jax.random.split(state.key, 3)
        state, data = self._collect(state, collect_key, random_actions=False)

        def gradient_step(agent_state, step_key):
            sample_key, learn_key = jax.random.split(step_key)
            batch = buffer.sample(state.buffer, sample_key, cfg.batch_size)
            return self.agent.update(agent_state, state.obs_stats, batch, learn_key)

        agent_state, losses = jax.lax.scan(gradient_step, state.agent,
                                           jax.random.split(update_key, cfg.grad_updates_per_step))
        metrics = {f"loss/{k}": jnp.mean(v) for k, v in losses.items()}
        metrics.update(rollout.episode_summary(data))
        return state.replace(agent=agent_state, key=key, iteration=state.iteration + 1), metrics

    def _prefill(self, state: TrainState) -> TrainState:
        """Off-policy: fills the replay ring with `prefill_iterations` steps of random actions."""

        def body(state, _):
            key, collect_key = jax.random.split(state.key)
            state, _ = self._collect(state.replace(key=key), collect_key, random_actions=True)
            return state, None

        state, _ = jax.lax.scan(body, state, None, length=self.cfg.prefill_iterations)
        return state

    def _epoch(self, state: TrainState):
        state, metrics = jax.lax.scan(self._iteration, state, None, length=self.cfg.iterations_per_epoch)
        episodes = jnp.sum(metrics.pop("episodes"))
        return_sum = jnp.sum(metrics.pop("return_sum"))
        out = {k: jnp.mean(v) for k, v in metrics.items()}
        out["train/episodes"] = episodes
        out["train/episode_return"] = jnp.where(episodes > 0, return_sum / jnp.maximum(episodes, 1.0), jnp.nan)
        return state, out

    def _evaluate(self, state: TrainState, key: jax.Array) -> dict:
        metrics = rollout.evaluate(self.eval_env, self.agent, state.agent, state.obs_stats, key,
                                   self.cfg.num_eval_envs)
        return {f"eval/{k}": v for k, v in metrics.items()}

    # ---- host-side helpers ----
    def env_steps(self, state: TrainState) -> int:
        return self.cfg.prefill_steps + int(state.iteration) * self.cfg.steps_per_iteration
