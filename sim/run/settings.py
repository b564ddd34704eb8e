"""The run's settings, one small frozen config per concern: where the run lives and how it
is watched (`RunDir`), its logging, its devices and hosts, its sim-to-real disturbances; the
checkpoints' (`sim/run/checkpoints/settings.py`) and the population's and its PBT's
(`sim/run/populations/settings.py`) live with the code that reads them. `sim/run/config.py`
composes them with the env, the budget and the agent's config.

Each field's docstring is its `--help` text and its name is its flag (`--checkpoint-every`):
the command line stays one flat set of flags. Each config checks its own values
(`validate`, raising ConfigError naming the flag); what spans two of them the run config checks.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from typing import Literal, Optional

from sim.core.contract import ConfigError
from envs.sim2real import parse_noise, parse_ranges


@dataclasses.dataclass(frozen=True)
class RunDir:
    """Where the run lives, and how it is watched."""

    run_dir: Optional[str] = None
    """Where config.json and metrics.jsonl go (default: runs/<env>__<agent>__<seed>__<time>; a population: runs/<env>__<agent>__<seed>__x<members>__<time>)."""
    overwrite: bool = False
    """Start over in a --run-dir that holds an earlier run: removes the files that run wrote (config.json, metrics.jsonl, summary.json, checkpoints/, curve.png, W&B and TensorBoard files) and nothing else (without it such a run dir is refused)."""
    resume: Optional[str] = None
    """Continue the run in this run directory from its newest checkpoint (its config.json gives the defaults; flags given override)."""
    resume_if_exists: bool = False
    """With --run-dir D: continue D's run from its newest checkpoint when D holds one (as --resume D, flags given override), else start it there (replacing the files of a run that wrote no checkpoint), so a requeued job runs the same command line."""
    progress: bool = True
    """Show a progress bar on stderr."""
    compile_cache: str = "auto"
    """Directory of JAX's persistent compilation cache, so a restart, resume or play reuses compiled programs (auto: $XDG_CACHE_HOME/fusedrl/jax, else ~/.cache/fusedrl/jax; off: no cache)."""
    stall_timeout: float = 300.0
    """On a CPU backend, end the run (exit code 4) when a stage or an epoch keeps the process idle this many seconds: a deadlock, not work (0: never). Slow stages are reported either way."""

    def validate(self) -> None:
        if not self.stall_timeout >= 0:  # (NaN too)
            raise ConfigError("stall-timeout", f"must be >= 0 seconds, got {self.stall_timeout}")
        if self.resume_if_exists and self.run_dir is None and self.resume is None:
            raise ConfigError("resume-if-exists", "needs --run-dir DIR (the run to continue, or to start there)")
        if self.resume_if_exists and self.overwrite:
            raise ConfigError("resume-if-exists", "continues a run: it cannot be combined with --overwrite")
        if self.overwrite and self.resume is not None:
            raise ConfigError("overwrite", "starts a fresh run: it cannot be combined with --resume")


@dataclasses.dataclass(frozen=True)
class Logging:
    """Where every epoch's metrics go besides metrics.jsonl: Weights & Biases, TensorBoard."""

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
    tensorboard: bool = False
    """Write every epoch's metrics as TensorBoard event files under <run-dir>/tensorboard (one run per member of a population), the scalars W&B gets (x-axis: env steps); needs tensorboardX (the tensorboard extra)."""

    def validate(self) -> None:
        if self.tensorboard and importlib.util.find_spec("tensorboardX") is None:
            raise ConfigError("tensorboard", "needs tensorboardX: pip install -e '.[tensorboard]'")


@dataclasses.dataclass(frozen=True)
class Hosts:
    """The devices the run shards over, the precision of their matmuls, and the hosts of a
    multi-process run."""

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
    matmul_precision: Literal["highest", "high", "default"] = "highest"
    """Precision of the programs' float32 matmuls (the physics, the losses, everything but the network layers, which --matmul-dtype sets): highest, full float32; high, three bfloat16 passes on a TPU (TensorFloat-32 on an NVIDIA GPU); default, the platform's own (one bfloat16 pass on a TPU, as Brax's trainers run there: it moves MJX's physics far beyond float32 rounding, see docs/benchmarks.md). No effect on a CPU."""
    coordinator: Optional[str] = None
    """Multi-host: address host:port of process 0 (or JAX_COORDINATOR_ADDRESS)."""
    num_processes: Optional[int] = None
    """Multi-host: total number of processes (or JAX_NUM_PROCESSES)."""
    process_id: Optional[int] = None
    """Multi-host: index of this process, 0 .. num_processes - 1 (or JAX_PROCESS_ID)."""

    def validate(self) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class SimToRealSettings:
    """Disturbances of training for a policy that must survive another world: randomised
    physics, noisy observations, delayed actions, pushes."""

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
    domain_randomization: bool = False
    """The task's own domain randomiser (Playground's robots that have one: Go1, G1, T1, Berkeley Humanoid, LEAP and Aero hands; --list-envs marks them), each training env's model drawn anew at every reset, after --randomize's factors. On by default for those tasks, as in Playground's published runs (--no-domain-randomization turns it off), but for FastTD3 and FastSAC, whose reference trains without it. Evaluations run the nominal model."""

    def validate(self) -> None:
        try:
            randomize_ranges(self.randomize)
        except (ValueError, OSError) as err:
            raise ConfigError("randomize", str(err)) from None
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

    @property
    def active(self) -> bool:
        return bool(self.randomize or self.obs_noise or self.action_delay or self.push or self.domain_randomization)


# The appending flags: given on the command line of a resumed run, they replace the saved
# values instead of adding to them (a requeued job repeats its own command line).
APPENDED = ("sweep", "pbt_explore")


def randomize_ranges(entries) -> tuple[tuple[str, float, float], ...]:
    """--randomize's (name, low, high) factors; a FILE entry's lines are read as entries.
    Raises ValueError starting with the flag for a malformed one."""
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
    return parse_ranges([e for e in setting.split(",") if e.strip()])
