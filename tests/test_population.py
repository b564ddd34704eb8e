"""Populations: seeds x a hyper-parameter sweep trained as the members of one program."""

import itertools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sim.core.contract import ConfigError
from sim.run.populations import population
from sim.run import stats
from sim.run.build import build_engine
from sim.run.trainer import Diverged, train
from tests.helpers import small_config
from tests.test_checkpoint import assert_same_leaves, final_leaves, quiet, read_jsonl, training_only


# ---- statistics, against values worked out by hand ----
def test_iqm_is_the_mean_of_the_middle_half():
    assert stats.iqm([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5  # cut 2 each end: mean(3, 4, 5, 6)
    assert stats.iqm([4, 1, 3, 2]) == 2.5  # cut 1 each end: mean(2, 3)
    assert stats.iqm([1, 2, 3, 4, 100]) == 3.0  # floor(5 / 4) = 1 each end: mean(2, 3, 4)
    assert stats.iqm([1, 2, 3]) == 2.0  # floor(3 / 4) = 0: the plain mean
    d = stats.describe([1.0, 2.0, 3.0, 4.0], reps=1000)
    assert d["mean"] == 2.5 and d["n"] == 4
    assert d["std"] == pytest.approx(np.sqrt(5 / 3))  # sample std: sum of squares 5 over n - 1
    assert stats.describe([7.0, None, float("nan")])["n"] == 1


def exact_interval(scores, statistic, level=0.95):
    """The percentile interval of `statistic` over ALL n^n resamples, each weighted equally."""
    values = np.sort([statistic(np.asarray(s, float)) for s in itertools.product(scores, repeat=len(scores))])
    tail = (1 - level) / 2
    return values[int(np.floor(tail * len(values)))], values[int(np.ceil((1 - tail) * len(values))) - 1]


@pytest.mark.parametrize("scores", [[0.0, 1.0], [0.0, 0.0, 1.0, 5.0], [3.0, -1.0, 2.0, 10.0, 4.0]])
def test_bootstrap_interval_matches_exact_enumeration(scores):
    # [0, 1]: resample means 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4: the 95% interval is [0, 1].
    if scores == [0.0, 1.0]:
        assert stats.bootstrap_ci(scores) == (0.0, 1.0)
    got = stats.bootstrap_ci(scores, "iqm")
    want = exact_interval(scores, stats.iqm)
    assert got == pytest.approx(want, abs=0.05 * (max(scores) - min(scores))), (got, want)
    assert stats.bootstrap_ci([3.0, 3.0, 3.0]) == (3.0, 3.0)


# ---- the command line's population ----
def test_members_are_configuration_major_then_seed():
    cfg = small_config(num_seeds=2, seed=5, sweep=("learning-rate=1e-3,3e-4", "entropy-cost=0,0.1"))
    members = population.members(cfg)
    assert cfg.population_size == len(members) == 8
    assert [(m.seed, m.config) for m in members[:4]] == [(5, 0), (6, 0), (5, 1), (6, 1)]
    assert members[3].swept == (("learning_rate", 1e-3), ("entropy_cost", 0.1))
    single = population.member_config(cfg, members[3])
    assert (single.seed, single.population.num_seeds, single.population.sweep) == (6, 1, ())
    assert (single.agent_config.learning_rate, single.agent_config.entropy_cost) == (1e-3, 0.1)
    hp = population.stacked_hp(cfg)
    np.testing.assert_allclose(hp.learning_rate, [1e-3] * 4 + [3e-4] * 4, rtol=1e-6)
    np.testing.assert_allclose(hp.entropy_cost, [0, 0, 0.1, 0.1] * 2, rtol=1e-6)


@pytest.mark.parametrize("sweep, message", [
    (("num-envs=8,16",), "num-envs changes array shapes"),
    (("batch-size=8,16",), "batch-size changes array shapes"),
    (("policy-hidden-sizes=8",), "policy-hidden-sizes changes array shapes"),
    (("tau=0.1",), "tau is not a hyper-parameter of --agent ppo"),
    (("learning-rate",), "expected NAME=V1,V2"),
    (("learning-rate=fast",), "values must be numbers"),
    (("learning-rate=1e-3", "learning-rate=1e-4"), "swept twice"),
    (("learning-rate=1e-3,-1",), "learning-rate=-1: --learning-rate: must be > 0"),
])
def test_a_sweep_that_cannot_be_one_program_is_refused(sweep, message):
    with pytest.raises(ConfigError) as err:
        small_config(sweep=sweep).validate()
    assert str(err.value).startswith("--sweep: ") and message in str(err.value), str(err.value)
    if "changes array shapes" in message:
        assert "sweepable: discounting, learning-rate" in str(err.value)


def test_sweep_errors_are_one_line_exit_2(capsys):
    import train as cli

    assert cli.main(["--env", "cartpole", "--sweep", "unroll-length=8,16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --sweep: unroll-length changes array shapes")
    assert cli.main(["--env", "cartpole", "--num-seeds", "0"]) == 2
    assert "--num-seeds: must be a positive integer" in capsys.readouterr().err


# ---- the program ----
def agent_leaves(state):
    return jax.tree.leaves(jax.device_get(state.agent))


@pytest.mark.parametrize("env, agent", [("cartpole", "ppo"), ("pendulum", "sac")])
def test_a_member_equals_the_single_run_of_its_seed_and_values(env, agent):
    cfg = small_config(env, agent, num_seeds=2, seed=3, sweep=("learning-rate=1e-3,3e-3", "discounting=0.9,0.97"))
    engine = build_engine(cfg)
    init_keys, eval_keys = population.keys(cfg)
    state = engine.init(init_keys)
    if cfg.loop.droppable is not None:
        state = engine.prefill(state)
    member = population.members(cfg)[5]  # seed 4, learning rate 3e-3, discounting 0.9
    single_cfg = population.member_config(cfg, member)
    assert (single_cfg.seed, single_cfg.agent_config.learning_rate, single_cfg.agent_config.discounting) == (4, 3e-3, 0.9)
    single = build_engine(single_cfg)
    init_key, eval_key = population.keys(single_cfg)
    one = single.init(init_key)
    if cfg.loop.droppable is not None:
        one = single.prefill(one)
    for a, b in zip(agent_leaves(one), agent_leaves(state)):
        np.testing.assert_array_equal(a, b[member.index])  # the same initial state, bitwise
    for epoch in (1, 2):
        state, metrics = engine.epoch(state)
        one, one_metrics = single.epoch(one)
        for a, b in zip(agent_leaves(one), agent_leaves(state)):
            np.testing.assert_allclose(a, b[member.index], rtol=1e-4, atol=1e-5)
        losses = [k for k in one_metrics if k.startswith("loss/")]
        assert losses
        for k in losses:
            np.testing.assert_allclose(one_metrics[k], metrics[k][member.index], rtol=1e-4, atol=1e-6, err_msg=k)
    got = engine.evaluate(state, engine.eval_key(eval_keys, 2))["eval/episode_return"][member.index]
    want = single.evaluate(one, single.eval_key(eval_key, 2))["eval/episode_return"]
    np.testing.assert_allclose(got, want, rtol=1e-3)


def test_each_member_reads_its_own_hyper_parameters():
    """A learning rate of 0 in one member freezes that member alone, in the same program."""
    cfg = small_config(num_seeds=2)
    engine = build_engine(cfg)
    state = engine.init(population.keys(cfg)[0])
    hp = state.agent.hp
    state = state.replace(agent=state.agent.replace(hp=hp.replace(learning_rate=hp.learning_rate.at[0].set(0.0))))

    def weights(agent_state):  # network weights by path (optimizer statistics left out)
        flat = jax.tree_util.tree_flatten_with_path(jax.device_get(agent_state))[0]
        return {jax.tree_util.keystr(p): x for p, x in flat
                if "params" in jax.tree_util.keystr(p) and "opt" not in jax.tree_util.keystr(p)}

    before = weights(state.agent)
    state, _ = engine.epoch(state)
    after = weights(state.agent)
    assert before
    for name in before:
        np.testing.assert_array_equal(before[name][0], after[name][0], err_msg=name)
        assert not np.array_equal(before[name][1], after[name][1]), name


# ---- what a run writes ----
@pytest.fixture(scope="module")
def population_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("population")
    cfg = small_config(num_seeds=3, sweep=("learning-rate=1e-3,3e-4",), epochs=4, checkpoint_every=1)
    messages = []
    train(cfg, run_dir=str(run_dir), log=messages.append)
    return cfg, run_dir, messages


def test_metrics_hold_each_member_and_each_configuration(population_run):
    cfg, run_dir, _ = population_run
    records = read_jsonl(run_dir / "metrics.jsonl")
    members = [r for r in records if "member" in r]
    configs = [r for r in records if "config" in r and "member" not in r]
    epochs = cfg.num_epochs
    assert len(members) == epochs * 6 and len(configs) == epochs * 2
    assert [(r["member"], r["seed"], r["sweep"]) for r in members[:4]] == [
        (0, 0, {"learning_rate": 1e-3}), (1, 1, {"learning_rate": 1e-3}), (2, 2, {"learning_rate": 1e-3}),
        (3, 0, {"learning_rate": 3e-4})]
    last = [r for r in members if r["epoch"] == epochs]
    for c, agg in enumerate(r for r in configs if r["epoch"] == epochs):
        own = [r for r in last if r["config"] == c]
        returns = [r["eval/episode_return"] for r in own]
        assert agg["seeds"] == 3 and agg["sweep"] == own[0]["sweep"]
        assert agg["eval/episode_return"] == pytest.approx(np.mean(returns))
        assert agg["loss/total"] == pytest.approx(np.mean([r["loss/total"] for r in own]))
        assert agg["seeds/eval_return_std"] == pytest.approx(np.std(returns, ddof=1))
        assert agg["seeds/eval_return_ci_low"] <= agg["eval/episode_return"] <= agg["seeds/eval_return_ci_high"]


def test_summary_ranks_configurations_and_names_the_best_member(population_run):
    cfg, run_dir, messages = population_run
    summary = json.load(open(run_dir / "summary.json"))
    finals = {m["member"]: m["eval_return"] for m in summary["members"]}
    records = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["epoch"] == cfg.num_epochs and "member" in r]
    assert finals == {r["member"]: r["eval/episode_return"] for r in records}
    ranked = summary["configurations"]
    assert [s["rank"] for s in ranked] == [1, 2] and ranked[0]["iqm"] >= ranked[1]["iqm"]
    for s in ranked:
        scores = [finals[k] for k in s["members"]]
        assert s["mean"] == pytest.approx(np.mean(scores)) and s["iqm"] == pytest.approx(stats.iqm(scores))
        assert s["iqm_ci"][0] <= s["iqm"] <= s["iqm_ci"][1]
    assert summary["best_member"] == max(finals, key=finals.get)
    table = next(m for m in messages if "ranked by IQM" in m)
    assert "learning-rate=0.001" in table and "IQM 95% CI" in table
    assert os.path.getsize(run_dir / "curve.png") > 0
    written = json.load(open(run_dir / "config.json"))
    assert [m["seed"] for m in written["derived"]["population"]] == [0, 1, 2, 0, 1, 2]


def test_play_takes_the_best_member_or_the_one_asked_for(population_run):
    from sim.run.commands import PlayCommand
    from sim.run.policy.play import play

    cfg, run_dir, _ = population_run
    best = json.load(open(run_dir / "summary.json"))["best_member"]
    result = play(PlayCommand(str(run_dir)), log=quiet)
    assert result["member"] == best and result["episode_return"] > 0
    result = play(PlayCommand(str(run_dir), member=4), log=quiet)
    assert result["member"] == 4
    with pytest.raises(ConfigError, match=r"--member: must be in \[0, 5\]"):
        play(PlayCommand(str(run_dir), member=6), log=quiet)


def test_a_population_resumes_bitwise(tmp_path, population_run):
    cfg, run_dir, _ = population_run
    train(cfg, run_dir=str(tmp_path), log=quiet, stop_after=1)
    train(cfg.replace(resume=str(tmp_path)), log=quiet)
    assert_same_leaves(final_leaves(run_dir), final_leaves(tmp_path))
    one_go, resumed = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(tmp_path / "metrics.jsonl")
    assert [training_only(r) for r in one_go] == [training_only(r) for r in resumed]


def test_a_diverging_member_is_left_out_while_the_others_train_on(tmp_path):
    cfg = small_config(sweep=("reward-scaling=1,1e38",), epochs=2)
    messages = []
    train(cfg, run_dir=str(tmp_path), log=messages.append)
    assert any(m.startswith("member 1 (seed 0, reward-scaling=1e+38) diverged") for m in messages), messages
    summary = json.load(open(tmp_path / "summary.json"))
    scaled = next(s for s in summary["configurations"] if s["sweep"]["reward_scaling"] > 1)
    assert scaled["diverged"] == 1 and scaled["n"] == 0 and scaled["rank"] == 2
    assert summary["best_member"] == 0
    # a resume remembers which member diverged: not reported again, still left out
    messages.clear()
    train(cfg.replace(resume=str(tmp_path), total_steps=2 * cfg.total_steps), log=messages.append)
    assert not any("diverged" in m for m in messages), messages
    summary = json.load(open(tmp_path / "summary.json"))
    assert [m["diverged"] for m in summary["members"]] == [None, 1]
    with pytest.raises(Diverged, match="every member of the population"):
        train(small_config(num_seeds=2, reward_scaling=1e38, epochs=2), run_dir=str(tmp_path / "all"), log=quiet)


def test_the_memory_check_scales_with_the_population():
    parts = {}
    for cfg in (small_config("pendulum", "sac"), small_config("pendulum", "sac", num_seeds=4)):
        engine = build_engine(cfg)
        template = engine.template(population.keys(cfg)[0])
        parts[engine.members] = {p.what: p for p in engine.memory_parts(template)[0]}
    for what, part in parts[4].items():
        assert part.nbytes == 4 * parts[1][what].nbytes, what
        assert ("num_seeds", 4) in part.sizes  # what to lower is named


def test_members_envs_step_as_one_batch_with_the_nested_values():
    """Under a population's vmap the env step sees all members' envs as one batch [M*B], and
    returns what the nested vmap returns; a leaf shared by the members is broadcast to each."""
    from sim.core.rollout import members_as_one_batch

    seen = []

    def step(state, action):  # a batch [B] of envs
        seen.append(action.shape)
        return {"x": state["x"] * action.sum(-1) + state["shared"], "shared": state["shared"] + 1.0}

    x, action = jnp.arange(12.0).reshape(3, 4), jnp.linspace(0.0, 1.0, 3 * 4 * 2).reshape(3, 4, 2)
    state = {"x": x, "shared": jnp.ones((4,))}
    vmapped = jax.vmap(members_as_one_batch(step), in_axes=({"x": 0, "shared": None}, 0))
    got = vmapped(state, action)
    assert seen[-1] == (12, 2)  # (after custom_vmap's trace of one member for its shapes)
    want = jax.vmap(step, in_axes=({"x": 0, "shared": None}, 0))(state, action)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    assert got["shared"].shape == (3, 4)
    one = state | {"x": x[0]}  # not vmapped: the step itself
    np.testing.assert_array_equal(members_as_one_batch(step)(one, action[0])["x"], step(one, action[0])["x"])
