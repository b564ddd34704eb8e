"""Train an agent on an environment in one compiled, donated, on-device program.

    python train.py --env humanoid --num-envs 4096
    python train.py --help          # every flag, with the chosen env's tuned defaults
    python train.py --resume runs/<run>                  # continue from its newest checkpoint
    python train.py --play runs/<run> --video out.mp4    # evaluate its policy, film an episode
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys

from sim.run.config import Config, ConfigError, defaults_for
from sim.run.trainer import DIVERGED, Diverged, train

DESCRIPTION = __doc__.strip().splitlines()[0]


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


def parse_config(argv: list[str]) -> Config:
    """Parses flags on top of the tuned defaults of the chosen --env and --agent (or of the
    run that --resume / --play names); only the chosen agent's flags are accepted."""
    from sim.run.config import from_flags

    default = _default_config(argv)
    _check_agent_flags(argv, default.agent)
    cfg = from_flags(_parse_flags(argv, default))
    if cfg.resume_if_exists and cfg.run_dir and _has_checkpoint(cfg.run_dir):
        cfg = cfg.replace(resume=cfg.run_dir)  # the run there continues, as --resume would
    try:
        return cfg.validate()
    except ConfigError as err:
        raise UsageError(str(err)) from None


def _default_config(argv: list[str]) -> Config:
    import agents

    pre = argparse.ArgumentParser(add_help=False)
    for flag in ("--env", "--agent", "--resume", "--play", "--run-dir"):
        pre.add_argument(flag, default=None)
    pre.add_argument("--resume-if-exists", action="store_true")
    known, _ = pre.parse_known_args(argv)
    if known.agent is not None and known.agent not in agents.names():
        raise UsageError(f"--agent: unknown agent {known.agent!r}; valid agents: {', '.join(agents.names())}")
    source = known.resume or known.play
    if not source and known.resume_if_exists and known.run_dir and _has_checkpoint(known.run_dir):
        source = known.resume = known.run_dir
    if not source:
        return defaults_for(known.env or "cartpole", known.agent or "ppo")
    # A resumed or played run starts from its own saved config; flags given override it.
    from sim.run.checkpoint import CheckpointError, load_run_config

    flag = "--resume" if known.resume else "--play"
    if known.resume and known.run_dir and os.path.abspath(known.run_dir) != os.path.abspath(known.resume):
        raise UsageError("--run-dir: a resumed run continues in its own directory (the --resume one)")
    try:
        default = load_run_config(source)
    except CheckpointError as err:
        raise UsageError(f"{flag}: {err}") from None
    if known.agent is not None and known.agent != default.agent:
        raise UsageError(f"--agent: {source} is a run of --agent {default.agent}; it cannot continue as {known.agent}")
    return default


def _has_checkpoint(run_dir: str) -> bool:
    from sim.run.checkpoint import list_checkpoints

    return bool(list_checkpoints(run_dir))


def _check_agent_flags(argv: list[str], agent: str) -> None:
    """A flag of another agent is an error naming the chosen one, not silently ignored."""
    import agents
    from sim.run.config import flag_names, flags_class

    mine = flag_names(flags_class(agent))
    owners: dict[str, list[str]] = {}
    for other in agents.all_agents().values():
        for flag in flag_names(other.config) - mine:
            owners.setdefault(flag, []).append(other.name)
    for token in argv:
        flag = token.split("=", 1)[0]
        if flag in owners:
            raise UsageError(f"{flag}: --agent {agent} has no such flag (it is {' and '.join(owners[flag])}'s); "
                             f"see python train.py --agent {agent} --help")


def _parse_flags(argv: list[str], default: Config):
    import tyro

    from sim.run.config import flags_class, to_flags

    # tyro reports parse errors in a multi-line box; keep its first two lines as one.
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            flags = tyro.cli(flags_class(default.agent), args=argv, default=to_flags(default), description=DESCRIPTION)
    except SystemExit as exit_:
        text = captured.getvalue()
        if exit_.code in (0, None):
            sys.stderr.write(text)
            raise
        raise UsageError(f"{_tyro_message(text)} (see --help)") from None
    sys.stderr.write(captured.getvalue())
    return flags


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


def _env_table() -> str:
    import envs

    rows = [("env", "family", "actions", "default backend", "backends")]
    for e in envs.describe():
        rows.append((e["name"] + ("" if e["installed"] else " *"), e["family"], e["actions"], e["default_backend"],
                     ", ".join(e["backends"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    for family, (_, hint) in envs.EXTRAS.items():
        if not envs.installed(family):
            lines.append(f"* not installed: {hint}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_config(argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if cfg.list_envs:
        print(_env_table())
        return 0
    if cfg.print_config:
        print(json.dumps(cfg.replace(print_config=False).to_dict(), indent=2))
        return 0
    from sim.core.memory import ResourceError
    from sim.run.checkpoint import CheckpointError
    from sim.run.config import ConfigError
    from sim.run.disk import DISK_ERROR, DiskError, DiskSpaceError
    from sim.run.lock import RunDirBusy
    from sim.run.signals import STOPPED, Stopped
    from sim.run.video import VideoError

    try:
        from sim.run import compile_cache, devices

        devices.initialize(cfg)  # joins a multi-process run; before anything touches a device
        compile_cache.enable(cfg.compile_cache)
        if cfg.play:
            from sim.run.play import play

            play(cfg, cfg.play)
        else:
            train(cfg)
    except (CheckpointError, VideoError, ConfigError, ResourceError, DiskSpaceError, RunDirBusy) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Diverged as err:
        print(f"error: {err}", file=sys.stderr)
        return DIVERGED
    except DiskError as err:
        print(f"error: {err}", file=sys.stderr)
        return DISK_ERROR
    except Stopped as err:
        print(err, flush=True)
        return STOPPED
    return 0


if __name__ == "__main__":
    sys.exit(main())
