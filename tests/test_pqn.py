"""PQN: its Q(lambda) returns against a Python loop and by hand, and learning on CPU."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from agents import pqn
from sim.run.config import defaults_for
from sim.run.trainer import train



def run(tmp_path, env, agent, **overrides):
    cfg = defaults_for(env, agent).replace(progress=False, **overrides).validate()
    train(cfg, run_dir=str(tmp_path), log=lambda *a: None)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return [(r["env_steps"], r["eval/episode_return"]) for r in records]


def q_lambda_loop(r, q_next, term, trunc, gamma, lam):
    T, N = r.shape
    out = np.zeros((T, N))
    for n in range(N):
        g = q_next[T - 1, n]
        for t in reversed(range(T)):
            done = max(term[t, n], trunc[t, n])
            nxt = q_next[t, n] + (lam * (g - q_next[t, n]) if (t < T - 1 and not done) else 0.0)
            g = r[t, n] + gamma * (1 - term[t, n]) * nxt
            out[t, n] = g
    return out


def test_q_lambda_returns_match_python_loop_and_reduce_to_one_step():
    rng = np.random.default_rng(0)
    T, N = 9, 4
    r, q_next = rng.normal(size=(T, N)), rng.normal(size=(T, N))
    term, trunc = (rng.random((T, N)) < 0.15).astype(float), (rng.random((T, N)) < 0.15).astype(float)
    got = pqn.q_lambda_returns(*(jnp.asarray(x, jnp.float32) for x in (r, q_next, term, trunc)), 0.9, 0.7)
    np.testing.assert_allclose(got, q_lambda_loop(r, q_next, term, trunc, 0.9, 0.7), rtol=1e-5, atol=1e-5)
    one_step = pqn.q_lambda_returns(*(jnp.asarray(x, jnp.float32) for x in (r, q_next, term, trunc)), 0.9, 0.0)
    np.testing.assert_allclose(one_step, r + 0.9 * (1 - term) * q_next, rtol=1e-5, atol=1e-5)


def test_q_lambda_returns_by_hand():
    # three steps, gamma 0.5, lambda 1: G_2 = 1 + 0.5 * 4 = 3 (bootstraps fully), G_1 = 1 + 0.5 * 3 = 2.5,
    # G_0 truncated: bootstraps from its own final observation's value 8 -> 1 + 0.5 * 8 = 5
    r = jnp.ones((3, 1))
    q_next = jnp.array([[8.0], [6.0], [4.0]])
    trunc = jnp.array([[1.0], [0.0], [0.0]])
    got = pqn.q_lambda_returns(r, q_next, jnp.zeros((3, 1)), trunc, 0.5, 1.0)
    np.testing.assert_allclose(np.asarray(got)[:, 0], [5.0, 2.5, 3.0])


def test_pqn_cartpole_reaches_475_within_500k(tmp_path):
    evals = run(tmp_path, "cartpole", "pqn", total_steps=491_520, epochs=8)  # 240 iterations of 2,048 steps
    assert evals[-1][0] <= 500_000
    assert evals[-1][1] >= 475, evals


@pytest.mark.slow  # (the default suite has its cartpole run)
def test_pqn_acrobot_reaches_minus_100(tmp_path):
    evals = run(tmp_path, "acrobot", "pqn", total_steps=491_520, epochs=8)
    assert evals[-1][1] >= -100, evals
