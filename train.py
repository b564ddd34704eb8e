"""Train an agent on an environment in one compiled, donated, on-device program.

    python train.py --env humanoid --num-envs 4096
    python train.py --help                               # every flag, with the chosen env's tuned defaults
    python train.py --resume runs/<run>                  # continue from its newest checkpoint
    python train.py play runs/<run> --video out.mp4      # evaluate its policy, film an episode
    python train.py export runs/<run> policy.onnx        # write the policy for a robot
"""

from __future__ import annotations

import json
import sys

import envs
from sim.core.memory import ResourceError
from sim.run import compile_cache, devices
from sim.run.checkpoints.checkpoint import CheckpointError
from sim.run.cli import UsageError, parse, parse_config  # noqa: F401  (parse_config: the API of tests and benchmarks)
from sim.run.commands import ExportCommand, PlayCommand
from sim.run.config import ConfigError
from sim.run.disk import DISK_ERROR, DiskError, DiskSpaceError
from sim.run.lock import RunDirBusy
from sim.run.policy.play import export, play
from sim.run.signals import STOPPED, Stopped
from sim.run.trainer import DIVERGED, Diverged, train
from sim.run.policy.video import VideoError


def env_table() -> str:
    """`--list-envs`: every env with its family, action space, backends and whether it has a
    domain randomiser of its own (--domain-randomization)."""
    rows = [("env", "family", "actions", "default backend", "backends", "own randomiser")]
    for e in envs.describe():
        rows.append((e["name"] + ("" if e["installed"] else " *"), e["family"], e["actions"], e["default_backend"],
                     ", ".join(e["backends"]), "yes" if e["domain_randomizer"] else ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    for family, (_, hint) in envs.EXTRAS.items():
        if not envs.installed(family):
            lines.append(f"* not installed: {hint}")
    return "\n".join(lines)


def run(command) -> None:
    """Hands a parsed command over: play, export, or train (the default)."""
    if isinstance(command, (PlayCommand, ExportCommand)):
        compile_cache.enable(command.compile_cache)
        (play if isinstance(command, PlayCommand) else export)(command)
        return
    cfg = command.config
    devices.initialize(cfg)  # joins a multi-process run; before anything touches a device
    compile_cache.enable(cfg.run.compile_cache)
    train(cfg)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        command = parse(argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if getattr(command, "list_envs", False):
        print(env_table())
        return 0
    if getattr(command, "print_config", False):
        print(json.dumps(command.config.to_dict(), indent=2))
        return 0
    try:
        run(command)
    except (CheckpointError, VideoError, ConfigError, ResourceError, DiskSpaceError, RunDirBusy,
            envs.AssetError) as err:
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
