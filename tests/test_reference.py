"""The drift check of benchmarks/reference.py: the recorded tasks rerun at or above their
floors, a deliberately broken run (a learning rate of 1e-9: nothing learnt) is caught and said
by how much, and the check's arithmetic on given figures."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks import reference

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _check(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "reference.py"), "--check", *flags],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)


def test_the_checked_tasks_have_recorded_bands_with_floors_below_their_means():
    bands = reference.json.load(open(reference.BANDS))
    checked = [name for name, task in reference.TASKS.items() if task[1]]
    assert checked and set(checked) <= set(bands)
    for name in checked:
        b = bands[name]
        assert b["floor"] < b["mean"] and b["seeds"] >= 3 and b["flags"] == reference.TASKS[name][0], name


def test_check_names_each_task_below_its_floor_and_by_how_much():
    bands = {"a": {"mean": 100.0, "std": 5.0, "seeds": 3, "floor": 90.0, "date": "d"},
             "b": {"mean": -150.0, "std": 10.0, "seeds": 3, "floor": -170.0, "date": "d"}}
    assert reference.check({"a": {"mean": 90.0}, "b": {"mean": -160.0}}, bands) == []
    low = reference.check({"a": {"mean": 80.0}, "b": {"mean": -200.0}}, bands)
    assert [line.split(":")[0] for line in low] == ["a", "b"]
    assert "is 10.0 below the recorded floor 90.0" in low[0] and "is 30.0 below" in low[1]
    assert reference.band({"final": [10.0, 12.0, 14.0], "mean": 12.0, "seeds": 3, "date": "d", "flags": []})[
        "floor"] == 12.0 - 4.0


def test_the_recorded_tasks_show_no_drift():
    out = _check()
    assert out.returncode == 0 and "no drift" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


def test_a_broken_change_fails_the_check_saying_by_how_much():
    out = _check("--tasks", "cartpole", "--extra", "--learning-rate 1e-9")
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    assert "drift: cartpole: mean final return" in out.stdout and "below the recorded floor" in out.stdout
