"""What the compiled core is built from: a narrow, frozen value the run harness builds
(`sim.run.build.core_spec`) from its config. The core never sees the harness's config, its
flags or its files: only the env it steps, the agent it trains, the sizes of its programs,
the devices and the population's values."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The sizes of a program: the whole run's, or one device's share of it."""

    num_envs: int  # parallel training envs
    agent_config: Any  # the agent's config: its batch (shard), its replay ring (share), its widths
    steps_per_iteration: int  # env steps one iteration takes (action repeats counted)
    prefill_iterations: int  # iterations before training (a replay ring's random-action prefill)
    iterations_per_epoch: int  # iterations one compiled epoch scans
    total_iterations: int  # iterations of the whole run (the agent's schedules read it)

    @classmethod
    def of(cls, spec: "Sizes") -> "Sizes":
        """The sizes part of `spec` (a `CoreSpec`: the run's own sizes)."""
        return Sizes(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(Sizes)})


@dataclasses.dataclass(frozen=True)
class Disturbances:
    """What training changes between the simulation and the policy (`train.py --randomize`,
    `--obs-noise`, ...; envs/sim2real.py): evaluations run the nominal physics, observed alike."""

    randomize: tuple = ()  # (name, low, high) factors of dynamics parameters drawn at each reset
    obs_noise: tuple = ()  # (start, stop, std) slices of Gaussian noise on what the policy observes
    action_delay: int = 0  # control steps between choosing an action and the env applying it
    push: float = 0.0  # top speed of random pushes of the robot's root in training (0: none)
    push_every: int = 250  # mean control steps between two pushes
    domain_randomization: bool = False  # the task's own randomiser draws each training env's model at every reset

    @property
    def any(self) -> bool:
        """Whether training runs under randomised or disturbed physics or observations."""
        return bool(self.randomize or self.obs_noise or self.action_delay or self.push or self.domain_randomization)


@dataclasses.dataclass(frozen=True)
class Members:
    """The population trained in one program."""

    size: int = 1  # members (1: one run)
    num_seeds: int = 1  # its seeds (a size the memory check scales)


@dataclasses.dataclass(frozen=True)
class CoreSpec(Sizes):
    """One run as the core sees it: the run's sizes, the env, the agent, the devices and the
    population. `device` is the share of one device's program (the run's own sizes where
    whole population members are spread over the devices, or on one device)."""

    env: str = ""  # the env's registry name
    backend: Optional[str] = None  # its physics backend (None: the family's default)
    env_config: tuple = ()  # (key, value) overrides of the env's own config (`envs.parse_env_config`)
    episode_length: Optional[int] = None  # its time limit
    action_repeat: int = 1
    disturbances: Disturbances = Disturbances()  # training's randomised physics, noise, delay and pushes
    num_eval_envs: int = 1  # deterministic evaluation episodes, one env each
    matmul_precision: str = "highest"  # what the programs' matmuls take, the network layers' aside
    agent: Any = None  # the agent's declaration (sim.core.contract.AgentDef): it names its loop
    members: Members = Members()  # the population trained in one program
    num_devices: int = 1  # devices the program shards over
    hp: Any = None  # the state's hyper-parameter values: one config's, or the members' stacked [M]
    teacher: Any = None  # a distilling agent's teacher: (env spec) -> its policy (sim.core.contract.Budget.teacher)
    device: Optional[Sizes] = None  # one device's sizes (None: the run's own)

    def __post_init__(self):
        if self.device is None:
            object.__setattr__(self, "device", Sizes.of(self))
