"""Donation that provably updates in place, whatever order a function returns its outputs in.

How JAX picks aliases (jax/_src/interpreters/mlir.py `_set_up_aliases`, JAX 0.10): it walks
the flat OUTPUTS in order and gives each one the first still-unclaimed donated input with the
same shape and dtype. Return order as such is harmless; what hurts is an output that comes
before the state's own leaf and has the same shape/dtype: it takes the alias, and the state's
leaf is then written to fresh memory, i.e. the whole ring is copied every call (tests/
test_donation.py shows it; no "donated buffers were not usable" warning is raised, because the
donated input did alias *something*). `jit_in_place` rules that out by construction: the
compiled program returns the new donated state FIRST, leaf for leaf in the input's order, and
the caller gets its own output order back outside the jit. `assert_in_place` checks a compiled
program: each donated leaf aliases its own new value, and temp memory plus fresh outputs stay far below it.
"""

from __future__ import annotations

import functools
import re
from typing import Callable, Sequence

import jax
import numpy as np

_ALIAS = re.compile(r"\{([\d,\s]*)\}:\s*\((\d+),")


def alias_map(compiled) -> dict[int, int]:
    """{flat parameter number: flat output number} from the compiled HLO module's header."""
    header = compiled.as_text().split("\n", 1)[0]
    m = re.search(r"input_output_alias=\{(.*?)\}\s*,\s*\w+=", header)
    if not m:
        return {}
    return {int(p): int(o.split(",")[0] or 0) for o, p in _ALIAS.findall(m.group(1))}


def tree_bytes(tree) -> int:
    """Per-device bytes of a pytree of arrays or ShapeDtypeStructs (PRNG keys by their key data)."""
    def leaf_bytes(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.eval_shape(jax.random.key_data, x)
        sharding = getattr(x, "sharding", None)
        # memory_analysis() counts one device's share: so do we for sharded arrays.
        shape = sharding.shard_shape(x.shape) if sharding is not None else x.shape
        return int(np.prod(shape)) * x.dtype.itemsize
    return int(sum(leaf_bytes(x) for x in jax.tree.leaves(tree)))


def assert_in_place(compiled, donated, *, pairs: dict[int, int] | None = None, max_temp_fraction: float = 0.1):
    """Raises AssertionError unless the donated state is updated where it lies.

    donated: the donated pytree (arrays or ShapeDtypeStructs) or its size in bytes.
    pairs: {flat parameter: flat output} that must be aliased (exact check, see jit_in_place).
    An alias alone is no proof: XLA copies a donated buffer into temp memory when the program
    reads its old contents after writing the new ones (e.g. sample before add), and when an
    earlier output of the same shape takes the alias, the new state is written to a fresh
    output instead. So temp memory is bounded too, and without `pairs` (when which output is
    the new state is unknown) temp plus the outputs that alias no input.
    """
    nbytes = donated if isinstance(donated, int) else tree_bytes(donated)
    mem = compiled.memory_analysis()
    problems = []
    if pairs is not None:
        got = alias_map(compiled)
        wrong = {p: (o, got.get(p)) for p, o in pairs.items() if got.get(p) != o}
        if wrong:
            problems.append("donated parameters not aliased to their own outputs "
                            "{param: (wanted output, got output)}: " + str(wrong))
    if mem.alias_size_in_bytes < nbytes:
        problems.append(f"alias covers {mem.alias_size_in_bytes} of {nbytes} donated bytes")
    fresh = 0 if pairs is not None else max(mem.output_size_in_bytes - mem.alias_size_in_bytes, 0)
    if mem.temp_size_in_bytes + fresh > max_temp_fraction * nbytes:
        plus = f" + unaliased outputs {fresh} bytes" if fresh else ""
        problems.append(f"temp memory {mem.temp_size_in_bytes} bytes{plus} > {max_temp_fraction:.0%} of the "
                        f"{nbytes} donated bytes (the state is probably copied)")
    if problems:
        raise AssertionError("donated state is not updated in place: " + "; ".join(problems))


def _check_same(name: str, old, new):
    old_leaves, old_def = jax.tree.flatten_with_path(old)
    new_def = jax.tree.structure(new)
    if new_def != old_def:
        raise ValueError(f"new {name} has tree structure {new_def}, the donated input has {old_def}")
    for (path, a), b in zip(old_leaves, jax.tree.leaves(new)):
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            raise ValueError(f"new {name}{jax.tree_util.keystr(path)} is {b.dtype}{list(b.shape)}, the donated "
                             f"input is {a.dtype}{list(a.shape)}: it cannot reuse the input's memory")


class jit_in_place:
    """jax.jit(fun, donate_argnums) whose donated args are guaranteed to alias their new values.

    fun returns a tuple; out_index[i] is where the new value of donated arg donate_argnums[i]
    sits in it (default: the first len(donate_argnums) outputs, e.g. `(state, metrics)`), or
    out_index=None when fun returns just the new state. The new state must have the input's
    tree structure, shapes and dtypes (ValueError at trace time otherwise).
    """

    def __init__(self, fun: Callable, donate_argnums: int | Sequence[int] = 0,
                 out_index: int | Sequence[int] | None = (), **jit_kwargs):
        self.fun = fun
        self.argnums = tuple(sorted({donate_argnums} if isinstance(donate_argnums, int) else set(donate_argnums)))
        if out_index == ():
            out_index = tuple(range(len(self.argnums)))
        self.out_index = (out_index,) if isinstance(out_index, int) else out_index
        if self.out_index is not None and len(self.out_index) != len(self.argnums):
            raise ValueError(f"out_index {out_index} needs one entry per donated arg {self.argnums}")
        if "static_argnums" in jit_kwargs or "static_argnames" in jit_kwargs:
            raise ValueError("jit_in_place does not take static args; close over them instead")
        # keep_unused: parameter numbers then equal flat argument positions (used by check()).
        # wraps: the program keeps fun's name (jit(_epoch)) for logs and lowering counters.
        program = functools.update_wrapper(lambda *args: self._split(*args), fun)
        self.jitted = jax.jit(program, donate_argnums=self.argnums, keep_unused=True, **jit_kwargs)

    def _split(self, *args):
        out = self.fun(*args)
        if self.out_index is None:
            states, rest = (out,), None
        else:
            states = tuple(out[j] for j in self.out_index)
            rest = [None if j in self.out_index else x for j, x in enumerate(out)]
            rest = tuple(rest) if isinstance(out, tuple) else rest
        for i, s in zip(self.argnums, states):
            _check_same(f"donated arg {i}", args[i], s)
        return states, rest  # donated states FIRST: each input leaf meets its own output first

    def _merge(self, states, rest):
        if self.out_index is None:
            return states[0]
        out = list(rest)
        for j, s in zip(self.out_index, states):
            out[j] = s
        return tuple(out) if isinstance(rest, tuple) else out

    def __call__(self, *args):
        return self._merge(*self.jitted(*args))

    def lower(self, *args):
        """Like jax.jit's: .compile() gives a program that takes args and returns fun's outputs."""
        return _Merged(self.jitted.lower(*args), self._merge)

    def check(self, *args, max_temp_fraction: float = 0.1):
        """Compiles for args and asserts every donated leaf aliases its own new value."""
        compiled = self.lower(*args).compile()
        offsets, n = [], 0
        for i, a in enumerate(args):
            offsets.append(n)
            n += len(jax.tree.leaves(a))
        params = [offsets[i] + k for i in self.argnums for k in range(len(jax.tree.leaves(args[i])))]
        assert_in_place(compiled, [args[i] for i in self.argnums], pairs={p: o for o, p in enumerate(params)},
                        max_temp_fraction=max_temp_fraction)
        return compiled


class _Merged:
    """A jax Lowered/Compiled whose call returns the caller's output order; the rest passes through."""

    def __init__(self, inner, merge):
        self._inner, self._merge = inner, merge

    def compile(self, *args, **kwargs):
        return _Merged(self._inner.compile(*args, **kwargs), self._merge)

    def __call__(self, *args):
        return self._merge(*self._inner(*args))

    def __getattr__(self, name):
        return getattr(self._inner, name)
