"""Runs that survive a cluster: stop signals (SIGINT, SIGTERM, SIGUSR1), the same command line
to continue a requeued job, corrupt checkpoints, full disks and one writer per run directory
(train.py as a user runs it, in subprocesses; sim/run/signals.py, disk.py, lock.py)."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import train
from sim.run.checkpoints import checkpoint
from sim.run import disk, signals
from sim.run.lock import RunDirBusy, RunLock
from tests.helpers import small_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, JAX_PLATFORMS="cpu")
# A cartpole run of many short epochs (~0.1 s each here): signals land in the middle of it.
TINY = ["--env", "cartpole", "--num-envs", "8", "--batch-size", "8", "--num-minibatches", "2", "--unroll-length", "16",
        "--num-eval-envs", "2", "--no-progress"]
FOREVER = [*TINY, "--total-steps", "100000000", "--epochs", "100000"]


def start(*args):
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)


def finish(proc, timeout=300):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def wait_for_epochs(proc, run_dir, n, timeout=300):
    """Waits until metrics.jsonl holds n lines (n epochs of one run)."""
    metrics = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.time() + timeout
    while not (os.path.exists(metrics) and open(metrics).read().count("\n") >= n):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline, "the run did not reach its epochs in time"
        time.sleep(0.05)


def records(run_dir):
    return [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]


def one_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def last_line(out):
    return [line for line in out.splitlines() if line.strip()][-1]


# ---- stop signals ----
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1], ids=lambda s: s.name)
def test_a_stop_signal_finishes_the_epoch_writes_a_checkpoint_and_exits_for_a_requeue(tmp_path, sig):
    run_dir = str(tmp_path / "run")
    proc = start(*FOREVER, "--run-dir", run_dir)
    wait_for_epochs(proc, run_dir, 2)
    proc.send_signal(sig)
    code, out, err = finish(proc)
    assert code == signals.STOPPED == 75, err[-3000:]
    epochs = [r["epoch"] for r in records(run_dir)]
    assert epochs == list(range(1, len(epochs) + 1))
    meta = checkpoint.read_meta(checkpoint.latest(run_dir))
    assert meta["epoch"] == epochs[-1]  # the checkpoint is of the last epoch logged
    line = last_line(out)
    assert line.startswith(f"stopped by {sig.name} after epoch {epochs[-1]}/") and line.endswith(
        f"continue with: python train.py --resume {run_dir}"), out[-2000:]
    assert "Traceback" not in err and os.path.exists(os.path.join(run_dir, "curve.png"))


def test_a_signal_in_a_long_epoch_stops_at_once_keeping_the_last_checkpoint(tmp_path):
    """An epoch that would outlast --stop-grace is cut: the run exits at once, its last checkpoint
    (and the metrics up to it) kept, the epoch's progress lost."""
    run_dir = str(tmp_path / "run")
    # ~1 s epochs, no evaluation between them: the signal lands inside an epoch.
    proc = start("--env", "cartpole", "--total-steps", "5000000", "--epochs", "20", "--eval-every", "0",
                 "--checkpoint-every", "1", "--stop-grace", "0", "--no-progress", "--run-dir", run_dir)
    wait_for_epochs(proc, run_dir, 1)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == signals.STOPPED, err[-3000:]
    kept = checkpoint.latest(run_dir)
    epoch = checkpoint.read_meta(kept)["epoch"]
    line = last_line(out)
    assert line.startswith(f"stopped by SIGTERM in epoch {epoch + 1} (about ") and line.endswith(
        f"s left, past the 0s of --stop-grace): its last checkpoint, {kept}, is kept; continue with: "
        f"python train.py --resume {run_dir}"), out[-2000:]
    assert [r["epoch"] for r in records(run_dir)] == list(range(1, epoch + 1))
    assert not [n for n in os.listdir(os.path.join(run_dir, "checkpoints")) if n.startswith(".tmp")]


def test_signals_while_a_checkpoint_is_written_let_it_finish(tmp_path):
    """Two SIGTERMs in the middle of writing a checkpoint's bytes: the write completes, the run
    then stops, and the checkpoint reads back whole."""
    run_dir = str(tmp_path / "run")
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        sys.path.insert(0, {ROOT!r})
        from sim.run.checkpoints import checkpoint
        import train

        leaves = []

        def signalled_memoryview(raw):  # the writer wraps each leaf's bytes in memoryview() to write them
            leaves.append(1)
            if len(leaves) == 40:  # inside the checkpoint after epoch 1 or 2
                for _ in range(2):
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(0.3)
            return memoryview(raw)

        checkpoint.memoryview = signalled_memoryview
        sys.exit(train.main({[*FOREVER, "--checkpoint-every", "1", "--run-dir", run_dir]!r}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=ENV,
                          timeout=300)
    assert proc.returncode == signals.STOPPED, proc.stderr[-3000:]
    path = checkpoint.latest(run_dir)
    epoch = checkpoint.read_meta(path)["epoch"]
    assert proc.stdout.count(f"SIGTERM: writing the checkpoint of epoch {epoch}; stopping as soon as it is "
                             f"complete") == 2, proc.stdout[-2000:]
    assert checkpoint.load_leaves(path, checkpoint.read_meta(path))  # every checksum holds
    assert not [n for n in os.listdir(os.path.join(run_dir, "checkpoints")) if n.startswith(".tmp")]
    assert [r["epoch"] for r in records(run_dir)] == list(range(1, epoch + 1))


def test_the_stop_decisions(capsys):
    """What a signal does in each phase of a run (the helper thread's decision, called directly)."""
    exits, lines = [], []

    def stopper(**kw):
        s = signals.Stopper(lines.append, grace=10.0, resume_hint="python train.py --resume D", exit_=exits.append)
        for k, v in kw.items():
            setattr(s, k, v)
        return s

    s = stopper()
    s.receive(signal.SIGTERM)  # starting up: nothing to save
    assert exits == [75] and lines[-1] == "stopped by SIGTERM while starting up: no checkpoint of it was written; " \
                                          "start it again"
    s = stopper(checkpoint="D/checkpoints/epoch_000003")
    with s.phase(signals.EPOCH, expected=5.0, epoch=4):  # will end in time: finish it
        s.receive(signal.SIGUSR1)
        assert exits == [75] and s.requested == "SIGUSR1" and lines[-1].startswith("SIGUSR1: finishing epoch 4")
        s.receive(signal.SIGINT)  # a second one: at once
        assert exits == [75, 75] and lines[-1] == ("stopped by SIGINT in epoch 4: its last checkpoint, "
                                                   "D/checkpoints/epoch_000003, is kept; continue with: "
                                                   "python train.py --resume D")
    s = stopper(checkpoint="D/checkpoints/epoch_000003")
    with s.phase(signals.EPOCH, expected=60.0, epoch=4):  # would outlast the grace: at once
        s.receive(signal.SIGTERM)
    assert exits[-1] == 75 and len(exits) == 3 and "past the 10s of --stop-grace" in lines[-1]
    s = stopper()
    with s.phase(signals.EPOCH, expected=60.0, epoch=1):  # nothing to fall back to: finish it
        s.receive(signal.SIGTERM)
    assert len(exits) == 3 and "no earlier one to fall back to" in lines[-1]
    s = stopper(checkpoint="D/checkpoints/epoch_000003")
    with s.phase(signals.EPOCH, expected=1.0, epoch=4):
        pass
    with s.phase(signals.SAVING, epoch=4):  # never in the middle of a checkpoint
        s.receive(signal.SIGTERM)
        s.receive(signal.SIGTERM)
    assert len(exits) == 3 and lines[-1] == "SIGTERM: writing the checkpoint of epoch 4; stopping as soon as it is " \
                                            "complete"
    s.receive(signal.SIGTERM)  # after it, between epochs: a third one stops at once
    assert len(exits) == 4 and lines[-1].startswith("stopped by SIGTERM after epoch 4: its last checkpoint")


# ---- the same command line continues a requeued job ----
# (population: 28 s; a population's bitwise resume runs by default in test_population.py)
@pytest.mark.parametrize("population", [[], pytest.param(["--num-seeds", "2"], marks=pytest.mark.slow)],
                         ids=["run", "population"])
def test_a_requeued_job_continues_with_the_same_command_bitwise(tmp_path, population):
    args = [*TINY, *population, "--total-steps", str(24 * 20 * 256), "--epochs", "24"]
    one_go = str(tmp_path / "one_go")
    code, _, err = finish(start(*args, "--run-dir", one_go))
    assert code == 0, err[-3000:]
    run_dir = str(tmp_path / "requeued")
    command = [*args, "--run-dir", run_dir, "--resume-if-exists"]
    first = start(*command)
    wait_for_epochs(first, run_dir, 3 * (len(population) and 3 or 1))  # a population logs 3 lines an epoch
    first.send_signal(signal.SIGTERM)
    code, out, err = finish(first)
    assert code == signals.STOPPED, err[-3000:]
    stopped_at = checkpoint.read_meta(checkpoint.latest(run_dir))["epoch"]
    assert stopped_at < 24
    code, out, err = finish(start(*command))  # the requeue: the same command line
    assert code == 0, err[-3000:]
    assert f"resuming {run_dir} from" in out and f"epoch {stopped_at}/24" in out
    lines = records(run_dir)
    keys = [(r["epoch"], r.get("member"), r.get("config")) for r in lines]
    assert len(keys) == len(set(keys)) and sorted({r["epoch"] for r in lines}) == list(range(1, 25))
    assert len(lines) == len(records(one_go))  # each epoch (and member) logged once
    a = checkpoint.latest(one_go)
    b = checkpoint.latest(run_dir)
    left, right = checkpoint.load_leaves(a, checkpoint.read_meta(a)), checkpoint.load_leaves(b, checkpoint.read_meta(b))
    assert sorted(left) == sorted(right)
    assert all(left[k].tobytes() == right[k].tobytes() for k in left), "the requeued run differs from the one go"


def test_a_requeued_sweep_and_pbt_population_continues_with_its_own_command_line(tmp_path):
    """The appending flags (--sweep, --pbt-explore) of a requeued job's command line replace the
    saved run's values instead of adding to them: the job continues where it stopped."""
    run_dir = str(tmp_path / "requeued")
    command = [*TINY, "--num-seeds", "2", "--sweep", "learning-rate=1e-3,3e-3", "--pbt", "--pbt-every", "1",
               "--pbt-explore", "entropy-cost=0:0.05", "--total-steps", str(12 * 20 * 256), "--epochs", "12",
               "--run-dir", run_dir, "--resume-if-exists"]
    first = start(*command)
    wait_for_epochs(first, run_dir, 2 * 4)  # 4 member lines an epoch
    first.send_signal(signal.SIGTERM)
    code, out, err = finish(first)
    assert code == signals.STOPPED, err[-3000:]
    stopped_at = checkpoint.read_meta(checkpoint.latest(run_dir))["epoch"]
    assert stopped_at < 12
    cfg = train.parse_config(command)  # the requeue: the same command line
    assert cfg.run.resume == run_dir and cfg.population.sweep == ("learning-rate=1e-3,3e-3",)
    assert cfg.pbt.pbt_explore == ("entropy-cost=0:0.05",) and cfg.population_size == 4
    code, out, err = finish(start(*command))
    assert code == 0, err[-3000:]
    assert f"resuming {run_dir} from" in out and f"epoch {stopped_at}/12" in out
    assert sorted({r["epoch"] for r in records(run_dir)}) == list(range(1, 13))


def test_resume_if_exists_starts_a_run_where_there_is_none(tmp_path):
    run_dir = tmp_path / "fresh"
    code, out, err = finish(start(*TINY, "--total-steps", "2048", "--epochs", "2", "--run-dir", str(run_dir),
                                  "--resume-if-exists"))
    assert code == 0 and "resuming" not in out, err[-3000:]
    assert [r["epoch"] for r in records(run_dir)] == [1, 2]
    # files of a run killed before its first checkpoint are replaced, and it says so
    shutil.rmtree(run_dir / "checkpoints")
    code, out, err = finish(start(*TINY, "--total-steps", "2048", "--epochs", "2", "--run-dir", str(run_dir),
                                  "--resume-if-exists"))
    assert code == 0 and "holds no checkpoint: starting the run there" in out, err[-3000:]
    assert [r["epoch"] for r in records(run_dir)] == [1, 2]
    # how it was launched is not part of the run: it exports like any other
    assert train.main(["export", str(run_dir), str(tmp_path / "policy.npz")]) == 0
    assert os.path.getsize(tmp_path / "policy.npz") > 0


# ---- checkpoints: by default, bounded, and a corrupt newest one ----
def test_checkpoints_by_default_keep_the_newest_and_a_corrupt_one_falls_back(tmp_path):
    from sim.run.trainer import train

    lines = []
    cfg = small_config("cartpole", epochs=4, keep_checkpoints=3)
    assert cfg.checkpoints.checkpoint_every is None  # the default: every epoch while they stay under 1% of training
    train(cfg.replace(checkpoint_every=1), run_dir=str(tmp_path), log=lines.append)
    assert [e for e, _ in checkpoint.list_checkpoints(str(tmp_path))] == [2, 3, 4]  # the newest 3
    newest = checkpoint.latest(str(tmp_path))
    with open(os.path.join(newest, "state.bin"), "r+b") as f:
        f.seek(20)
        byte = f.read(1)
        f.seek(20)
        f.write(bytes([byte[0] ^ 0xFF]))
    record = train(cfg.replace(resume=str(tmp_path), total_steps=cfg.total_steps * 2), log=lines.append)
    fallback = [line for line in lines if "is corrupt" in line]
    assert len(fallback) == 1 and fallback[0].endswith(f"resuming from the one before it, "
                                                       f"{os.path.join(str(tmp_path), 'checkpoints', 'epoch_000003')}")
    assert record["env_steps"] >= 2 * cfg.total_steps  # from epoch 3 to the doubled budget
    assert [r["epoch"] for r in records(str(tmp_path))] == list(range(1, record["epoch"] + 1))


def test_the_default_cadence_spaces_out_expensive_checkpoints_and_says_so(tmp_path):
    """A checkpoint costing more than 1% of an epoch is written less often, with one line."""
    from sim.run import trainer

    lines = []
    cfg = small_config("pendulum", "sac", epochs=8, max_replay_size=200_000)  # a 7 MiB buffer against ~0.1 s epochs
    trainer.train(cfg, run_dir=str(tmp_path), log=lines.append)
    spaced = [line for line in lines if line.startswith("checkpoints: about")]
    assert len(spaced) == 1 and "with the replay buffer" in spaced[0] and "under 1% of the training time" in spaced[0]
    epochs = [e for e, _ in checkpoint.list_checkpoints(str(tmp_path))]
    assert epochs[-1] == 8 and len(epochs) <= 2  # the end's, and at most one more kept
    meta = checkpoint.read_meta(checkpoint.latest(str(tmp_path)))
    spent = meta["extra"]["checkpoint_s"]
    assert 0 < spent and meta["left_out"] == []


# ---- disks ----
def test_a_full_disk_while_writing_a_checkpoint_keeps_the_last_good_one(tmp_path, monkeypatch):
    config = {"env": "cartpole", "agent": "ppo", "backend": None}
    state = {"w": __import__("numpy").arange(4096, dtype="float32")}
    good = checkpoint.save(str(tmp_path), state, epoch=1, env_steps=10, config=config)
    real_open = open

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(bytes(data)[:100])
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "open", lambda path, mode="r", **kw: Full(real_open(path, mode, **kw)),
                        raising=False)
    with pytest.raises(disk.DiskError) as err:
        checkpoint.save(str(tmp_path), state, epoch=2, env_steps=20, config=config)
    assert str(err.value).startswith("no space left on device writing ") and "needs 16.0 KiB" in str(err.value)
    assert os.listdir(tmp_path / "checkpoints") == ["epoch_000001"] and checkpoint.latest(str(tmp_path)) == good


def test_a_full_disk_while_appending_metrics_leaves_no_torn_line(tmp_path, monkeypatch):
    path = str(tmp_path / "metrics.jsonl")
    disk.append_line(path, '{"epoch": 1}\n')
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[:5]))  # the disk fills part way
    with pytest.raises(disk.DiskError, match=r"^no space left on device writing .*metrics\.jsonl \(needs"):
        disk.append_line(path, '{"epoch": 2, "loss": 1.0}\n')
    monkeypatch.undo()
    assert open(path).read() == '{"epoch": 1}\n'


def test_a_full_disk_while_writing_a_video_leaves_nothing(tmp_path, monkeypatch):
    import numpy as np

    from sim.run.policy import video

    def full(av, tmp, *args):
        open(tmp, "wb").write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(video, "_encode", full)
    with pytest.raises(disk.DiskError, match="no space left on device writing .*out.mp4"):
        video.write_mp4(str(tmp_path / "out.mp4"), [np.zeros((8, 8, 3), np.uint8)], 30.0)
    assert os.listdir(tmp_path) == []


def _small_filesystem():
    """A shell prefix that runs a script with a private tmpfs mounted (an unprivileged user
    namespace), or None where this machine does not allow one."""
    try:
        ok = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True,
                            timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return ["unshare", "--user", "--map-root-user", "--mount", "bash", "-c"] if ok else None


needs_tmpfs = pytest.mark.skipif(_small_filesystem() is None, reason="needs `unshare --user --mount` for a small tmpfs")


def _in_small_fs(size: str, script: str, tmp_path):
    """Runs `script` (bash) with a `size` tmpfs mounted on tmp_path/disk, in its own namespace."""
    mount = tmp_path / "disk"
    mount.mkdir()
    full = f"set -u; mount -t tmpfs -o size={size} tmpfs {mount}; cd {ROOT}; {script}"
    return subprocess.run([*_small_filesystem(), full], capture_output=True, text=True, env=ENV, timeout=600)


@needs_tmpfs
def test_a_run_whose_checkpoints_cannot_fit_is_told_before_it_trains(tmp_path):
    run_dir = tmp_path / "disk" / "run"
    proc = _in_small_fs("150k", f"{sys.executable} train.py --env cartpole --checkpoint-every 1 --run-dir {run_dir} "
                                f"--no-progress; echo rc=$?; ls -A {tmp_path}/disk | wc -l", tmp_path)
    assert proc.stdout.split()[-2:] == ["rc=2", "0"], proc.stdout + proc.stderr[-3000:]  # nothing written
    line = one_line(proc.stderr)
    assert line.startswith("error: --run-dir: the run's checkpoints need ") and f"{run_dir} has " in line, line
    assert "KiB free" in line and "--keep-checkpoints 1" in line and "--run-dir on another disk" in line, line


@needs_tmpfs
def test_a_disk_that_fills_during_a_run_ends_it_in_one_line_with_its_checkpoint_intact(tmp_path):
    run_dir = tmp_path / "disk" / "run"
    script = f"""
        {sys.executable} train.py {' '.join(FOREVER)} --checkpoint-every 1 --run-dir {run_dir} > {tmp_path}/out.txt 2> {tmp_path}/err.txt &
        pid=$!
        for i in $(seq 600); do [ -d {run_dir}/checkpoints/epoch_000002 ] && break; sleep 0.1; done
        dd if=/dev/zero of={tmp_path}/disk/filler bs=64k 2>/dev/null
        wait $pid; echo "rc=$?"
        ls -A {run_dir}/checkpoints | tr '\\n' ' '; echo
        {sys.executable} -c "import json; [json.loads(l) for l in open('{run_dir}/metrics.jsonl')]; print('lines ok')"
        rm {tmp_path}/disk/filler
        {sys.executable} train.py play {run_dir} --num-eval-envs 2; echo "play rc=$?"
    """
    proc = _in_small_fs("3m", textwrap.dedent(script), tmp_path)
    err = open(tmp_path / "err.txt").read()
    assert "rc=5" in proc.stdout, proc.stdout + err[-3000:]
    line = one_line(err)
    assert line.startswith(f"error: no space left on device writing {run_dir}/") and "free); the last good checkpoint" \
        in line and line.endswith(f"continue with: python train.py --resume {run_dir}"), line
    listed = proc.stdout.split("rc=5")[1].splitlines()[1]
    assert ".tmp" not in listed and "epoch_" in listed, listed
    assert "lines ok" in proc.stdout and "play rc=0" in proc.stdout, proc.stdout + proc.stderr[-3000:]


# ---- one writer per run directory ----
def test_a_second_run_on_a_run_dir_in_use_is_refused_naming_the_holder(tmp_path):
    run_dir = str(tmp_path / "run")
    holder = start(*FOREVER, "--run-dir", run_dir)
    try:
        wait_for_epochs(holder, run_dir, 1)
        for args in ([*FOREVER, "--seed", "7", "--run-dir", run_dir], ["--resume", run_dir, "--no-progress"]):
            code, _, err = finish(start(*args))
            assert code == 2, err[-3000:]
            line = one_line(err)
            assert line.startswith(f"error: --run-dir: {run_dir} is in use by another run (pid {holder.pid} on host ")
    finally:
        holder.send_signal(signal.SIGTERM)
        finish(holder)
    epochs = [r["epoch"] for r in records(run_dir)]
    assert epochs == list(range(1, len(epochs) + 1)) and {r.get("seed", 0) for r in records(run_dir)} == {0}


def test_a_lock_left_by_a_killed_run_does_not_block(tmp_path):
    run_dir = str(tmp_path / "run")
    killed = start(*FOREVER, "--checkpoint-every", "1", "--run-dir", run_dir)
    wait_for_epochs(killed, run_dir, 2)
    killed.kill()
    finish(killed)
    assert os.path.exists(os.path.join(run_dir, ".lock"))
    done = checkpoint.read_meta(checkpoint.latest(run_dir))["env_steps"]
    code, out, err = finish(start("--resume", run_dir, "--total-steps", str(done), "--no-progress"))
    assert code == 0 and "nothing to train" in out, err[-3000:]


def test_the_lock_in_one_process():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        lock = RunLock(d).acquire()
        lock.sign()
        script = f"import sys; sys.path.insert(0, {ROOT!r}); from sim.run.lock import RunLock; RunLock({d!r}).acquire()"
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert "RunDirBusy" in proc.stderr and f"pid {os.getpid()}" in proc.stderr
        lock.release()
        assert subprocess.run([sys.executable, "-c", script], timeout=60).returncode == 0
        with pytest.raises(RunDirBusy):  # flock locks are per open file: a second open in one process is refused too
            first = RunLock(d).acquire()
            try:
                RunLock(d).acquire()
            finally:
                first.release()
