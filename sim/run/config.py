"""The typed, frozen run configuration: the run's own fields (each docstring is its `--help`
text) and `agent_config`, the chosen agent's config (declared by the agent, see `agents/base.py`).

On the command line both are one flat set of kebab-case flags with brax.training's names and
meanings (a Brax config ports by copying its numbers); per-environment defaults come from the
agent's declaration (the published Brax training configs).
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from typing import Annotated, Any, Literal, Optional

import tyro

import agents
from agents.base import ConfigError  # noqa: F401  (re-exported)
from agents.common import PRIVILEGED
from sim.run import population


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The run's own fields (the agent's hyper-parameters are in `Config.agent_config`)."""

    # ---- run ----
    env: str = "cartpole"
    """Environment name (see the README's table; e.g. cartpole, pendulum, ant, humanoid)."""
    backend: Optional[str] = None
    """Physics backend for Brax envs: mjx, generalized, positional or spring (default: the env's own)."""
    agent: str = "ppo"
    """Learning algorithm (a registered agent; `--agent NAME --help` lists its flags and defaults)."""
    num_envs: int = 64
    """Parallel training environments."""
    total_steps: int = 500_000
    """Environment steps to train for (rounded up to whole epochs of whole iterations)."""
    seed: int = 0
    """Random seed of the whole run."""
    run_dir: Optional[str] = None
    """Where config.json and metrics.jsonl go (default: runs/<env>__<agent>__<seed>__<time>; a population: runs/<env>__<agent>__<seed>__x<members>__<time>)."""
    overwrite: bool = False
    """Start over in a --run-dir that holds an earlier run: removes the files that run wrote (config.json, metrics.jsonl, summary.json, checkpoints/, curve.png, W&B files) and nothing else (without it such a run dir is refused)."""
    resume_if_exists: bool = False
    """With --run-dir D: continue D's run from its newest checkpoint when D holds one (as --resume D, flags given override), else start it there (replacing the files of a run that wrote no checkpoint), so a requeued job runs the same command line."""
    epochs: int = 20
    """Number of epochs the run is split into: one compiled program call and one metrics line each."""
    eval_every: int = 1
    """Evaluate every N epochs (0: only after the last epoch, which always evaluates)."""
    num_eval_envs: int = 128
    """Parallel environments for the deterministic evaluation episodes."""
    progress: bool = True
    """Show a progress bar on stderr."""
    compile_cache: str = "auto"
    """Directory of JAX's persistent compilation cache, so a restart, resume or --play reuses compiled programs (auto: $XDG_CACHE_HOME/fusedrl/jax, else ~/.cache/fusedrl/jax; off: no cache)."""
    num_seeds: int = 1
    """Train N independent members with seeds seed, seed+1, ..., seed+N-1 in one compiled program (a population: each member equals the single run of its seed); metrics.jsonl, summary.json and curve.png report each member and each configuration's mean, std, IQM and 95% bootstrap interval."""
    sweep: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """NAME=V1,V2,...: also train every listed value of a hyper-parameter that leaves array shapes alone (learning-rate, discounting, entropy-cost, tau, ...; repeat the flag for the grid of several), each with --num-seeds seeds, in the same program. A name that changes shapes is refused with the list of sweepable ones."""
    pbt: bool = False
    """Population-based training of the population (--num-seeds, --sweep): after every --pbt-every epochs, the members in the bottom --pbt-fraction by fitness take a copy of a random member of the top fraction (parameters, optimizer state, target networks, observation statistics; their envs keep running) and perturb or redraw its explored hyper-parameters (--pbt-explore, and every swept one), on the devices in one compiled program."""
    pbt_every: int = 2
    """Epochs between two PBT steps."""
    pbt_explore: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """NAME=[log:]LOW:HIGH: a hyper-parameter PBT explores, and the range it stays in (log: drawn log-uniformly; e.g. learning-rate=log:1e-5:1e-2). A swept one without it stays within its --sweep values (log-scaled when they are positive and span 10x or more). (repeatable)"""
    pbt_fraction: float = 0.25
    """Fraction of the members a PBT step replaces (the worst by fitness, and every diverged one) and that they copy (the best); at least one each, at most half."""
    pbt_resample: float = 0.25
    """Probability that a replaced member's explored hyper-parameter is drawn anew from its range instead of its parent's value times 0.8 or 1.25."""
    pbt_fitness: Literal["eval", "train"] = "eval"
    """What ranks the members at a PBT step: the epoch's evaluation return (eval: that epoch is evaluated), or the mean training episode return over the epochs since the step before (train)."""
    list_envs: bool = False
    """List every environment (family, action space, default and other backends) and exit."""
    print_config: bool = False
    """Print this command's fully resolved config (the env's and agent's defaults, then the flags given) as JSON and exit without compiling anything."""
    stall_timeout: float = 300.0
    """On a CPU backend, end the run (exit code 4) when a stage or an epoch keeps the process idle this many seconds: a deadlock, not work (0: never). Slow stages are reported either way."""

    # ---- checkpoints, evaluation and video ----
    resume: Optional[str] = None
    """Continue the run in this run directory from its newest checkpoint (its config.json gives the defaults; flags given override)."""
    checkpoint_every: Optional[int] = None
    """Write a checkpoint every N epochs into <run-dir>/checkpoints, and always at the end and on a stop signal (0: only then; -1: never; default: after every epoch while checkpoints take under 1% of the training time, less often where they would take more, e.g. with a large replay buffer, which the run says)."""
    keep_checkpoints: int = 2
    """Complete checkpoints kept (the newest; older ones are removed once a newer one is whole). A resume whose newest checkpoint is corrupt falls back to the one before, so keep at least 2 to survive that."""
    stop_grace: float = 20.0
    """Seconds a run gives itself after SIGTERM, SIGUSR1 or Ctrl-C: it finishes the epoch in progress when that and a checkpoint fit in them, else it stops at once with its last checkpoint. Keep it below what the scheduler leaves before SIGKILL (SLURM's KillWait and Kubernetes' terminationGracePeriodSeconds: 30 s by default; T with SLURM's --signal=USR1@T)."""
    checkpoint_buffer: Literal["auto", "on", "off"] = "auto"
    """Replay agents: keep the replay buffer in checkpoints (auto: when it fits in half the free disk and host memory; without it a resume refills it with random actions)."""
    play: Optional[str] = None
    """Instead of training, evaluate the newest checkpoint of this run directory: --num-eval-envs deterministic episodes, mean/std return."""
    video: Optional[str] = None
    """With --play: render one deterministic episode offscreen into this .mp4 file."""
    export: Optional[str] = None
    """With --play: write the deterministic policy, observation normalisation folded in, to this file: .onnx (an ONNX graph, input obs [batch, obs size]; needs the export extra) or .npz (the same program and its weights, run with numpy alone by sim/run/export.py's numpy_policy); checked against the JAX policy on 1,000 observations."""
    member: Optional[int] = None
    """With --play on a population's run: the member to evaluate (its index in summary.json; default: the best member by final evaluation)."""

    # ---- Weights & Biases ----
    wandb: bool = False
    """Log the config once and every epoch's metrics to Weights & Biases (x-axis: env steps)."""
    wandb_project: str = "fusedrl"
    """W&B project."""
    wandb_entity: Optional[str] = None
    """W&B entity (user or team; default: the API key's default entity)."""
    wandb_group: Optional[str] = None
    """W&B group, to show runs (e.g. seeds) together."""
    wandb_tags: tuple[str, ...] = ()
    """W&B tags."""
    wandb_mode: Optional[Literal["online", "offline"]] = None
    """W&B mode (default: $WANDB_MODE, else online; online without an API key falls back to offline)."""

    # ---- devices and hosts ----
    devices: Optional[int] = None
    """Devices to shard the envs and batches over (default: every accelerator; on a CPU-only
    host, one XLA device per core for an on-policy agent on a Brax or Playground env, as many
    cores as divide the run, and one device otherwise: where the networks dominate (classic
    control, gymnax, replay agents) splitting was measured slower). On a CPU host, N > 1
    splits the CPU into N XLA devices, each stepping its share of the envs on its own thread.
    A run's results depend on N (its RNG streams are per device): `--devices 1` gives results
    that do not depend on the core count. A population (--num-seeds, --sweep) spreads whole
    members over the devices when N divides their count (each member's results are then those
    of its single run on one device) and splits each member's envs otherwise; on a CPU-only
    host its default is the most cores that divide the member count. A resume keeps the
    count its run trained on."""
    coordinator: Optional[str] = None
    """Multi-host: address host:port of process 0 (or JAX_COORDINATOR_ADDRESS)."""
    num_processes: Optional[int] = None
    """Multi-host: total number of processes (or JAX_NUM_PROCESSES)."""
    process_id: Optional[int] = None
    """Multi-host: index of this process, 0 .. num_processes - 1 (or JAX_PROCESS_ID)."""

    episode_length: int = 500
    """Time limit of an episode, in environment steps."""
    action_repeat: int = 1
    """Repeat each policy action this many environment steps."""

    # ---- sim-to-real ----
    randomize: tuple[str, ...] = ()
    """NAME=LOW:HIGH ...: domain randomisation, each training env's physics drawn anew at every reset as factors of the nominal values (e.g. --randomize friction=0.5:1.5 mass=0.8:1.2; names: friction, mass, gravity, damping, gain (actuator gain and bias), or an env's own parameter fields, which an unknown name lists; a FILE of such entries is read too). Each name draws one factor per geom, body, dof or actuator. Evaluations run the nominal physics. The drawn factors are the observation's part "dynamics", for a privileged critic."""
    obs_noise: tuple[str, ...] = ()
    """Std of Gaussian noise added to what the policy observes (the observation's part "state"), in the observation's units, at every step of training and evaluation: STD for all of it, or START:STOP=STD per slice of its entries (e.g. --obs-noise 0:9=0.01 9:=0.1; a later entry overrides an earlier one); the clean observation is the part "privileged_state"."""
    action_delay: int = 0
    """Control steps between the policy choosing an action and the env applying it (zeros at an episode's start)."""
    push: float = 0.0
    """Random pushes during training (MuJoCo physics: Brax's mjx backend, Playground tasks): the robot's root gets a horizontal velocity kick of a random direction and a speed uniform in [0, PUSH] m/s, on average every --push-every control steps; evaluations are not pushed."""
    push_every: int = 250
    """Mean control steps between two pushes (--push); each step pushes with probability 1/PUSH_EVERY."""
    privileged_critic: bool = False
    """Asymmetric actor-critic: the critic (value or Q networks) reads the privileged parts of the observation (the clean state and the randomised dynamics factors with --randomize / --obs-noise / --action-delay, or an env's own privileged_state), the policy only its part "state"; --play and --export use the policy alone."""
    robustness: tuple[str, ...] = ()
    """With --play: also evaluate the policy under these physics settings, one per value, each NAME=FACTOR or NAME=LOW:HIGH joined by commas (e.g. --robustness friction=0.3 friction=2,mass=1.5 mass=0.5:1.5), or push=SPEED for pushes up to SPEED m/s every --push-every steps on average (MuJoCo physics); the nominal physics first, then a return per setting."""


RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunConfig))


@dataclasses.dataclass(frozen=True)
class Config(RunConfig):
    agent_config: Any = None
    """The agent's config (an `agents.base.AgentConfig`); None: the agent's defaults."""

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
        from sim.core import loops

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
        size = self.num_seeds
        for _, values in population.parse_sweeps(self.sweep, type(self.agent_config), self.agent):
            size *= len(values)
        return size

    # ---- flat views (command line, config.json, checkpoints) ----
    def replace(self, **flat) -> "Config":
        """A copy with run fields and agent fields changed by their flat (flag) names."""
        run = {k: v for k, v in flat.items() if k in RUN_FIELDS or k == "agent_config"}
        hp_fields = {f.name for f in dataclasses.fields(self.agent_config)}
        agent = {k: v for k, v in flat.items() if k not in run}
        unknown = sorted(set(agent) - hp_fields)
        if unknown:
            raise TypeError(f"--agent {self.agent} has no field {', '.join(unknown)}")
        new = dataclasses.replace(self, **run)
        if "agent" in run and run["agent"] != self.agent and "agent_config" not in run:
            new = dataclasses.replace(new, agent_config=agents.get(run["agent"]).config())
        return dataclasses.replace(new, agent_config=dataclasses.replace(new.agent_config, **agent)) if agent else new

    def flat(self) -> dict:
        """The run and agent fields as one flat dict, by their flag names."""
        flat = {f.name: getattr(self, f.name) for f in dataclasses.fields(RunConfig)}
        flat.update({f.name: getattr(self.agent_config, f.name) for f in dataclasses.fields(self.agent_config)})
        return flat

    def to_dict(self) -> dict:
        """`flat()` ready for JSON (tuples as lists)."""
        return json.loads(json.dumps(self.flat()))

    @classmethod
    def from_dict(cls, flat: dict) -> "Config":
        """The Config of a flat dict (config.json, a checkpoint's config); fields the agent does
        not have (a run written before agents had their own configs stores them all) are dropped."""
        agent = agents.get(flat.get("agent", "ppo"))
        hp_fields = {f.name for f in dataclasses.fields(agent.config)}
        fix = lambda v: tuple(v) if isinstance(v, list) else v  # noqa: E731
        run = {k: fix(v) for k, v in flat.items() if k in RUN_FIELDS}
        hp = agent.config(**{k: fix(v) for k, v in flat.items() if k in hp_fields})
        return cls(**run, agent_config=hp)

    # ---- derived sizes ----
    def device_count(self) -> int:
        """Devices the run shards over, checked against those visible (sim/run/devices.py)."""
        from sim.run import devices

        return devices.device_count(self)

    def per_device(self, n: int) -> "Config":
        """The sizes one of n devices works with: its envs, batch shard and replay ring."""
        from sim.run import devices

        return devices.per_device_config(self, n)

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps of one training iteration."""
        return self.agent_config.steps_per_iteration(self.num_envs, self.action_repeat)

    @property
    def prefill_iterations(self) -> int:
        """Replay agents: iterations of random actions that fill the buffer to min_replay_size."""
        return self.agent_config.prefill_iterations(self.num_envs)

    @property
    def prefill_steps(self) -> int:
        """Replay agents: environment steps of the random-action prefill (counted in the budget)."""
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

    def validate(self) -> "Config":
        """Checks every value before anything compiles; raises ConfigError naming the flag."""
        import envs

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
        for name in ("num_envs", "total_steps", "epochs", "num_eval_envs", "episode_length", "action_repeat",
                     "num_seeds"):
            value = getattr(self, name)
            if value < 1:
                raise ConfigError(name.replace("_", "-"), f"must be a positive integer, got {value}")
        self._validate_run()
        self.agent_config.validate(self.num_envs)
        from sim.run import pbt

        pbt.validate(self)
        if self.sweep:  # every member's values, e.g. a negative learning rate in the grid
            for member in population.members(self):
                try:
                    population.member_config(self, member).agent_config.validate(self.num_envs)
                except ConfigError as err:
                    raise ConfigError("sweep", f"{member.label}: {err}") from None
        return self

    def _validate_run(self) -> None:
        if self.eval_every < 0:
            raise ConfigError("eval-every", f"must be >= 0, got {self.eval_every}")
        if not self.stall_timeout >= 0:  # (NaN too)
            raise ConfigError("stall-timeout", f"must be >= 0 seconds, got {self.stall_timeout}")
        if self.checkpoint_every is not None and self.checkpoint_every < -1:
            raise ConfigError("checkpoint-every", f"must be >= -1, got {self.checkpoint_every}")
        if self.keep_checkpoints < 1:
            raise ConfigError("keep-checkpoints", f"must be a positive integer, got {self.keep_checkpoints}")
        if not self.stop_grace >= 0:
            raise ConfigError("stop-grace", f"must be >= 0 seconds, got {self.stop_grace}")
        if self.resume_if_exists and self.run_dir is None and self.resume is None:
            raise ConfigError("resume-if-exists", "needs --run-dir DIR (the run to continue, or to start there)")
        if self.resume_if_exists and (self.overwrite or self.play is not None):
            raise ConfigError("resume-if-exists", "continues a run: it cannot be combined with "
                                                  f"{'--overwrite' if self.overwrite else '--play'}")
        if self.video is not None and self.play is None:
            raise ConfigError("video", "needs --play RUN_DIR (the run whose policy to film)")
        if self.video is not None and not self.video.lower().endswith(".mp4"):
            raise ConfigError("video", f"must be an .mp4 file path, got {self.video!r}")
        if self.resume is not None and self.play is not None:
            raise ConfigError("play", "cannot be combined with --resume")
        if self.overwrite and (self.resume is not None or self.play is not None):
            raise ConfigError("overwrite", "starts a fresh run: it cannot be combined with --resume or --play")
        if self.member is not None and self.play is None:
            raise ConfigError("member", "needs --play RUN_DIR (the population whose member to evaluate)")
        if self.member is not None and not 0 <= self.member < self.population_size:
            raise ConfigError("member", f"must be in [0, {self.population_size - 1}] (the run's members), "
                                        f"got {self.member}")
        try:
            randomize_ranges(self.randomize)
        except (ValueError, OSError) as err:
            raise ConfigError("randomize", str(err)) from None
        for setting in self.robustness:
            try:
                robustness_setting(setting)
            except ValueError as err:
                raise ConfigError("robustness", str(err)) from None
        from envs.sim2real import parse_noise

        try:
            parse_noise(self.obs_noise)  # a run written when the flag was one number gives that number
        except ValueError as err:
            raise ConfigError("obs-noise", str(err)) from None
        if not (math.isfinite(self.push) and self.push >= 0):
            raise ConfigError("push", f"must be a speed >= 0 (m/s), got {self.push}")
        if self.push_every < 1:
            raise ConfigError("push-every", f"must be >= 1 control step, got {self.push_every}")
        if self.action_delay < 0:
            raise ConfigError("action-delay", f"must be >= 0 control steps, got {self.action_delay}")
        if self.export is not None and self.play is None:
            raise ConfigError("export", "needs --play RUN_DIR (the run whose policy to export)")
        if self.export is not None and not self.export.lower().endswith((".onnx", ".npz")):
            raise ConfigError("export", f"must be an .onnx or .npz file path, got {self.export!r}")
        if self.robustness and self.play is None:
            raise ConfigError("robustness", "needs --play RUN_DIR (the run whose policy to evaluate)")
        if self.privileged_critic and not hasattr(self.agent_config, "critic_obs"):
            raise ConfigError("privileged-critic", f"--agent {self.agent_def.name} has no critic")
        if self.privileged_critic and self.agent_config.critic_obs:
            raise ConfigError("privileged-critic", "names the critic's parts itself: drop --critic-obs")
        if self.checkpoint_buffer != "auto" and self.loop.droppable is None:
            raise ConfigError("checkpoint-buffer", f"--agent {self.agent_def.name} keeps no replay buffer")


def randomize_ranges(entries) -> tuple[tuple[str, float, float], ...]:
    """--randomize's (name, low, high) factors; a FILE entry's lines are read as entries.
    Raises ValueError starting with the flag for a malformed one."""
    import os

    from envs.sim2real import parse_ranges

    expanded = []
    for entry in entries:
        if "=" not in entry and os.path.isfile(entry):
            with open(entry) as f:
                expanded += [t for line in f for t in line.split("#")[0].split()]
        else:
            expanded.append(entry)
    return parse_ranges(expanded)


def robustness_setting(setting: str) -> tuple[tuple[str, float, float], ...]:
    """One --robustness value, NAME=FACTOR or NAME=LOW:HIGH joined by commas, as factors."""
    from envs.sim2real import parse_ranges

    return parse_ranges([e for e in setting.split(",") if e.strip()])


def defaults_for(env: str, agent: str = "ppo") -> Config:
    """The tuned default config of (env, agent): the generic defaults, then what the env fixes
    itself (its own time limit), then the agent's per-env defaults (a variant's: those of the
    env it is tuned as, e.g. cartpole_no_vel as cartpole). Raises ValueError for an unknown
    agent."""
    import envs

    return (Config(env=env, agent=agent).replace(**envs.run_defaults(env))
            .replace(**agents.get(agent).env_defaults(envs.tuned_as(env))))


# ---- the command line's flat view ----
def flags_class(agent: str):
    """One flat dataclass of the run's fields and `agent`'s, for the command-line parser
    (help texts are the fields' docstrings, found through the class hierarchy)."""
    definition = agents.get(agent)
    about = "; ".join(f"{a.name} [{a.kind.name}]: {a.about}" for a in agents.all_agents().values())
    namespace = {
        "__doc__": f"Flags of a run with --agent {agent}.",
        "__annotations__": {"agent": Annotated[Literal[agents.names()], tyro.conf.arg(
            help=f"Learning algorithm ({about}). `--agent NAME --help` lists that agent's flags and defaults.")]},
        "agent": agent,
    }
    return dataclasses.dataclass(frozen=True)(type("Flags", (definition.config, RunConfig), namespace))


def to_flags(cfg: Config):
    return flags_class(cfg.agent_def.name)(**cfg.flat())


def from_flags(flags) -> Config:
    return Config.from_dict({f.name: getattr(flags, f.name) for f in dataclasses.fields(flags)})


def flag_names(config_cls) -> set[str]:
    """Every command-line spelling of `config_cls`'s fields: --name, --no-name, aliases."""
    out = set()
    hints = typing.get_type_hints(config_cls, include_extras=True)
    for f in dataclasses.fields(config_cls):
        name = f.name.replace("_", "-")
        out.update({f"--{name}", f"--no-{name}"})
        for meta in getattr(hints[f.name], "__metadata__", ()):
            out.update(getattr(meta, "aliases", None) or ())
    return out


def flag_of(quantity: str) -> str:
    """The command-line flag of a run's quantity as the compiled core names it (num_envs -> --num-envs)."""
    return "--" + quantity.replace("_", "-")


def core_spec(cfg: Config):
    """What the compiled core is built from (`sim.core.spec.CoreSpec`): `cfg` checked, its
    sizes for the whole run and for one device, its devices and its population's values."""
    from agents.config import hyper_params
    from envs.sim2real import parse_noise
    from sim.core.parallel import spreads_members
    from sim.core.spec import CoreSpec, Sizes

    cfg = cfg.validate()
    if cfg.privileged_critic:  # the parts are the env's to name: agents.common.obs_inputs
        cfg = cfg.replace(critic_obs=PRIVILEGED)
    n, members = cfg.device_count(), cfg.population_size

    # Whole members spread over the devices run their own sizes there; otherwise each device
    # takes a share of every member's envs, batch and ring.
    device = Sizes.of(cfg if spreads_members(members, n) else cfg.per_device(n))
    hp = population.stacked_hp(cfg) if members > 1 else hyper_params(cfg.agent_config)
    return CoreSpec(**vars(Sizes.of(cfg)), env=cfg.env, backend=cfg.backend, episode_length=cfg.episode_length,
                    action_repeat=cfg.action_repeat, randomize=randomize_ranges(cfg.randomize),
                    obs_noise=parse_noise(cfg.obs_noise), action_delay=cfg.action_delay,
                    push=float(cfg.push), push_every=cfg.push_every, num_eval_envs=cfg.num_eval_envs, num_seeds=cfg.num_seeds,
                    agent=cfg.agent_def, population_size=members, num_devices=n, hp=hp, device=device)


def build_engine(cfg: Config):
    """The compiled core for `cfg`; a size the core finds too large becomes the usage error of
    its flag, with the largest value that fits."""
    from sim.core.engine import Engine
    from sim.core.memory import TooLarge

    from envs.sim2real import SettingError

    try:
        return Engine(core_spec(cfg))
    except SettingError as err:
        raise ConfigError(err.flag, str(err)) from None
    except TooLarge as err:
        raise ConfigError(err.quantity.replace("_", "-"), f"{err} ({flag_of(err.quantity)} {err.fits})") from None


def build_evaluation(cfg: Config):
    """The policy's side of `cfg` alone (`sim.core.evaluation.Evaluation`: its env and agent,
    no loop), for playing or exporting a trained policy."""
    from sim.core.evaluation import Evaluation
    from envs.sim2real import SettingError

    try:
        return Evaluation(core_spec(cfg))
    except SettingError as err:
        raise ConfigError(err.flag, str(err)) from None
