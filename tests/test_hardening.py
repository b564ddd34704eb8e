"""A run never loses work silently: divergence stops it, memory is checked before anything
runs, a stalled stage is reported and ended (train.py, sim/core/memory.py, sim/run/watchdog.py)."""

import json
import os
import re
import subprocess
import sys
import types

import pytest

from sim.run.checkpoints import checkpoint
from sim.core import memory
from sim.run.config import flag_of
from sim.run.watchdog import Watchdog
from tests.helpers import small_config
from sim.run.divergence import DIVERGED, Diverged, check_finite
from sim.run.trainer import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_train(*args, timeout=600):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


# ---- divergence ----
def test_a_diverging_run_stops_at_its_first_non_finite_epoch_and_keeps_the_good_checkpoints(tmp_path):
    cfg = small_config("cartpole", checkpoint_every=1)
    train(cfg, run_dir=str(tmp_path), log=lambda *a: None, stop_after=2)
    good = checkpoint.list_checkpoints(str(tmp_path))
    assert [epoch for epoch, _ in good] == [1, 2]
    with pytest.raises(Diverged) as err:  # the same run, resumed with rewards scaled past float32
        train(small_config("cartpole", checkpoint_every=1, resume=str(tmp_path), reward_scaling=1e38),
              log=lambda *a: None)
    message = str(err.value)
    # (here Adam's second-moment estimate overflows first: squared gradients of ~1e38)
    assert re.match(r"diverged: (loss/\w+|agent\.[\w.]+|obs_stats) became NaN or Inf in epoch 3 ", message), message
    assert f"{good[-1][1]}" in message and f"--resume {tmp_path}" in message
    assert checkpoint.list_checkpoints(str(tmp_path)) == good  # nothing saved over the good ones
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2] and all("nonfinite" not in r for r in records)


def test_diverging_off_policy_run_is_one_line_exit_3(tmp_path):
    proc = run_train("--env", "pendulum", "--agent", "sac", "--learning-rate", "1e4", "--total-steps", "2048",
                     "--num-envs", "8", "--min-replay-size", "64", "--epochs", "2", "--num-eval-envs", "2",
                     "--run-dir", str(tmp_path / "run"), "--no-progress")
    assert proc.returncode == DIVERGED == 3, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: diverged:") and "Traceback" not in proc.stderr, lines
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_the_first_quantity_to_go_non_finite_is_named():
    flags = {"obs_stats": -1, "loss/value": 4, "agent.params": 3}
    cfg = small_config("cartpole")
    with pytest.raises(Diverged, match=r"agent.params became NaN or Inf in epoch 7 \(iteration 4 of"):
        check_finite(flags, 7, cfg, "runs/x", None)
    check_finite({"obs_stats": -1, "loss/value": -1}, 1, cfg, "runs/x", None)  # healthy: no error


# ---- memory ----
class FakeCompiled:
    def __init__(self, arguments, outputs, aliased, temps):
        self.analysis = types.SimpleNamespace(argument_size_in_bytes=arguments, output_size_in_bytes=outputs,
                                              alias_size_in_bytes=aliased, temp_size_in_bytes=temps)

    def memory_analysis(self):
        return self.analysis


class FakeDevice:
    def memory_stats(self):
        return {"bytes_limit": 10 * memory.GIB}


def test_memory_check_names_the_biggest_part_and_a_value_that_fits():
    gib = memory.GIB
    state = [memory.Part("the env states", 1 * gib, (("num_envs", 1000),))]
    work = {"epoch": (("num_minibatches", 400), ("batch_size", 8))}
    fits = {"epoch": FakeCompiled(1 * gib, 1 * gib, 1 * gib, 4 * gib), "init": FakeCompiled(0, gib, 0, 0)}
    assert memory.check(fits, state, work, 1, FakeDevice()) == (5 * gib, 10 * gib, "device memory")
    too_big = dict(fits, epoch=FakeCompiled(1 * gib, 1 * gib, 1 * gib, 20 * gib))
    with pytest.raises(memory.ResourceError) as err:
        memory.check(too_big, state, work, 1, FakeDevice(), named=flag_of)
    message = str(err.value)
    assert "needs 21.00 GiB" in message and "epoch program" in message and "9.00 GiB" in message, message
    suggested = int(re.search(r"--num-minibatches \(400 now; about (\d+) fits\)", message).group(1))
    assert "or --batch-size" in message
    # the epoch's working memory scales with num-minibatches: the suggestion fits, one more does not
    scaled = dict(fits, epoch=FakeCompiled(1 * gib, 1 * gib, 1 * gib, int(20 * gib * suggested / 400)))
    memory.check(scaled, state, work, 1, FakeDevice())
    # on a CPU host every device's footprint comes out of the same RAM
    with pytest.raises(memory.ResourceError, match="per device x 2 devices"):
        memory.check(dict(fits, epoch=FakeCompiled(1 * gib, 1 * gib, 1 * gib, 4 * gib)), state, work, 2, FakeDevice())


def test_a_run_too_big_for_memory_is_refused_before_it_runs(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_train("--env", "cartpole", "--agent", "ppo", "--num-envs", "2", "--num-minibatches", "1000003",
                     "--run-dir", str(run_dir))
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("error: the run needs") and "--num-minibatches (1,000,003 now; about" in lines[0]
    assert not run_dir.exists()  # nothing written, nothing run


def test_out_of_memory_at_run_time_is_one_line():
    cfg = small_config("cartpole")
    err = RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 1222755672088 bytes.\nmore detail")
    found = memory.out_of_memory(err, "epoch 3", ("num_envs", "num_eval_envs", *cfg.loop.work_sizes), flag_of)
    assert isinstance(found, memory.ResourceError) and "\n" not in str(found)
    assert "while epoch 3 (Out of memory allocating 1222755672088 bytes.)" in str(found) and "--num-envs" in str(found)
    assert memory.out_of_memory(ValueError("something else"), "epoch 3", ("num_envs",), flag_of) is None


# ---- stalls ----
def test_a_stage_without_cpu_progress_is_ended_with_its_stacks(tmp_path):
    logged, stalled = [], []
    dog = Watchdog(logged.append, stall_timeout=60, stacks_path=str(tmp_path / "stacks.txt"), poll=3600,
                   on_stall=lambda: stalled.append(True))
    try:
        with dog.stage("epoch 5", expected=40):
            start = dog.current.started
            cpu = dog.current.cpu
            dog.check(now=start + 30, cpu=cpu + 20)  # busy and on time: nothing to say
            assert not logged and not stalled
            dog.check(now=start + 50, cpu=cpu + 40)  # busy but late: reported, not ended
            assert len(logged) == 1 and "epoch 5: still running after 50s (expected about 40s)" in logged[0]
            assert "waiting in" in logged[0] and not stalled
            dog.check(now=start + 80, cpu=cpu + 40)  # idle 30s: not yet
            assert not stalled
            dog.check(now=start + 115, cpu=cpu + 40)  # idle 65s: stalled
        assert stalled == [True]
        assert "test_a_stage_without_cpu_progress" in (tmp_path / "stacks.txt").read_text()
    finally:
        dog.close()


def test_a_run_without_matplotlib_ends_whole_and_says_why_it_drew_no_curve(tmp_path, monkeypatch):
    """matplotlib is a dependency, but a hand-made install (a lent accelerator's) can lack it:
    the run's end then says so in a line instead of a traceback after the last checkpoint."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    lines = []
    record = train(small_config("cartpole", "ppo", epochs=1), run_dir=str(tmp_path / "run"), log=lines.append)
    assert record["epoch"] == 1 and (tmp_path / "run" / "summary.json").exists()
    assert not (tmp_path / "run" / "curve.png").exists()
    assert any(line.startswith("curve.png not drawn (") and "pip install matplotlib" in line for line in lines), lines
