"""The package's layers (docs/layout.md): every import between its modules, at module level or
inside a function, points down or sideways within a layer, none closes a circle, and no module
imports another of the package inside a function (only optional third-party modules are
imported there)."""

import ast
import pathlib

import pytest

PACKAGE = "nemo_lens_cpp"
# The sources (a build directory may still hold a module the sources no longer have).
ROOT = pathlib.Path(__file__).resolve().parents[2] / "python" / PACKAGE

# Each module's layer, bottom first; a module may import modules of its own layer or below. The
# drawing in docs/layout.md is this table.
LAYERS = {
    # 0. the compiled core
    "_core": 0,
    # 1. foundation: pure data and rules, on the core only
    "package_info": 1, "groups": 1, "config": 1, "semconv": 1, "sampling": 1, "fallbacks": 1,
    "attributes": 1, "_setups": 1,
    # 2. lens' spans and context, metrics and logs, finished spans
    "spans": 2, "_tracer": 2, "metrics": 2, "exporters": 2,
    # 3. the OpenTelemetry adapter (plugs into the spans layer through its one hook)
    "otel": 3, "otel.join": 3, "otel.providers": 3, "otel.foreign": 3, "otel.exporter": 3,
    "otel.metric_reader": 3,
    # 4. set-up
    "telemetry": 4,
    # 5. NeMo Lens' modules: thin faces over the layers below
    "handle": 5, "helpers": 5, "providers": 5, "strategies": 5, "state": 5, "propagation": 5,
    "distributed": 5, "bridge": 5, "logging_bridge": 5,
    "resources": 5, "resources._detect": 5, "resources.slurm": 5, "resources.kubernetes": 5,
    "resources.local": 5,
    "instruments": 5, "instruments._cache": 5, "instruments.gym": 5, "instruments.rl": 5,
    "instruments.inference": 5,
    "contrib": 5, "contrib.nccl": 5, "contrib.ray": 5, "contrib.fastapi": 5, "contrib.aiohttp": 5,
    # 6. the package's face
    "": 6,
}


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str) -> bool:
    # Whether `name` (relative to the package, "" the package itself) is a module of the package.
    if name == "_core":
        return True
    path = ROOT.joinpath(*name.split(".")) if name else ROOT
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: pathlib.Path):
    """(imported module relative to the package, line, inside a function) for each import of a
    module of the package in `path`."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = [p for p in package if p]
    tree = ast.parse(path.read_text(), str(path))
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                        out.append((alias.name[len(PACKAGE) + 1:], child.lineno, inner))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[:len(package) - (child.level - 1)] if child.level > 1 \
                        else package
                    target = ".".join(base + ([child.module] if child.module else []))
                elif child.module == PACKAGE or (child.module or "").startswith(PACKAGE + "."):
                    target = child.module[len(PACKAGE) + 1:]
                else:
                    continue
                for alias in child.names:
                    sub = f"{target}.{alias.name}" if target else alias.name
                    out.append((sub if is_module(sub) else target, child.lineno, inner))
            visit(child, inner)

    visit(tree, False)
    return out


def graph():
    """module -> {imported module: first line}, with the implicit import of every package above
    an imported module (importing a.b runs a's __init__ first)."""
    edges = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = module_name(path)
        out = edges.setdefault(name, {})
        for target, line, _ in imports_of(path):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                above = ".".join(parts[:i])
                if above != name and not name.startswith(above + ".") and above not in out:
                    out[above] = line
    return edges


def test_every_module_has_a_layer():
    modules = {module_name(p) for p in ROOT.rglob("*.py")}
    assert modules - set(LAYERS) == set(), "add the new module to LAYERS and docs/layout.md"
    assert set(LAYERS) - modules - {"_core"} == set(), "a module in LAYERS no longer exists"


def test_no_module_of_the_package_is_imported_inside_a_function():
    late = [f"{module_name(p) or '__init__'}:{line} imports {target or PACKAGE}"
            for p in sorted(ROOT.rglob("*.py")) for target, line, inner in imports_of(p) if inner]
    assert late == []


def test_every_import_points_down_or_sideways():
    upward = [f"{name or '__init__'} (layer {LAYERS[name]}) imports {target} (layer "
              f"{LAYERS[target]}) at line {line}"
              for name, out in graph().items() for target, line in out.items()
              if LAYERS.get(target, 99) > LAYERS.get(name, -1)]
    assert upward == []


def test_no_import_closes_a_circle():
    edges = graph()
    state = {}  # module -> "open" while on the path, "done" after

    def walk(node, path):
        state[node] = "open"
        for target in edges.get(node, {}):
            if state.get(target) == "open":
                pytest.fail("import circle: " + " -> ".join(path[path.index(target):] +
                                                             [target]))
            if target not in state:
                walk(target, path + [target])
        state[node] = "done"

    for module in sorted(edges):
        if module not in state:
            walk(module, [module])


def test_the_checks_see_an_upward_import_and_a_circle(tmp_path, monkeypatch):
    # The walker itself: a fake package whose spans layer imports the adapter, which imports it
    # back, is caught by both checks.
    fake = tmp_path / PACKAGE
    (fake / "otel").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "spans.py").write_text("def f():\n    from .otel import join\n")
    (fake / "otel" / "__init__.py").write_text("")
    (fake / "otel" / "join.py").write_text("from .. import spans\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", fake)
    edges = graph()
    assert edges["spans"] == {"otel": 2, "otel.join": 2}
    assert edges["otel.join"] == {"spans": 1}
    with pytest.raises(AssertionError):
        test_no_module_of_the_package_is_imported_inside_a_function()
    with pytest.raises(AssertionError):
        test_every_import_points_down_or_sideways()
    with pytest.raises(pytest.fail.Exception):
        test_no_import_closes_a_circle()


def test_importing_the_package_imports_no_opentelemetry():
    # The adapter imports OpenTelemetry when a program uses it or at set-up, never at import:
    # a process that never touches OpenTelemetry pays nothing for it (here with the stand-in
    # importable, as the real one would be).
    import os
    import subprocess
    import sys

    stub = pathlib.Path(__file__).resolve().parent / "otel_stub"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(stub)] + sys.path))
    code = ("import sys, nemo_lens_cpp, nemo_lens_cpp.providers, nemo_lens_cpp.handle; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]"
    code = ("import opentelemetry.trace, nemo_lens_cpp, sys; "
            "print(type(opentelemetry.context._RUNTIME_CONTEXT).__name__)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "LensRuntimeContext"  # imported first: joined at import
