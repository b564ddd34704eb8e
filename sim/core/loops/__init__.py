"""Iteration loops: what ONE training iteration of the compiled epoch does, one module per
kind, behind one small interface. An agent's declaration names its loop (`Kind.name`); the
engine composes env + agent + loop + devices + population and calls only what a `Loop` offers:

    loop.setup(core)              # host-side checks and shapes, before anything is compiled
    loop.init(core, key)          # -> {field: value}: its own fields of the state (buffer, carry)
    loop.iteration(core, state)   # -> (state, metrics): one iteration, traced
    loop.prefill(core, state)     # -> state: what runs once before training (None: nothing)
    loop.memory(core, template)   # -> (parts, flags): its big state parts, what sizes its work

and says what the harness asks of it: `keeps_buffer` (a replay ring in the state, which a
checkpoint may leave out), `splits_over_cores`, `work_sizes` (the run's sizes that scale its work).

`core` is the engine: `core.env` (auto-resetting, batched), `core.agent`, `core.dev` (one
device's sizes), `core.cfg` (the run's), `core.axis` (the device axis or None) and
`core.device_key(key)` (a per-device stream).
"""

from __future__ import annotations

from sim.core.loops.recurrent import RecurrentLoop
from sim.core.loops.replay import ReplayLoop
from sim.core.loops.unroll import UnrollLoop

LOOPS = {"unroll": UnrollLoop(), "recurrent": RecurrentLoop(), "replay": ReplayLoop()}


def get(name: str):
    """The loop of an agent's iteration kind."""
    return LOOPS[name]
