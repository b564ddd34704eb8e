"""The typed, frozen run configuration: the env, the budget and the evaluation at the top,
the run's settings by concern (`sim/run/settings.py`) and the chosen agent's config, which
the agent declares (`agents/config.py`).

On the command line all of it is one flat set of kebab-case flags with brax.training's names
and meanings (a Brax config ports by copying its numbers): `Config.replace(**flat)`,
`flat()`, `to_dict()` and `from_dict()` speak those names, and config.json stores them flat.
Per-environment defaults come from the agent's declaration (the published training configs).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Annotated, Generic, Literal, Optional, TypeVar

import tyro

import agents
import envs
from sim.core.contract import ConfigError  # noqa: F401  (re-exported: the run's usage error)
from envs import env_config
from sim.core import loops
from sim.core.spec import Sizes
from sim.run.populations import pbt, population
from sim.run.checkpoints.settings import Checkpointing
from sim.run.populations.settings import PbtSettings, Population
from sim.run.settings import Hosts, Logging, RunDir, SimToRealSettings

A = TypeVar("A")
FLAT = tyro.conf.OmitArgPrefixes  # a section's flags are its fields' names, without a prefix
_AGENTS = "; ".join(f"{a.name} [{a.kind.name}]: {a.about}" for a in agents.all_agents().values())


@dataclasses.dataclass(frozen=True)
class Config(Generic[A]):
    """A training run: its env, budget and evaluation, its settings by concern, its agent's config."""

    env: str = "cartpole"
    """Environment name (`--list-envs` lists them; e.g. cartpole, pendulum, ant, humanoid, CheetahRun)."""
    backend: Optional[str] = None
    """Physics backend for Brax envs: mjx, generalized, positional or spring (default: the env's own)."""
    env_config: tuple[str, ...] = ()
    """KEY=VALUE ...: entries of the env's own config overridden, for training and evaluation alike: a Playground task's config entries, dotted (e.g. --env-config push_config.enable=false reward_config.scales.energy=-5e-5), a Brax env's constructor arguments (e.g. ctrl_cost_weight=0.1); a joystick robot's command=[VX,VY,YAW] fixes its velocity command (as play --command does); values are read as JSON (numbers, true/false, lists), else as strings."""
    agent: Annotated[Literal[agents.names()], tyro.conf.arg(help=(
        f"Learning algorithm ({_AGENTS}). `--agent NAME --help` lists that agent's flags and defaults."))] = "ppo"
    num_envs: int = 64
    """Parallel training environments."""
    total_steps: int = 500_000
    """Environment steps to train for (rounded up to whole epochs of whole iterations)."""
    seed: int = 0
    """Random seed of the whole run."""
    episode_length: int = 500
    """Time limit of an episode, in environment steps."""
    action_repeat: int = 1
    """Repeat each policy action this many environment steps."""
    epochs: int = 20
    """Number of epochs the run is split into: one compiled program call and one metrics line each."""
    eval_every: int = 1
    """Evaluate every N epochs (0: only after the last epoch, which always evaluates)."""
    num_eval_envs: int = 128
    """Parallel environments for the deterministic evaluation episodes."""
    run: Annotated[RunDir, FLAT] = RunDir()
    checkpoints: Annotated[Checkpointing, FLAT] = Checkpointing()
    logging: Annotated[Logging, FLAT] = Logging()
    hosts: Annotated[Hosts, FLAT] = Hosts()
    sim2real: Annotated[SimToRealSettings, FLAT] = SimToRealSettings()
    population: Annotated[Population, FLAT] = Population()
    pbt: Annotated[PbtSettings, FLAT] = PbtSettings()
    agent_config: Annotated[A, FLAT] = None
    """The agent's config (an `agents.config.AgentConfig` subclass); None: the agent's defaults."""

    def __post_init__(self):
        if self.agent_config is None:
            object.__setattr__(self, "agent_config", agents.get(self.agent).config())

    # ---- what the agent declares ----
    @property
    def agent_def(self):
        return agents.get(self.agent)

    @property
    def kind(self):
        return self.agent_def.kind

    @property
    def loop(self):
        """The class of the compiled core's loop that runs this agent's iterations
        (sim/core/loops/): what it declares before it is built."""
        return loops.loop_class(self.kind)

    @property
    def name(self) -> str:
        """<env>__<agent>__<seed> (a population: __x<members>): the stem of run directory and
        W&B run names."""
        size = self.population_size
        return f"{self.env}__{self.agent_def.name}__{self.seed}" + (f"__x{size}" if size > 1 else "")

    @property
    def population_size(self) -> int:
        """Members trained together: --num-seeds times the --sweep grid's size."""
        size = self.population.num_seeds
        for _, values in population.parse_sweeps(self.population.sweep, type(self.agent_config), self.agent):
            size *= len(values)
        return size

    # ---- flat views (command line, config.json, checkpoints) ----
    def replace(self, **flat) -> "Config":
        """A copy with fields changed by their flat (flag) names: the run's own, its settings'
        and its agent's."""
        top = {k: flat.pop(k) for k in list(flat) if k in TOP_FIELDS or k == "agent_config"}
        new = dataclasses.replace(self, **top)
        if "agent" in top and top["agent"] != self.agent and "agent_config" not in top:
            new = dataclasses.replace(new, agent_config=agents.get(top["agent"]).config())
        for section, names in SECTIONS.items():
            given = {k: flat.pop(k) for k in list(flat) if k in names}
            if given:
                new = dataclasses.replace(new, **{section: dataclasses.replace(getattr(new, section), **given)})
        unknown = sorted(set(flat) - {f.name for f in dataclasses.fields(new.agent_config)})
        if unknown:
            raise TypeError(f"--agent {new.agent} has no field {', '.join(unknown)}")
        return dataclasses.replace(new, agent_config=dataclasses.replace(new.agent_config, **flat)) if flat else new

    def flat(self) -> dict:
        """The run, settings and agent fields as one flat dict, by their flag names."""
        out = {name: getattr(self, name) for name in TOP_FIELDS}
        for section in SECTIONS:
            out.update(dataclasses.asdict(getattr(self, section)))
        out.update({f.name: getattr(self.agent_config, f.name) for f in dataclasses.fields(self.agent_config)})
        return out

    def to_dict(self) -> dict:
        """`flat()` ready for JSON (tuples as lists)."""
        return json.loads(json.dumps(self.flat()))

    @classmethod
    def from_dict(cls, flat: dict) -> "Config":
        """The Config of a flat dict (config.json, a checkpoint's config); fields it does not
        have (a run written before agents had their own configs stores them all) are dropped."""
        agent = agents.get(flat.get("agent", "ppo"))
        known = set(TOP_FIELDS).union(*SECTIONS.values(), (f.name for f in dataclasses.fields(agent.config)))
        fix = lambda v: tuple(v) if isinstance(v, list) else v  # noqa: E731
        return cls(agent=agent.name).replace(**{k: fix(v) for k, v in flat.items() if k in known and k != "agent"})

    # ---- derived sizes ----
    @property
    def steps_per_iteration(self) -> int:
        """Environment steps of one training iteration."""
        return self.agent_config.steps_per_iteration(self.num_envs, self.action_repeat, self.episode_length)

    @property
    def prefill_iterations(self) -> int:
        """Iterations before training (a replay ring's random-action prefill, to min_replay_size)."""
        return self.agent_config.prefill_iterations(self.num_envs)

    @property
    def prefill_steps(self) -> int:
        """Environment steps of the prefill (counted in the budget)."""
        return self.prefill_iterations * self.num_envs * self.action_repeat

    @property
    def num_epochs(self) -> int:
        # Fewest whole epochs of iterations_per_epoch that cover the budget.
        return -(-self.total_iterations // self.iterations_per_epoch)

    @property
    def total_iterations(self) -> int:
        return max(1, -(-(self.total_steps - self.prefill_steps) // self.steps_per_iteration))

    @property
    def iterations_per_epoch(self) -> int:
        return -(-self.total_iterations // max(1, min(self.epochs, self.total_iterations)))

    @property
    def steps_per_epoch(self) -> int:
        return self.iterations_per_epoch * self.steps_per_iteration

    def sizes(self) -> Sizes:
        """This run's sizes as the core takes them (the run layer reads its own config: the
        core is handed the values, never the config)."""
        return Sizes(num_envs=self.num_envs, agent_config=self.agent_config,
                     steps_per_iteration=self.steps_per_iteration, prefill_iterations=self.prefill_iterations,
                     iterations_per_epoch=self.iterations_per_epoch, total_iterations=self.total_iterations)

    # ---- validation ----
    def validate(self) -> "Config":
        """Checks every value before anything compiles (once per config); raises ConfigError
        naming the flag to change."""
        if self.__dict__.get("_valid"):
            return self
        self._validate_agent_and_env()
        for name in ("num_envs", "total_steps", "epochs", "num_eval_envs", "episode_length", "action_repeat"):
            value = getattr(self, name)
            if value < 1:
                raise ConfigError(name.replace("_", "-"), f"must be a positive integer, got {value}")
        if self.eval_every < 0:
            raise ConfigError("eval-every", f"must be >= 0, got {self.eval_every}")
        for section in ("run", "checkpoints", "logging", "hosts", "sim2real", "population", "pbt"):
            getattr(self, section).validate()
        if self.sim2real.domain_randomization and not envs.has_domain_randomizer(self.env):
            raise ConfigError("domain-randomization", f"env {self.env} has no domain randomiser of its own (Playground's "
                                                      f"robots have, e.g. Go1JoystickFlatTerrain; --list-envs marks them); "
                                                      f"--randomize NAME=LOW:HIGH randomises any env's physics")
        if self.checkpoints.checkpoint_buffer != "auto" and self.loop.droppable is None:
            raise ConfigError("checkpoint-buffer", f"--agent {self.agent_def.name} keeps no replay buffer")
        if self.checkpoints.checkpoint_buffer == "on" and self.checkpoints.checkpoint_envs == "off":
            raise ConfigError("checkpoint-buffer", "on keeps the replay buffer, which --checkpoint-envs off leaves out "
                                                   "with the envs (its newest rows continue their episodes): drop one")
        self.agent_config.validate(self.num_envs)
        pbt.validate(self)
        if self.population.sweep:  # every member's values, e.g. a negative learning rate in the grid
            for member in population.members(self):
                try:
                    population.member_config(self, member).agent_config.validate(self.num_envs)
                except ConfigError as err:
                    raise ConfigError("sweep", f"{member.label}: {err}") from None
        object.__setattr__(self, "_valid", True)
        return self

    def _validate_agent_and_env(self) -> None:
        try:
            agent = agents.get(self.agent)
        except ValueError as err:
            raise ConfigError("agent", str(err)) from None
        if not isinstance(self.agent_config, agent.config):
            raise ConfigError("agent", f"the config given is a {type(self.agent_config).__name__}, not {agent.name}'s")
        try:
            envs.check(self.env, self.backend)
        except ValueError as err:
            flag = "backend" if "backend" in str(err).split(";")[0] else "env"
            raise ConfigError(flag, str(err)) from None
        if agent.kind.gradients_through_env and not envs.differentiable(self.env, self.backend):
            usable = [b for b in envs.backends(self.env) if b not in envs.NOT_DIFFERENTIABLE]
            raise ConfigError("backend", f"--agent {agent.name} takes gradients through the env's step, which the "
                                         f"{self.backend} backend does not allow; use a JAX backend ({', '.join(usable)})")
        try:
            envs.parse_env_config(self.env_config)
        except ValueError as err:
            raise ConfigError("env-config", str(err)) from None
        if self.env_config and envs.family(self.env) not in envs.CONFIGURABLE_FAMILIES:
            raise ConfigError("env-config", f"env {self.env} ({envs.family(self.env)}) takes no config entries; "
                                            f"Playground's tasks and Brax's envs do")
        try:
            env_config.check(self.env, envs.parse_env_config(self.env_config))
        except ValueError as err:
            raise ConfigError("env-config", str(err)) from None


# The settings sections and their flat field names; the run's own fields at the top.
SECTIONS = {f.name: tuple(g.name for g in dataclasses.fields(f.default)) for f in dataclasses.fields(Config)
            if dataclasses.is_dataclass(f.default)}
TOP_FIELDS = tuple(f.name for f in dataclasses.fields(Config) if f.name != "agent_config" and f.name not in SECTIONS)


def defaults_for(env: str, agent: str = "ppo") -> Config:
    """The tuned default config of (env, agent): the generic defaults, then what the env fixes
    itself (its own time limit), then the agent's per-env defaults (a variant's: those of the
    env it is tuned as, e.g. cartpole_no_vel as cartpole). Raises ValueError for an unknown
    agent."""
    return (Config(env=env, agent=agent).replace(**envs.run_defaults(env))
            .replace(**agents.get(agent).env_defaults(envs.tuned_as(env))))


# ---- the training command's flags ----
@dataclasses.dataclass(frozen=True)
class TrainCommand(Generic[A]):
    """Train an agent on an environment in one compiled, donated, on-device program. Other
    commands: `train.py play RUN` (evaluate a trained policy, film it, test its robustness),
    `train.py export RUN FILE` (write the policy to ONNX or numpy)."""

    config: Annotated[Config[A], FLAT]
    list_envs: bool = False
    """List every environment (family, action space, default and other backends) and exit."""
    print_config: bool = False
    """Print this command's fully resolved config (the env's and agent's defaults, then the flags given) as JSON and exit without compiling anything."""


def train_flags(agent: str) -> type:
    """The training command's class with `agent`'s config (its flags and help texts)."""
    return TrainCommand[agents.get(agent).config]


def train_flag_names(agent: str) -> set[str]:
    """Every flag of the training command with `agent`'s config."""
    return flag_names(TrainCommand) | flag_names(Config) | flag_names(agents.get(agent).config)


def flag_names(config_cls) -> set[str]:
    """Every command-line spelling of `config_cls`'s own fields (those of its settings sections
    too, not its agent's config): --name, --no-name, aliases."""
    out = set()
    hints = typing.get_type_hints(config_cls, include_extras=True)
    for f in dataclasses.fields(config_cls):
        if dataclasses.is_dataclass(f.default):
            out |= flag_names(type(f.default))
            continue
        if f.name in ("config", "agent_config"):
            continue
        name = f.name.replace("_", "-")
        out.update({f"--{name}", f"--no-{name}"})
        for meta in getattr(hints[f.name], "__metadata__", ()):
            out.update(getattr(meta, "aliases", None) or ())
    return out


def flag_of(quantity: str) -> str:
    """The command-line flag of a run's quantity as the compiled core names it (num_envs -> --num-envs)."""
    return "--" + quantity.replace("_", "-")
