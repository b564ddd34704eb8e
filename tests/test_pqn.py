"""PQN learning on CPU (its Q(lambda) returns: tests/test_returns.py)."""

import json

import pytest

from sim.run.config import defaults_for
from sim.run.trainer import train


def run(tmp_path, env, agent, **overrides):
    cfg = defaults_for(env, agent).replace(progress=False, **overrides).validate()
    train(cfg, run_dir=str(tmp_path), log=lambda *a: None)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return [(r["env_steps"], r["eval/episode_return"]) for r in records]


def test_pqn_cartpole_reaches_475_within_500k(tmp_path):
    evals = run(tmp_path, "cartpole", "pqn", total_steps=491_520, epochs=8)  # 240 iterations of 2,048 steps
    assert evals[-1][0] <= 500_000
    assert evals[-1][1] >= 475, evals


@pytest.mark.slow  # (the default suite has its cartpole run)
def test_pqn_acrobot_reaches_minus_100(tmp_path):
    evals = run(tmp_path, "acrobot", "pqn", total_steps=491_520, epochs=8)
    assert evals[-1][1] >= -100, evals
