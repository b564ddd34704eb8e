"""The engine's promises: one compiled, donated epoch with no host traffic inside."""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sim.run.policy import teacher as teachers
from sim.run.build import build_engine
from sim.core import step_ring
from sim.core.state import read_steps
from tests.helpers import agent_env, all_agents, count_lowerings, dot_precisions, host_branches, small_config

REPLAY_AGENTS = [a for a in all_agents() if small_config(agent_env(a), a).loop.droppable is not None]


POPULATION = dict(num_seeds=2, sweep=("discounting=0.9,0.99",))  # 4 members in one program
# The population proofs run on one agent of each loop and of each part a loop keeps in the
# state (the unroll, the recurrent state, the ring of transitions and of int32 actions, the
# replay loop's per-env carry and sequence samples, the differentiable unroll, a generation). The other agents differ from these only
# inside their update, which the one-run proofs check agent by agent; the members' axis is a
# vmap of the whole iteration, the same for every agent of a loop.
POPULATION_AGENTS = ["ppo", "ppo_rnn", "sac", "dqn", "fasttd3", "shac", "es", "evosax", "bc_rnn"]
RUNS = [(a, "one run") for a in all_agents()] + [(a, "population") for a in POPULATION_AGENTS]
# A replay agent's runs hold a ring of 2^16 rows: large against the program's temporaries, so
# the check that no step copies the whole ring can tell a copy from a batch.
RING = dict(max_replay_size=1 << 16)
_BUILT: dict = {}


def engine_of(agent: str, kind: str):
    """(config, engine) of `agent` as one run or as a population of seeds x a sweep (the
    state's leading member axis), built once for all the tests of this module that take it."""
    if (agent, kind) not in _BUILT:
        extra = dict(POPULATION) if kind == "population" else {}
        if agent in REPLAY_AGENTS:
            extra.update(RING)
        _BUILT[agent, kind] = built(small_config(agent_env(agent), agent, **extra))
    return _BUILT[agent, kind]


def _run_id(run) -> str:
    return f"{run[0]}-{run[1].replace(' ', '-')}"


@pytest.fixture(scope="module", params=RUNS, ids=_run_id)
def run(request):
    """(config, engine) of every registered agent, through the same engine paths."""
    return engine_of(*request.param)


def built(cfg):
    return cfg, build_engine(cfg, teachers.source(cfg))


def initial_state(run, seed):
    """The initial state of `run` = (config, engine) under `seed`, its replay ring prefilled."""
    from sim.run.populations import population

    cfg, engine = run
    state = engine.init(population.keys(cfg.replace(seed=seed))[0])
    return engine.prefill(state) if engine.loop.prefill_iterations else state


def test_epoch_runs_under_transfer_guard(run):
    cfg, engine = run
    state = initial_state(run, 0)
    jax.block_until_ready(state)
    epoch = engine.epoch.lower(state).compile()
    with jax.transfer_guard("disallow"):
        state, metrics = epoch(state)
        state, metrics = epoch(state)
        jax.block_until_ready((state, metrics))
    assert np.all(np.asarray(state.iteration) == 2 * cfg.iterations_per_epoch)
    assert np.shape(state.iteration) == ((cfg.population_size,) if cfg.population_size > 1 else ())
    # the state counts the env steps, prefill included
    assert read_steps(state.env_steps) == read_steps(metrics["env_steps"]) == (
        cfg.prefill_steps + 2 * cfg.steps_per_epoch)


def test_epoch_has_no_branch_a_gpu_would_read_on_the_host(run):
    """No conditional and no data-dependent while in the compiled epoch (the classic envs'
    physics has none either): XLA on a GPU would read their predicate on the host, a sync
    inside the epoch."""
    engine = run[1]
    compiled = engine.epoch.lower(initial_state(run, 0)).compile()
    assert host_branches(compiled) == {"conditional": 0, "unbounded while": 0}


def test_td3_delaying_its_actor_at_every_gradient_step_has_no_branch_either():
    run = built(small_config("pendulum", agent="td3", policy_delay=2, grad_updates_per_step=1))
    engine = run[1]
    assert engine.agent.updates_per_call == 1  # the per-step path: the actor's step kept where due
    compiled = engine.epoch.lower(initial_state(run, 0)).compile()
    assert host_branches(compiled) == {"conditional": 0, "unbounded while": 0}


@pytest.mark.parametrize("env, matmul_dtype", [("cartpole", "float32"), ("cartpole", "tf32"),
                                               pytest.param("inverted_pendulum", "tf32", marks=pytest.mark.slow)])
def test_every_matmul_of_the_programs_is_full_float32_but_the_networks_chosen_ones(env, matmul_dtype):
    """JAX's default float32 matmul on NVIDIA GPUs since Ampere is TensorFloat-32: every
    program sets its precision outright (the MJX physics' matmuls included)."""
    engine = build_engine(small_config(env, "ppo", matmul_dtype=matmul_dtype, backend=None if env == "cartpole" else "mjx"))
    state = engine.init(jax.random.PRNGKey(0))
    starts = jax.eval_shape(engine.starts, jax.random.PRNGKey(0))
    programs = {"starts": engine.starts.lower(jax.random.PRNGKey(0)),
                "init": engine.init_from.lower(jax.random.PRNGKey(0), starts), "epoch": engine.epoch.lower(state),
                "evaluate": engine.evaluate.lower(state, jax.random.PRNGKey(1))}
    for name, lowered in programs.items():
        got = dot_precisions(lowered)
        assert "DEFAULT" not in got, name
        network = got.count("HIGH")
        assert (network > 0) == (matmul_dtype == "tf32" and name not in ("starts", "init")), (name, got)
    if env != "cartpole":  # the physics' own matmuls are there, full float32
        assert dot_precisions(programs["epoch"]).count("HIGHEST") > 0


@pytest.mark.parametrize("precision", ["high", "default"])
def test_matmul_precision_reaches_the_physics_and_leaves_the_networks_alone(precision):
    """--matmul-precision: every matmul outside the network layers (MJX's physics here) traced
    at the chosen precision, in the training and the evaluation programs alike; the network
    layers keep the full float32 their --matmul-dtype of float32 asks for."""
    runs = {p: build_engine(small_config("inverted_pendulum", "ppo", backend="mjx", matmul_precision=p))
            for p in ("highest", precision)}
    key = jax.random.PRNGKey(0)
    for name in ("epoch", "evaluate"):
        got = {}
        for p, engine in runs.items():
            template = jax.eval_shape(engine.init, key)
            lowered = engine.epoch.lower(template) if name == "epoch" else engine.evaluate.lower(template, key)
            got[p] = dot_precisions(lowered)
        assert set(got["highest"]) == {"HIGHEST"}, name
        chosen = got[precision]
        assert len(chosen) == len(got["highest"]), name
        physics = chosen.count(precision.upper())  # "default" prints as DEFAULT, or no precision at all
        assert 0 < physics < len(chosen) and chosen.count("HIGHEST") == len(chosen) - physics, (name, chosen)


def test_only_the_starts_program_resets_the_physics(monkeypatch):
    """A reset is a whole physics forward pass: the training envs' resets are traced in
    `starts` alone, never in the epoch, init or renew programs (each would compile it again)."""
    engine = build_engine(small_config("inverted_pendulum", "ppo", backend="mjx"))
    inner = engine.env.env  # what AutoReset resets
    traced = []
    reset = inner.reset
    monkeypatch.setattr(inner, "reset", lambda *args, **kwargs: traced.append(1) or reset(*args, **kwargs))
    key = jax.random.PRNGKey(0)
    starts = jax.eval_shape(engine.starts, key)
    template = jax.eval_shape(engine.init, key)
    assert traced, "the starts program resets the envs"
    for name, lower in {"init": lambda: engine.init_from.lower(key, starts), "epoch": lambda: engine.epoch.lower(template),
                        "renew": lambda: engine.renew.lower(template, starts)}.items():
        traced.clear()
        lower()
        assert not traced, name


def test_second_epoch_does_not_recompile(run):
    engine = run[1]
    state = initial_state(run, 1)
    with count_lowerings() as counts:
        for _ in range(3):
            state, _ = engine.epoch(state)
        jax.block_until_ready(state)
    assert counts.get("jit(_epoch)", 0) <= 1, counts


def test_donated_state_is_aliased_and_deleted(run):
    engine = run[1]
    state = initial_state(run, 2)
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


# One agent per loop, and a population: the harness compiles each program once the same way
# for every agent of a loop.
@pytest.mark.parametrize("agent,population", [("ppo", False), ("ppo_rnn", False), ("sac", False), ("ppo", True)])
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
    a = build_engine(small_config("pendulum"))
    results = []
    for _ in range(2):
        state = a.init(jax.random.PRNGKey(3))
        state, metrics = a.epoch(state)
        results.append(jax.tree.leaves(jax.device_get(state.agent)))
    for x, y in zip(*results):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("agent, kind", [r for r in RUNS if r[0] in REPLAY_AGENTS],
                         ids=[_run_id(r) for r in RUNS if r[0] in REPLAY_AGENTS])
def test_replay_epoch_keeps_the_replay_ring_in_place(agent, kind):
    run = cfg, engine = engine_of(agent, kind)
    state = initial_state(run, 0)
    assert np.all(np.asarray(state.loop.ring.rows.size) == cfg.prefill_iterations * cfg.num_envs)
    # exact pairs: every donated leaf (the ring included) aliases its own new value, and
    # temp memory stays under 10% of the state: no whole-buffer copy anywhere.
    compiled = engine.epoch.check(state)
    ring = state.loop.ring  # its rows and the final observations' table
    with jax.transfer_guard("disallow"):
        new_state, metrics = compiled(state)
        jax.block_until_ready(new_state)
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves(ring))
    assert np.all(np.asarray(new_state.loop.ring.rows.size) == (cfg.prefill_iterations * cfg.num_envs
                                                          + cfg.iterations_per_epoch * cfg.num_envs))
    with count_lowerings() as counts:
        for _ in range(2):
            new_state, metrics = engine.epoch(new_state)
        jax.block_until_ready(new_state)
    assert counts.get("jit(_epoch)", 0) <= 1, counts
    assert all(np.all(np.isfinite(v)) for k, v in metrics.items() if k.startswith("loss/"))


@pytest.mark.parametrize("agent, options", [("sac", {}), ("td3", {"policy_delay": 2})])
def test_replay_batches_drawn_ahead_in_any_number_of_parts_give_the_same_training(agent, options, monkeypatch):
    """An iteration's batches are drawn before its gradient steps, all at once or in parts
    (`replay.presample_chunks`; a part per update call is drawing each batch as its step comes):
    every gradient step gets the same batch and key, so training ends where it would."""
    from sim.core.loops import replay

    assert replay.presample_chunks(8, 100, budget=800) == 1
    assert replay.presample_chunks(8, 100, budget=450) == 2  # 4 calls' batches per part
    assert replay.presample_chunks(6, 100, budget=250) == 3  # 2 per part (3 would fit but not divide)
    assert replay.presample_chunks(6, 100, budget=50) == 6  # one call's batches at a time
    cfg = small_config("pendulum", agent=agent, grad_updates_per_step=8, **options)
    ends = {}
    for budget in (replay.PRESAMPLE_BYTES, 1):  # all at once; one call's batches at a time
        monkeypatch.setattr(replay, "PRESAMPLE_BYTES", budget)
        engine = build_engine(cfg)
        state, metrics = engine.epoch(engine.init(jax.random.PRNGKey(0)))
        ends[budget] = jax.device_get((state.agent, {k: v for k, v in metrics.items() if k.startswith("loss/")}))
    (a, b) = ends.values()
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6), a, b)


def test_td3_delays_the_actor_without_a_branch_the_same_way_per_step_and_per_period():
    """grad_updates_per_step 2, policy_delay 2: one call per delay period (2 critic steps, then
    the actor's); grad_updates_per_step 1: one call per step, the actor's step kept where due.
    Both give the same states and losses on the same batches and keys."""
    from agents.td3 import make_td3

    cfg = small_config("pendulum", agent="td3", policy_delay=2, grad_updates_per_step=2)
    engine = build_engine(cfg)
    period = engine.agent
    per_step = make_td3(dataclasses.replace(cfg.agent_config, grad_updates_per_step=1), engine.spec)
    assert (period.updates_per_call, per_step.updates_per_call) == (2, 1)
    state = engine.init(jax.random.PRNGKey(0))
    sampled = jax.eval_shape(lambda ring: step_ring.sample(ring, jax.random.PRNGKey(0), 16), state.loop.ring)
    batches = jax.tree.map(lambda x: jax.random.normal(jax.random.PRNGKey(1), (2,) + x.shape), sampled)
    keys = jax.random.split(jax.random.PRNGKey(2), 2)
    got, got_losses = jax.jit(period.update)(state.agent, state.obs_stats, batches, keys)
    want, losses = state.agent, []
    for i in range(2):
        want, loss = jax.jit(per_step.update)(want, state.obs_stats, jax.tree.map(lambda x: x[i], batches), keys[i])
        losses.append(loss)
    # the delayed actor steps on every 2nd critic step only; the skipped step's loss has weight 0
    assert [float(x["actor"].weight) for x in losses] == [0.0, 1.0] == got_losses["actor"].weight.tolist()
    actor = [float(x["actor"].value) for x in losses]
    assert actor[0] == 0.0 and np.isfinite(actor[1]) and actor[1] != 0
    np.testing.assert_allclose(got_losses["actor"].value, actor, rtol=1e-5)
    for name in ("critic", "q"):
        np.testing.assert_allclose(got_losses[name], [float(x[name]) for x in losses], rtol=1e-5)
    assert int(got.step) == int(want.step) == 2
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), got, want)
    assert not np.allclose(jax.tree.leaves(got.policy)[0], jax.tree.leaves(state.agent.policy)[0])
    state = engine.prefill(state)
    state, metrics = engine.epoch(state)  # one actor step per iteration
    assert np.isfinite(float(metrics["loss/actor"])) and float(metrics["loss/actor"]) != 0.0


@pytest.mark.parametrize("agent", all_agents())
def test_hyper_parameters_are_read_from_the_state(agent):
    """The learning rate lives in the agent state, not in the compiled program: zeroing it in
    the state freezes every network weight through a whole epoch, with no recompilation."""
    run = cfg, engine = engine_of(agent, "one run")

    def weights(agent_state):  # network weights by path (optimizer statistics left out), or a search mean's
        flat = jax.tree_util.tree_flatten_with_path(jax.device_get(agent_state))[0]
        return {jax.tree_util.keystr(p): x for p, x in flat
                if ("params" in jax.tree_util.keystr(p) or jax.tree_util.keystr(p) == ".strategy.mean")
                and "opt" not in jax.tree_util.keystr(p)}

    state = initial_state(run, 0)
    hp = state.agent.hp
    assert hp.learning_rate.dtype == np.float32
    frozen = initial_state(run, 0)  # its own buffers: each epoch call donates its argument
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


def test_the_loop_alone_defines_its_part_of_the_state(run):
    """The training state has one slot for the loop, which the loop's `init` fills; what a
    checkpoint may leave out lies inside it, and is what the loop's prefill rebuilds."""
    from sim.core.state import TrainState
    from sim.run.populations import population

    cfg, engine = run
    assert [f.name for f in dataclasses.fields(TrainState)] == ["agent", "env", "obs_stats", "key", "iteration",
                                                              "env_steps", "loop"]
    template = engine.template(population.keys(cfg)[0])
    own = jax.eval_shape(engine.loop.init, jax.random.PRNGKey(0))
    assert jax.tree.structure(template.loop) == jax.tree.structure(own)  # the slot holds the loop's own state
    mine, built = jax.tree.leaves(template.loop), jax.tree.leaves(own)  # (with member and device axes in front)
    assert [x.shape[x.ndim - y.ndim:] for x, y in zip(mine, built)] == [y.shape for y in built]
    droppable = engine.droppable_paths(template)
    assert all(path.startswith(".loop") for path in droppable)
    assert bool(droppable) == (engine.loop.droppable is not None) == (engine.loop.prefill_iterations > 0)
