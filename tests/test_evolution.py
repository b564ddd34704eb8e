"""The generation loop and its agents (ES, ARS): the updates equal their closed forms, the
agents solve cartpole, and a generation's members split over devices."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.ars import top_direction_step
from sim.core.contract import Generation
from agents.es import ESConfig, antithetic, es_step, make_es, shape_fitness
from agents.strategies import EvosaxConfig, average_ranks, build, catalogue, make_evosax
from envs.base import EnvSpec
from sim.core.engine import state_groups
from sim.run.config import ConfigError, defaults_for
from sim.run.trainer import train


def test_the_es_step_on_a_quadratic_is_its_closed_form():
    """f(theta) = -|theta - c|^2: an antithetic pair's fitness difference is -4 sigma eps.(theta - c)
    exactly, so the unshaped step is 4 sigma / P sum_i eps_i eps_i^T (c - theta)."""
    theta, c, sigma, pairs = jnp.asarray([0.5, -1.0, 2.0]), jnp.asarray([1.0, 1.0, -1.0]), 0.1, 8
    members, noise = antithetic({"w": theta}, jax.random.PRNGKey(0), pairs, sigma)
    np.testing.assert_allclose(members["w"][:pairs] - theta, sigma * noise["w"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(members["w"][pairs:] - theta, -sigma * noise["w"], rtol=1e-6, atol=1e-7)
    fitness = -jnp.sum((members["w"] - c) ** 2, axis=1)
    step = es_step(fitness, noise, {"w": theta}, "original", 0.0)["w"]
    eps = np.asarray(noise["w"], np.float64)
    closed = 4 * sigma / pairs * eps.T @ eps @ (np.asarray(c) - np.asarray(theta))
    np.testing.assert_allclose(step, closed, rtol=1e-4)
    l2 = es_step(fitness, noise, {"w": theta}, "original", 0.5)["w"]
    np.testing.assert_allclose(l2, closed - 0.5 * np.asarray(theta), rtol=1e-4)


def test_fitness_shapings_are_braxs():
    f = jnp.asarray([3.0, -1.0, 10.0, 2.0])
    np.testing.assert_allclose(shape_fitness(f, "centered_rank"), [1 / 6, -0.5, 0.5, -1 / 6], rtol=1e-6)
    np.testing.assert_allclose(shape_fitness(f, "original"), f)
    u = np.maximum(0.0, np.log(3.0) - np.log([2.0, 4.0, 1.0, 3.0]))  # the best has rank 1
    np.testing.assert_allclose(shape_fitness(f, "wierstra"), u / u.sum() - 0.25, rtol=1e-6)


def test_es_steps_adam_along_the_fitness_weighted_noise():
    """ES's update from a hand-made generation (a quadratic's fitness of its members): Adam's
    first step moves each parameter by the learning rate along the sign of the ES step."""
    spec = EnvSpec(obs_shape=(2,), discrete=False, episode_length=10, action_shape=(1,), action_low=(-1.0,),
                   action_high=(1.0,))
    config = ESConfig(population_size=8, policy_hidden_sizes=(4,), fitness_shaping="original", learning_rate=0.01)
    agent = make_es(config, spec)
    state = agent.init(jax.random.PRNGKey(1))
    target = jax.tree.map(jnp.ones_like, state.policy)

    def evaluate(members, act):
        distance = jax.tree.map(lambda m, t: jnp.sum((m - t) ** 2, axis=tuple(range(1, m.ndim))), members, target)
        return -sum(jax.tree.leaves(distance)), "after"

    key = jax.random.PRNGKey(2)
    new, metrics, after = agent.update(state, None, Generation(8, evaluate), key)
    members, noise = antithetic(state.policy, key, 4, 0.1)
    step = es_step(evaluate(members, None)[0], noise, state.policy, "original", 0.0)
    moved = jax.tree.map(lambda a, b, s: np.asarray(a - b) / np.sign(np.asarray(s)), new.policy, state.policy, step)
    for leaf in jax.tree.leaves(moved):
        np.testing.assert_allclose(leaf, 0.01, rtol=1e-3)
    assert after == "after" and float(metrics["fitness_max"]) <= 0


def test_ars_steps_along_its_top_directions_scaled_by_their_returns_spread():
    fitness = jnp.asarray([1.0, 5.0, 2.0, 0.0, 4.0, 2.5])  # pairs (1, 0), (5, 4), (2, 2.5)
    noise = {"w": jnp.asarray([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])}
    step = top_direction_step(fitness, noise, top=2)["w"]  # the pairs best at 5 and 2.5
    sigma = np.std([5.0, 2.0, 4.0, 2.5])
    np.testing.assert_allclose(step, ((5 - 4) * np.asarray([0.0, 1.0]) + (2 - 2.5) * np.asarray([1.0, 1.0]))
                               / (2 * sigma), rtol=1e-6)


@pytest.mark.parametrize("agent, steps", [("ars", 160_000), ("es", 320_000)])
def test_es_and_ars_solve_cartpole(tmp_path, agent, steps):
    cfg = defaults_for("cartpole", agent).replace(progress=False, total_steps=steps, epochs=2).validate()
    train(cfg, run_dir=str(tmp_path), log=lambda *a: None)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["env_steps"] == steps
    assert records[-1]["eval/episode_return"] >= 475, records


def test_a_population_that_does_not_fit_the_envs_is_refused():
    with pytest.raises(ConfigError, match="^--num-envs: must be a multiple of --population-size 32"):
        defaults_for("cartpole", "es").replace(num_envs=48).validate()
    with pytest.raises(ConfigError, match="^--population-size: must be even"):
        defaults_for("cartpole", "ars").replace(population_size=31, num_envs=31).validate()


@pytest.mark.slow
def test_es_balances_braxs_inverted_pendulum_with_its_defaults(tmp_path):
    """16 members, Adam 0.03, 2M env steps (125 generations of 1,000-step episodes): about 90 s."""
    cfg = defaults_for("inverted_pendulum", "es").replace(progress=False, epochs=8).validate()
    record = train(cfg, run_dir=str(tmp_path), log=lambda *a: None)
    assert record["eval/episode_return"] >= 900


@pytest.mark.slow  # (27 s; ARS and ES solve cartpole in the default suite)
def test_ars_balances_braxs_inverted_pendulum_with_its_defaults(tmp_path):
    """32 members on raw observations at step 0.1, noise 0.1, 1M env steps (32 generations): about
    20 s of training; 1000 from its 8th generation on in the measured seeds."""
    cfg = defaults_for("inverted_pendulum", "ars").replace(progress=False, epochs=4).validate()
    assert not cfg.agent_config.normalize_observations
    train(cfg, run_dir=str(tmp_path), log=lambda *a: None)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records] == [256_000, 512_000, 768_000, 1_024_000]
    assert all(r["eval/episode_return"] >= 900 for r in records[1:]), records


def test_evosax_tells_its_strategy_the_negated_fitness_and_plays_its_mean():
    """One generation of the agent equals evosax's own ask and tell with the same keys, told the
    members' returns negated (evosax minimises); the policy acting is the strategy's mean; a
    learning rate of 0 keeps the mean."""
    spec = EnvSpec(obs_shape=(2,), discrete=False, episode_length=10, action_shape=(1,), action_low=(-1.0,),
                   action_high=(1.0,))
    config = EvosaxConfig(strategy="SNES", population_size=8, policy_hidden_sizes=(4,))
    agent = make_evosax(config, spec)
    state = agent.init(jax.random.PRNGKey(0))

    def returns(members):  # higher for members nearer 1 everywhere
        return -sum(jnp.sum(jnp.square(x - 1.0).reshape(x.shape[0], -1), axis=1) for x in jax.tree.leaves(members))

    def evaluate(members, act):
        return returns(members), "after"

    key = jax.random.PRNGKey(1)
    new, metrics, after = agent.update(state, None, Generation(8, evaluate), key)
    strategy, params = build(config, jax.tree.map(jnp.zeros_like, strategy_of(state)))
    ask_key, tell_key = jax.random.split(key)
    members, asked = strategy.ask(ask_key, state.strategy, params)
    told, _ = strategy.tell(tell_key, members, -returns(members), asked, params)
    np.testing.assert_array_equal(new.strategy.mean, told.mean)
    assert after == "after" and float(metrics["fitness_max"]) == pytest.approx(float(jnp.max(returns(members))))
    assert float(jnp.mean(returns(jax.tree.map(lambda x: x[None], strategy.get_mean(new.strategy))))) > \
        float(jnp.mean(returns(jax.tree.map(lambda x: x[None], strategy.get_mean(state.strategy)))))
    obs = jnp.ones((5, 2))
    action, _, _ = agent.act(new, None, obs, key, deterministic=True)
    mean_policy = strategy.get_mean(new.strategy)
    layers = mean_policy["params"]
    hidden = jnp.tanh(obs @ layers["Dense_0"]["kernel"] + layers["Dense_0"]["bias"])
    out = hidden @ layers["Dense_1"]["kernel"] + layers["Dense_1"]["bias"]  # [loc, scale] of the one action
    np.testing.assert_allclose(action, jnp.tanh(out[:, :1]), rtol=1e-5, atol=1e-6)
    frozen = state.replace(hp=state.hp.replace(learning_rate=jnp.zeros((), jnp.float32)))
    np.testing.assert_array_equal(agent.update(frozen, None, Generation(8, evaluate), key)[0].strategy.mean,
                                  state.strategy.mean)


def strategy_of(state):
    """The network parameters' tree the agent's strategy searches over (the zero mean of its init)."""
    from agents.networks import MLP
    return MLP((4,), 2, "tanh").init(jax.random.PRNGKey(0), jnp.zeros((1, 2)))


@pytest.mark.parametrize("strategy, flags", [("SNES", {}), ("CMA_ES", {}), ("Open_ES", {"learning_rate": 50.0})])
def test_evosax_strategies_solve_cartpole(tmp_path, strategy, flags):
    cfg = defaults_for("cartpole", "evosax")
    cfg = cfg.replace(progress=False, total_steps=320_000, epochs=4,
                      agent_config=cfg.agent_config.__class__(**{**vars(cfg.agent_config), "strategy": strategy,
                                                                  **flags})).validate()
    record = train(cfg, run_dir=str(tmp_path), log=lambda *a: None)
    assert record["eval/episode_return"] >= 475


def test_an_unknown_strategy_is_refused_with_the_catalogue():
    with pytest.raises(ConfigError, match="^--strategy: unknown strategy 'Nope': one of .*CMA_ES.*SNES"):
        EvosaxConfig(strategy="Nope").validate(64)


def test_average_ranks_are_rankdatas_without_its_branch():
    for fitness in ([3.0, 1.0, 2.0, 1.0, 5.0], [500.0, 500.0, 500.0, 1.0], [np.nan, 1.0, 2.0, np.nan]):
        x = jnp.asarray(fitness)
        expected = jax.scipy.stats.rankdata(jnp.where(jnp.isnan(x), jnp.inf, x)) - 1
        np.testing.assert_array_equal(average_ranks(x), expected)
    np.testing.assert_array_equal(average_ranks(jnp.asarray([500.0, 500.0, 500.0, 1.0])), [2.0, 2.0, 2.0, 0.0])


def test_every_offered_strategy_updates_without_a_host_branch():
    """Each strategy of the catalogue builds, its generation's update compiles with no
    conditional and no unbounded while (the engine proofs cover the default, SNES, in a whole
    epoch), and after two generations its state holds no NaN or Inf, which the run's divergence
    check would read as a diverged run (GuidedES's NaN "no gradient given" did, at iteration 1)."""
    from tests.helpers import host_branches
    spec = EnvSpec(obs_shape=(2,), discrete=False, episode_length=10, action_shape=(1,), action_low=(-1.0,),
                   action_high=(1.0,))

    def evaluate(members, act):
        return -sum(jnp.sum(jnp.square(x).reshape(16, -1), axis=1) for x in jax.tree.leaves(members)), None

    assert {"SNES", "CMA_ES", "Sep_CMA_ES", "PGPE", "Open_ES", "xNES", "ARS"} <= set(catalogue())
    for name in catalogue():
        agent = make_evosax(EvosaxConfig(strategy=name, population_size=16, policy_hidden_sizes=(4,)), spec)
        state = agent.init(jax.random.PRNGKey(0))
        update = jax.jit(lambda s, k: agent.update(s, None, Generation(16, evaluate), k)[0])
        compiled = update.lower(state, jax.random.PRNGKey(1)).compile()
        assert host_branches(compiled) == {"conditional": 0, "unbounded while": 0}, name
        state = compiled(compiled(state, jax.random.PRNGKey(1)), jax.random.PRNGKey(2))
        bad = [k for k, leaves in state_groups(state.replace(hp=None)).items()
               if not all(bool(jnp.all(jnp.isfinite(x))) for x in leaves)]
        assert not bad, (name, bad)
