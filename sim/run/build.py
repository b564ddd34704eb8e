"""From a run's config to the compiled core: its `CoreSpec` (sizes for the run and for one
device, devices, the population's values), the training `Engine`, or the policy's side alone
(`Evaluation`, for play and export). A size the core finds too large, or a setting the env
cannot take, becomes the usage error of its flag."""

from __future__ import annotations

import envs
from agents.config import hyper_params
from envs.sim2real import SettingError, parse_noise
from sim.core.engine import Engine
from sim.core.evaluation import Evaluation
from sim.core.memory import TooLarge
from sim.core.parallel import spreads_members
from sim.core.spec import CoreSpec, Disturbances, Members
from sim.run import devices
from sim.run.populations import population
from sim.run.config import Config, ConfigError, flag_of
from sim.run.settings import randomize_ranges


def core_spec(cfg: Config, teacher=None) -> CoreSpec:
    """What the compiled core is built from: `cfg` checked, its sizes for the whole run and
    for one device, its devices and its population's values; `teacher`: a distilling agent's
    teacher (`sim.run.policy.teacher.source(cfg)`, which a training run hands in: it reads another
    run, above this module)."""
    cfg = cfg.validate()
    n, members = devices.device_count(cfg), cfg.population_size
    # Whole members spread over the devices run their own sizes there; otherwise each device
    # takes a share of every member's envs, batch and ring.
    device = (cfg if spreads_members(members, n) else devices.per_device_config(cfg, n)).sizes()
    hp = population.stacked_hp(cfg) if members > 1 else hyper_params(cfg.agent_config)
    s2r = cfg.sim2real
    return CoreSpec(**vars(cfg.sizes()), env=cfg.env, backend=cfg.backend,
                    env_config=envs.parse_env_config(cfg.env_config), episode_length=cfg.episode_length,
                    action_repeat=cfg.action_repeat,
                    disturbances=Disturbances(randomize=randomize_ranges(s2r.randomize), obs_noise=parse_noise(s2r.obs_noise),
                                              action_delay=s2r.action_delay, push=float(s2r.push), push_every=s2r.push_every,
                                              domain_randomization=s2r.domain_randomization),
                    num_eval_envs=cfg.num_eval_envs, matmul_precision=cfg.hosts.matmul_precision,
                    agent=cfg.agent_def, members=Members(members, cfg.population.num_seeds), num_devices=n, hp=hp,
                    device=device, teacher=teacher)


def build_engine(cfg: Config, teacher=None) -> Engine:
    """The compiled core for `cfg` (and a distilling agent's `teacher`, as `core_spec` takes
    it); a size the core finds too large becomes the usage error of its flag, with the largest
    value that fits."""
    try:
        return Engine(core_spec(cfg, teacher))
    except SettingError as err:
        raise ConfigError(err.flag, str(err)) from None
    except TooLarge as err:
        raise ConfigError(err.quantity.replace("_", "-"), f"{err} ({flag_of(err.quantity)} {err.fits})") from None


def build_evaluation(cfg: Config) -> Evaluation:
    """The policy's side of `cfg` alone (its env and agent, no loop), for playing or exporting
    a trained policy."""
    try:
        return Evaluation(core_spec(cfg))
    except SettingError as err:
        raise ConfigError(err.flag, str(err)) from None
