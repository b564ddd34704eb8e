"""The engine's promises: one compiled, donated epoch with no host traffic inside."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sim.core.engine import Engine, read_steps
from tests.helpers import agent_env, all_agents, count_lowerings, small_config

REPLAY_AGENTS = [a for a in all_agents() if small_config(agent_env(a), a).uses_replay]


POPULATION = dict(num_seeds=2, sweep=("discounting=0.9,0.99",))  # 4 members in one program


@pytest.fixture(scope="module", params=[(a, m) for m in ("one run", "population") for a in all_agents()],
                ids=lambda p: f"{p[0]}-{p[1].replace(' ', '-')}")
def engine(request):
    """Every registered agent, through the same engine paths: one run, and a population of
    seeds x a sweep (the state's leading member axis)."""
    agent, kind = request.param
    return Engine(small_config(agent_env(agent), agent, **(POPULATION if kind == "population" else {})))


def initial_state(engine, seed):
    from sim.run import population

    state = engine.init(population.keys(engine.cfg.replace(seed=seed))[0])
    return engine.prefill(state) if engine.cfg.uses_replay else state


def test_epoch_runs_under_transfer_guard(engine):
    state = initial_state(engine, 0)
    jax.block_until_ready(state)
    epoch = engine.epoch.lower(state).compile()
    with jax.transfer_guard("disallow"):
        state, metrics = epoch(state)
        state, metrics = epoch(state)
        jax.block_until_ready((state, metrics))
    cfg = engine.cfg
    assert np.all(np.asarray(state.iteration) == 2 * cfg.iterations_per_epoch)
    assert np.shape(state.iteration) == ((cfg.population_size,) if cfg.population_size > 1 else ())
    # the state counts the env steps, prefill included
    assert read_steps(state.env_steps) == read_steps(metrics["env_steps"]) == (
        cfg.prefill_steps + 2 * cfg.steps_per_epoch)


def test_second_epoch_does_not_recompile(engine):
    state = initial_state(engine, 1)
    with count_lowerings() as counts:
        for _ in range(3):
            state, _ = engine.epoch(state)
        jax.block_until_ready(state)
    assert counts.get("jit(_epoch)", 0) <= 1, counts


def test_donated_state_is_aliased_and_deleted(engine):
    state = initial_state(engine, 2)
    compiled = engine.epoch.lower(state).compile()
    stats = compiled.memory_analysis()
    # Every byte of the donated state is aliased to an output.
    assert stats.alias_size_in_bytes >= stats.argument_size_in_bytes
    assert "input_output_alias" in compiled.as_text().split("\n", 1)[0]
    old_leaves = jax.tree.leaves(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new_state, _ = compiled(state)
        jax.block_until_ready(new_state)
    assert all(leaf.is_deleted() for leaf in old_leaves)
    # Input and output leaves line up one to one: the state keeps its structure.
    assert jax.tree.structure(new_state) == jax.tree.structure(state)


@pytest.mark.parametrize("agent,population", [(a, False) for a in all_agents()] + [("ppo", True), ("sac", True)])
def test_whole_training_run_compiles_the_epoch_once(tmp_path, agent, population):
    from sim.run.trainer import train

    cfg = small_config(agent_env(agent), agent, epochs=3, **(POPULATION if population else {}))
    with count_lowerings() as counts:
        record = train(cfg, run_dir=str(tmp_path), log=lambda *a: None)
    assert counts.get("jit(_epoch)") == 1, counts
    assert counts.get("jit(_evaluate)") == 1, counts
    assert record["env_steps"] == cfg.prefill_steps + cfg.num_epochs * cfg.steps_per_epoch
    assert np.all(np.isfinite(record["eval/episode_return"]))
    assert np.size(record["eval/episode_return"]) == cfg.population_size


def test_same_seed_same_result():
    a = Engine(small_config("pendulum"))
    results = []
    for _ in range(2):
        state = a.init(jax.random.PRNGKey(3))
        state, metrics = a.epoch(state)
        results.append(jax.tree.leaves(jax.device_get(state.agent)))
    for x, y in zip(*results):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("agent,population", [(a, False) for a in REPLAY_AGENTS] + [("sac", True), ("dqn", True)])
def test_replay_epoch_keeps_the_replay_ring_in_place(agent, population):
    cfg = small_config(agent_env(agent), agent, max_replay_size=1 << 16, min_replay_size=32,
                       **(POPULATION if population else {}))
    engine = Engine(cfg)
    state = initial_state(engine, 0)
    assert np.all(np.asarray(state.buffer.size) == cfg.prefill_iterations * cfg.num_envs)
    # exact pairs: every donated leaf (the ring included) aliases its own new value, and
    # temp memory stays under 10% of the state: no whole-buffer copy anywhere.
    compiled = engine.epoch.check(state)
    ring = state.buffer.data
    with jax.transfer_guard("disallow"):
        new_state, metrics = compiled(state)
        jax.block_until_ready(new_state)
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves(ring))
    assert np.all(np.asarray(new_state.buffer.size) == (cfg.prefill_iterations * cfg.num_envs
                                                          + cfg.iterations_per_epoch * cfg.num_envs))
    with count_lowerings() as counts:
        for _ in range(2):
            new_state, metrics = engine.epoch(new_state)
        jax.block_until_ready(new_state)
    assert counts.get("jit(_epoch)", 0) <= 1, counts
    assert all(np.all(np.isfinite(v)) for k, v in metrics.items() if k.startswith("loss/"))


def test_td3_averages_the_actor_loss_over_the_steps_that_trained_the_actor():
    cfg = small_config("pendulum", agent="td3", policy_delay=2)
    engine = Engine(cfg)
    state = engine.init(jax.random.PRNGKey(0))
    batch = jax.tree.map(lambda x: jax.random.normal(jax.random.PRNGKey(1), (16,) + x.shape),
                         engine.example_transition)
    update = jax.jit(engine.agent.update)
    agent, first = update(state.agent, state.obs_stats, batch, jax.random.PRNGKey(2))
    agent, second = update(agent, state.obs_stats, batch, jax.random.PRNGKey(3))
    # the delayed actor steps on every 2nd critic step only; the skipped step's loss has weight 0
    assert float(first["weight/actor"]) == 0.0 and float(second["weight/actor"]) == 1.0
    assert np.isfinite(float(second["actor"])) and float(second["actor"]) != 0.0
    state = engine.prefill(state)
    state, metrics = engine.epoch(state)  # grad_updates_per_step=2: one actor step per iteration
    assert np.isfinite(float(metrics["loss/actor"])) and float(metrics["loss/actor"]) != 0.0



@pytest.mark.parametrize("agent", all_agents())
def test_hyper_parameters_are_read_from_the_state(agent):
    """The learning rate lives in the agent state, not in the compiled program: zeroing it in
    the state freezes every network weight through a whole epoch, with no recompilation."""
    engine = Engine(small_config(agent_env(agent), agent))

    def weights(agent_state):  # network weights by path (optimizer statistics left out)
        flat = jax.tree_util.tree_flatten_with_path(jax.device_get(agent_state))[0]
        return {jax.tree_util.keystr(p): x for p, x in flat
                if "params" in jax.tree_util.keystr(p) and "opt" not in jax.tree_util.keystr(p)}

    state = initial_state(engine, 0)
    hp = state.agent.hp
    assert hp.learning_rate.dtype == np.float32
    frozen = initial_state(engine, 0)  # its own buffers: each epoch call donates its argument
    zero_lr = frozen.agent.hp.replace(learning_rate=jnp.zeros((), jnp.float32))
    frozen = frozen.replace(agent=frozen.agent.replace(hp=zero_lr))
    before = weights(frozen.agent)
    with count_lowerings() as counts:
        after, _ = engine.epoch(frozen)
        moved, _ = engine.epoch(state)
    assert counts.get("jit(_epoch)", 0) <= 1, counts
    after, moved = weights(after.agent), weights(moved.agent)
    assert before and before.keys() == after.keys()
    for name in before:
        np.testing.assert_array_equal(before[name], after[name], err_msg=name)
    assert any(not np.array_equal(after[name], moved[name]) for name in before)
