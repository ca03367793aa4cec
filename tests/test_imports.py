"""The package's structure: imports go one way (no cycle, lazy imports inside functions included), the solver kit
and each model family import no family or layer above them, and no module or function grows past its size."""

import ast
from pathlib import Path

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


def _families() -> list[str]:
    """The registered families' packages (``gradflow._diagonal``, ...), from the registry."""
    from gradflow._registry import FAMILIES

    return [type(f).__module__.rsplit(".", 1)[0] for f in FAMILIES]


_ABOVE = (
    "gradflow._api",
    "gradflow._registry",
    "gradflow._demo",
    "gradflow._cli",
    "gradflow._sweep",
    "gradflow.models",
)
"""What lies above the families: the entry points, the registry, the apps and the public table of tasks."""

_APPS = ("_experiments", "_pipeline")
"""A family's own apps (perturb-and-continue, a ``gradflow compare`` pipeline): modules built on the public entry
points, which they may import, with the demo's kit (``gradflow._demo._steps``, ``_report``, ``_pipelines``). No
other module of their family imports them, so the engine stays below the entry points."""


def _layers() -> list[tuple[str, tuple[str, ...]]]:
    families = tuple(_families())
    return [
        ("gradflow._solver", families + ("gradflow._kit",) + _ABOVE),
        ("gradflow._kit", families + ("gradflow._solver",) + _ABOVE),
        *((f, tuple(o for o in families if o != f) + _ABOVE) for f in families),
    ]


def test_layers_import_downwards_only():
    """The solver kit imports no engine, nor the family kit beside it; the family kit no family, nor the solver
    kit; a family imports neither another family nor anything above it, except its apps (``_APPS``), which build
    on the entry points and which its engine does not import."""
    graph = _graph()
    assert len(_layers()) >= 4
    for lower, above in _layers():
        for name, targets in graph.items():
            if name != lower and not name.startswith(lower + "."):
                continue
            bad = [t for t in targets if any(t == a or t.startswith(a + ".") for a in above)]
            if name.rsplit(".", 1)[-1] in _APPS:
                demo_kit = ("gradflow._demo._steps", "gradflow._demo._report", "gradflow._demo._pipelines")
                bad = [t for t in bad if t != "gradflow._api" and t not in demo_kit]
            else:
                bad += [t for t in targets if t.startswith(lower + ".") and t.rsplit(".", 1)[-1] in _APPS]
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


_LAID_OUT = ("",) + tuple(sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()))
"""The packages whose tests are laid out like the tree: every one (``""``: gradflow's own top-level modules), so that a
new family's subpackage is held to it too."""

_TESTED_ELSEWHERE = {
    "gradflow/_data.py": "the models' data and loss checks, through the models (tests/diagonal/test_model.py)",
    "gradflow/_outputs.py": "save, load and report, on each family's results (tests/*/test_compare.py)",
    "gradflow/_registry.py": "with the public table of tasks it makes (tests/models/test_registry.py)",
    "gradflow/_results.py": "how the entry points end, through them (tests/test_api.py, tests/test_bad_inputs.py)",
}
"""Modules with logic whose tests are those of the modules that use them, and where."""


def test_every_module_with_logic_has_its_test_module():
    """``gradflow/_pkg/_name.py`` is tested in ``tests/pkg/test_name.py`` (``gradflow/_name.py`` in
    ``tests/test_name.py``) where it defines a function or a class, but for the short list above."""
    tests = PACKAGE.parent / "tests"
    missing = []
    for package in _LAID_OUT:
        for path in sorted((PACKAGE / package).glob("_*.py")):
            if path.name == "__init__.py" or path.name == "__main__.py":
                continue
            defines = any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in ast.parse(path.read_text()).body)
            test = tests / package.lstrip("_") / f"test{path.stem}.py"
            if defines and not test.exists() and str(path.relative_to(PACKAGE.parent)) not in _TESTED_ELSEWHERE:
                missing.append(f"{path.relative_to(PACKAGE.parent)} -> {test.relative_to(PACKAGE.parent)}")
    assert not missing, missing
    for name in _TESTED_ELSEWHERE:
        assert (PACKAGE.parent / name).exists(), name
