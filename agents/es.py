"""Evolution strategies (OpenAI-ES, arXiv:1703.03864, as Brax's `es` trainer does it): each
generation perturbs the policy's parameters with `population_size / 2` antithetic pairs of
Gaussian noise (theta + sigma eps, theta - sigma eps), plays one episode of each member on its
own envs (the generation loop), shapes the members' fitness (centered ranks by default) and
steps Adam along sum_i (w_i+ - w_i-) eps_i / pairs - l2coeff theta, the fitness-weighted
noise (Brax's convention: no division by sigma, which the learning rate absorbs). Members act
deterministically (the perturbation explores); the policy is an MLP whose output the env gets
as the action's mode (tanh-squashed to the bounds, or the arg-max of discrete actions).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import networks as nets
from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Generation
from agents.common import obs_inputs, policy_head, prep_fn
from agents.config import GenerationConfig, HyperParams, agent_config, bind, hparam, hyper_params
from agents.defaults.evolution import ES_DEFAULTS
from agents.optim import adam
from envs.base import EnvSpec

SHAPINGS = ("centered_rank", "original", "wierstra")


@struct.dataclass
class ESState:
    policy: dict
    opt_state: optax.OptState
    hp: HyperParams


@agent_config
class ESConfig(GenerationConfig):
    """ES's hyper-parameters (brax.training's es names)."""

    learning_rate: float = hparam(1e-2)
    """Adam learning rate of the step along the fitness-weighted noise."""
    perturbation_std: float = hparam(0.1)
    """Standard deviation sigma of the parameters' Gaussian perturbations."""
    l2coeff: float = hparam(0.0)
    """Weight decay of the update (the step gains -l2coeff x parameters)."""
    fitness_shaping: Literal["centered_rank", "original", "wierstra"] = "centered_rank"
    """How the members' returns become weights: centered_rank (ranks scaled to [-0.5, 0.5]), original (the returns as they are), wierstra (log-rank utilities that sum to zero)."""
    policy_hidden_sizes: tuple[int, ...] = (32, 32, 32, 32)
    """Hidden layer sizes of the policy network."""
    activation: Literal["swish", "tanh", "relu", "elu"] = "relu"
    """Hidden-layer activation."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if self.perturbation_std <= 0:
            raise ConfigError("perturbation-std", f"must be > 0, got {self.perturbation_std}")


def shape_fitness(fitness: jax.Array, how: str) -> jax.Array:
    """Weights [M] of the members' fitness [M] (higher is better), as Brax's ES options define them."""
    if how == "original":
        return fitness
    ranks = jnp.argsort(jnp.argsort(fitness)).astype(jnp.float32)  # 0: the worst
    n = fitness.shape[0]
    if how == "centered_rank":
        return ranks / (n - 1) - 0.5
    utility = jnp.maximum(0.0, jnp.log(n / 2.0 + 1.0) - jnp.log(n - ranks))  # the best has rank n - 1
    return utility / jnp.sum(utility) - 1.0 / n


def es_step(fitness: jax.Array, noise, params, shaping: str, l2coeff):
    """The direction ES moves the parameters along: sum_i (w_i+ - w_i-) eps_i / pairs -
    l2coeff params, w the shaped fitness [2 x pairs] (the + members first), noise leaves
    [pairs, ...]."""
    weights = shape_fitness(fitness, shaping)
    pairs = fitness.shape[0] // 2
    weights = weights[:pairs] - weights[pairs:]
    return jax.tree.map(lambda eps, p: jnp.tensordot(weights, eps, axes=1) / pairs - l2coeff * p, noise, params)


def antithetic(params, key: jax.Array, pairs: int, std):
    """(members [2 x pairs, ...]: params + std eps then params - std eps, the noise eps [pairs, ...])."""
    leaves, tree = jax.tree.flatten(params)
    noise = [jax.random.normal(k, (pairs,) + leaf.shape, leaf.dtype) for k, leaf in
             zip(jax.random.split(key, len(leaves)), leaves)]
    members = [jnp.concatenate([leaf + std * eps, leaf - std * eps]) for leaf, eps in zip(leaves, noise)]
    return jax.tree.unflatten(tree, members), jax.tree.unflatten(tree, noise)


def deterministic_policy(config, spec: EnvSpec, net):
    """`act(params, obs_stats, obs) -> env action`: the network's mode action."""
    head = policy_head(spec)
    prep = prep_fn(config.normalize_observations, config.obs_clip)

    def act(params, obs_stats, obs):
        return head.to_env(head.mode(net.apply(params, prep(obs_stats, obs))))

    return act


def make_es(config: ESConfig, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    head = policy_head(spec)
    net = nets.MLP(config.policy_hidden_sizes, head.out_size, config.activation, matmul_dtype=config.matmul_dtype,
                   inputs=obs_inputs(config, spec))
    policy = deterministic_policy(config, spec, net)
    optimizer = adam()
    pairs = config.population_size // 2

    def init(key, hp=None):
        params = net.init(key, jnp.zeros((1,) + spec.obs_shape, jnp.float32))
        hp = hyper_params(config, hp)
        return ESState(policy=params, opt_state=optimizer.init(params, hp), hp=hp)

    def act(state: ESState, obs_stats, obs, key, deterministic=False, carry=None):
        action = policy(state.policy, obs_stats, obs)
        return action, action, carry

    def update(state: ESState, obs_stats, data: Generation, key):
        """One generation: the members' fitness -> shaped weights -> one Adam step."""
        hp = bind(config, state.hp)
        members, noise = antithetic(state.policy, key, pairs, hp.perturbation_std)
        fitness, after = data.evaluate(members, policy)
        step = es_step(fitness, noise, state.policy, config.fitness_shaping, hp.l2coeff)
        params, opt_state = optimizer.step(jax.tree.map(jnp.negative, step), state.opt_state, state.policy, hp)
        metrics = {"fitness": jnp.mean(fitness), "fitness_max": jnp.max(fitness),
                   "params_norm": optax.global_norm(params)}
        return state.replace(policy=params, opt_state=opt_state), metrics, after

    return Agent(init=init, act=act, update=update)


AGENT = AgentDef(name="es", about="Evolution strategies (OpenAI-ES): antithetic perturbations, shaped fitness, Adam",
                 config=ESConfig, make=make_es, actions=("continuous", "discrete"), defaults=ES_DEFAULTS)
