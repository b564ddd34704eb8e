"""Asset wheels that hold only some robots, for a lent accelerator machine that has no network
and takes 64 MiB per call: the two `robots` asset wheels (180 MB) rebuilt under their own names
and version with only the Menagerie folders given, copied from the installed wheels. The folders
are the same files (envs/robots.py checks their digests there as here).

    .venv/bin/python benchmarks/carry_robot_assets.py unitree_go1 [--out .whl-tpu/any]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root

from envs.robots import _MENAGERIE_IN_WHEEL, ASSET_WHEELS, _wheel_folders  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="Menagerie folders to keep, e.g. unitree_go1")
    parser.add_argument("--out", default=".whl-tpu/any")
    args = parser.parse_args()
    installed = _wheel_folders()
    missing = sorted(set(args.folders) - set(installed))
    if missing:
        sys.exit(f"not in the installed asset wheels: {', '.join(missing)}")
    os.makedirs(args.out, exist_ok=True)
    inside = "/".join(_MENAGERIE_IN_WHEEL)
    for module, dist, version in ASSET_WHEELS:
        info = f"{dist.replace('-', '_')}-{version}.dist-info"
        path = pathlib.Path(args.out) / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
            wheel.writestr(f"{module}/__init__.py", "")
            wheel.writestr(f"{module}/{inside}/.kept", " ".join(args.folders) + "\n")
            for name in args.folders:
                root = installed[name].resolve()
                if root.parts[-len(_MENAGERIE_IN_WHEEL) - 2] != module:
                    continue
                for f in sorted(p for p in root.rglob("*") if p.is_file()):
                    wheel.write(f, f"{module}/{inside}/{name}/{f.relative_to(root).as_posix()}")
            wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
            wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: carry_robot_assets\n"
                                            "Root-Is-Purelib: true\nTag: py3-none-any\n")
            wheel.writestr(f"{info}/RECORD", "")
        print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
