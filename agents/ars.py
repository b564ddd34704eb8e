"""Augmented Random Search (arXiv:1803.07055, as Brax's `ars` trainer does it): a linear policy
(observation x W, W from zeros; with --normalize-observations the observations are
normalised by running statistics of the generations' episodes: ARS V2) perturbed along
`population_size / 2` Gaussian directions both ways, one episode per member (the generation
loop). The `--top-directions` b directions whose better side scored highest make the step:

    W += learning_rate / (b sigma_R) sum_k (r_k+ - r_k-) delta_k

sigma_R the standard deviation of those 2b returns. Plain steps, no optimizer. The env gets
the linear output as the action's mode (tanh-squashed to its bounds; the arg-max of discrete
actions).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from sim.core.contract import Agent, AgentDef, Budget, ConfigError, Generation
from agents.common import obs_inputs, policy_head
from agents.config import GenerationConfig, HyperParams, agent_config, bind, hparam, hyper_params
from agents.defaults.evolution import ARS_DEFAULTS
from agents.es import antithetic, deterministic_policy
from agents.networks import take
from envs.base import EnvSpec


@struct.dataclass
class ARSState:
    policy: dict
    hp: HyperParams


@agent_config
class ARSConfig(GenerationConfig):
    """ARS's hyper-parameters (brax.training's ars names, where it has them)."""

    learning_rate: float = hparam(0.015)
    """Step size of the update (Brax's step_size)."""
    exploration_noise_std: float = hparam(0.025)
    """Standard deviation of the directions' Gaussian perturbations."""
    top_directions: int = 20
    """Directions b whose better side scored highest that make the step (at most population_size / 2)."""

    def positive_fields(self):
        return (*super().positive_fields(), "top_directions")

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if self.top_directions > self.population_size // 2:
            raise ConfigError("top-directions", f"must be at most population_size / 2 = {self.population_size // 2}, "
                                                f"got {self.top_directions}")
        if self.exploration_noise_std <= 0:
            raise ConfigError("exploration-noise-std", f"must be > 0, got {self.exploration_noise_std}")


class Linear(nn.Module):
    """observation (the parts the policy reads) x W, no bias, W from zeros."""

    out_size: int
    inputs: tuple[tuple[int, int], ...] | None = None

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.out_size, use_bias=False, kernel_init=nn.initializers.zeros)(take(x, self.inputs))


def top_direction_step(fitness: jax.Array, noise, top: int):
    """sum_k (r_k+ - r_k-) delta_k / (b sigma_R) over the `top` directions whose better side
    scored highest; fitness [2 x pairs] (the + members first), noise leaves [pairs, ...]."""
    pairs = fitness.shape[0] // 2
    plus, minus = fitness[:pairs], fitness[pairs:]
    chosen = (jnp.argsort(jnp.argsort(-jnp.maximum(plus, minus))) < top).astype(jnp.float32)
    both = jnp.concatenate([chosen, chosen]) > 0
    sigma = jnp.std(fitness, where=both)
    sigma = jnp.where(sigma > 0, sigma, 1e-6)
    weights = chosen * (plus - minus) / (top * sigma)
    return jax.tree.map(lambda eps: jnp.tensordot(weights, eps, axes=1), noise)


def make_ars(config: ARSConfig, spec: EnvSpec, axis_name: str | None = None, budget: Budget = Budget(1)) -> Agent:
    head = policy_head(spec)
    net = Linear(head.out_size, obs_inputs(config, spec))
    policy = deterministic_policy(config, spec, net)
    pairs = config.population_size // 2

    def init(key, hp=None):
        return ARSState(policy=net.init(key, jnp.zeros((1,) + spec.obs_shape, jnp.float32)),
                        hp=hyper_params(config, hp))

    def act(state: ARSState, obs_stats, obs, key, deterministic=False, carry=None):
        action = policy(state.policy, obs_stats, obs)
        return action, action, carry

    def update(state: ARSState, obs_stats, data: Generation, key):
        """One generation: the members' returns -> a step along the best directions."""
        hp = bind(config, state.hp)
        members, noise = antithetic(state.policy, key, pairs, hp.exploration_noise_std)
        fitness, after = data.evaluate(members, policy)
        step = top_direction_step(fitness, noise, config.top_directions)
        params = jax.tree.map(lambda p, s: p + hp.learning_rate * s, state.policy, step)
        metrics = {"fitness": jnp.mean(fitness), "fitness_max": jnp.max(fitness)}
        return state.replace(policy=params), metrics, after

    return Agent(init=init, act=act, update=update)


AGENT = AgentDef(name="ars", about="Augmented Random Search: a linear policy, its best perturbation directions",
                 config=ARSConfig, make=make_ars, actions=("continuous", "discrete"), defaults=ARS_DEFAULTS)
