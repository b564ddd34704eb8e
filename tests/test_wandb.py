"""--wandb: what an offline W&B run records equals metrics.jsonl, read back from its file."""

import glob
import json
import os
import re
import struct
import subprocess
import sys
import zlib

import pytest

from sim.run.metrics import wandb_key
from tests.helpers import needs, small_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BLOCK = 32 * 1024  # LevelDB-style log: records never straddle a block's last 6 bytes
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def read_wandb_records(path: str) -> list:
    """The `wandb_internal_pb2.Record`s of a `run-*.wandb` file.

    Format: a 7-byte header (b":W&B", magic 0xBEE1 little-endian, version 0), then 32 KiB
    blocks of chunks, each with a 7-byte header (crc32 of type byte + payload, uint32 LE;
    payload length, uint16 LE; type: full/first/middle/last); a record's payload is the
    concatenation of its chunks. The header counts towards the first block.
    """
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B" and struct.unpack("<HB", data[4:7]) == (0xBEE1, 0), data[:7]
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # zero padding at a block's end
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:  # preallocated zeros past the last record
            break
        payload = data[pos + 7:pos + 7 + length]
        assert zlib.crc32(bytes([kind]) + payload) == crc, f"bad checksum at byte {pos}"
        pos += 7 + length
        pending = payload if kind in (_FULL, _FIRST) else pending + payload
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _items(items) -> dict:
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}


def _run_file(run_dir) -> str:
    files = glob.glob(os.path.join(str(run_dir), "wandb", "offline-run-*", "run-*.wandb"))
    assert len(files) == 1, files
    return files[0]


def _train(cfg, run_dir, messages):
    from sim.run.trainer import train

    return train(cfg, run_dir=str(run_dir), log=messages.append)


def test_offline_history_equals_metrics_jsonl(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = small_config("cartpole", epochs=4, eval_every=2, wandb=True, wandb_project="tests", wandb_group="g",
                       wandb_tags=("a", "b"))
    messages = []
    _train(cfg, tmp_path, messages)
    records = read_wandb_records(_run_file(tmp_path))
    kinds = [r.WhichOneof("record_type") for r in records]

    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert re.fullmatch(r"cartpole__ppo__0__\d{8}-\d{6}", run.display_name), run.display_name
    assert run.project == "tests" and run.run_group == "g" and list(run.tags) == ["a", "b"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["env"] == "cartpole" and config["num_envs"] == cfg.num_envs and config["epochs"] == 4
    # logged once: no later config record changes it
    assert kinds.count("config") <= 1

    metrics = [r.metric for r in records if r.WhichOneof("record_type") == "metric"]
    assert any(m.glob_name == "*" and m.step_metric == "env_steps" for m in metrics)  # env steps: the x-axis

    history = [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    jsonl = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(history) == len(jsonl) == cfg.num_epochs == 4  # once per epoch
    for row, record in zip(history, jsonl):
        logged = {k: v for k, v in row.items() if not k.startswith("_")}
        assert logged == {wandb_key(k): v for k, v in record.items()}
        assert row["_step"] == record["epoch"]
        assert all(k == "env_steps" or k.split("/")[0] in ("train", "loss", "eval", "perf") for k in logged)
        assert {"perf/steps_per_s", "perf/compile_s", "loss/total", "train/episode_return"} <= set(logged)
    assert "eval/episode_return" in history[1] and "eval/episode_return" not in history[0]
    assert kinds[-1] == "exit" and records[-1].exit.exit_code == 0
    assert any("wandb sync" in m for m in messages)


def test_no_api_key_falls_back_to_offline(tmp_path, monkeypatch):
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = small_config("cartpole", epochs=1, wandb=True, wandb_mode="online")
    messages = []
    _train(cfg, tmp_path / "run", messages)
    assert any("no API key" in m and "offline" in m for m in messages), messages
    sync = [m for m in messages if "wandb sync" in m]
    assert sync and os.path.isdir(sync[0].split("wandb sync ", 1)[1])
    history = [r for r in read_wandb_records(_run_file(tmp_path / "run")) if r.WhichOneof("record_type") == "history"]
    assert len(history) == 1


def test_wandb_is_imported_only_when_enabled(tmp_path):
    code = ("import sys, train; rc = train.main(sys.argv[1:]); "
            "assert 'wandb' not in sys.modules, 'wandb imported'; sys.exit(rc)")
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=os.path.join(ROOT, ".jax_cache"))
    proc = subprocess.run([sys.executable, "-c", code, "--total-steps", "256", "--num-envs", "8", "--batch-size", "8",
                           "--num-minibatches", "2", "--unroll-length", "16", "--epochs", "1", "--num-eval-envs", "2",
                           "--no-progress", "--run-dir", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("key, expected", [("sps", "perf/steps_per_s"), ("epoch", "train/epoch"),
                                           ("env_steps", "env_steps"), ("loss/total", "loss/total"),
                                           ("wall_s", "perf/wall_s")])
def test_keys_are_namespaced(key, expected):
    assert wandb_key(key) == expected


def test_a_population_logs_one_run_per_member_in_one_group(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = small_config("cartpole", epochs=2, num_seeds=2, sweep=("learning-rate=1e-3,3e-4",), wandb=True,
                       wandb_project="tests")
    messages = []
    _train(cfg, tmp_path / "pop", messages)
    files = glob.glob(os.path.join(str(tmp_path / "pop"), "wandb", "offline-run-*", "run-*.wandb"))
    assert len(files) == 4, files
    jsonl = [json.loads(line) for line in (tmp_path / "pop" / "metrics.jsonl").read_text().splitlines()]
    seen = set()
    for path in files:
        records = read_wandb_records(path)
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        config = {item.key: json.loads(item.value_json) for item in run.config.update}
        member = config["member"]
        seen.add(member)
        assert run.run_group == "pop" and run.display_name.endswith(f"__m{member}")
        assert (config["seed"], config["learning_rate"]) == ([0, 1, 0, 1][member], [1e-3, 1e-3, 3e-4, 3e-4][member])
        assert config["sweep"] == {"learning-rate": config["learning_rate"]} and config["num_seeds"] == 1
        history = [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
        own = [r for r in jsonl if r.get("member") == member]
        assert len(history) == len(own) == cfg.num_epochs
        for row, record in zip(history, own):
            assert row["eval/episode_return"] == record["eval/episode_return"]
            assert row["env_steps"] == record["env_steps"]
    assert seen == {0, 1, 2, 3}


def test_pbt_logs_each_members_values_over_time(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = small_config("cartpole", epochs=3, num_seeds=2, sweep=("learning-rate=1e-3,3e-4",), wandb=True,
                       wandb_project="tests", pbt=True, pbt_every=1)
    _train(cfg, tmp_path / "pbt", [])
    files = glob.glob(os.path.join(str(tmp_path / "pbt"), "wandb", "offline-run-*", "run-*.wandb"))
    jsonl = [json.loads(line) for line in (tmp_path / "pbt" / "metrics.jsonl").read_text().splitlines()]
    assert len(files) == 4
    for path in files:
        records = read_wandb_records(path)
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        member = json.loads(next(i.value_json for i in run.config.update if i.key == "member"))
        history = [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
        own = [r for r in jsonl if r["member"] == member]
        assert [row["hp/learning_rate"] for row in history] == [r["hp/learning_rate"] for r in own]
    assert len({r["hp/learning_rate"] for r in jsonl}) > 2  # explored beyond the two starting values


def read_tensorboard_scalars(directory) -> dict:
    """{tag: [(step, value)]} of the TensorBoard event files in `directory` (TFRecord framing:
    length, its CRC, an Event proto, its CRC)."""
    from tensorboardX.proto import event_pb2

    out: dict = {}
    for path in sorted(glob.glob(os.path.join(str(directory), "events.out.tfevents.*"))):
        data = open(path, "rb").read()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


@needs("tensorboard")
def test_tensorboard_gets_each_members_metrics_at_its_env_steps(tmp_path):
    """--tensorboard: one TensorBoard run per member, W&B's names, the values of metrics.jsonl
    at each epoch's env steps."""
    cfg = small_config("cartpole", epochs=3, num_seeds=2, tensorboard=True)
    _train(cfg, tmp_path, [])
    lines = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    for member in (0, 1):
        scalars = read_tensorboard_scalars(tmp_path / "tensorboard" / f"member_{member}")
        mine = [r for r in lines if r.get("member") == member]
        assert len(mine) == cfg.num_epochs >= 2
        for key in ("train/episode_return", "eval/episode_return", "sps"):
            want = [(r["env_steps"], r[key]) for r in mine if r.get(key) is not None]
            got = scalars[wandb_key(key)]
            assert [s for s, _ in got] == [s for s, _ in want], key
            assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6), key
