"""The dependency bounds pyproject.toml declares agree with what the code was checked against:
Playground held below its PyTorch rewrite, the robot asset wheels pinned at the versions whose
files envs/robots.py records, and what is installed here inside those bounds."""

import os
import tomllib
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from envs import robots
from tests.helpers import needs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _extras() -> dict[str, dict[str, Requirement]]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    return {name: {Requirement(r).name: Requirement(r) for r in reqs} for name, reqs in extras.items()}


@pytest.mark.parametrize("extra", ["playground", "robots"])
def test_playground_stays_below_its_pytorch_rewrite(extra):
    spec = _extras()[extra]["playground"].specifier
    assert Version("0.2.0") in spec and Version("1.0.0") not in spec and Version("0.3.0") not in spec


def test_the_robots_extra_pins_the_asset_wheels_whose_files_are_recorded():
    robots_extra = _extras()["robots"]
    for _, dist, version in robots.ASSET_WHEELS:
        assert str(robots_extra[dist].specifier) == f"=={version}", dist


@needs("playground")
def test_the_installed_playground_is_inside_the_bound():
    assert Version(metadata.version("playground")) in _extras()["playground"]["playground"].specifier


@needs("robots")
def test_the_installed_asset_wheels_are_the_recorded_versions():
    for _, dist, version in robots.ASSET_WHEELS:
        assert metadata.version(dist) == version, dist
