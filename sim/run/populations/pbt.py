"""--pbt: population-based training of a population's members during the run.

What it explores: every hyper-parameter given by `--pbt-explore NAME=[log:]LOW:HIGH`, and
every swept one (`--sweep`), which starts from its sweep values and stays within
[lowest, highest] of them unless `--pbt-explore` gives its range. A range is log-scaled when
asked (`log:`), or for a swept one whose values are positive and span 10x or more.

When: after every `--pbt-every`-th epoch but the last, on that epoch's fitness: its
evaluation return (`--pbt-fitness eval`, the epoch is then evaluated), or the mean training
episode return over the epochs since the step before (`train`). A diverged member's fitness
is NaN: the step replaces it instead of leaving it out (sim/core/pbt.py does the step).

What it records: each member's line of metrics.jsonl carries `hp/<name>`, the values it
trained with that epoch (W&B plots them per member); at a step, `pbt/parent` (the member it
copied, itself if kept) and `pbt/replaced`. summary.json holds the lineage (epoch, member,
parent, new values) and the best member's schedule: the values its line of ancestors trained
with, epoch by epoch.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from sim.core.contract import ConfigError
from agents.config import sweepable
from sim.core.pbt import Explore, Plan
from sim.run.populations import population


def flag(name: str) -> str:
    return name.replace("_", "-")


def parse_range(text: str, config_cls, agent: str):
    """"learning-rate=log:1e-5:1e-2" -> pbt.Explore; errors name --pbt-explore."""
    allowed = sweepable(config_cls)
    name, sep, spec = text.partition("=")
    field = name.strip().lstrip("-").replace("-", "_")
    usage = f"expected NAME=[log:]LOW:HIGH (e.g. learning-rate=log:1e-5:1e-2), got {text!r}"
    if not sep:
        raise ConfigError("pbt-explore", usage)
    if field not in allowed:
        raise ConfigError("pbt-explore", f"{flag(field)} is not a hyper-parameter of --agent {agent} that leaves "
                                         f"array shapes alone; explorable: {', '.join(flag(n) for n in allowed)}")
    parts = spec.strip().split(":")
    log = parts[0] == "log"
    if log or parts[0] == "lin":
        parts = parts[1:]
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise ConfigError("pbt-explore", usage) from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ConfigError("pbt-explore", f"{flag(field)}: need a finite LOW < HIGH, got {low:g} and {high:g}")
    if log and low <= 0:
        raise ConfigError("pbt-explore", f"{flag(field)}: a log range must be positive, got {low:g}")
    return Explore(field, low, high, log)


def explored(cfg) -> tuple:
    """Every explored hyper-parameter with its range (pbt.Explore), in the state's name order."""
    given = {}
    for text in cfg.pbt.pbt_explore:
        spec = parse_range(text, type(cfg.agent_config), cfg.agent)
        if spec.name in given:
            raise ConfigError("pbt-explore", f"{flag(spec.name)} is given twice")
        given[spec.name] = spec
    for name, values in population.parse_sweeps(cfg.population.sweep, type(cfg.agent_config), cfg.agent):
        low, high = min(values), max(values)
        if name in given:
            spec = given[name]
            if not spec.low <= low <= high <= spec.high:
                raise ConfigError("pbt-explore", f"{flag(name)}: the --sweep values [{low:g}, {high:g}] lie outside "
                                                 f"its range [{spec.low:g}, {spec.high:g}]")
            continue
        if low == high:
            raise ConfigError("pbt-explore", f"{flag(name)} is swept over one value: give its range, "
                                             f"--pbt-explore {flag(name)}=LOW:HIGH")
        given[name] = Explore(name, low, high, log=low > 0 and high >= 10 * low)
    return tuple(given[name] for name in sorted(given))


def validate(cfg) -> None:
    """What --pbt asks of the rest of the run (its own values `PbtSettings.validate` checks):
    members to copy and something to explore; ConfigError naming the flag to change."""
    if not cfg.pbt.enabled:
        return
    if cfg.population_size < 2:
        raise ConfigError("pbt", "needs a population of 2 or more members (--num-seeds N and/or --sweep NAME=V1,V2,...)")
    if not explored(cfg):
        raise ConfigError("pbt", "has nothing to explore: give --pbt-explore NAME=[log:]LOW:HIGH or --sweep NAME=...")


def plan(cfg):
    """The core's step plan (sim/core/pbt.py) of a run's flags."""
    return Plan(explore=explored(cfg), fraction=cfg.pbt.pbt_fraction, resample=cfg.pbt.pbt_resample)


def step_key(seed: int, epoch: int):
    """The step's key: from the run's seed and the epoch, so a resumed run steps as an
    uninterrupted one."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), 0x9B7), epoch)


class Pbt:
    """A run's PBT steps: when they are due, each member's fitness, the step and its records."""

    def __init__(self, cfg, program, log, history=()):
        self.cfg, self.program, self.log = cfg, program, log
        self.names = [e.name for e in explored(cfg)]
        self.train_returns = [list(r) for r in history]  # [M] each, epochs since the last step (train fitness)

    @classmethod
    def resumed(cls, cfg, program, log, records, done_epochs: int) -> "Pbt":
        """A resumed run's: the training returns of the epochs since its last step, read back."""
        since = done_epochs - done_epochs % cfg.pbt.pbt_every
        by_epoch: dict[int, dict] = {}
        for r in records:
            if "member" in r and since < r.get("epoch", 0) <= done_epochs:
                by_epoch.setdefault(r["epoch"], {})[r["member"]] = r.get("train/episode_return")
        history = [[row.get(m) for m in range(cfg.population_size)] for _, row in sorted(by_epoch.items())]
        return cls(cfg, program, log, history)

    def due(self, epoch: int, final: bool) -> bool:
        """Whether a step follows `epoch` (never the run's final one)."""
        return not final and epoch % self.cfg.pbt.pbt_every == 0

    @property
    def needs_eval(self) -> bool:
        """Whether a step's epoch is evaluated (its fitness is the evaluation return)."""
        return self.cfg.pbt.pbt_fitness == "eval"

    def observe(self, record: dict) -> None:
        """An epoch's training returns (for the train fitness)."""
        self.train_returns.append(list(record["train/episode_return"]))

    def fitness(self, record: dict, diverged) -> list[float]:
        """Each member's fitness [M]: NaN for a diverged member or one without a score."""
        if self.cfg.pbt.pbt_fitness == "eval":
            scores = record["eval/episode_return"]
        else:
            scores = []
            for m in range(len(self.train_returns[-1])):
                seen = [row[m] for row in self.train_returns if row[m] is not None and math.isfinite(row[m])]
                scores.append(sum(seen) / len(seen) if seen else math.nan)
        return [math.nan if m in diverged or s is None else float(s) for m, s in enumerate(scores)]

    def step(self, state, record: dict, divergence):
        """The step after epoch record["epoch"]: the new state; the record gains each member's
        parent and whether it was replaced; replaced diverged members train on again."""
        epoch = record["epoch"]
        fitness = self.fitness(record, divergence.members)
        state, lineage = self.program(state, jnp.asarray(fitness, jnp.float32), step_key(self.cfg.seed, epoch))
        lineage = jax.device_get(lineage)
        record["pbt/fitness"] = [f if math.isfinite(f) else None for f in fitness]  # NaN: null in JSON
        record["pbt/parent"] = [int(p) for p in lineage["source"]]
        record["pbt/replaced"] = [bool(r) for r in lineage["replaced"]]
        for name in self.names:
            record[f"pbt/{name}"] = [float(v) for v in lineage[f"hp/{name}"]]
        for m, parent in enumerate(record["pbt/parent"]):
            if m in divergence.members and record["pbt/replaced"][m]:
                del divergence.members[m]
                self.log(f"member {m} (diverged) takes a copy of member {parent} (PBT) and trains on")
        self.train_returns = []
        return state

    def values(self, state) -> dict:
        """hp/<name>: each member's current value [M] of every explored hyper-parameter."""
        hp = jax.device_get(state.agent.hp)
        members = self.cfg.population_size
        return {f"hp/{name}": [float(v) for v in np.asarray(getattr(hp, name)).reshape(members, -1)[:, 0]]
                for name in self.names}


# ---- what summary.json says of a PBT run ----
def lineage(records: list[dict]) -> list[dict]:
    """Every replacement: {epoch, member, parent, hp: new values}, in order."""
    out = []
    for r in records:
        if "member" in r and r.get("pbt/replaced"):
            hp = {k[len("pbt/"):]: v for k, v in r.items() if k.startswith("pbt/") and k not in
                  ("pbt/parent", "pbt/replaced", "pbt/fitness")}
            out.append({"epoch": r["epoch"], "member": r["member"], "parent": r["pbt/parent"], "hp": hp})
    return out


def schedule(records: list[dict], member: int) -> list[dict]:
    """The values `member`'s line of ancestors trained with, epoch by epoch: [{epoch, hp}],
    following each replacement back to the parent it copied."""
    by_epoch: dict[int, dict[int, dict]] = {}
    for r in records:
        if "member" in r:
            by_epoch.setdefault(r["epoch"], {})[r["member"]] = r
    out, who = [], member
    for epoch in sorted(by_epoch, reverse=True):
        r = by_epoch[epoch].get(who)
        if r is None:
            continue
        if r.get("pbt/replaced"):  # `who` was a copy of its parent from this epoch's step on
            who = r["pbt/parent"]
            r = by_epoch[epoch][who]
        out.append({"epoch": epoch, "member": who, "hp": {k[3:]: v for k, v in r.items() if k.startswith("hp/")}})
    return out[::-1]


def summarize(cfg, summary: dict, records: list[dict]) -> tuple[dict, str]:
    """A PBT run's summary.json (the members ranked by final evaluation with the values they
    ended with, the lineage, the best member's schedule; no per-configuration statistics: the
    members left their starting configurations) and its printed table."""
    final_hp: dict[int, dict] = {}
    for r in records:
        if "member" in r:
            final_hp[r["member"]] = {k[3:]: v for k, v in r.items() if k.startswith("hp/")}
    members = [dict(m, hp=final_hp.get(m["member"], {})) for m in summary["members"]]
    ranked = sorted(members, key=lambda m: -math.inf if m["eval_return"] is None else m["eval_return"], reverse=True)
    best = summary["best_member"]
    out = {"members": members, "best_member": best,
           "pbt": {"explored": [{"name": e.name, "low": e.low, "high": e.high, "log": e.log} for e in explored(cfg)],
                   "every": cfg.pbt.pbt_every, "fraction": cfg.pbt.pbt_fraction, "resample": cfg.pbt.pbt_resample,
                   "fitness": cfg.pbt.pbt_fitness, "lineage": lineage(records),
                   "best_schedule": schedule(records, best) if best is not None else []}}
    values = lambda hp: ", ".join(f"{flag(k)}={v:.3g}" for k, v in hp.items())  # noqa: E731
    rows = [f"{'member':>6}  {'final eval':>10}  hyper-parameters at the end"]
    for m in ranked:
        score = "-" if m["eval_return"] is None else f"{m['eval_return']:.2f}"
        rows.append(f"{m['member']:>6}  {score:>10}  {values(m['hp'])}")
    if best is not None:
        rows.append(f"best member {best}'s schedule (epoch: values, where its line of ancestors changed them):")
        before = None
        for e in out["pbt"]["best_schedule"]:
            if e["hp"] != before:
                rows.append(f"  epoch {e['epoch']} (member {e['member']}): {values(e['hp'])}")
                before = e["hp"]
    return out, "\n".join(rows)
