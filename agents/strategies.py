"""Any distribution-based evolution strategy of evosax's catalogue over a policy's parameters
(`--agent evosax --strategy NAME`: SNES, CMA_ES, Sep_CMA_ES, xNES, PGPE, Open_ES, ARS, ...), on
the generation loop as `es` and `ars` are. Each generation the strategy is asked for
`population_size` members (whole parameter sets of the policy network), every member plays
one episode on each of its envs, and the strategy is told their fitness (the members' mean
returns, negated: evosax minimises); the policy is the strategy's mean. Members act
deterministically (the search distribution explores); the network's output is the action's mode
(tanh-squashed to the bounds, or the arg-max of discrete actions).

The strategy's state (its mean, step sizes or covariance, its optimizer's moments, its counters)
is the agent's state: donated, checkpointed and resumed as every agent's. `--perturbation-std`
is the strategy's initial search scale, which evosax defaults to 1 (too wide for a network's
weights); `--learning-rate` scales the strategy's step of its mean (1: its own step; sweepable,
as every agent's learning rate is).
"""

from __future__ import annotations

import inspect
from typing import Literal

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import networks as nets
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Generation
from agents.common import obs_inputs, policy_head
from agents.config import GenerationConfig, HyperParams, agent_config, bind, hparam, hyper_params
from agents.defaults.evolution import EVOSAX_DEFAULTS
from agents.es import deterministic_policy
from envs.base import EnvSpec

# Left out: strategies whose constructors need more than a population and a solution (several
# populations, a sampling function), those that rank inside their update with
# jax.scipy.stats.rankdata, whose branch on NaN a GPU would read on the host every generation,
# and GuidedES, which steers its search by a surrogate gradient given before every generation:
# this agent has none to give, and the state's `grad` then holds NaN ("none given"), which the
# run's divergence check rightly reads as a diverged state.
_LEFT_OUT = {"RandomSearch": "it samples from a function given to it", "SV_CMA_ES": "it runs several populations",
             "SV_Open_ES": "it runs several populations", "CR_FM_NES": "it ranks with a branch on NaN",
             "Rm_ES": "it ranks with a branch on NaN",
             "GuidedES": "it steers its search by a surrogate gradient given before every generation, which this "
                         "agent has none of (its state would hold NaN where the gradient goes)"}


def catalogue() -> dict:
    """evosax's distribution-based strategies this agent builds, by name."""
    from evosax.algorithms import distribution_based_algorithms  # evosax builds arrays on import: not before --devices
    return {name: cls for name, cls in distribution_based_algorithms.items() if name not in _LEFT_OUT}


def _accepts(cls, name: str) -> bool:
    return name in inspect.signature(cls.__init__).parameters


@struct.dataclass
class EvosaxState:
    strategy: object  # the strategy's own state (a pytree)
    hp: HyperParams


@agent_config
class EvosaxConfig(GenerationConfig):
    """The strategy and the policy network it searches over."""

    strategy: str = "SNES"
    """The evolution strategy: a name of evosax's distribution-based catalogue (SNES, CMA_ES, Sep_CMA_ES, xNES, PGPE, Open_ES, ARS, DES, MA_ES, LM_MA_ES, ...; a wrong name lists them all)."""
    perturbation_std: float = 0.1
    """The strategy's initial search scale (its std_init, or the constant of its std schedule)."""
    learning_rate: float = hparam(1.0)
    """Scale of the strategy's step of its mean each generation: 1 takes the strategy's own step, 0 keeps the mean where it is; for strategies whose optimizer is plain SGD (Open_ES at 0.001, ...) it multiplies their learning rate."""
    policy_hidden_sizes: tuple[int, ...] = (32, 32)
    """Hidden layer sizes of the policy network (its parameters are the strategy's search space)."""
    activation: Literal["swish", "tanh", "relu", "elu"] = "tanh"
    """Hidden-layer activation."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        names = catalogue()
        if self.strategy in _LEFT_OUT:
            raise ConfigError("strategy", f"{self.strategy} is not offered: {_LEFT_OUT[self.strategy]}; one of "
                                          f"{', '.join(sorted(names))}")
        if self.strategy not in names:
            raise ConfigError("strategy", f"unknown strategy {self.strategy!r}: one of {', '.join(sorted(names))}")
        if self.perturbation_std <= 0:
            raise ConfigError("perturbation-std", f"must be > 0, got {self.perturbation_std}")


def average_ranks(fitness: jax.Array) -> jax.Array:
    """Ranks from 0 of a generation's fitness [M], ties sharing their average rank, NaN counted as
    +inf: `jax.scipy.stats.rankdata(method="average") - 1` without its branch on NaN, a
    conditional whose predicate a GPU would read on the host in every generation."""
    n = fitness.shape[-1]
    f = jnp.where(jnp.isnan(fitness), jnp.inf, fitness)
    order = jnp.argsort(f)
    ranked = f[order]
    first = jnp.concatenate([jnp.ones((1,), bool), ranked[1:] != ranked[:-1]])  # a tie group starts
    group = jnp.cumsum(first)[jnp.argsort(order)]  # each member's group, from 1
    starts = jnp.nonzero(first, size=n + 1, fill_value=n)[0].astype(jnp.float32)  # then n
    return 0.5 * (starts[group - 1] + starts[group] - 1.0)


def _centered_ranks(population, fitness, state, params):
    return average_ranks(fitness) / (fitness.shape[-1] - 1) - 0.5


def _rank_weights(population, fitness, state, params):
    weights = params.weights[..., average_ranks(fitness).astype(jnp.int32)]
    return jnp.where(jnp.all(jnp.isnan(fitness), axis=-1, keepdims=True), jnp.zeros_like(weights), weights)


def _shaping(cls) -> dict:
    """The strategy's own fitness shaping where it ranks, computed by `average_ranks`."""
    from evosax.core import fitness_shaping as shaping  # evosax builds arrays on import: not before --devices
    given = inspect.signature(cls.__init__).parameters.get("fitness_shaping_fn")
    own = {shaping.centered_rank_fitness_shaping_fn: _centered_ranks, shaping.weights_fitness_shaping_fn: _rank_weights}
    return {"fitness_shaping_fn": own[given.default]} if given is not None and given.default in own else {}


def build(config: EvosaxConfig, solution):
    """(the strategy over parameter trees shaped as `solution`, its params)."""
    cls = catalogue()[config.strategy]
    kwargs = _shaping(cls)
    if _accepts(cls, "std_schedule"):
        kwargs["std_schedule"] = optax.constant_schedule(config.perturbation_std)
    strategy = cls(population_size=config.population_size, solution=solution, **kwargs)
    params = strategy.default_params
    if "std_init" in getattr(params, "__dataclass_fields__", {}):
        params = params.replace(std_init=jnp.asarray(config.perturbation_std, jnp.float32))
    return strategy, params


def make_evosax(config: EvosaxConfig, spec: EnvSpec, axis_name: str | None = None,
                budget: Budget = Budget(1)) -> Agent:
    head = policy_head(spec)
    net = nets.MLP(config.policy_hidden_sizes, head.out_size, config.activation, matmul_dtype=config.matmul_dtype,
                   inputs=obs_inputs(config, spec))
    policy = deterministic_policy(config, spec, net)
    dummy = jnp.zeros((1,) + spec.obs_shape, jnp.float32)
    strategy, params = build(config, net.init(jax.random.PRNGKey(0), dummy))  # (the tree's shapes only)

    def init(key, hp=None):
        net_key, strategy_key = jax.random.split(key)
        state = strategy.init(strategy_key, net.init(net_key, dummy), params)
        return EvosaxState(strategy=state, hp=hyper_params(config, hp))

    def act(state: EvosaxState, obs_stats, obs, key, deterministic=False, carry=None):
        action = policy(strategy.get_mean(state.strategy), obs_stats, obs)
        return action, action, carry

    def update(state: EvosaxState, obs_stats, data: Generation, key):
        """One generation: ask for members, play them, tell the strategy their negated fitness."""
        ask_key, tell_key = jax.random.split(key)
        members, asked = strategy.ask(ask_key, state.strategy, params)
        fitness, after = data.evaluate(members, policy)
        told, _ = strategy.tell(tell_key, members, -fitness, asked, params)
        scale = bind(config, state.hp).learning_rate
        told = told.replace(mean=jnp.where(scale == 1.0, told.mean, asked.mean + scale * (told.mean - asked.mean)))
        metrics = {"fitness": jnp.mean(fitness), "fitness_max": jnp.max(fitness),
                   "params_norm": optax.global_norm(strategy.get_mean(told))}
        return state.replace(strategy=told), metrics, after

    return Agent(init=init, act=act, update=update)


AGENT = AgentDef(name="evosax", about="An evolution strategy of evosax's catalogue (--strategy: SNES, CMA_ES, PGPE, ...)",
                 config=EvosaxConfig, make=make_evosax, actions=("continuous", "discrete"), defaults=EVOSAX_DEFAULTS,
                 fixed=("strategy",))
