"""The command line: which command (training, `play`, `export`), its flags parsed on top of
their defaults (the env's and agent's tuned ones, or a resumed run's own config), every value
checked; a bad one is a `UsageError`: one line, exit code 2."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import sys

import tyro

import agents
from sim.run.checkpoints.checkpoint import CheckpointError, list_checkpoints, load_run_config
from sim.run.commands import ExportCommand, PlayCommand
from sim.run.config import Config, ConfigError, TrainCommand, defaults_for, flag_names, train_flag_names, train_flags
from sim.run.settings import APPENDED

COMMANDS = {"play": PlayCommand, "export": ExportCommand}
# The training command's flags of earlier versions that are commands (or their options) now.
MOVED = {"--play": "playing is a command now: python train.py play RUN_DIR",
         "--export": "exporting is a command now: python train.py export RUN_DIR FILE",
         "--video": "an option of the play command now: python train.py play RUN_DIR --video FILE",
         "--robustness": "an option of the play command now: python train.py play RUN_DIR --robustness SETTING",
         "--member": "an option of the play and export commands now: python train.py play RUN_DIR --member K"}


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


def parse(argv: list[str]):
    """The command `argv` asks for: a TrainCommand, PlayCommand or ExportCommand, checked."""
    if argv and argv[0] in COMMANDS:
        name, cls = argv[0], COMMANDS[argv[0]]
        command = _tyro(cls, argv[1:], None, f"train.py {name}")
        try:
            return command.validate()
        except ConfigError as err:
            raise UsageError(str(err)) from None
    return parse_train(argv)


def parse_train(argv: list[str]) -> TrainCommand:
    """The training command: flags parsed on top of the tuned defaults of the chosen --env and
    --agent (or of the run that --resume names); only the chosen agent's flags are accepted."""
    for token in argv:
        moved = MOVED.get(token.split("=", 1)[0])
        if moved:
            raise UsageError(f"{token.split('=', 1)[0]}: {moved}")
    default = _default_config(argv)
    _check_agent_flags(argv, default.agent)
    command = _tyro(train_flags(default.agent), argv, TrainCommand(config=default), "train.py")
    cfg = command.config
    if cfg.run.resume_if_exists and cfg.run.run_dir and list_checkpoints(cfg.run.run_dir):
        cfg = cfg.replace(resume=cfg.run.run_dir)  # the run there continues, as --resume would
    if cfg.run.resume:
        _check_fixed(cfg, default)
    try:
        cfg.validate()
    except ConfigError as err:
        raise UsageError(str(err)) from None
    return dataclasses.replace(command, config=cfg)


def parse_config(argv: list[str]) -> Config:
    """The training command's config."""
    return parse_train(argv).config


def _default_config(argv: list[str]) -> Config:
    pre = argparse.ArgumentParser(add_help=False)
    for flag in ("--env", "--agent", "--resume", "--run-dir"):
        pre.add_argument(flag, default=None)
    pre.add_argument("--resume-if-exists", action="store_true")
    known, _ = pre.parse_known_args(argv)
    if known.agent is not None and known.agent not in agents.names():
        raise UsageError(f"--agent: unknown agent {known.agent!r}; valid agents: {', '.join(agents.names())}")
    source = known.resume
    if not source and known.resume_if_exists and known.run_dir and list_checkpoints(known.run_dir):
        source = known.resume = known.run_dir
    if not source:
        return defaults_for(known.env or "cartpole", known.agent or "ppo")
    # A resumed run starts from its own saved config; flags given override it.
    if known.run_dir and os.path.abspath(known.run_dir) != os.path.abspath(known.resume):
        raise UsageError("--run-dir: a resumed run continues in its own directory (the --resume one)")
    try:
        default = load_run_config(source)
    except CheckpointError as err:
        raise UsageError(f"--resume: {err}") from None
    if known.agent is not None and known.agent != default.agent:
        raise UsageError(f"--agent: {source} is a run of --agent {default.agent}; it cannot continue as {known.agent}")
    # An appending flag given again (a requeued job's own command line) replaces the saved
    # values instead of adding to them.
    given = {flag.split("=", 1)[0] for flag in argv}
    return default.replace(**{name: () for name in APPENDED if "--" + name.replace("_", "-") in given})


def _check_fixed(cfg: Config, saved: Config) -> None:
    """A resumed run keeps what its agent's state means (`AgentDef.fixed`: evosax's strategy)."""
    for name in cfg.agent_def.fixed:
        given, kept = getattr(cfg.agent_config, name), getattr(saved.agent_config, name)
        if given != kept:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag}: {cfg.run.resume} is a run of {flag} {kept}, whose state means that; a resumed "
                             f"run keeps it (start a new run for {flag} {given})")


def _check_agent_flags(argv: list[str], agent: str) -> None:
    """A flag of another agent is an error naming the chosen one, not silently ignored."""
    mine = train_flag_names(agent)
    owners: dict[str, list[str]] = {}
    for other in agents.all_agents().values():
        for flag in flag_names(other.config) - mine:
            owners.setdefault(flag, []).append(other.name)
    for token in argv:
        flag = token.split("=", 1)[0]
        if flag in owners:
            raise UsageError(f"{flag}: --agent {agent} has no such flag (it is {' and '.join(owners[flag])}'s); "
                             f"see python train.py --agent {agent} --help")


def _tyro(cls, argv: list[str], default, prog: str):
    """tyro's parse of `argv` into `cls`; its errors (a multi-line box) as one UsageError line."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            parsed = tyro.cli(cls, args=argv, default=default, prog=prog)
    except SystemExit as exit_:
        text = captured.getvalue()
        if exit_.code in (0, None):
            sys.stderr.write(text)
            raise
        raise UsageError(f"{_tyro_message(text)} (see --help)") from None
    sys.stderr.write(captured.getvalue())
    return parsed


def _tyro_message(text: str) -> str:
    """tyro's parse error as one line: the message inside its box (drawn with box-drawing or
    ASCII characters, wrapped to the terminal's width), without the help text under it."""
    lines = [line.strip(" |+-\u2502\u256d\u256e\u2570\u256f\u2500") for line in text.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return "could not parse the command line"
    body = []
    for line in lines[1:]:
        if line.startswith(("Argument helptext", "For full helptext", "Usage:", "usage:")):
            break
        body.append(line)
    return " ".join(body) or lines[0]  # the box's title ("Value error") says less than its text
