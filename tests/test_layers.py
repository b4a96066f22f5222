"""The package's layers import one way, with no cycle (module-level or lazy imports alike).

Imports are read from the source (ast), so a lazy import inside a function counts as much as a
top-level one: a layer may not reach another by deferring the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "demo"

# The layers of today's flat package: each name lists its modules, and what none of them may import
# (dotted prefixes). engine < models < page | benchmark; world trains and evaluates the models.
LAYERS = {
    "engine": (
        {
            "demo.events",
            "demo.sampling",
            "demo.drafters",
            "demo.speculative",
            "demo.metrics",
            "demo.race",
            "demo.detokenize",
            "demo.compat",
            "demo.export",
        },
        (
            "gradio",
            "plotly",
            "demo.ui",
            "demo.analysis_tab",
            "demo.render",
            "demo.charts",
            "demo.analysis_charts",
            "demo.bench",
            "demo.report",
            "demo.page_bench",
            "demo.gpu_check",
            "demo.soak",
            "demo.models",
            "demo.presets",
            "demo.hub",
            "demo.families",
            "demo.devices",
            "demo.world",
            "demo.validate",
        ),
    ),
    "page": (
        {"demo.ui", "demo.analysis_tab", "demo.render", "demo.charts", "demo.analysis_charts"},
        (
            "demo.bench",
            "demo.report",
            "demo.page_bench",
            "demo.gpu_check",
            "demo.soak",
            "demo.world.train",
            "demo.world.recipe",
            "demo.world.data",
            "demo.world.fit",
            "demo.world.experiments",
        ),
    ),
    "models": (
        {"demo.models", "demo.presets", "demo.hub", "demo.families", "demo.devices"},
        (
            "gradio",
            "plotly",
            "demo.ui",
            "demo.analysis_tab",
            "demo.render",
            "demo.charts",
            "demo.bench",
            "demo.report",
            "demo.world",
        ),
    ),
    "benchmark": (
        {"demo.bench", "demo.report", "demo.page_bench", "demo.gpu_check", "demo.soak"},
        ("demo.analysis_tab",),  # the benchmark drives the page only as a client, over HTTP (or ui, to launch it)
    ),
}


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
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: {m for m in _imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def _layer(name: str) -> str | None:
    return next((layer for layer, (members, _) in LAYERS.items() if name in members), None)


def _matches(imported: str, prefix: str) -> bool:
    return imported == prefix or imported.startswith(prefix + ".")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_imports_only_the_layers_below_it(name):
    layer = _layer(name)
    if layer is None:
        return
    wrong = sorted(
        imported for imported in _imports(MODULES[name]) for prefix in LAYERS[layer][1] if _matches(imported, prefix)
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
