"""Populations: `--num-seeds` seeds of every configuration of the `--sweep` grid, trained as
the members of one compiled program (a leading population axis on the training state), and
what a run reports of them.

Member k trains configuration k // num_seeds of the grid (the product of the sweeps, in the
order given) with seed `seed + k % num_seeds`; it is the single run of that seed and those
hyper-parameters (`member_config`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp

from sim.core.contract import ConfigError
from agents.config import hyper_params, sweepable
from sim.run import stats

# Run fields a user may try to sweep: they size the program (the rest are not hyper-parameters).
RUN_SIZES = ("num_envs", "episode_length", "action_repeat", "num_eval_envs", "total_steps", "epochs")


@dataclasses.dataclass(frozen=True)
class Member:
    index: int
    seed: int
    config: int  # its configuration's index in the sweep grid
    swept: tuple[tuple[str, float], ...]  # (field name, value) of each sweep

    @property
    def label(self) -> str:
        return ", ".join(f"{flag(k)}={v:g}" for k, v in self.swept) or "base"


def flag(name: str) -> str:
    return name.replace("_", "-")


def parse_sweeps(sweeps: tuple[str, ...], config_cls, agent: str) -> list[tuple[str, tuple[float, ...]]]:
    """`("learning-rate=3e-4,1e-3", ...)` -> [("learning_rate", (3e-4, 1e-3)), ...]; a name that
    is unknown, repeated or changes array shapes, or a value that is not a number, is a
    ConfigError naming the sweepable ones."""
    allowed = sweepable(config_cls)
    known = {f.name for f in dataclasses.fields(config_cls)}
    names = ", ".join(flag(n) for n in allowed)
    out = []
    for text in sweeps:
        name, sep, values = text.partition("=")
        field = name.strip().lstrip("-").replace("-", "_")
        if not sep or not values.strip():
            raise ConfigError("sweep", f"expected NAME=V1,V2,... got {text!r}; sweepable for --agent {agent}: {names}")
        if field not in allowed:
            why = ("changes array shapes or the compiled program" if field in known or field in RUN_SIZES
                   else f"is not a hyper-parameter of --agent {agent}")
            raise ConfigError("sweep", f"{flag(field)} {why}, so it cannot be swept in one program; "
                                       f"sweepable: {names}")
        if field in (f for f, _ in out):
            raise ConfigError("sweep", f"{flag(field)} is swept twice; give all its values in one --sweep")
        try:
            parsed = tuple(float(v) for v in values.split(","))
        except ValueError:
            raise ConfigError("sweep", f"{flag(field)}: values must be numbers, got {values!r}") from None
        out.append((field, parsed))
    return out


def members(cfg) -> list[Member]:
    """The population's members in order: configuration-major, then seed."""
    sweeps = parse_sweeps(cfg.population.sweep, type(cfg.agent_config), cfg.agent)
    names = [name for name, _ in sweeps]
    grid = list(itertools.product(*(values for _, values in sweeps)))
    seeds = cfg.population.num_seeds
    return [Member(c * seeds + s, cfg.seed + s, c, tuple(zip(names, values)))
            for c, values in enumerate(grid) for s in range(seeds)]


def member_config(cfg, member: Member):
    """The single run that member `member` of `cfg`'s population is."""
    return cfg.replace(seed=member.seed, num_seeds=1, sweep=(), **dict(member.swept))


def stacked_hp(cfg):
    """The hyper-parameters of every member, stacked [M] (the state's `agent.hp`)."""
    each = [hyper_params(member_config(cfg, m).agent_config) for m in members(cfg)]
    return jax.tree.map(lambda *v: jnp.stack(v), *each)


def keys(cfg):
    """(init key, eval key): each member's, stacked [M, 2], from its own seed as its single run
    derives them; a single run's own pair when the population has one member."""
    pairs = [jax.random.split(jax.random.PRNGKey(m.seed)) for m in members(cfg)]
    if len(pairs) == 1:
        return pairs[0][0], pairs[0][1]
    return jnp.stack([p[0] for p in pairs]), jnp.stack([p[1] for p in pairs])


# ---- what the run reports ----
EVAL = "eval/episode_return"


def member_records(cfg, record: dict) -> list[dict]:
    """One record per member from an epoch's record, whose per-member values are lists [M]
    (the rest, e.g. the epoch and env steps, all members share)."""
    return [{"member": m.index, "seed": m.seed, "config": m.config, "sweep": dict(m.swept),
             **{k: v[m.index] if isinstance(v, list) else v for k, v in record.items()}} for m in members(cfg)]


def is_config_line(record: dict) -> bool:
    """Whether a metrics.jsonl record is a configuration's line of its seeds' means
    (`config_records`), not one member's."""
    return "config" in record and "member" not in record


def config_records(cfg, records: list[dict], diverged=()) -> list[dict]:
    """Per configuration, the mean over its seeds of every number its members' records hold,
    and for the eval return its std, IQM and the 95% bootstrap interval of the mean (the band
    of curve.png); diverged members are left out."""
    out = []
    by_config: dict[int, list[dict]] = {}
    for r in records:
        if r["member"] not in diverged:
            by_config.setdefault(r["config"], []).append(r)
    for c, group in sorted(by_config.items()):
        first = group[0]
        record = {"epoch": first["epoch"], "env_steps": first["env_steps"], "config": c, "sweep": first["sweep"],
                  "seeds": len(group)}
        for key, value in first.items():
            if key in record or key in ("member", "seed") or not isinstance(value, (int, float)):
                continue
            values = [r[key] for r in group if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
            record[key] = sum(values) / len(values) if values else None
        returns = [r.get(EVAL) for r in group]
        if any(v is not None for v in returns):
            d = stats.describe(returns, reps=2000)
            record.update({"seeds/eval_return_std": d["std"], "seeds/eval_return_iqm": d["iqm"]})
            finite = [v for v in returns if v is not None and math.isfinite(v)]
            low, high = stats.bootstrap_ci(finite, "mean", reps=2000) if finite else (None, None)
            record.update({"seeds/eval_return_ci_low": low, "seeds/eval_return_ci_high": high})
        out.append(record)
    return out


def summary(cfg, records: list[dict]) -> dict:
    """The final evaluation of every member (its last one in `records`, a metrics.jsonl's
    records) and, per configuration, mean, std, IQM and its 95% interval, ranked by IQM."""
    last: dict[int, dict] = {}
    for r in records:
        if is_config_line(r):
            continue
        if r.get(EVAL) is not None or r.get("member", 0) not in last:
            last[r.get("member", 0)] = r
    finals = []
    for m in members(cfg):
        r = last.get(m.index, {})
        finals.append({"member": m.index, "seed": m.seed, "config": m.config, "sweep": dict(m.swept),
                       "eval_return": r.get(EVAL), "epoch": r.get("epoch"), "env_steps": r.get("env_steps"),
                       "diverged": r.get("diverged")})
    configs = []
    for c, group in itertools.groupby(finals, key=lambda f: f["config"]):
        group = list(group)
        scores = [f["eval_return"] for f in group if not f["diverged"]]
        configs.append({"config": c, "sweep": group[0]["sweep"], "members": [f["member"] for f in group],
                        "seeds": len(group), "diverged": sum(bool(f["diverged"]) for f in group),
                        **stats.describe(scores)})
    configs.sort(key=lambda s: -math.inf if s["iqm"] is None else s["iqm"], reverse=True)
    for rank, s in enumerate(configs, 1):
        s["rank"] = rank
    scored = [f for f in finals if f["eval_return"] is not None and not f["diverged"]]
    best = max(scored, key=lambda f: f["eval_return"])["member"] if scored else None
    return {"configurations": configs, "members": finals, "best_member": best,
            "statistics": f"over each configuration's seeds: mean, sample std, IQM (interquartile mean) and its "
                          f"{stats.LEVEL:.0%} percentile bootstrap interval ({stats.REPS} resamples)"}


def table(summary: dict) -> str:
    """The ranked table of `summary` as text."""
    rows = [("rank", "configuration", "seeds", "mean", "std", "IQM", "IQM 95% CI")]
    for s in summary["configurations"]:
        label = ", ".join(f"{flag(k)}={v:g}" for k, v in s["sweep"].items()) or "base"
        seeds = f"{s['n']}/{s['seeds']}" if s["diverged"] else str(s["seeds"])
        num = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        ci = "-" if s["iqm_ci"] is None else f"[{s['iqm_ci'][0]:.2f}, {s['iqm_ci'][1]:.2f}]"
        rows.append((str(s["rank"]), label, seeds, num(s["mean"]), num(s["std"]), num(s["iqm"]), ci))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if i == 1 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    if summary["best_member"] is not None:
        best = summary["members"][summary["best_member"]]
        lines.append(f"best member: {best['member']} (seed {best['seed']}"
                     + (f", {', '.join(f'{flag(k)}={v:g}' for k, v in best['sweep'].items())}" if best["sweep"] else "")
                     + f"): final eval return {best['eval_return']:.2f}")
    return "\n".join(lines)
