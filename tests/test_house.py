"""The house rules a newcomer can rely on, checked on the source: modules stay small, functions
short, configs and states narrow, no module imports another that imports it back, and imports
sit at the top of their module (a local one names its reason beside it: an optional extra, or
a measured start-up cost)."""

from __future__ import annotations

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("sim", "agents", "envs")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_CLASS_FIELDS = 20


def sources(with_train: bool = True) -> dict[str, str]:
    """Module name -> source of every module of the project's packages (and train.py)."""
    out = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
                    out[module] = open(path).read()
    if with_train:
        out["train"] = open(os.path.join(ROOT, "train.py")).read()
    return out


def test_modules_stay_under_400_lines():
    long = {m: s.count("\n") for m, s in sources(with_train=False).items() if s.count("\n") > MAX_MODULE_LINES}
    assert not long, long


def test_functions_stay_under_60_lines():
    long = []
    for module, src in sources().items():
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{module}:{node.lineno} {node.name} ({length} lines)")
    assert not long, long


MAX_AGENT_CONFIG_FIELDS = 30


def _base_name(node: ast.expr) -> str | None:
    """A base class's name as written (`Base`, `module.Base`, `Base[T]`)."""
    node = node.value if isinstance(node, ast.Subscript) else node
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def class_fields() -> dict[tuple[str, str], set[str]]:
    """(module, class) -> the names of its annotated fields, its project bases' counted in."""
    own = {}
    for module, src in sources().items():
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.ClassDef):
                fields = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                          and isinstance(s.target, ast.Name) and "ClassVar" not in ast.unparse(s.annotation)}
                own[(module, node.name)] = (fields, [_base_name(b) for b in node.bases])
    by_name = {}
    for module, name in own:
        by_name.setdefault(name, []).append(module)

    def resolve(key, seen=()):
        fields, bases = own[key]
        out = set(fields)
        for base in bases:
            modules = by_name.get(base, [])
            module = key[0] if key[0] in modules else (modules[0] if modules else None)
            if module is not None and (module, base) not in seen:
                out |= resolve((module, base), seen + (key,))
        return out

    return {key: resolve(key) for key in own}


def test_classes_have_at_most_20_fields():
    """Counted with the fields a class inherits. An agent's config is the set of its flags (one
    flat namespace with brax.training's names, which a researcher ports a config into by copying
    its numbers): its ceiling is 30, a budget that still stops it growing unnoticed."""
    wide = []
    for (module, name), fields in class_fields().items():
        agent_config = module.startswith("agents.") and name.endswith("Config")
        if len(fields) > (MAX_AGENT_CONFIG_FIELDS if agent_config else MAX_CLASS_FIELDS):
            wide.append(f"{module}.{name} ({len(fields)} fields)")
    assert not wide, wide


def test_no_two_classes_share_a_name():
    """A class's name finds one class: a reader (and the field count above) never has to ask
    which `Pbt` or `SimToReal` a line means."""
    modules = {}
    for module, name in class_fields():
        modules.setdefault(name, []).append(module)
    shared = {name: where for name, where in modules.items() if len(where) > 1}
    assert not shared, shared


def test_the_field_count_sees_inherited_fields():
    fields = class_fields()
    assert len(fields[("sim.core.spec", "CoreSpec")]) > len(fields[("sim.core.spec", "Sizes")]) >= 6
    assert fields[("sim.core.spec", "Sizes")] <= fields[("sim.core.spec", "CoreSpec")]


def _imported(node: ast.AST, module: str, known: set[str]) -> set[str]:
    """The project modules an import statement names."""
    names = set()
    if isinstance(node, ast.Import):
        names = {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            base = ".".join(module.split(".")[:-node.level] + ([base] if base else []))
        names = {base} | {f"{base}.{a.name}" for a in node.names}
    return {n for n in names if n in known}


def test_no_module_imports_one_that_imports_it_back():
    srcs = sources()
    known = set(srcs)
    graph = {m: set().union(*(_imported(n, m, known) for n in ast.walk(ast.parse(s)))) - {m}
             for m, s in srcs.items()}
    # a package's __init__ importing its own submodules is how a package presents them, not a circle
    graph = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}
    circles, state = [], {}

    def visit(m, path):
        state[m] = "open"
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                circles.append(path[path.index(d):] + [d] if d in path else [m, d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not circles, circles


# Who may import whom, lowest first: envs, the core (which owns the contract with an agent,
# sim/core/contract.py), the agents, the run layer, train.py. A package imports nothing from those
# above it, at the top of a module or inside a function (the run layer hands an agent what it
# reads from outside its program, as a distilling agent's teacher).
BELOW = {"envs": ("sim", "agents", "train"), "sim.core": ("agents", "sim.run", "train"),
         "agents": ("sim.run", "train"), "sim.run": ("train",)}


def test_no_module_imports_from_a_layer_above_it():
    srcs = sources()
    known = set(srcs)
    upward = []
    for module, src in srcs.items():
        above = next((v for k, v in BELOW.items() if module == k or module.startswith(k + ".")), ())
        for node in ast.walk(ast.parse(src)):
            for name in _imported(node, module, known):
                if any(name == a or name.startswith(a + ".") for a in above):
                    upward.append(f"{module}:{node.lineno} imports {name}")
    assert not upward, upward


def reason(line: str) -> str:
    """The comment of a source line, less a leading `noqa: CODES` (empty where it has none)."""
    comment = line.split("#", 1)[1].strip() if "#" in line else ""
    return re.sub(r"^noqa(: [A-Z0-9, ]+)?\s*", "", comment)


def test_imports_sit_at_the_top_or_name_their_reason():
    """A local import's comment says why it is there in words of its own (at least three), not
    a pointer to another line's reason."""
    local = []
    for module, src in sources().items():
        lines = src.splitlines()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    why = reason(lines[sub.lineno - 1]) if isinstance(sub, (ast.Import, ast.ImportFrom)) else None
                    if why is not None and (len(why.split()) < 3 or why.startswith(("(likewise", "(see"))):
                        local.append(f"{module}:{sub.lineno}: {lines[sub.lineno - 1].strip()}")
    assert not local, local
