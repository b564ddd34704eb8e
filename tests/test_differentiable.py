"""The differentiable loop and its agents (APG, SHAC): gradients taken through the env's step
equal hand-derived ones, the agents learn pendulum, and envs whose step JAX cannot
differentiate are refused."""

import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.apg import APGConfig, make_apg
from sim.core.contract import Agent
from agents.shac import segment_weights, short_horizon_loss
from envs.base import Env, EnvSpec
from envs.wrappers import AutoReset, EpisodeStats, init_stats
from sim.core.loops.base import LoopContext
from sim.core.loops.differentiable import DifferentiableLoop
from sim.core.state import TrainState
from sim.run.config import ConfigError, defaults_for
from sim.run.trainer import train
from tests.helpers import needs

A, B = 0.9, 0.5  # x' = A x + B u, reward -x'^2


class Linear(Env):
    """A scalar linear system: x' = A x + B u, reward -x'^2, episodes of 3 steps, x0 = 1 + env index."""

    spec = EnvSpec(obs_shape=(1,), discrete=False, episode_length=3, action_shape=(1,), action_low=(-1e6,),
                   action_high=(1e6,))

    def _reset(self, key, params):
        x = jax.random.randint(key, (1,), 1, 3).astype(jnp.float32)  # 1 or 2
        return x, x

    def _step(self, x, action, params):
        x = A * x + B * action
        return x, x, -jnp.sum(x**2), jnp.zeros(())


def loop_of(agent: Agent, num_envs: int, horizon: int, spec=Linear.spec) -> DifferentiableLoop:
    hp = types.SimpleNamespace(horizon_length=horizon, normalize_observations=False)
    run = types.SimpleNamespace(num_envs=num_envs, steps_per_iteration=num_envs * horizon, agent_config=hp)
    dev = types.SimpleNamespace(num_envs=num_envs, agent_config=hp)
    env = AutoReset(EpisodeStats(Linear()), spares=False)
    return DifferentiableLoop.make(LoopContext(env, agent, spec, dev, run, None))


def first_state(loop, agent_state, num_envs):
    env = loop.context.env
    envs = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(3), num_envs))
    return TrainState(agent=agent_state, env=envs, obs_stats=init_stats((1,)), key=jax.random.PRNGKey(0),
                      iteration=jnp.zeros((), jnp.int32), env_steps=jnp.zeros((2,), jnp.int32))


def test_the_loops_gradient_through_three_steps_of_a_linear_system_is_the_analytic_one():
    """u = k x: x_t = (A + B k)^t x0, so d/dk of the mean reward over 3 steps and the envs is
    -(1/3) mean_envs(x0^2) sum_t 2 (t + 1) c^(2t + 1) B, c = A + B k."""
    def act(k, obs_stats, obs, key, deterministic=False, carry=None):
        return k * obs, k * obs, carry

    def update(k, obs_stats, data, key):
        def mean_reward(p):
            steps, after = data.unroll(p)
            return jnp.mean(steps.reward), after

        (value, after), grad = jax.value_and_grad(mean_reward, has_aux=True)(k)
        return k, {"policy": value, "grad": grad}, jax.lax.stop_gradient(after)

    agent = Agent(init=None, act=act, update=update)
    loop = loop_of(agent, num_envs=4, horizon=3)
    state = first_state(loop, jnp.asarray(-0.4), 4)
    x0 = np.asarray(state.env.obs[:, 0])
    new, record = jax.jit(loop.iteration)(state)
    c, k = A + B * -0.4, -0.4
    expected = -np.mean(x0**2) / 3 * sum(2 * (t + 1) * c ** (2 * t + 1) * B for t in range(3))
    np.testing.assert_allclose(float(record.losses["grad"].total), expected, rtol=1e-5)
    assert int(record.episodes) == 4  # each env's 3-step episode ended in the unroll
    np.testing.assert_allclose(np.asarray(record.return_sum), -np.sum(x0**2) * sum(c ** (2 * t + 2) for t in range(3)),
                               rtol=1e-5)
    assert k == -0.4 and int(new.iteration) == 1


def test_apg_steps_on_the_gradient_of_its_unroll_taken_independently():
    """APG's gradient norm (before clipping) and loss equal those of the same 3-step unroll
    written out by hand (the policy applied to x, then x' = A x + B u), without its loop."""
    config = APGConfig(horizon_length=3, action_noise=0.0, max_grad_norm=None, policy_hidden_sizes=(8,))
    agent = make_apg(config, Linear.spec)
    loop = loop_of(agent, num_envs=2, horizon=3)
    state = first_state(loop, agent.init(jax.random.PRNGKey(1)), 2)
    new, record = jax.jit(loop.iteration)(state)

    def by_hand(params):
        x, total = state.env.obs, 0.0
        for _ in range(3):
            u, _, _ = agent.act(state.agent.replace(policy=params), state.obs_stats, x, None, True)
            x = A * x + B * u
            total = total - jnp.mean(x[:, 0] ** 2)
        return -total / 3

    loss, grads = jax.value_and_grad(by_hand)(state.agent.policy)
    losses = {k: float(v.total / v.count) for k, v in record.losses.items()}
    np.testing.assert_allclose(losses["policy"], float(loss), rtol=1e-5)
    np.testing.assert_allclose(losses["grad_norm"], float(jax.tree.reduce(
        lambda a, g: a + jnp.sum(g**2), grads, 0.0) ** 0.5), rtol=1e-4)
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), new.agent.policy, state.agent.policy)
    assert max(jax.tree.leaves(moved)) > 0


def test_shac_weighs_each_episode_segment_and_bootstraps_where_it_ends():
    gamma = 0.5
    ends = jnp.asarray([[0.0], [1.0], [0.0], [0.0]])
    np.testing.assert_allclose(segment_weights(ends, gamma)[:, 0], [1.0, 0.5, 1.0, 0.5])
    reward = jnp.asarray([[1.0], [2.0], [3.0], [4.0]])
    next_value = jnp.asarray([[10.0], [20.0], [30.0], [40.0]])
    truncated = ends  # step 1 hit a time limit: its segment bootstraps from V(final obs)
    loss = short_horizon_loss(reward, jnp.zeros_like(ends), truncated, next_value, gamma)
    by_hand = (1 + 0.5 * 2 + 0.5 * gamma * 20) + (3 + 0.5 * 4 + 0.5 * gamma * 40)
    np.testing.assert_allclose(float(loss), -by_hand / 4)
    terminated = ends  # a termination bootstraps nothing
    loss = short_horizon_loss(reward, terminated, jnp.zeros_like(ends), next_value, gamma)
    np.testing.assert_allclose(float(loss), -((1 + 0.5 * 2) + (3 + 0.5 * 4 + 0.5 * gamma * 40)) / 4)


RANDOM_PENDULUM = -1200.0  # a uniform random policy scores about -1200 per 200-step episode


@pytest.mark.parametrize("agent, steps", [("apg", 204_800), ("shac", 409_600)])
def test_apg_and_shac_learn_pendulum_far_beyond_random(tmp_path, agent, steps):
    cfg = defaults_for("pendulum", agent).replace(progress=False, total_steps=steps, epochs=4).validate()
    train(cfg, run_dir=str(tmp_path), log=lambda *a: None)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval/episode_return"] for r in records if "eval/episode_return" in r]
    assert records[-1]["env_steps"] == steps
    assert evals[-1] >= RANDOM_PENDULUM + 900, evals
    assert all(np.isfinite(r["loss/grad_norm"]) for r in records)


def test_the_episodes_start_staggered():
    loop = loop_of(None, num_envs=64, horizon=4, spec=EnvSpec(obs_shape=(1,), discrete=False, episode_length=200,
                                                             action_shape=(1,), action_low=(-1.0,),
                                                             action_high=(1.0,)))
    env = jax.vmap(loop.context.env.reset)(jax.random.split(jax.random.PRNGKey(0), 64))
    steps = np.asarray(loop.start(env, jax.random.PRNGKey(1)).steps)
    assert steps.min() >= 0 and steps.max() < 200 and len(set(steps.tolist())) > 20


@needs("robots")
def test_a_backend_jax_cannot_differentiate_is_refused_naming_those_it_can():
    cfg = defaults_for("Go1JoystickFlatTerrain", "shac").replace(backend="warp")
    with pytest.raises(ConfigError, match=r"^--backend: --agent shac takes gradients through the env's step.*\(mjx\)"):
        cfg.validate()
