"""The agent registry: every agent the trainer offers, one line each (module:attribute of
its `sim.core.contract.AgentDef`). Config, command line, engine, checkpoints and `--play` look
agents up here and read what they declare; nothing else knows an agent by its name."""

from __future__ import annotations

import importlib

from sim.core.contract import AgentDef

REGISTRY = (
    "agents.ppo:AGENT",
    "agents.ppo_rnn:AGENT",
    "agents.sac:AGENT",
    "agents.td3:TD3",
    "agents.td3:DDPG",
    "agents.fasttd3:AGENT",
    "agents.fastsac:AGENT",
    "agents.pqn:AGENT",
    "agents.dqn:AGENT",
    "agents.crossq:AGENT",
    "agents.apg:AGENT",
    "agents.shac:AGENT",
    "agents.es:AGENT",
    "agents.ars:AGENT",
    "agents.strategies:AGENT",
    "agents.bc:AGENT",
    "agents.bc:RNN",
)


def _load(entry: str) -> AgentDef:
    module, attribute = entry.split(":")
    return getattr(importlib.import_module(module), attribute)


def all_agents() -> dict[str, AgentDef]:
    """Every registered agent by its name, in registry order."""
    out = {}
    for entry in REGISTRY:
        agent = _load(entry)
        out[agent.name] = agent
    return out


def names() -> tuple[str, ...]:
    return tuple(all_agents())


def get(name: str) -> AgentDef:
    """The agent called `name`; ValueError naming the valid ones otherwise."""
    found = all_agents().get(name)
    if found is None:
        raise ValueError(f"unknown agent {name!r}; valid agents: {', '.join(names())}")
    return found
