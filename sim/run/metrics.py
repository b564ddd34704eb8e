"""Host-side sinks for the few scalars each epoch returns: JSONL file, progress bar, W&B,
TensorBoard."""

from __future__ import annotations

import json
import math
import netrc
import os
import secrets
import sys
import time
from urllib.parse import urlparse

from sim.run import disk


def to_python(metrics: dict) -> dict:
    """Device scalars -> plain floats/ints, NaN -> None (valid JSON); a population's [M]
    arrays -> lists of those."""

    def plain(value):
        if getattr(value, "ndim", 0) > 0:
            return [plain(v) for v in value]
        value = value.item() if hasattr(value, "item") else value
        return None if isinstance(value, float) and not math.isfinite(value) else value

    return {key: plain(value) for key, value in metrics.items()}


class JsonlSink:
    """Appends one JSON object per epoch to `<run_dir>/metrics.jsonl`, flushed each time."""

    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    def write(self, record: dict) -> None:
        """Appends the record's line; raises disk.DiskError (and leaves no torn line) when
        the disk refuses it."""
        disk.append_line(self.path, json.dumps(record) + "\n")

    def truncate(self, epochs: int) -> None:
        """Keeps the records of epochs 1..epochs (a resumed run drops those past its checkpoint,
        and a line torn by a kill); rewritten beside the file, then renamed over it."""
        if not os.path.exists(self.path):
            return
        kept = []
        with open(self.path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("epoch", 0) <= epochs:
                    kept.append(json.dumps(record) + "\n")
        disk.write_atomic(self.path, "".join(kept))


def _fmt_time(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressBar:
    """A one-line bar on stderr: env steps, steps/s, latest eval return, ETA.

    On a terminal it redraws in place; otherwise it prints one line per update.
    """

    def __init__(self, total_steps: int, enabled: bool = True, stream=None):
        self.total = total_steps
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.perf_counter()

    def update(self, steps: int, sps: float, eval_return: float | None, train_seconds: float) -> None:
        if not self.enabled:
            return
        frac = min(1.0, steps / max(1, self.total))
        width = 24
        filled = int(frac * width)
        bar = "#" * filled + "-" * (width - filled)
        rate = steps / train_seconds if train_seconds > 0 else 0.0
        eta = (self.total - steps) / rate if rate > 0 else float("nan")
        ev = "-" if eval_return is None else f"{eval_return:.1f}"
        line = (f"[{bar}] {100 * frac:3.0f}% {steps:,}/{self.total:,} steps | {sps:,.0f} steps/s | "
                f"eval {ev} | ETA {_fmt_time(eta) if math.isfinite(eta) else '?'}")
        if self.tty:
            self.stream.write("\r" + line)
            if steps >= self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


# ---- Weights & Biases ----
# W&B names of a record's plain keys; keys with a namespace ("loss/", "train/", "eval/",
# "perf/") keep theirs. env_steps is the x-axis of every chart.
WANDB_KEYS = {"env_steps": "env_steps", "epoch": "train/epoch", "sps": "perf/steps_per_s",
              "train_s": "perf/train_s", "wall_s": "perf/wall_s"}


def wandb_key(key: str) -> str:
    """The W&B name of a metrics.jsonl key (plain keys not listed go under perf/)."""
    return key if "/" in key else WANDB_KEYS.get(key, f"perf/{key}")


def wandb_credentials() -> bool:
    """Whether W&B can authenticate: WANDB_API_KEY, an identity token file, or a netrc entry
    for the W&B host (what `wandb login` writes). Looks only; never prompts."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _identity(path: str, name: str, member: int | None) -> dict:
    """The W&B id and name of a run (or of a population's member), kept in `path` so a resumed
    run continues the same W&B run: {"id", "name"}, or {"members": {"<k>": {"id", "name"}}}."""
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        saved = {}
    ident = saved if member is None and "id" in saved else saved.get("members", {}).get(str(member))
    if ident is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        suffix = "" if member is None else f"__m{member}"
        ident = {"id": secrets.token_hex(4), "name": f"{name}__{stamp}{suffix}"}
        if member is None:
            saved = ident
        else:
            saved.setdefault("members", {})[str(member)] = ident
        disk.write_atomic(path, json.dumps(saved))
    return ident


class WandbSink:
    """Logs the config once and each epoch's record to W&B, from the host between epochs.

    `wandb` is imported here, so runs without --wandb never import it. The run's id and name
    (`<env>__<agent>__<seed>__<time>`, a member's with `__m<k>`) are kept in
    `<run_dir>/wandb_run.json`, so a resumed run (--resume) continues the same W&B run(s).
    Files go under `<run_dir>/wandb/`.
    """

    def __init__(self, cfg, run_dir: str, config: dict, log=print, member: int | None = None,
                 group: str | None = None):
        import wandb  # an optional import: runs without --wandb never pay for it

        self.log = log
        mode = cfg.logging.wandb_mode or os.environ.get("WANDB_MODE") or "online"
        if mode == "online" and not wandb_credentials():
            if member in (None, 0):
                log("wandb: no API key found (WANDB_API_KEY or `wandb login`): logging offline instead")
            mode = "offline"
        ident = _identity(os.path.join(run_dir, "wandb_run.json"), cfg.name, member)
        self.mode = mode
        # A population's members are runs of one process, side by side.
        extra = {} if member is None else {"reinit": "create_new"}
        logging = cfg.logging
        self.run = wandb.init(project=logging.wandb_project, entity=logging.wandb_entity,
                              group=group or logging.wandb_group, tags=list(logging.wandb_tags) or None,
                              name=ident["name"], id=ident["id"],
                              resume="allow", dir=run_dir, mode=mode, config=config, **extra)
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")

    def write(self, record: dict) -> None:
        self.run.log({wandb_key(k): v for k, v in record.items()}, step=int(record["epoch"]))

    def close(self, exit_code: int = 0) -> None:
        offline_dir = os.path.dirname(self.run.dir) if self.mode == "offline" else None
        self.run.finish(exit_code=exit_code)
        if offline_dir:
            self.log(f"wandb: offline run saved; upload it with: wandb sync {offline_dir}")


class TensorboardSink:
    """Writes each epoch's scalars (W&B's names, `wandb_key`) as TensorBoard events under
    `directory`, x-axis env steps; a resumed run appends to the same directory. `tensorboardX`
    is imported here, so runs without --tensorboard never import it."""

    def __init__(self, directory: str):
        from tensorboardX import SummaryWriter  # an optional import: the tensorboard extra

        self.directory = directory
        try:  # (it creates the directory and opens its event file now)
            self.writer = SummaryWriter(logdir=directory)
        except OSError as err:  # a folder the disk refuses (not writable, a file in its place): one line, exit 5
            raise disk.error(err, directory) from None

    def write(self, record: dict) -> None:
        step = int(record["env_steps"])
        try:
            for key, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "env_steps":
                    self.writer.add_scalar(wandb_key(key), value, global_step=step)
            self.writer.flush()
        except OSError as err:
            raise disk.error(err, self.directory) from None

    def close(self, exit_code: int = 0) -> None:
        self.writer.close()
