"""Iteration loops: what ONE training iteration of the compiled epoch does, one module per
kind, each a typed unit that owns its part of the training state (`loops/base.py`). An
agent declares its iteration kind; the core runs the loop of that kind."""

from __future__ import annotations

from sim.core.contract import DIFFERENTIABLE, GENERATION, RECURRENT, REPLAY, UNROLL, Kind
from sim.core.loops.base import Loop, LoopContext
from sim.core.loops.differentiable import DifferentiableLoop
from sim.core.loops.generation import GenerationLoop
from sim.core.loops.recurrent import RecurrentLoop
from sim.core.loops.replay import ReplayLoop
from sim.core.loops.unroll import UnrollLoop

LOOPS: dict[Kind, type] = {UNROLL: UnrollLoop, RECURRENT: RecurrentLoop, REPLAY: ReplayLoop,
                           DIFFERENTIABLE: DifferentiableLoop, GENERATION: GenerationLoop}


def loop_class(kind: Kind) -> type:
    """The loop that runs the iterations of an agent of this kind (its class: what it declares
    before it is built)."""
    return LOOPS[kind]


def make_loop(kind: Kind, context: LoopContext) -> Loop:
    """The loop of `kind`, built (sizes bound, checked) for `context`."""
    return loop_class(kind).make(context)
