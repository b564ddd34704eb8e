"""`train.py export RUN_DIR policy.onnx` (or `policy.npz`): the deterministic policy,
observation normalisation folded in, as a file a robot runs without JAX.

The policy (what `play` evaluates: the agent's `act(..., deterministic=True)`) is traced
once to a jaxpr on a batch of one observation; everything that depends only on the
checkpoint (weights, statistics, bounds) is computed at export time, and the rest, the ops on
the observation, becomes a short program in ONNX's operator names (`program`). The batch is
the leading axis of every value the observation reaches, so the files take any batch size.

- `.onnx`: that program as an ONNX graph (opset 18): input `obs` float32 [batch, obs_size],
  output `action`, float32 [batch, action_size] (int32 [batch] for discrete actions). Needs
  the `onnx` package (`pip install -e '.[export]'`).
- `.npz`: the program as JSON (`program`) and its constants (`c0`, `c1`, ...); `numpy_policy`
  below runs it with numpy alone (copy that function to the robot).

Recurrent policies (a memory between steps) are refused.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np

from sim.core.contract import fresh_carry

OPSET = 18


class ExportError(ValueError):
    """A policy this exporter cannot write (a recurrent one, an op it does not translate)."""


# ---- tracing: the policy's jaxpr as a program on the observation ----
_UNARY = {"neg": "Neg", "tanh": "Tanh", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "abs": "Abs",
          "logistic": "Sigmoid", "sign": "Sign", "stop_gradient": "Identity", "copy": "Identity",
          "copy_p": "Identity", "floor": "Floor", "ceil": "Ceil"}
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "max": "Max", "min": "Min", "pow": "Pow",
           "lt": "Less", "gt": "Greater", "le": "LessOrEqual", "ge": "GreaterOrEqual", "eq": "Equal",
           "and": "And", "or": "Or"}
_INLINE = ("jit", "pjit", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "closed_call", "remat",
           "checkpoint")


class _Program:
    def __init__(self):
        self.ops: list[dict] = []  # {"op", "inputs", "outputs", "attrs"}
        self.consts: list[np.ndarray] = []
        self.count = 0

    def const(self, value) -> str:
        value = np.asarray(value)
        if value.dtype == np.float64 or value.dtype.name == "bfloat16":
            value = value.astype(np.float32)
        if value.dtype == np.int64:
            value = value.astype(np.int32) if np.abs(value).max(initial=0) < 2**31 else value
        self.consts.append(value)
        return f"c{len(self.consts) - 1}"

    def ints(self, values) -> str:
        """An int64 operand of ONNX's own (a shape, axes, slice bounds)."""
        self.consts.append(np.asarray(values, np.int64))
        return f"c{len(self.consts) - 1}"

    def emit(self, op: str, inputs: list[str], attrs: dict | None = None, outputs: int = 1):
        names = [f"v{self.count + i}" for i in range(outputs)]
        self.count += outputs
        self.ops.append({"op": op, "inputs": list(inputs), "outputs": names, "attrs": attrs or {}})
        return names[0] if outputs == 1 else names


def _sub_jaxpr(eqn):
    for name in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        sub = eqn.params.get(name)
        if sub is not None:
            return sub
    raise ExportError(f"cannot inline {eqn.primitive.name}")


def _run(jaxpr, consts, args, prog: _Program):
    """Walks `jaxpr`: constant inputs are evaluated now (numpy arrays), those that depend on
    the observation become program ops (names). Returns the outputs."""
    env = {}

    def read(var):
        if hasattr(var, "val"):  # a literal
            return np.asarray(var.val)
        return env[var]

    for var, value in zip(jaxpr.constvars, consts):
        env[var] = np.asarray(value)
    for var, value in zip(jaxpr.invars, args):
        env[var] = value
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        if name in _INLINE:
            sub = _sub_jaxpr(eqn)
            inner, inner_consts = (sub.jaxpr, sub.consts) if hasattr(sub, "consts") else (sub, ())
            outs = _run(inner, inner_consts, ins, prog)
        elif all(not isinstance(x, str) for x in ins):  # a constant: evaluate it now
            outs = eqn.primitive.bind(*[jax.numpy.asarray(x) for x in ins], **eqn.params)
            outs = [np.asarray(o) for o in outs] if eqn.primitive.multiple_results else [np.asarray(outs)]
        else:
            try:
                outs = _translate(eqn, ins, prog)
            except ExportError as err:  # an error only where the action needs it (see trace)
                outs = prog.emit("?", [x for x in ins if isinstance(x, str)], {"error": str(err)},
                                 outputs=len(eqn.outvars))
                outs = outs if isinstance(outs, list) else [outs]
        for var, value in zip(eqn.outvars, outs):
            env[var] = value
    return [read(v) for v in jaxpr.outvars]


def _name(x, prog: _Program) -> str:
    return x if isinstance(x, str) else prog.const(x)


def _translate(eqn, ins, prog: _Program) -> list:
    """The program ops of one equation on the observation (batch: the leading axis)."""
    name = eqn.primitive.name
    n = [_name(x, prog) for x in ins]
    if name in _UNARY:
        return [prog.emit(_UNARY[name], n[:1])]
    if name in _BINARY:
        return [prog.emit(_BINARY[name], n)]
    if name in _ELEMENTWISE:
        return [_ELEMENTWISE[name](prog, n, eqn.params)]
    if name in _STRUCTURAL:
        return _STRUCTURAL[name](eqn, ins, n, prog)
    raise ExportError(f"the policy uses {name}, which the exporter does not translate")


def _one(x: float):
    return np.float32(x)


# Elementwise primitives made of a few ops: (prog, input names, params) -> output name.
_ELEMENTWISE = {
    "ne": lambda prog, n, p: prog.emit("Not", [prog.emit("Equal", n)]),
    "not": lambda prog, n, p: prog.emit("Not", n),
    "rsqrt": lambda prog, n, p: prog.emit("Reciprocal", [prog.emit("Sqrt", n)]),
    "log1p": lambda prog, n, p: prog.emit("Log", [prog.emit("Add", [n[0], prog.const(_one(1))])]),
    "expm1": lambda prog, n, p: prog.emit("Sub", [prog.emit("Exp", n), prog.const(_one(1))]),
    "square": lambda prog, n, p: prog.emit("Mul", [n[0], n[0]]),
    "integer_pow": lambda prog, n, p: prog.emit("Pow", [n[0], prog.const(_one(p["y"]))]),
    "clamp": lambda prog, n, p: prog.emit("Max", [prog.emit("Min", [n[1], n[2]]), n[0]]),  # clamp(lo, x, hi)
    "concatenate": lambda prog, n, p: prog.emit("Concat", n, {"axis": int(p["dimension"])}),
}


def _select(eqn, ins, n, prog) -> list:
    if len(ins) != 3 or eqn.invars[0].aval.dtype != np.bool_:
        raise ExportError("select_n with more than two cases")
    return [prog.emit("Where", [n[0], n[2], n[1]])]


def _dot(eqn, ins, n, prog) -> list:
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs_rank = len(eqn.invars[0].aval.shape)
    if tuple(lc) != (lhs_rank - 1,) or tuple(rc) != (0,) or lb or rb or isinstance(ins[1], str):
        raise ExportError("a dot_general other than observation-features x weights")
    return [prog.emit("MatMul", n)]


def _cast(eqn, ins, n, prog) -> list:
    dtype = np.dtype(eqn.params["new_dtype"])
    return [prog.emit("Cast", n, {"to": "float32" if dtype.name == "bfloat16" else dtype.name})]


def _reshape(eqn, ins, n, prog) -> list:
    """reshape, broadcast_in_dim, squeeze, expand_dims: the batch axis stays first."""
    name, shape = eqn.primitive.name, list(eqn.outvars[0].aval.shape)
    if not shape or shape[0] != 1 or not isinstance(ins[0], str) or eqn.invars[0].aval.shape[:1] != (1,):
        raise ExportError(f"{name} that moves the batch axis")
    if name != "broadcast_in_dim":
        return [prog.emit("Reshape", [n[0], prog.ints([-1] + shape[1:])])]
    dims = eqn.params["broadcast_dimensions"]
    if not dims or dims[0] != 0:
        raise ExportError("broadcast_in_dim that moves the batch axis")
    kept = [1] * len(shape)
    for i, d in enumerate(dims):
        kept[d] = eqn.invars[0].aval.shape[i]
    reshaped = prog.emit("Reshape", [n[0], prog.ints([-1] + kept[1:])])
    return [prog.emit("Expand", [reshaped, prog.ints([1] + shape[1:])])]


def _slice(eqn, ins, n, prog) -> list:
    p = eqn.params
    if p.get("strides") not in (None, (1,) * len(p["start_indices"])):
        raise ExportError("a strided slice")
    starts, limits = list(p["start_indices"]), list(p["limit_indices"])
    if starts[0] != 0:
        raise ExportError("a slice of the batch axis")
    axes = list(range(1, len(starts)))
    return [prog.emit("Slice", [n[0], prog.ints(starts[1:]), prog.ints(limits[1:]), prog.ints(axes)])]


def _split(eqn, ins, n, prog) -> list:
    axis, start, outs = int(eqn.params["axis"]), 0, []
    if axis == 0:
        raise ExportError("a split of the batch axis")
    for size in eqn.params["sizes"]:
        outs.append(prog.emit("Slice", [n[0], prog.ints([start]), prog.ints([start + int(size)]), prog.ints([axis])]))
        start += int(size)
    return outs


def _reduce(eqn, ins, n, prog) -> list:
    name, axes = eqn.primitive.name, list(eqn.params["axes"])
    if 0 in axes:
        raise ExportError(f"{name} over the batch axis")
    op = {"reduce_sum": "ReduceSum", "reduce_max": "ReduceMax", "reduce_min": "ReduceMin"}[name]
    return [prog.emit(op, [n[0], prog.ints(axes)], {"keepdims": 0})]


def _argmax(eqn, ins, n, prog) -> list:
    (axis,) = eqn.params["axes"]
    index = prog.emit("ArgMax", n, {"axis": int(axis), "keepdims": 0})
    return [prog.emit("Cast", [index], {"to": np.dtype(eqn.params["index_dtype"]).name})]


# Primitives that need their equation's shapes: (eqn, inputs, input names, prog) -> output names.
_STRUCTURAL = {"select_n": _select, "dot_general": _dot, "convert_element_type": _cast, "reshape": _reshape,
               "broadcast_in_dim": _reshape, "squeeze": _reshape, "expand_dims": _reshape, "slice": _slice,
               "split": _split, "reduce_sum": _reduce, "reduce_max": _reduce, "reduce_min": _reduce,
               "argmax": _argmax}


def trace(engine, agent_state, obs_stats) -> dict:
    """The deterministic policy of (agent_state, obs_stats) as a program: {"program": [...],
    "consts": [...], "input", "output", "obs_size", "discrete"}."""
    agent = engine.agent
    memory = fresh_carry(agent, 1)
    key = jax.random.PRNGKey(0)
    size = int(np.prod(engine.spec.obs_shape))

    def act(obs, memory):
        return agent.act(agent_state, obs_stats, jnp.reshape(obs, (1,) + engine.spec.obs_shape), key, True, memory)[0]

    closed = jax.make_jaxpr(act)(jnp.zeros((1, size), jnp.float32), memory)
    held = [f"memory{i}" for i in range(len(jax.tree.leaves(memory)))]
    prog = _Program()
    (out,) = _run(closed.jaxpr, closed.consts, ["obs", *held], prog)
    if not isinstance(out, str):
        raise ExportError("the policy does not depend on its observation")
    live = _live(prog.ops, out)
    if set(held) & {i for op in live for i in op["inputs"]} or out in held:
        raise ExportError("a recurrent policy carries a memory between steps: export takes feed-forward ones")
    for op in live:
        if op["op"] == "?":
            raise ExportError(op["attrs"]["error"])
    return {"program": live, "consts": prog.consts, "output": out, "obs_size": size,
            "action_shape": list(closed.out_avals[0].shape[1:]), "discrete": bool(engine.spec.discrete)}


def _live(ops: list[dict], output: str) -> list[dict]:
    """The ops `output` needs, in order (the trace also holds what the policy computes and drops)."""
    needed, kept = {output}, []
    for op in reversed(ops):
        if needed & set(op["outputs"]):
            kept.append(op)
            needed.update(op["inputs"])
    return kept[::-1]


# ---- writing ----
def to_onnx(traced: dict):
    """The ONNX model of a traced policy."""
    try:
        import onnx  # the optional export extra
        from onnx import TensorProto, helper, numpy_helper  # the optional export extra, as above
    except ImportError:
        raise ExportError("writing .onnx needs the onnx package: .venv/bin/pip install -e '.[export]' "
                          "(or write a .npz, run by numpy alone)") from None
    used = {i for op in traced["program"] for i in op["inputs"]}
    inits = [numpy_helper.from_array(np.asarray(v), name=f"c{i}") for i, v in enumerate(traced["consts"])
             if f"c{i}" in used]
    nodes = []
    for op in traced["program"]:
        attrs = dict(op["attrs"])
        if op["op"] == "Cast":
            attrs["to"] = helper.np_dtype_to_tensor_dtype(np.dtype(attrs["to"]))
        nodes.append(helper.make_node(op["op"], op["inputs"], op["outputs"], **attrs))
    nodes.append(helper.make_node("Identity", [traced["output"]], ["action"]))
    obs = helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", traced["obs_size"]])
    action = helper.make_tensor_value_info("action", TensorProto.INT32 if traced["discrete"] else TensorProto.FLOAT,
                                           ["batch", *traced["action_shape"]])
    graph = helper.make_graph(nodes, "policy", [obs], [action], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="fusedrl")
    onnx.checker.check_model(model)
    return model


def write(path: str, engine, agent_state, obs_stats) -> dict:
    """Writes the policy to `path` (.onnx or .npz); returns what `check` needs."""
    traced = trace(engine, agent_state, obs_stats)
    if path.lower().endswith(".onnx"):
        model = to_onnx(traced)  # raises ExportError without the onnx package
        import onnx  # the optional export extra (to_onnx has just imported it)

        onnx.save(model, path)
    else:
        meta = {k: traced[k] for k in ("program", "output", "obs_size", "action_shape", "discrete")}
        np.savez(path, program=np.array(json.dumps(meta)),
                 **{f"c{i}": np.asarray(v) for i, v in enumerate(traced["consts"])})
    return traced


def run_file(path: str, obs: np.ndarray) -> np.ndarray:
    """The exported file's actions for `obs` [batch, obs_size]: onnxruntime for .onnx (when
    installed), `numpy_policy` for .npz."""
    if path.lower().endswith(".onnx"):
        import onnxruntime  # the optional export extra (run_file's caller catches its absence)

        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        return session.run(["action"], {"obs": np.asarray(obs, np.float32)})[0]
    return numpy_policy(path)(obs)


# ---- the robot's side: numpy only ----
def numpy_policy(path):
    """The .npz policy as a function obs [batch, obs_size] -> action, with numpy alone."""
    import json  # imported here: the function is copied onto a robot on its own, with its imports

    import numpy as np  # imported here too: the function travels alone

    data = np.load(path)
    meta = json.loads(str(data["program"]))
    ops = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Max": np.maximum,
           "Min": np.minimum, "Pow": np.power, "Less": np.less, "Greater": np.greater, "Equal": np.equal,
           "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal, "And": np.logical_and,
           "Or": np.logical_or, "Not": np.logical_not, "Neg": np.negative, "Tanh": np.tanh, "Exp": np.exp,
           "Log": np.log, "Sqrt": np.sqrt, "Abs": np.abs, "Sign": np.sign, "Floor": np.floor, "Ceil": np.ceil,
           "Reciprocal": np.reciprocal, "Identity": lambda x: x, "MatMul": np.matmul,
           "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Where": np.where,
           "Reshape": lambda x, s: x.reshape(s), "Expand": lambda x, s: np.broadcast_to(x, np.broadcast_shapes(
               x.shape, tuple(s))), "Concat": lambda *xs, axis: np.concatenate(xs, axis),
           "ReduceSum": lambda x, axes, keepdims: x.sum(tuple(axes), keepdims=bool(keepdims)),
           "ReduceMax": lambda x, axes, keepdims: x.max(tuple(axes), keepdims=bool(keepdims)),
           "ReduceMin": lambda x, axes, keepdims: x.min(tuple(axes), keepdims=bool(keepdims)),
           "ArgMax": lambda x, axis, keepdims: x.argmax(axis), "Cast": lambda x, to: x.astype(to)}

    def take(x, starts, stops, axes):
        index = [slice(None)] * x.ndim
        for axis, start, stop in zip(axes, starts, stops):
            index[axis] = slice(start, stop)
        return x[tuple(index)]

    ops["Slice"] = take

    def forward(obs):
        values = {k: data[k] for k in data.files if k != "program"}
        values["obs"] = np.asarray(obs, np.float32).reshape(-1, meta["obs_size"])
        with np.errstate(over="ignore"):  # Sigmoid's exp of a large input: inf, and 1 / (1 + inf) is its limit, 0
            for op in meta["program"]:
                out = ops[op["op"]](*[values[i] for i in op["inputs"]], **op["attrs"])
                values[op["outputs"][0]] = np.asarray(out, np.float32) if np.asarray(out).dtype == np.float64 else out
        return values[meta["output"]]

    return forward
