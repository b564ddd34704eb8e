"""Agent configs: the frozen dataclasses an agent declares its hyper-parameters in (each
field's docstring is its `--help` text), and the bases every agent builds on: `AgentConfig`
(the fields every agent has), one base per iteration kind with the sizes of its loop
(`UnrollConfig`, `ReplayConfig`, `HorizonConfig`, `GenerationConfig`) and `TargetNetworks` for agents that keep target networks.

Fields made with `hparam` leave array shapes alone: they live in the agent state's `hp` as
float32 leaves (`hyper_params`), so a population can vmap over them and PBT can change them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, Literal, Optional

import jax
import jax.numpy as jnp
import tyro

from sim.core.contract import DIFFERENTIABLE, GENERATION, RECURRENT, REPLAY, UNROLL, ConfigError


def hparam(default, **kwargs):
    """A config field that does not change array shapes: it lives in the agent state's `hp`
    as a float32 leaf (so a population can vmap over it), not in a closure."""
    return dataclasses.field(default=default, metadata={"sweep": True}, **kwargs)


def agent_config(cls):
    """Decorator of an agent's config: a frozen dataclass (fields made with `hparam` are its
    hyper-parameters)."""
    return dataclasses.dataclass(frozen=True)(cls)


def sweepable(config_cls) -> tuple[str, ...]:
    """The names of a config class's shape-free hyper-parameters."""
    return tuple(f.name for f in dataclasses.fields(config_cls) if f.metadata.get("sweep"))


class HyperParams:
    """An agent's shape-free hyper-parameters as float32 leaves, read as attributes
    (`hp.learning_rate`); a pytree whose structure is their names only."""

    __slots__ = ("_values",)

    def __init__(self, values: dict):
        object.__setattr__(self, "_values", dict(sorted(values.items())))

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no hyper-parameter {name!r}") from None

    def __setattr__(self, name, value):
        raise AttributeError("HyperParams is immutable; use replace()")

    def replace(self, **values) -> "HyperParams":
        return HyperParams({**self._values, **values})

    def items(self):
        return self._values.items()

    def __repr__(self):
        return f"HyperParams({', '.join(f'{k}={v}' for k, v in self._values.items())})"


jax.tree_util.register_pytree_with_keys(
    HyperParams,
    lambda hp: ([(jax.tree_util.GetAttrKey(k), v) for k, v in hp.items()], tuple(k for k, _ in hp.items())),
    lambda names, leaves: HyperParams(dict(zip(names, leaves))),
    lambda hp: (list(v for _, v in hp.items()), tuple(k for k, _ in hp.items())),
)


def hyper_params(config, given: Optional[HyperParams] = None) -> HyperParams:
    """The `hp` an agent state carries: `given` (a population member's, see `init`), else
    every one of `config`'s hyper-parameters as a float32 scalar. An optional one that is
    unset (None) is +inf, its "no limit": the state's tree is the same whichever are set, so
    a run resumes or sweeps with any of them given."""
    if given is not None:
        return given
    return HyperParams({name: jnp.asarray(_unset_is_inf(getattr(config, name)), jnp.float32)
                        for name in sweepable(type(config))})


def _unset_is_inf(value):
    return float("inf") if value is None else value


def bind(config, hp: HyperParams):
    """`config` with its hyper-parameters taken from `hp` (traced values inside a program):
    what an agent's functions read, static switches and sizes included."""
    return dataclasses.replace(config, **dict(hp.items()))


@agent_config
class AgentConfig:
    """Hyper-parameters every agent has (brax.training names and meanings)."""

    discounting: float = hparam(0.99)
    """Discount factor gamma."""
    learning_rate: float = hparam(3e-4)
    """Adam learning rate."""
    reward_scaling: float = hparam(1.0)
    """Rewards are multiplied by this before learning."""
    max_grad_norm: Optional[float] = hparam(None)
    """Clip gradients to this global norm (None: no clipping)."""
    normalize_observations: bool = True
    """Normalise observations with running mean/std statistics."""
    obs_clip: Optional[float] = 5.0
    """With normalize_observations: normalised observations are clipped to plus or minus this; None: not clipped (as Brax's trainers, which never clip them)."""
    activation: Literal["swish", "tanh", "relu", "elu"] = "tanh"
    """Hidden-layer activation."""
    matmul_dtype: Literal["float32", "tf32", "bfloat16", "default"] = "float32"
    """Precision of the networks' matmuls, forward and backward. float32: full float32 on every platform (JAX's default on NVIDIA GPUs since Ampere is TensorFloat-32, which breaks some training runs; every other matmul of the program, physics included, is full float32 too). tf32: TensorFloat-32 products with float32 sums where the hardware has them (NVIDIA Ampere and newer; float32 elsewhere). bfloat16: the hidden-to-hidden matmuls multiply in bfloat16 and sum in float32 (parameters, optimizer state and the input and output layers stay float32): faster where the hardware has bfloat16 matmuls (GPUs; CPUs with AVX512-BF16 or AMX), slower where it does not. default: every layer at the platform's default precision (one bfloat16 pass per product on a TPU, as Brax's trainers run there: a SAC gradient step in about half the time of float32's; float32 on a CPU). tf32, bfloat16 and default round differently from float32, so a seed's run differs from its float32 run where they take effect."""

    actor_obs: str = ""
    """The parts of a structured (dict) observation the policy reads, comma-separated (e.g. state); empty: the whole observation of an env with one array, the part named state of a structured one."""

    kind = None  # the iteration kind (a class attribute of each kind's config, not a field)

    def positive_fields(self) -> tuple[str, ...]:
        return ()

    def validate(self, num_envs: int) -> None:
        """Raises ConfigError naming the flag to change."""
        for f in dataclasses.fields(self):  # NaN passes every comparison; +-inf only means "no limit" for a limit
            value = getattr(self, f.name)
            if isinstance(value, float) and (math.isnan(value) or (math.isinf(value) and f.default is not None)):
                raise ConfigError(f.name.replace("_", "-"), f"must be a finite number, got {value}")
        for name in self.positive_fields():
            if getattr(self, name) < 1:
                raise ConfigError(name.replace("_", "-"), f"must be a positive integer, got {getattr(self, name)}")
        if not 0.0 <= self.discounting <= 1.0:
            raise ConfigError("discounting", f"must be in [0.0, 1.0], got {self.discounting}")
        if self.learning_rate <= 0:
            raise ConfigError("learning-rate", f"must be > 0, got {self.learning_rate}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ConfigError("max-grad-norm", f"must be > 0 when set, got {self.max_grad_norm}")
        if self.obs_clip is not None and self.obs_clip <= 0:
            raise ConfigError("obs-clip", f"must be > 0 when set, got {self.obs_clip}")
        for f in dataclasses.fields(self):
            if f.name.endswith("hidden_sizes") and any(h < 1 for h in getattr(self, f.name)):
                raise ConfigError(f.name.replace("_", "-"), "hidden sizes must be positive integers")

    def per_device(self, n: int) -> "AgentConfig":
        """The sizes one of n devices works with."""
        return self

    def divisible(self) -> tuple[tuple[str, int], ...]:
        """(flag, value) of the sizes that must divide over the devices."""
        return ()


@agent_config
class UnrollConfig(AgentConfig):
    """The sizes of an on-policy iteration (brax.training names)."""

    unroll_length: int = 32
    """Environment steps per trajectory between updates."""
    batch_size: int = 256
    """Trajectories per minibatch."""
    num_minibatches: int = 4
    """Minibatches per pass over the collected data; batch_size * num_minibatches trajectories are collected per iteration."""
    num_updates_per_batch: int = 4
    """Passes (epochs) of minibatch updates over each collected batch."""
    anneal_lr: bool = False
    """Linearly anneal the learning rate to zero over the run."""

    kind = UNROLL

    def positive_fields(self):
        return ("unroll_length", "batch_size", "num_minibatches", "num_updates_per_batch")

    def steps_per_iteration(self, num_envs: int, action_repeat: int, episode_length: int) -> int:
        return self.batch_size * self.num_minibatches * self.unroll_length * action_repeat

    def unrolls_per_iteration(self, num_envs: int) -> int:
        """Sequential unrolls of all envs per iteration."""
        return self.batch_size * self.num_minibatches // num_envs

    def prefill_iterations(self, num_envs: int) -> int:
        """Iterations before training: none (on-policy agents learn from what they just did)."""
        return 0

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        trajectories = self.batch_size * self.num_minibatches
        if trajectories % num_envs:
            # The valid --num-envs are the divisors of the trajectories: the nearest below and
            # above the one given (none above when it exceeds them all).
            divisors = [d for d in range(1, trajectories + 1) if trajectories % d == 0]
            near = [max(d for d in divisors if d < num_envs)]
            near += [d for d in divisors if d > num_envs][:1]
            raise ConfigError(
                "num-envs", f"batch_size * num_minibatches = {trajectories} trajectories must divide by num_envs "
                            f"{num_envs}; use --num-envs {' or '.join(map(str, near))}, or change "
                            f"--batch-size/--num-minibatches so that their product is a multiple of {num_envs}")

    def per_device(self, n):
        return dataclasses.replace(self, batch_size=self.batch_size // n)

    def divisible(self):
        return (("batch-size", self.batch_size),)


@agent_config
class ReplayConfig(AgentConfig):
    """The sizes of an off-policy iteration and its replay ring (brax.training names)."""

    max_replay_size: Annotated[int, tyro.conf.arg(aliases=("--buffer-size",))] = 1_048_576
    """Replay buffer capacity in transitions."""
    min_replay_size: int = 8192
    """Transitions collected with random actions before learning starts."""
    grad_updates_per_step: int = 1
    """Gradient steps per environment step of all envs (one iteration)."""
    batch_size: int = 256
    """Transitions per gradient step."""

    kind = REPLAY

    def positive_fields(self):
        return ("max_replay_size", "grad_updates_per_step", "batch_size")

    def steps_per_iteration(self, num_envs: int, action_repeat: int, episode_length: int) -> int:
        return num_envs * action_repeat

    @property
    def steps_per_sample(self) -> int:
        """Consecutive steps of one env in each sample the agent learns from (n-step returns:
        data `Transition` with reward, terminated and truncated [M, n]); 1 by default."""
        return 1

    def prefill_iterations(self, num_envs: int) -> int:
        """Enough steps of every env for min_replay_size rows, and at least a sample's steps:
        a step is sampled once the one after it is stored (sim/core/step_ring.py)."""
        return max(-(-self.min_replay_size // num_envs), self.steps_per_sample)

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if self.min_replay_size < 0:
            raise ConfigError("min-replay-size", f"must be >= 0, got {self.min_replay_size}")
        if self.batch_size > self.max_replay_size:
            raise ConfigError("batch-size", f"{self.batch_size} exceeds --max-replay-size {self.max_replay_size}")
        if self.min_replay_size > self.max_replay_size:
            raise ConfigError("min-replay-size",
                              f"{self.min_replay_size} exceeds --max-replay-size {self.max_replay_size}")
        steps = self.steps_per_sample + 1  # a sample's steps and the step after them
        if self.max_replay_size < steps * num_envs:
            raise ConfigError("max-replay-size", f"must hold at least {steps} steps of --num-envs {num_envs} "
                                                 f"({steps * num_envs} rows)")

    def per_device(self, n):
        return dataclasses.replace(self, batch_size=self.batch_size // n, max_replay_size=self.max_replay_size // n,
                                   min_replay_size=-(-self.min_replay_size // n))

    def divisible(self):
        return (("batch-size", self.batch_size),)


@agent_config
class HorizonConfig(AgentConfig):
    """The size of a differentiable iteration: every env steps `horizon_length` times and the
    policy takes one gradient step through those steps."""

    horizon_length: int = 32
    """Env steps of each unroll the policy's gradient is taken through (one update per unroll); longer horizons see further and their gradients explode sooner."""
    normalize_observations: bool = False
    """Normalise observations with running mean/std statistics."""

    kind = DIFFERENTIABLE

    def positive_fields(self):
        return ("horizon_length",)

    def steps_per_iteration(self, num_envs: int, action_repeat: int, episode_length: int) -> int:
        return num_envs * self.horizon_length * action_repeat

    def prefill_iterations(self, num_envs: int) -> int:
        return 0


@agent_config
class GenerationConfig(AgentConfig):
    """The size of a generation: `population_size` perturbed policies, each playing one episode
    on each of its num_envs / population_size envs."""

    population_size: int = 64
    """Perturbed policies per generation, in antithetic pairs (an even number); each plays one episode on each of its num_envs / population_size envs, and its fitness is their mean return."""
    normalize_observations: bool = False
    """Normalise observations with running mean/std statistics of the generations' episodes."""

    kind = GENERATION

    def positive_fields(self):
        return ("population_size",)

    def steps_per_iteration(self, num_envs: int, action_repeat: int, episode_length: int) -> int:
        return num_envs * -(-episode_length // action_repeat) * action_repeat  # every env, a whole episode

    def prefill_iterations(self, num_envs: int) -> int:
        return 0

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if self.population_size % 2:
            raise ConfigError("population-size", f"must be even (antithetic pairs), got {self.population_size}")
        if num_envs % self.population_size:
            raise ConfigError("num-envs", f"must be a multiple of --population-size {self.population_size} (each "
                                          f"perturbed policy plays on as many envs), got {num_envs}")

    def divisible(self):
        return (("population-size", self.population_size),)


@dataclasses.dataclass(frozen=True)
class RecurrentCore:
    """Config fields of an agent whose networks carry a recurrent state from step to step (mixed
    into an `UnrollConfig`'s subclass: its iterations become recurrent ones, on whole trajectories)."""

    cell: Literal["gru", "lstm"] = "gru"
    """The recurrent core of the agent's networks."""
    hidden_size: int = 128
    """Width of each network's input layer and of its recurrent state."""

    kind = RECURRENT

    def positive_fields(self):
        return (*super().positive_fields(), "hidden_size")

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if self.unroll_length < 2:
            raise ConfigError("unroll-length", f"a recurrent policy learns over trajectories: must be >= 2, "
                                               f"got {self.unroll_length}")


@dataclasses.dataclass(frozen=True)
class Critic:
    """Config fields of an agent with a critic (a value or Q network) that may read other parts
    of a structured observation than the policy does (mixed into its config)."""

    critic_obs: str = ""
    """The parts of a structured (dict) observation the critic reads, comma-separated (e.g. privileged_state for a critic that sees what the policy cannot); empty: as --actor-obs."""
    privileged_critic: bool = False
    """Asymmetric actor-critic: the critic (value or Q networks) reads the privileged parts of the observation (the clean state and the randomised dynamics factors with --randomize / --obs-noise / --action-delay, or an env's own privileged_state), the policy only its part "state"; play and export use the policy alone."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if self.privileged_critic and self.critic_obs:
            raise ConfigError("privileged-critic", "names the critic's parts itself: drop --critic-obs")


@dataclasses.dataclass(frozen=True)
class TargetNetworks:
    """Config fields of an agent that keeps Polyak-averaged target networks (mixed into its config)."""

    tau: float = hparam(0.005)
    """Polyak averaging rate of the target networks."""

    def validate(self, num_envs: int) -> None:
        super().validate(num_envs)
        if not 0.0 <= self.tau <= 1.0:
            raise ConfigError("tau", f"must be in [0.0, 1.0], got {self.tau}")
