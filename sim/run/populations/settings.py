"""The population's settings (`--num-seeds`, `--sweep`) and its population-based training's
(`--pbt*`): each field's docstring is its `--help` text, its name its flag. Each checks its own
values; what spans the population and the agent (a PBT with members to copy and something to
explore) `pbt.validate` checks."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

import tyro

from sim.core.contract import ConfigError


FRACTION_MAX = 0.5  # parents come from the top fraction, replaced members from the bottom: never the same


@dataclasses.dataclass(frozen=True)
class Population:
    """Seeds and sweeps trained together as the members of one program."""

    num_seeds: int = 1
    """Train N independent members with seeds seed, seed+1, ..., seed+N-1 in one compiled program (a population: each member equals the single run of its seed); metrics.jsonl, summary.json and curve.png report each member and each configuration's mean, std, IQM and 95% bootstrap interval."""
    sweep: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """NAME=V1,V2,...: also train every listed value of a hyper-parameter that leaves array shapes alone (learning-rate, discounting, entropy-cost, tau, ...; repeat the flag for the grid of several), each with --num-seeds seeds, in the same program. A name that changes shapes is refused with the list of sweepable ones."""

    def validate(self) -> None:
        if self.num_seeds < 1:
            raise ConfigError("num-seeds", f"must be a positive integer, got {self.num_seeds}")


@dataclasses.dataclass(frozen=True)
class PbtSettings:
    """Population-based training of a population's members."""

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

    @property
    def enabled(self) -> bool:
        return self.pbt

    def validate(self) -> None:
        options = self.pbt_explore or self.pbt_fitness != "eval"
        if not self.pbt:
            if options:
                raise ConfigError("pbt-explore" if self.pbt_explore else "pbt-fitness", "needs --pbt")
            return
        if self.pbt_every < 1:
            raise ConfigError("pbt-every", f"must be a positive number of epochs, got {self.pbt_every}")
        if not 0 < self.pbt_fraction <= FRACTION_MAX:
            raise ConfigError("pbt-fraction", f"must be in (0, {FRACTION_MAX}] (the replaced and the copied are "
                                              f"never the same members), got {self.pbt_fraction}")
        if not 0 <= self.pbt_resample <= 1:
            raise ConfigError("pbt-resample", f"must be a probability in [0, 1], got {self.pbt_resample}")
