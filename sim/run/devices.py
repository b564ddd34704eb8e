"""How many devices a run trains on, and what each one works with: the harness's choice
from the run's config and what the host offers (flags, JAX_* environment variables, cores),
with the flag to change in each error. The compiled core shards over what this decides
(`sim/core/parallel.py`)."""

from __future__ import annotations

import os

import jax

import envs
from sim.core.contract import ConfigError
from sim.core.parallel import spreads_members
from sim.run.config import Config


def initialize(cfg: Config) -> None:
    """Joins a multi-process run when asked to (flags or JAX_* environment variables).

    Must run before anything touches a JAX device. On CPU the cross-process collectives go
    through gloo. A single-process `--devices N` (N > 1) on a CPU host first splits the CPU
    into N XLA devices (`split_host_cpu`).
    """
    coordinator = cfg.hosts.coordinator or os.environ.get("JAX_COORDINATOR_ADDRESS")
    num_processes = cfg.hosts.num_processes or _env_int("JAX_NUM_PROCESSES")
    process_id = cfg.hosts.process_id if cfg.hosts.process_id is not None else _env_int("JAX_PROCESS_ID")
    if coordinator is None and num_processes in (None, 1):
        split_host_cpu(cfg.hosts.devices if cfg.hosts.devices is not None else default_devices(cfg))
        return
    if coordinator is None or num_processes is None or process_id is None:
        raise ConfigError("coordinator", "a multi-process run needs --coordinator, --num-processes and --process-id "
                                         "(or JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID)")
    if not 0 <= process_id < num_processes:
        raise ConfigError("process-id", f"must be in [0, {num_processes - 1}], got {process_id}")
    # Only the CPU client's cross-process collectives use this; accelerators keep their own.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)


def split_host_cpu(n: int | None) -> None:
    """Makes the CPU backend N XLA devices, so `--devices N` can use N cores of a CPU host.

    XLA runs one device's program on one thread at a time for the small, many-op physics
    programs, so a single CPU device keeps about one core busy; N devices run their shards
    side by side. Only the CPU client is affected (an accelerator host keeps its devices, and
    `--devices` is checked against those). Left alone when XLA_FLAGS already sets the count
    (the caller chose) or when JAX has already started its backends (too late to change).
    """
    if n is None or n <= 1 or n > host_cores():
        return  # more devices than cores would only add overhead: device_count() rejects it
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except AttributeError:  # a JAX without the option: the XLA flag does the same before the backend starts
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={n}".strip()
    except RuntimeError:  # backends already initialised: --devices is checked against what exists
        pass


def host_cores() -> int:
    """The cores this process may run on (a container's share, not the whole machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# The env families (`envs.PHYSICS_FAMILIES`) whose on-policy runs train faster split over a
# CPU's cores: their physics dominates a step, and each device steps its share of the envs on
# its own core (measured on 2 cores, `benchmarks/scaling.py --cpu --as-configured`: ant PPO
# x1.47, humanoid PPO x1.65, CheetahRun PPO x1.33). Where the networks dominate (classic
# control, gymnax; replay agents' many gradient steps per env step) the gradients averaged
# across devices at every step cost more than the split saves: cartpole PPO x0.84, pendulum
# SAC x0.78, ant SAC x0.81.
def default_devices(cfg: Config) -> int | None:
    """The CPU devices a run trains on when --devices is not given (a CPU-only host; an
    accelerator host keeps its own devices). None: one device, the JAX default.

    A population: the most cores that divide its member count, so each core trains whole
    members (a member's results are then those of its single run on one device, whatever
    the core count). One on-policy run of a physics env (`envs.PHYSICS_FAMILIES`): the most
    cores over which its envs and batches divide (results then depend on the count, as each
    device draws its own random streams); other runs, and runs whose sizes no count above 1
    divides: one.
    """
    cores = host_cores()
    if cfg.population_size > 1:
        return max(d for d in range(1, min(cores, cfg.population_size) + 1) if cfg.population_size % d == 0)
    if envs.family(cfg.env) not in envs.PHYSICS_FAMILIES or not cfg.loop.splits_over_cores:
        return None
    for n in range(cores, 1, -1):
        if divides(cfg, n):
            return n
    return None


def divides(cfg: Config, n: int) -> bool:
    """Whether one run's envs and batches split evenly over n devices."""
    if any(value % n for value in (cfg.num_envs, *(v for _, v in cfg.agent_config.divisible()))):
        return False
    try:
        per_device_config(cfg, n).validate()
    except (AssertionError, ConfigError):
        return False
    return True


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def device_count(cfg: Config) -> int:
    """Devices the run shards over, checked against what exists and the batch sizes."""
    available = len(jax.devices())
    n = available if cfg.hosts.devices is None else cfg.hosts.devices
    if not 1 <= n <= available:
        cores = host_cores()
        if jax.devices()[0].platform == "cpu" and jax.process_count() == 1 and n > cores:
            raise ConfigError("devices", f"must be in [1, {max(cores, available)}] on this CPU host "
                                         f"(one device per core), got {n}")
        raise ConfigError("devices", f"must be in [1, {available}] (devices visible to this run), got {n}")
    if jax.process_count() > 1 and n != available:
        raise ConfigError("devices", f"a multi-process run uses every device of every process ({available})")
    if spreads_members(cfg.population_size, n):
        return n  # each device trains whole members: their sizes need not divide
    for flag, value in (("num-envs", cfg.num_envs), *cfg.agent_config.divisible()):
        if value % n:
            lower, upper = (value // n) * n, -(-value // n) * n
            options = f"{lower} or {upper}" if lower else f"{upper}"
            raise ConfigError(flag, f"{value} does not divide over {n} devices; use --{flag} {options}")
    return n


def per_device_config(cfg: Config, n: int) -> Config:
    """The sizes one device works with: its envs, its batch shard, its replay ring."""
    if n == 1:
        return cfg
    dev = cfg.replace(num_envs=cfg.num_envs // n, agent_config=cfg.agent_config.per_device(n), devices=1)
    # Each device takes 1/n of every iteration's steps: its budget is 1/n of the run's, so
    # it runs exactly the run's iterations (not n times as many).
    dev = dev.replace(total_steps=dev.prefill_steps + cfg.total_iterations * dev.steps_per_iteration)
    assert (dev.total_iterations, dev.iterations_per_epoch, dev.prefill_iterations) == (
        cfg.total_iterations, cfg.iterations_per_epoch, cfg.prefill_iterations), "per-device sizes disagree"
    return dev
