"""Population-based training: the exploit-and-explore step worked by hand on a population of
four (sim/core/pbt.py), and --pbt through a run (flags, records, resume)."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sim.core import pbt
from sim.run.populations import population
from sim.run.build import build_engine
from tests.helpers import small_config

PLAN = pbt.Plan(explore=(pbt.Explore("learning_rate", 1e-5, 1e-2, log=True),), fraction=0.25, resample=0.0)


def test_ranks_put_non_finite_fitness_lowest_and_break_ties_in_member_order():
    # NaN and -inf both lowest (in member order), then 1, then the two 3s in member order
    np.testing.assert_array_equal(pbt.ranks(jnp.asarray([3.0, jnp.nan, 1.0, 3.0, -jnp.inf])), [3, 0, 2, 4, 1])


def test_the_worst_quarter_and_every_diverged_member_copy_one_of_the_best_quarter():
    fitness = jnp.asarray([5.0, 1.0, 9.0, 7.0, jnp.nan, 3.0, 8.0, 2.0])  # k = 2: members 1 and 7, and 4 (NaN)
    for seed in range(20):
        source, replaced = pbt.choose(fitness, jax.random.PRNGKey(seed), PLAN)
        np.testing.assert_array_equal(np.flatnonzero(replaced), [1, 4, 7])
        assert set(np.asarray(source)[[1, 4, 7]]) <= {2, 6}  # the two best
        np.testing.assert_array_equal(np.asarray(source)[[0, 2, 3, 5, 6]], [0, 2, 3, 5, 6])


def test_the_parents_are_never_replaced_even_when_others_diverged():
    source, replaced = pbt.choose(jnp.asarray([1.0, jnp.nan]), jax.random.PRNGKey(0), PLAN)
    np.testing.assert_array_equal(replaced, [False, True])
    np.testing.assert_array_equal(source, [0, 0])


def test_perturbation_multiplies_by_a_factor_and_resampling_stays_in_the_range():
    spec = pbt.Explore("x", 0.1, 10.0, log=True)
    value = jnp.full((4000,), 1.0)
    replaced = jnp.arange(4000) % 2 == 0
    moved = np.asarray(pbt.explored(value, replaced, jax.random.PRNGKey(0), spec, pbt.Plan((spec,), resample=0.0)))
    assert set(np.round(moved[::2].astype(float), 6)) == {0.8, 1.25} and np.all(moved[1::2] == 1.0)
    drawn = np.asarray(pbt.explored(value, replaced, jax.random.PRNGKey(1), spec, pbt.Plan((spec,), resample=1.0)))
    assert drawn[::2].min() >= 0.1 and drawn[::2].max() <= 10.0
    assert abs(np.mean(np.log10(drawn[::2]))) < 0.1  # log-uniform on [-1, 1] decades: mean 0
    edge = pbt.explored(jnp.full((400,), 9.0), jnp.ones(400, bool), jax.random.PRNGKey(2), spec, pbt.Plan((spec,)))
    assert float(jnp.max(edge)) <= 10.0 and float(jnp.min(edge)) >= 0.1  # x1.25 of 9 is clipped to 10


@pytest.fixture(scope="module")
def four():
    """A SAC population of 4 on pendulum, prefilled, and its PBT program."""
    cfg = small_config("pendulum", "sac", num_seeds=4)
    engine = build_engine(cfg)
    init_keys, _ = population.keys(cfg)
    state = engine.prefill(engine.init(init_keys))
    state, _ = engine.epoch(state)
    return engine, state, pbt.make_program(engine, PLAN)


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


def test_exploitation_copies_exactly_the_chosen_members_learner_state(four):
    engine, state, program = four
    before = jax.device_get(state)
    state = jax.tree.map(jnp.copy, state)  # the program donates its argument
    fitness = jnp.asarray([1.0, 4.0, 2.0, 3.0])  # member 0 is the worst, member 1 the best: 0 copies 1
    new, lineage = program(state, fitness, jax.random.PRNGKey(0))
    np.testing.assert_array_equal(lineage["source"], [1, 1, 2, 3])
    np.testing.assert_array_equal(lineage["replaced"], [True, False, False, False])
    after = jax.device_get(new)
    learner = lambda s: (s.agent.replace(hp=None), s.obs_stats)  # noqa: E731
    for old, got in zip(leaves(learner(before)), leaves(learner(after))):
        np.testing.assert_array_equal(got[0], old[1])  # parameters, optimizer, targets, statistics: member 1's
        np.testing.assert_array_equal(got[1:], old[1:])  # the others untouched
    for part in ("env", "loop", "key", "iteration"):  # its envs keep running, its ring and key stay its own
        for old, got in zip(leaves(getattr(before, part)), leaves(getattr(after, part))):
            np.testing.assert_array_equal(got, old)
    lr_old, lr_new = np.asarray(before.agent.hp.learning_rate), np.asarray(after.agent.hp.learning_rate)
    assert lr_new[0] == pytest.approx(lr_old[1] * 0.8) or lr_new[0] == pytest.approx(lr_old[1] * 1.25)
    np.testing.assert_array_equal(lr_new[1:], lr_old[1:])
    np.testing.assert_array_equal(lineage["hp/learning_rate"], lr_new)
    for name, value in before.agent.hp.items():  # what is not explored is the parent's
        if name != "learning_rate":
            np.testing.assert_array_equal(getattr(after.agent.hp, name)[0], np.asarray(value)[1])


def test_a_diverged_member_takes_its_parents_envs_and_ring_too(four):
    engine, state, program = four
    before = jax.device_get(state)
    state = jax.tree.map(jnp.copy, state)
    fitness = jnp.asarray([3.0, jnp.nan, 2.0, 4.0])  # k = 1: member 2 (worst finite) and member 1 (NaN) copy 3
    new, lineage = program(state, fitness, jax.random.PRNGKey(1))
    np.testing.assert_array_equal(lineage["source"], [0, 3, 3, 3])
    after = jax.device_get(new)
    for part in ("env", "loop"):
        for old, got in zip(leaves(getattr(before, part)), leaves(getattr(after, part))):
            np.testing.assert_array_equal(got[1], old[3])  # the diverged member: its parent's
            np.testing.assert_array_equal(got[2], old[2])  # merely the worst: its own
            np.testing.assert_array_equal(got[[0, 3]], old[[0, 3]])
    np.testing.assert_array_equal(np.asarray(after.key), np.asarray(before.key))


def test_the_step_updates_the_population_in_place(four):
    engine, state, program = four
    fitness, key = jnp.zeros(4), jax.random.PRNGKey(0)
    compiled = program.lower(state, fitness, key).compile()
    from sim.core import donation

    member = lambda tree: donation.tree_bytes(tree) // 4  # noqa: E731
    # exact alias pairs; temp: the gathered learner state and one member's envs and ring at most
    bound = donation.tree_bytes((state.agent, state.obs_stats)) + 2 * member((state.env, state.loop)) + (1 << 20)
    program.check(state, fitness, key, max_temp_fraction=bound / donation.tree_bytes(state))
    assert compiled.memory_analysis().temp_size_in_bytes < bound


# ---- --pbt through a run ----
from sim.core.contract import ConfigError  # noqa: E402
from sim.run.trainer import train  # noqa: E402
from tests.test_checkpoint import assert_same_leaves, final_leaves, quiet, read_jsonl, training_only  # noqa: E402

PBT = dict(num_seeds=2, sweep=("learning-rate=1e-3,3e-4",), pbt=True, pbt_every=1, epochs=4, checkpoint_every=1)


@pytest.mark.parametrize("flags, flag, says", [
    (dict(pbt=True), "pbt", "needs a population"),
    (dict(pbt_explore=("learning-rate=log:1e-5:1e-2",)), "pbt-explore", "needs --pbt"),
    (dict(PBT, pbt_fraction=0.6), "pbt-fraction", r"must be in \(0, 0.5\]"),
    (dict(PBT, pbt_explore=("learning-rate=log:1e-5:1e-2",), sweep=("learning-rate=1e-1,1e-3",)), "pbt-explore",
     "outside its range"),
    (dict(PBT, pbt_explore=("learning-rate=log:-1:1e-2",)), "pbt-explore", "must be positive"),
    (dict(PBT, pbt_explore=("num-envs=1:8",)), "pbt-explore", "explorable: "),
    (dict(PBT, pbt_explore=("learning-rate=1e-3",)), "pbt-explore", r"expected NAME=\[log:\]LOW:HIGH"),
    (dict(PBT, sweep=(), num_seeds=4), "pbt", "nothing to explore"),
])
def test_pbt_flags_are_checked_before_anything_runs(flags, flag, says):
    with pytest.raises(ConfigError, match=says) as err:
        small_config(**flags).validate()
    assert err.value.flag == flag


def test_a_swept_value_is_explored_within_its_sweep_and_log_scaled_when_it_spans_a_decade():
    from sim.run.populations import pbt as run_pbt

    cfg = small_config(num_seeds=2, sweep=("learning-rate=1e-4,1e-2", "discounting=0.9,0.99"), pbt=True,
                       pbt_explore=("entropy-cost=0:0.1",))
    assert run_pbt.explored(cfg) == (pbt.Explore("discounting", 0.9, 0.99, False),
                                     pbt.Explore("entropy_cost", 0.0, 0.1, False),
                                     pbt.Explore("learning_rate", 1e-4, 1e-2, True))


def test_without_a_step_due_pbt_changes_nothing_bitwise(tmp_path):
    """--pbt with its step never due (every 10 epochs of 4) trains the population exactly as
    without it: the program, the states and the losses are the same."""
    base = small_config(num_seeds=2, sweep=("learning-rate=1e-3,3e-4",), epochs=4, checkpoint_every=1)
    train(base, run_dir=str(tmp_path / "off"), log=quiet)
    train(base.replace(pbt=True, pbt_every=10), run_dir=str(tmp_path / "on"), log=quiet)
    assert_same_leaves(final_leaves(tmp_path / "off"), final_leaves(tmp_path / "on"))
    off = [r for r in read_jsonl(tmp_path / "off" / "metrics.jsonl") if "member" in r]
    on = read_jsonl(tmp_path / "on" / "metrics.jsonl")
    assert not any("pbt/parent" in r for r in on) and all("hp/learning_rate" in r for r in on)
    strip = lambda r: {k: v for k, v in training_only(r).items() if not k.startswith("hp/")}  # noqa: E731
    assert [strip(r) for r in off] == [strip(r) for r in on]


@pytest.fixture(scope="module")
def pbt_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("pbt")
    cfg = small_config(**PBT)
    messages = []
    train(cfg, run_dir=str(run_dir), log=messages.append)
    return cfg, run_dir, messages


def test_a_pbt_run_records_each_members_values_its_lineage_and_the_best_schedule(pbt_run):
    cfg, run_dir, messages = pbt_run
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert all("member" in r for r in records)  # no per-configuration lines: members leave theirs
    steps = [r for r in records if "pbt/parent" in r]
    assert {r["epoch"] for r in steps} == {1, 2, 3}  # after every epoch but the last
    for epoch in (1, 2, 3):
        rows = sorted((r for r in steps if r["epoch"] == epoch), key=lambda r: r["member"])
        assert sum(r["pbt/replaced"] for r in rows) == 1  # a quarter of 4, at least one
        replaced = next(r for r in rows if r["pbt/replaced"])
        parent = rows[replaced["pbt/parent"]]
        assert parent["eval/episode_return"] == max(r["eval/episode_return"] for r in rows)  # top quarter: the best
        assert replaced["eval/episode_return"] == min(r["eval/episode_return"] for r in rows)
        following = next(r for r in records if r["epoch"] == epoch + 1 and r["member"] == replaced["member"])
        assert following["hp/learning_rate"] == replaced["pbt/learning_rate"]  # what it trains with next
        assert 3e-4 <= following["hp/learning_rate"] <= 1e-3
    summary = json.load(open(run_dir / "summary.json"))
    assert len(summary["pbt"]["lineage"]) == 3 and "configurations" not in summary
    best = summary["best_member"]
    schedule = summary["pbt"]["best_schedule"]
    assert [e["epoch"] for e in schedule] == [1, 2, 3, 4] and schedule[-1]["member"] == best
    assert any(m.startswith("final evaluation per member, ranked (PBT") for m in messages)
    assert os.path.exists(run_dir / "curve.png")


def test_a_pbt_run_resumes_bitwise(tmp_path, pbt_run):
    cfg, run_dir, _ = pbt_run
    train(cfg, run_dir=str(tmp_path), log=quiet, stop_after=2)
    train(cfg.replace(resume=str(tmp_path)), log=quiet)
    assert_same_leaves(final_leaves(run_dir), final_leaves(tmp_path))
    one_go, resumed = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(tmp_path / "metrics.jsonl")
    assert [training_only(r) for r in one_go] == [training_only(r) for r in resumed]


def test_a_diverged_member_is_replaced_and_trains_on(tmp_path):
    cfg = small_config(sweep=("reward-scaling=1,1e38",), pbt=True, pbt_every=1, pbt_resample=0.0, epochs=4)
    messages = []
    train(cfg, run_dir=str(tmp_path), log=messages.append)
    assert any(m.startswith("member 1 (seed 0, reward-scaling=1e+38) diverged") for m in messages), messages
    assert any(m.startswith("member 1 (diverged) takes a copy of member 0 (PBT)") for m in messages), messages
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["pbt/replaced"] for r in records if r["epoch"] == 1] == [False, True]  # the parent is never replaced
    last = [r for r in records if r["epoch"] == 4]
    assert all(np.isfinite(r["eval/episode_return"]) and not r.get("diverged") for r in last)
    # member 0's reward scaling 1, times 0.8 or 1.25, within the sweep's range [1, 1e38]
    assert [r["hp/reward_scaling"] for r in records if r["member"] == 1][1] in (1.0, 1.25)


def test_training_return_fitness_survives_a_resume_between_steps(tmp_path):
    """--pbt-fitness train ranks by the mean training return since the step before: a run
    stopped between two steps reads the epochs it had back from metrics.jsonl and steps as
    an uninterrupted one."""
    cfg = small_config(**dict(PBT, pbt_every=2, pbt_fitness="train"))
    train(cfg, run_dir=str(tmp_path / "one"), log=quiet)
    train(cfg, run_dir=str(tmp_path / "two"), log=quiet, stop_after=1)
    train(cfg.replace(resume=str(tmp_path / "two")), log=quiet)
    assert_same_leaves(final_leaves(tmp_path / "one"), final_leaves(tmp_path / "two"))
    one, two = read_jsonl(tmp_path / "one" / "metrics.jsonl"), read_jsonl(tmp_path / "two" / "metrics.jsonl")
    assert [training_only(r) for r in one] == [training_only(r) for r in two]
    step = [r for r in one if r["epoch"] == 2]
    for r in step:  # the fitness is the mean of the member's training returns of epochs 1 and 2
        mine = [x["train/episode_return"] for x in one if x["member"] == r["member"] and x["epoch"] in (1, 2)]
        mine = [x for x in mine if x is not None]
        assert r["pbt/fitness"] == (pytest.approx(sum(mine) / len(mine)) if mine else None)
