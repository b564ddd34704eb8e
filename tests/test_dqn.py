"""DQN: its target and Huber loss by hand, the replay ring's integer actions, and learning on CPU."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import dqn
from sim.core import step_ring
from sim.run.build import build_engine
from sim.run.config import defaults_for
from tests.helpers import small_config
from sim.run.trainer import train



def run(tmp_path, env, agent, **overrides):
    cfg = defaults_for(env, agent).replace(progress=False, **overrides).validate()
    train(cfg, run_dir=str(tmp_path), log=lambda *a: None)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return [(r["env_steps"], r["eval/episode_return"]) for r in records]


def test_dqn_target_and_huber_loss_by_hand():
    y = dqn.dqn_target(jnp.array([1.0, 1.0]), jnp.array([0.0, 1.0]), jnp.array([[0.5, 2.0], [0.5, 2.0]]),
                       discount=0.9, reward_scaling=1.0)
    np.testing.assert_allclose(y, [1.0 + 0.9 * 2.0, 1.0], rtol=1e-6)
    # Q rows (1, 5) and (0, 0), actions 1 and 0: errors 5 - 2 = 3 (linear part: 3 - 0.5) and 0 - 0.5
    # (quadratic: 0.5 * 0.25) -> mean(2.5, 0.125)
    q = jnp.array([[1.0, 5.0], [0.0, 0.0]])
    loss, q_mean = dqn.huber_q_loss(q, lambda p, obs: p, None, jnp.array([1, 0], jnp.int32), jnp.array([2.0, 0.5]),
                                    1.0)
    assert float(loss) == pytest.approx((2.5 + 0.125) / 2) and float(q_mean) == pytest.approx(2.5)


def test_double_dqn_target_values_the_online_choice_with_the_target_network():
    # online prefers action 0, target prefers action 1: DQN takes max target (4), Double DQN target[0] (2)
    target_q, online_q = jnp.array([[2.0, 4.0]]), jnp.array([[9.0, 1.0]])
    assert float(dqn.dqn_target(jnp.zeros(1), jnp.zeros(1), target_q, 0.5, 1.0)[0]) == pytest.approx(2.0)
    assert float(dqn.dqn_target(jnp.zeros(1), jnp.zeros(1), target_q, 0.5, 1.0, online_q)[0]) == pytest.approx(1.0)


def test_the_ring_stores_discrete_actions_as_integers():
    engine = build_engine(small_config("cartpole", "dqn"))
    assert engine.loop.row.action.dtype == np.int32 and engine.loop.row.action.shape == ()
    state = engine.prefill(engine.init(jax.random.PRNGKey(0)))
    # the actions in the int32 ring (with each row's final observation's place), not in the floats
    ring = state.loop.ring
    assert [d.shape[1] for d in ring.rows.data if d.dtype == np.int32] == [2]
    actions = np.asarray(step_ring.contents(ring).action)[: int(ring.rows.size)]
    assert actions.dtype == np.int32 and set(np.unique(actions).tolist()) == {0, 1}


@pytest.mark.slow  # (45 s; Q-learning on cartpole is proven in the default suite by PQN's run)
def test_dqn_cartpole_beats_random_by_a_wide_margin_within_40k(tmp_path):
    evals = run(tmp_path, "cartpole", "dqn", total_steps=39_000, epochs=4)
    assert evals[-1][1] >= 100, evals  # a random policy balances about 22 steps


@pytest.mark.slow  # (150 s on a 2-core CPU; the default suite has the 40k run above)
def test_dqn_cartpole_reaches_475_within_200k(tmp_path):
    evals = run(tmp_path, "cartpole", "dqn", total_steps=199_000, epochs=10)
    assert evals[-1][0] <= 200_000
    assert max(ret for _, ret in evals) >= 475, evals  # reached within the budget
    assert evals[-1][1] >= 300, evals  # and held, near the top, at the end


@pytest.mark.slow  # (the default suite has its cartpole run)
def test_dqn_acrobot_reaches_minus_100(tmp_path):
    evals = run(tmp_path, "acrobot", "dqn", total_steps=199_000, epochs=10)
    assert evals[-1][1] >= -100, evals
