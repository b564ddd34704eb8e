"""A run's programs compiled for a TPU on this machine, no chip needed, and what the TPU's
compiler made of them: the loops it built from single ops (a gather, scatter or
dynamic-update-slice it could not do as one op becomes a serial loop, one trip per row), the
copies of large arrays it added (a layout change of a whole replay ring), temp memory, and
the seconds each compile took here.

    python benchmarks/tpu_compile.py [--env humanoid] [--agent sac] [--num-envs 128]
        [--num-seeds 1] [--set NAME=VALUE ...] [--programs epoch,prefill,evaluate]
        [--topology v5e:1x1] [--libtpu DIR] [--hlo-dir DIR] [--json PATH]

It needs libtpu, the TPU compiler JAX's `tpu` extra installs: the release JAX pins
(`pip install --target /tmp/libtpu 'libtpu==0.0.42.*'` for JAX 0.10), put on the path by
`--libtpu DIR`. JAX then offers the TPU as an abstract topology: programs lower and compile
for it (XLA's TPU passes, its layouts, its cost model) and nothing runs. Found this way: the
replay ring's gather of part of each row compiled to a loop of 512 one-row slices per
gradient step, where whole rows are one gather (SAC on humanoid ran at 0.08x Brax's SAC on
the chip). A compile here takes longer than on the chip's host (2 cores against 13).

Printed per program: trace and compile seconds, temp and argument bytes, and each loop the
compiler made, as `op x trips` (its op from the loop's JAX op name: a loop JAX wrote is named
".../while"). `--hlo-dir` keeps the optimized HLO text.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WHILE = re.compile(r"%(while[\w.\-]*) = .* while\(.*?condition=%([\w.\-]+).*?op_name=\"([^\"]+)\"")
COMPUTATION = re.compile(r"^(?:ENTRY )?%([\w.\-]+) .*\{\s*$")
COPY = re.compile(r"%([\w.\-]+) = (\w+)\[([\d,]*)\]\{([\d,]*)[^}]*\} copy\(")
BYTES = {"f32": 4, "s32": 4, "u32": 4, "f16": 2, "bf16": 2, "s8": 1, "u8": 1, "pred": 1, "f64": 8, "s64": 8}


def computations(text: str) -> dict[str, str]:
    """{computation name: its body text} of an HLO module's text."""
    out, name, lines = {}, None, []
    for line in text.split("\n"):
        m = COMPUTATION.match(line)
        if m and not line.startswith(" "):
            name, lines = m.group(1), []
        elif line.startswith("}") and name:
            out[name] = "\n".join(lines)
            name = None
        elif name:
            lines.append(line)
    return out


def made_loops(text: str) -> list[dict]:
    """The while loops of a compiled HLO module that no JAX loop wrote: {op, trips, op_name}.
    A JAX loop's op name ends in "while"; a loop the compiler made from one op is named after
    that op. `trips` is the constant its condition compares with (None if there is none)."""
    comps = computations(text)
    loops = []
    for m in WHILE.finditer(text):
        op = m.group(3).rsplit("/", 1)[-1]
        if op == "while":
            continue
        bounds = re.findall(r"s32\[\]\{[^}]*\} constant\((\d+)\)", comps.get(m.group(2), ""))
        loops.append({"op": op, "trips": int(bounds[0]) if len(bounds) == 1 else None, "op_name": m.group(3)})
    return loops


def large_copies(text: str, min_bytes: int = 1 << 26) -> list[dict]:
    """Copies of arrays of at least `min_bytes` in the entry computation (a layout change of a
    whole buffer, in and out of the program): {shape, layout, bytes}."""
    entry = text.split("\nENTRY ", 1)[-1]
    out = []
    for m in COPY.finditer(entry):
        dims = [int(d) for d in m.group(3).split(",") if d]
        size = BYTES.get(m.group(2), 4)
        for d in dims:
            size *= d
        if size >= min_bytes:
            out.append({"shape": f"{m.group(2)}[{m.group(3)}]", "layout": "{" + m.group(4) + "}", "bytes": size})
    return out


def summary(loops: list[dict]) -> str:
    """`gather x512 (2), scatter x128` : each kind of made loop, its trips and how many."""
    counts: dict[tuple, int] = {}
    for loop in loops:
        key = (loop["op"], loop["trips"])
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{op} x{trips}" + (f" ({n})" if n > 1 else "") for (op, trips), n in sorted(counts.items(),
                                                                                                  key=str)) or "none"


def _use_libtpu(argv: list[str]) -> None:
    """Puts `--libtpu DIR` on the path and tells libtpu it has no chip to look for, before
    JAX is imported (JAX finds its TPU plugin at import)."""
    if "--libtpu" in argv:
        sys.path.insert(0, argv[argv.index("--libtpu") + 1])
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # no chip is claimed: several may compile at once


def tpu_device(topology_name: str, script: str):
    """The first device of the abstract TPU `topology_name` (e.g. "v5e:1x1"), with JAX's
    persistent cache off (programs for it are compiled, never run); exits with one line saying
    what to install where there is no TPU compiler."""
    import jax
    from jax.experimental import topologies

    try:
        topology = topologies.get_topology_desc(platform="tpu", topology_name=topology_name,
                                                chips_per_host_bounds=(1, 1, 1), num_slices=1)
    except Exception as err:  # noqa: BLE001 (JAX raises several kinds)
        what = ("no TPU compiler: install libtpu (see tpu_compile.py's docstring) and pass --libtpu DIR"
                if importlib.util.find_spec("libtpu") is None else "the TPU compiler did not start")
        sys.exit(f"{script}: {what} ({str(err).splitlines()[0][:200]})")
    jax.config.update("jax_enable_compilation_cache", False)
    return topology.devices[0]


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    _use_libtpu(argv)
    sys.path.insert(0, ROOT)
    import jax
    from jax.sharding import SingleDeviceSharding

    from benchmarks import common
    from sim.run.build import build_engine
    from sim.run.config import defaults_for

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="humanoid")
    p.add_argument("--agent", default="sac")
    p.add_argument("--num-envs", type=int, default=None, help="default: the agent's value for the env")
    p.add_argument("--num-seeds", type=int, default=1)
    p.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="other config fields")
    p.add_argument("--programs", default="epoch,prefill,evaluate")
    p.add_argument("--topology", default="v5e:1x1")
    p.add_argument("--libtpu", default=None, help="the folder libtpu is installed in (pip --target)")
    p.add_argument("--hlo-dir", default=None, help="write each program's optimized HLO text here")
    p.add_argument("--json", default=None, help="append one JSON line per program")
    a = p.parse_args(argv)
    on_tpu = SingleDeviceSharding(tpu_device(a.topology, "tpu_compile.py"))
    sets = dict(common.parse_set(a.set))
    if a.num_envs:
        sets["num_envs"] = a.num_envs
    cfg = defaults_for(a.env, a.agent).replace(devices=1, num_seeds=a.num_seeds, progress=False,
                                               compile_cache="off", **sets).validate()
    engine = build_engine(cfg)
    place = lambda tree: jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=on_tpu), tree)  # noqa: E731
    key = jax.random.PRNGKey(0)
    keys = jax.random.split(key, a.num_seeds) if a.num_seeds > 1 else key
    template = place(jax.eval_shape(engine.init, keys))
    starts = place(jax.eval_shape(engine.starts, keys))
    key = place(jax.eval_shape(lambda: keys))
    programs = {"epoch": lambda: engine.epoch.lower(template), "prefill": lambda: engine.prefill.lower(template),
                "evaluate": lambda: engine.evaluate.lower(template, key), "starts": lambda: engine.starts.lower(key),
                "init": lambda: engine.init_from.lower(key, starts), "renew": lambda: engine.renew.lower(template, starts)}
    for name in a.programs.split(","):
        t0 = time.perf_counter()
        lowered = programs[name]()
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        text = compiled.as_text()
        if a.hlo_dir:
            os.makedirs(a.hlo_dir, exist_ok=True)
            with open(os.path.join(a.hlo_dir, f"{cfg.env}_{cfg.agent}_{cfg.num_envs}_{name}.hlo"), "w") as f:
                f.write(text)
        memory = compiled.memory_analysis()
        loops, copies = made_loops(text), large_copies(text)
        record = {"env": cfg.env, "agent": cfg.agent, "num_envs": cfg.num_envs, "num_seeds": a.num_seeds,
                  "program": name, "topology": a.topology, "set": a.set, "trace_s": round(t1 - t0, 1),
                  "compile_s": round(t2 - t1, 1), "temp_bytes": memory.temp_size_in_bytes,
                  "argument_bytes": memory.argument_size_in_bytes, "made_loops": summary(loops),
                  "large_copies": copies, "loops": loops}
        print(f"{name}: trace {record['trace_s']} s, compile {record['compile_s']} s (here), temp "
              f"{record['temp_bytes'] / 2**20:.0f} MiB, arguments {record['argument_bytes'] / 2**20:.0f} MiB; "
              f"loops the compiler made: {record['made_loops']}; large copies: "
              + (", ".join(f"{c['shape']}{c['layout']}" for c in copies) or "none"), flush=True)
        common.emit(record, a.json)


if __name__ == "__main__":
    main()
