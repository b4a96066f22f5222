"""The package's layers import one way, with no cycle (module-level or lazy imports alike).

Imports are read from the source (ast), so a lazy import inside a function counts as much as a
top-level one: a layer may not reach another by deferring the import.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "demo"

# The layers, as packages (dotted prefixes): each lists what none of its modules may import.
# engine < models < session < page | serve; world is the embedded world's runtime data, below
# everything. lab (benchmarks, the world's training, experiments) and deploy sit beside the app:
# nothing the app runs imports them.
APP_FORBIDS = ("demo.lab", "demo.deploy", "demo.batch")
LAYERS = {
    "engine": (
        ("demo.engine",),
        ("gradio", "plotly", "demo.models", "demo.world", "demo.session", "demo.page", "demo.serve", *APP_FORBIDS),
    ),
    "models": (
        ("demo.models",),
        ("gradio", "plotly", "demo.world", "demo.session", "demo.page", "demo.serve", *APP_FORBIDS),
    ),
    "session": (("demo.session",), ("gradio", "plotly", "demo.page", "demo.serve", *APP_FORBIDS)),
    # The page reads runs through the session: it touches no model, cache or logits itself.
    "page": (
        ("demo.page",),
        (
            "torch",
            "transformers",
            *APP_FORBIDS,
            "demo.models.loader",
            "demo.engine.speculative",
            "demo.engine.drafters",
            "demo.engine.sampling",
        ),
    ),
    # The server's front door: the guard, visitors' shares, the upload folder; no run, no page.
    "serve": (
        ("demo.serve",),
        ("torch", "transformers", "demo.engine", "demo.models.loader", "demo.page", *APP_FORBIDS),
    ),
    # The benchmark drives the page only as a client (over HTTP, or its launch function).
    "lab": (("demo.lab",), ("demo.page.handlers", "demo.page.analysis.tab", "demo.deploy")),
    "world": (
        ("demo.world",),
        ("gradio", "plotly", "demo.engine", "demo.models", "demo.session", "demo.page", "demo.serve", *APP_FORBIDS),
    ),
    # The batch on Ray Data runs the session layer's analysis and writes the tab's views as a report;
    # the app never imports it (Ray is not among the app's requirements).
    "batch": (("demo.batch",), ("gradio", "demo.serve", "demo.page.analysis.tab", "demo.lab", "demo.deploy")),
    # Deployment stages the app's files; it reaches no run, page or benchmark.
    "deploy": (
        ("demo.deploy",),
        ("gradio", "plotly", "demo.engine", "demo.session", "demo.page", "demo.serve", "demo.lab"),
    ),
}
MAX_LINES = 400
# The one import across the layers' rule: the world trains the hidden-state drafters' networks,
# which the engine runs (plain torch modules, no model call).
ALLOWED = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, as absolute dotted names (`from demo import x` gives demo.x)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: climb level - 1 packages from this one
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names]
            found.update(names)
            # `from package import module` imports the module, as `import package.module` does;
            # the package itself only when a name it defines is imported.
            if not all(_is_module(n) for n in names):
                found.add(base)
    return found


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: {m for m in _imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def _matches(imported: str, prefix: str) -> bool:
    return imported == prefix or imported.startswith(prefix + ".")


def _layer(name: str) -> str | None:
    return next((layer for layer, (members, _) in LAYERS.items() if any(_matches(name, m) for m in members)), None)


def test_every_module_lives_in_a_layer_package():
    # The package root holds only its __init__: a loose module would belong to no layer and
    # escape the directions below.
    assert sorted(name for name in MODULES if name != "demo" and _layer(name) is None) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_imports_only_the_layers_below_it(name):
    layer = _layer(name)
    if layer is None:
        return
    wrong = sorted(
        imported
        for imported in _imports(MODULES[name])
        for prefix in LAYERS[layer][1]
        if _matches(imported, prefix) and (name, imported) not in ALLOWED
    )
    assert not wrong, f"{name} (layer {layer}) imports {wrong}"


def test_the_package_has_no_import_cycle():
    # Tarjan's strongly connected components over the import graph: any component of two or more
    # modules is a cycle.
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_over_400_lines(name):
    lines = MODULES[name].read_text().count("\n")
    assert lines <= MAX_LINES, f"{name} has {lines} lines; split it (the limit is {MAX_LINES})"


def test_the_engine_names_every_module_it_has_and_counts_them():
    doc = (PACKAGE / "engine" / "__init__.py").read_text()
    engine = sorted(p.stem for p in (PACKAGE / "engine").glob("*.py") if p.stem != "__init__")
    listed = sorted(re.findall(r"^    ([a-z_]+)  +\S", doc, flags=re.MULTILINE))
    assert listed == engine
    assert f"Its {len(engine)} modules" in doc
