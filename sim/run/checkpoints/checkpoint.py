"""Atomic checkpoints of the whole `TrainState`, restored bit for bit.

Layout under a run directory::

    checkpoints/epoch_000004/state.bin   every leaf's raw bytes, one after the other
    checkpoints/epoch_000004/meta.json   format, epoch, env steps, config, and per leaf: its
                                         path in the pytree, dtype, shape, byte offset, CRC-32
    checkpoints/.tmp-*                   a write in progress (or killed): never read

A checkpoint is written into a fresh `.tmp-*` folder, fsynced, then renamed into place in
one `os.replace` (atomic on POSIX), so a run killed at any point (kill -9 included) leaves
every earlier checkpoint whole; `latest` only ever sees complete ones. The newest `keep`
are kept. A write the disk refuses (no space, an I/O error) removes its `.tmp-*` folder and
raises `disk.DiskError`; the checkpoints before it stay as they were. A resume whose newest
checkpoint turns out corrupt falls back to the one before it (`resume_state`).

Leaves are stored as raw bytes and viewed back as their recorded dtype, so every dtype
(uint32 PRNG keys, int32 counters, bfloat16) comes back exactly, with no pickling; plain
bytes also stream at disk speed (a zip/npz container computes its own CRC and copies again,
about 4x slower for a GiB-sized replay buffer).
The CRC of each leaf catches a corrupted file; the recorded paths, shapes and dtypes catch
a checkpoint from another env or config before anything is compiled.

A resume (`sim/run/checkpoints/resume.py`) reads them back into a run's state.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import zlib
from typing import Any, Iterable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

import agents
from sim.core.memory import host_available
from sim.run import disk
from sim.run.config import Config

FORMAT = 3  # 3: the loop owns its state (`.loop`), optimizers are optax chains with injected hyper-parameters
OLD_FORMATS = {1: "before agents kept their hyper-parameters in their state",
               2: "before the loop owned its state and optimizers injected their hyper-parameters"}
KEEP = 2
ROOT = "checkpoints"
HP = ".agent.hp."  # leaf paths of the agent's hyper-parameters: a resume takes them from its config
ENV_PARAMS = ".env.params"  # the envs' dynamics parameters: absent from checkpoints written before they were traced
_NAME = re.compile(r"^epoch_(\d+)$")
# Config fields that name what the state is of: a checkpoint never crosses these.
IDENTITY = ("env", "agent", "backend")
# Config fields of the run's bookkeeping, not of its state: free to change on resume.
RUN_FIELDS = ("run_dir", "resume", "resume_if_exists", "overwrite", "progress", "compile_cache", "stall_timeout",
              "checkpoint_every", "keep_checkpoints", "stop_grace", "checkpoint_buffer", "checkpoint_envs", "wandb", "wandb_project",
              "wandb_entity", "wandb_group", "wandb_tags", "wandb_mode", "tensorboard")


class CheckpointError(Exception):
    """A missing, corrupt or mismatching checkpoint: printed as one line, exit code 2."""


class CorruptCheckpoint(CheckpointError):
    """A checkpoint whose files are unreadable, torn or fail their checksums."""


# ---- locating ----
def checkpoint_root(run_dir: str) -> str:
    return os.path.join(run_dir, ROOT)


def list_checkpoints(run_dir: str) -> list[tuple[int, str]]:
    """Complete checkpoints of a run as (epoch, path), oldest first."""
    root = checkpoint_root(run_dir)
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        m = _NAME.match(name)
        if m and os.path.isfile(os.path.join(root, name, "meta.json")):
            found.append((int(m.group(1)), os.path.join(root, name)))
    return sorted(found)


def latest(run_dir: str) -> str | None:
    """Path of the newest complete checkpoint of a run, or None."""
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def load_run_config(run_dir: str):
    """The Config saved in `<run_dir>/config.json` (where-to-run fields, and how the run was
    launched, dropped: a run started with --resume-if-exists exports and plays like any other);
    raises CheckpointError when missing or unreadable."""
    path = os.path.join(run_dir, "config.json")
    try:
        with open(path) as f:
            saved = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{run_dir} is not a run directory (no config.json)") from None
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path} is unreadable: {err}") from None
    try:
        cfg = Config.from_dict({k: v for k, v in saved.items() if k not in ("run_dir", "resume", "resume_if_exists", "overwrite")})
    except ValueError as err:  # an agent this version does not have
        raise CheckpointError(f"{path}: {err}") from None
    # The device count the run trained on, where it was left to the default (which depends on
    # the machine): a resume continues on as many devices, whatever this machine's default.
    devices = (saved.get("derived") or {}).get("devices")
    return cfg.replace(devices=devices) if cfg.hosts.devices is None and devices else cfg


# ---- writing ----
def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def flatten(state) -> list[tuple[str, Any]]:
    return [(jax.tree_util.keystr(path), leaf) for path, leaf in jax.tree.flatten_with_path(state)[0]]


def _nbytes(leaf) -> int:
    return int(leaf.size * np.dtype(leaf.dtype).itemsize)


def droppable_bytes(state, droppable: frozenset = frozenset()) -> int:
    """Bytes of the leaves of `state` (arrays or shapes) at the paths `droppable` (what the
    loop lets a checkpoint leave out: a replay ring)."""
    return sum(_nbytes(leaf) for path, leaf in flatten(state) if path in droppable)


def state_bytes(state, leave_out: frozenset = frozenset()) -> int:
    """Bytes of a checkpoint of `state` (arrays or shapes) without the leaves at `leave_out`."""
    return sum(_nbytes(leaf) for path, leaf in flatten(state) if path not in leave_out)


def droppable_fits(state, droppable: frozenset, run_dir: str, keep: int = KEEP) -> bool:
    """Whether checkpoints with their droppable part fit: `keep` of them and the one being
    written within the free disk space of the run directory, and that part within half the
    available host memory (a save stages it on the host)."""
    nbytes = droppable_bytes(state, droppable)
    if nbytes == 0:
        return True
    memory = host_available()
    return (keep + 1) * state_bytes(state) <= disk.free_bytes(run_dir) and (memory is None or nbytes <= 0.5 * memory)


def save(run_dir: str, state, *, epoch: int, env_steps: int, config: dict, leave_out: frozenset = frozenset(),
         extra: dict | None = None, keep: int = KEEP) -> str:
    """Writes `state` (a TrainState of device arrays, NOT a donated one) as the checkpoint of
    `epoch`, atomically; returns its path. `config`: the run's config as a dict (stored to
    detect mismatches on restore). `leave_out`: leaf paths not written (a replay ring the loop
    lets a checkpoint drop; a resume rebuilds them). `extra`: small JSON-able host values kept
    with it (e.g. training seconds so far)."""
    leaves = [(path, leaf) for path, leaf in flatten(state) if path not in leave_out]
    # Every process takes part in gathering the shards it holds; process 0 alone writes.
    host = [_to_host(leaf) for _, leaf in leaves]
    root = checkpoint_root(run_dir)
    final = os.path.join(root, f"epoch_{epoch:06d}")
    if jax.process_index() != 0:
        return final
    with disk.writing(root):
        os.makedirs(root, exist_ok=True)
    for name in os.listdir(root):  # writes that a killed run left behind
        if name.startswith(".tmp-"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    raws, manifest, offset = [], [], 0
    for (path, _), value in zip(leaves, host):
        value = np.asarray(value)  # (not ascontiguousarray: it turns a scalar into shape [1])
        value = value if value.flags.c_contiguous else value.copy(order="C")
        raw = value.reshape(-1).view(np.uint8)
        raws.append(raw)
        manifest.append({"path": path, "dtype": value.dtype.name, "shape": list(value.shape), "offset": offset,
                         "nbytes": int(raw.size), "crc32": zlib.crc32(raw)})
        offset += raw.size
    meta = {"format": FORMAT, "epoch": int(epoch), "env_steps": int(env_steps), "left_out": sorted(leave_out),
            "written": time.strftime("%Y-%m-%dT%H:%M:%S"), "config": config, "leaves": manifest,
            "extra": extra or {}}
    tmp = os.path.join(root, f".tmp-{epoch:06d}-{os.getpid()}")
    # Whatever stops the write (a full disk, an I/O error, an exception), its folder goes and
    # the checkpoints before it stay as they were.
    with disk.writing(final, offset, cleanup=(tmp,)):
        os.makedirs(tmp)
        with open(os.path.join(tmp, "state.bin"), "wb") as f:
            for raw in raws:
                f.write(memoryview(raw))
            f.flush()
            os.fsync(f.fileno())
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        _fsync(tmp)
        if os.path.exists(final):  # the same epoch again (e.g. a resumed run that trained nothing)
            old = os.path.join(root, f".tmp-old-{epoch:06d}-{os.getpid()}")
            os.replace(final, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, final)
    _fsync(root)
    stale = list_checkpoints(run_dir)[:-keep] if keep > 0 else []
    for _, path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return final


def _to_host(leaf) -> np.ndarray:
    """A global array as one numpy array, also when its shards live in other processes."""
    if getattr(leaf, "is_fully_addressable", True):
        return np.asarray(jax.device_get(leaf))
    return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))


def place(value: np.ndarray, sharding):
    """Puts a host array onto `sharding`; each process fills only the shards it holds."""
    if sharding is None:
        return jax.device_put(value)
    if getattr(sharding, "is_fully_addressable", True):
        return jax.device_put(value, sharding)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


# ---- reading ----
def read_meta(path: str) -> dict:
    try:
        with open(os.path.join(path, "meta.json")) as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{path} is not a checkpoint (no meta.json)") from None
    except (OSError, ValueError) as err:
        raise CorruptCheckpoint(f"checkpoint {path} is corrupt: meta.json unreadable ({err})") from None
    old = meta.get("format") if isinstance(meta, dict) else None
    if old in OLD_FORMATS:
        raise CheckpointError(f"checkpoint {path} was written by an earlier version of this trainer (format {old}, "
                              f"{OLD_FORMATS[old]}); this one reads format {FORMAT}: start a new run, or continue that "
                              f"one with the version that wrote it")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or "leaves" not in meta:
        raise CorruptCheckpoint(f"checkpoint {path} is corrupt or of an unknown format (meta.json format "
                                f"{meta.get('format') if isinstance(meta, dict) else '?'}, expected {FORMAT})")
    return meta


def _describe(entry: dict | None) -> str:
    return "absent" if entry is None else f"{entry['dtype']}{entry['shape']}"


def check_identity(path: str, meta: dict, config: dict) -> None:
    """Raises CheckpointError unless the checkpoint is of this env, agent and backend, and of
    the agent's settings that say what its state means (`AgentDef.fixed`)."""
    saved = meta.get("config", {})
    for name in IDENTITY:
        if saved.get(name) != config.get(name):
            raise CheckpointError(
                f"checkpoint {path} is from another run: {name} {saved.get(name)!r} there, {config.get(name)!r} here")
    fixed = agents.get(config["agent"]).fixed if config.get("agent") in agents.names() else ()
    for name in fixed:
        if name in saved and saved[name] != config.get(name):
            flag = "--" + name.replace("_", "-")
            raise CheckpointError(f"{flag}: checkpoint {path} is of a run of {flag} {saved[name]}, whose state means "
                                  f"that; it cannot continue as {flag} {config.get(name)}")


def stale(meta: dict, template, droppable: frozenset) -> frozenset:
    """The paths of a droppable part (a replay ring) that the checkpoint holds in another
    layout than `template`'s (written by an earlier version: the ring's arrays were split
    since), its saved leaves' paths among them; empty if it matches or was left out. A resume
    treats them as left out (it refills the ring)."""
    if not droppable:
        return frozenset()
    here = {p: (np.dtype(x.dtype).name, list(x.shape)) for p, x in flatten(template)}
    there = {e["path"]: (e["dtype"], e["shape"]) for e in meta["leaves"]}
    containers = {p.rsplit("[", 1)[0] for p in droppable}
    saved = {p for p in there if p.rsplit("[", 1)[0] in containers}
    if not saved or all(there.get(p) == here.get(p) for p in droppable | saved):
        return frozenset()
    return frozenset(droppable | saved)


def check_compatible(path: str, meta: dict, template, config: dict, prefixes: tuple[str, ...] | None = None,
                     ignore: frozenset = frozenset()) -> None:
    """Raises CheckpointError unless the checkpoint holds a state of this env/agent and of the
    template's exact structure, shapes and dtypes (the leaves it says it left out may be absent).
    prefixes: compare only the leaves whose path starts with one of these; ignore: leaves to
    treat as left out (`stale`)."""
    check_identity(path, meta, config)
    saved = meta.get("config", {})
    here = {p: {"dtype": np.dtype(x.dtype).name, "shape": list(x.shape)} for p, x in flatten(template)}
    there = {e["path"]: e for e in meta["leaves"]}
    left_out = set(meta.get("left_out", ()))
    diffs = []
    for p in list(here) + [p for p in there if p not in here]:
        if prefixes is not None and not p.startswith(prefixes):
            continue
        if (p in left_out and p not in there) or p in ignore:
            continue
        if p.startswith(HP) and p not in there:  # the command line's values replace them (`current_hp`)
            continue
        if p.startswith(ENV_PARAMS) and p not in there:  # a resume starts them at the env's defaults
            continue
        a, b = there.get(p), here.get(p)
        if a is None or b is None or (a["dtype"], list(a["shape"])) != (b["dtype"], b["shape"]):
            diffs.append(f"{p} is {_describe(a)} there, {_describe(b)} here")
    if diffs:
        changed = [f"{k} {saved[k]!r} -> {config[k]!r}" for k in config
                   if k in saved and k not in RUN_FIELDS and saved[k] != config[k]]
        more = f" (+{len(diffs) - 2} more)" if len(diffs) > 2 else ""
        why = f"; config differs in: {', '.join(changed)}" if changed else ""
        raise CheckpointError(f"checkpoint {path} does not match this config: {'; '.join(diffs[:2])}{more}{why}")


def load_leaves(path: str, meta: dict, prefixes: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """{leaf path: numpy array} of the leaves whose path starts with one of `prefixes` (all
    when None), each checked against its recorded dtype, shape and CRC-32."""
    prefixes = tuple(prefixes) if prefixes is not None else None
    out = {}
    try:
        with open(os.path.join(path, "state.bin"), "rb") as f:
            for entry in meta["leaves"]:
                if prefixes is not None and not entry["path"].startswith(prefixes):
                    continue
                dtype = np.dtype(_dtype(entry["dtype"]))
                nbytes = dtype.itemsize * int(np.prod(entry["shape"], dtype=np.int64))
                if nbytes != entry["nbytes"]:
                    raise ValueError(f"leaf {entry['path']} records {entry['nbytes']} bytes for "
                                     f"{entry['dtype']}{entry['shape']}")
                raw = np.empty(nbytes, np.uint8)
                f.seek(entry["offset"])
                got = f.readinto(memoryview(raw))
                if got != nbytes:
                    raise ValueError(f"state.bin ends inside leaf {entry['path']} ({got} of {nbytes} bytes)")
                if zlib.crc32(raw) != entry["crc32"]:
                    raise ValueError(f"leaf {entry['path']} fails its checksum")
                out[entry["path"]] = raw.view(dtype).reshape(entry["shape"])
    except FileNotFoundError:
        raise CorruptCheckpoint(f"checkpoint {path} is corrupt: state.bin is missing") from None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CorruptCheckpoint(f"checkpoint {path} is corrupt: {err}") from None
    return out


def _dtype(name: str):
    try:
        return np.dtype(name)
    except TypeError:  # bfloat16 & co. live in ml_dtypes, which jax registers
        return jnp.dtype(name)



def restore(path: str, template, config: dict, parts: Iterable[str] | None = None, ignore: frozenset = frozenset()):
    """Restores a checkpoint into the structure of `template` and returns (state, meta).

    template: a TrainState of arrays or `jax.ShapeDtypeStruct`s (e.g. `jax.eval_shape` of
    `engine.init`). Each restored leaf is placed with the template leaf's sharding when it
    has one (else on the default device). A leaf the checkpoint lacks (one it left out, or a
    field outside `parts`) keeps the template's value.
    parts: top-level TrainState fields to load, e.g. ("agent", "obs_stats") to evaluate a
    policy without reading a large replay buffer (None: all). ignore: leaves to treat as left
    out (`stale`).
    """
    meta = read_meta(path)
    prefixes = None if parts is None else tuple(f".{p}" for p in parts)
    check_compatible(path, meta, template, config, prefixes, ignore)
    values = {p: v for p, v in load_leaves(path, meta, prefixes).items() if p not in ignore}
    flat, treedef = jax.tree.flatten_with_path(template)
    leaves = []
    for key_path, leaf in flat:
        name = jax.tree_util.keystr(key_path)
        if name in values:
            leaves.append(place(values[name], getattr(leaf, "sharding", None)))
        else:
            leaves.append(leaf)
    return jax.tree.unflatten(treedef, leaves), meta


def config_dict(cfg) -> dict:
    """A Config as the plain flat JSON dict stored with checkpoints (tuples as lists)."""
    return cfg.to_dict()
