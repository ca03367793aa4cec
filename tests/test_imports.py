"""The package's structure: imports go one way (no cycle, lazy imports inside functions included), the solver kit
and each model family import no family or layer above them, and no module or function grows past its size."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gradflow"


def _modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = list(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its source (top level or inside functions)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            candidates = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        found.update(c for c in candidates if c in modules and c != name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """An import cycle as a list of modules (a package's ``__init__`` importing its own submodules does not count:
    Python runs it first)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(u: str):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if v.startswith(u + "."):
                continue  # a package re-exporting its submodules
            if state.get(v) == 1:
                return stack[stack.index(v) :] + [v]
            if v not in state and (found := visit(v)):
                return found
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state and (found := visit(u)):
            return found
    return None


def test_no_import_cycle():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()))


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


_ABOVE_THEIR_FAMILY = {"gradflow._diagonal._experiments": ("gradflow._api",)}
"""Modules of a family built on the public entry points, which they may import: perturb-and-continue continues a
diagonal flow with ``simulate_flow``. Their package's ``__init__`` does not import them (the cycle test checks)."""


@pytest.mark.parametrize(
    "lower, above",
    [
        ("gradflow._solver", ("gradflow._diagonal", "gradflow._factorized", "gradflow._api", "gradflow._registry")),
        ("gradflow._diagonal", ("gradflow._factorized", "gradflow._api", "gradflow._registry", "gradflow._demo")),
        ("gradflow._factorized", ("gradflow._diagonal", "gradflow._api", "gradflow._registry", "gradflow._demo")),
        ("gradflow._kit", ("gradflow._solver", "gradflow._diagonal", "gradflow._factorized", "gradflow._api")),
        (
            "gradflow._kit",
            ("gradflow._registry", "gradflow._demo", "gradflow._cli", "gradflow._sweep", "gradflow.models"),
        ),
    ],
)
def test_layers_import_downwards_only(lower, above):
    """The solver kit imports no engine; the family kit no family, nor the solver kit beside it; a family imports
    neither the other family nor anything above it."""
    graph = _graph()
    for name, targets in graph.items():
        if name == lower or name.startswith(lower + "."):
            bad = [t for t in targets if any(t == a or t.startswith(a + ".") for a in above)]
            bad = [t for t in bad if t not in _ABOVE_THEIR_FAMILY.get(name, ())]
            assert not bad, f"{name} imports {bad}"


def test_modules_and_functions_stay_small():
    """No module over 500 lines and no function over 150."""
    for name, path in _modules().items():
        source = path.read_text()
        assert len(source.splitlines()) <= 500, f"{name}: {len(source.splitlines())} lines"
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                assert length <= 150, f"{name}.{node.name}: {length} lines"
