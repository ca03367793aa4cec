"""The documentation: the site builds without warnings, and its Python examples run.

Conventions for the Markdown pages (``docs/**/*.md`` and ``README.md``):

- Every fenced ```` ```python ```` block is executed, page by page, in order, in one namespace per
  page (later blocks may use names defined by earlier ones), in a temporary working directory.
- A block preceded by the line ``<!-- skip -->`` (blank lines in between are allowed) is not run:
  use it sparingly, for code that needs a GPU, a data set on disk, or hours.
- A block preceded by ``<!-- slow -->`` is heavy (seconds to minutes of CPU). ``make test`` runs a
  page's blocks up to its first slow block; the slow test (``make test-all``) runs the whole page.
  Heavy examples are therefore still executed, just not by the fast suite.

Other fences (``bash``, ``text``, ``console``) are never executed.
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

SKIP_MARK = "<!-- skip -->"
SLOW_MARK = "<!-- slow -->"
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\s`]*)[^`]*$")


def _pages() -> list[Path]:
    pages = sorted(DOCS.rglob("*.md"))
    readme = ROOT / "README.md"
    if readme.exists():
        pages.append(readme)
    return pages


def extract_blocks(text: str) -> list[dict]:
    """Fenced code blocks of ``text``: their language, source (dedented), first line and skip flag."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m["fence"], m["info"].lower()
        prev = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        body = []
        j = i + 1
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                break
            body.append(lines[j])
            j += 1
        source = textwrap.dedent("\n".join(body))
        blocks.append(
            {"lang": info, "source": source, "line": i + 2, "skip": prev == SKIP_MARK, "slow": prev == SLOW_MARK}
        )
        i = j + 1
    return blocks


def _python_blocks(page: Path) -> list[dict]:
    return [b for b in extract_blocks(page.read_text(encoding="utf-8")) if b["lang"] in ("python", "py")]


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _has_slow(page: Path) -> bool:
    return any(b["slow"] for b in _python_blocks(page))


def _fast_params():
    return [pytest.param(p, id=_page_id(p)) for p in _pages() if _python_blocks(p) and not _python_blocks(p)[0]["slow"]]


def _slow_params():
    return [pytest.param(p, id=_page_id(p), marks=pytest.mark.slow) for p in _pages() if _has_slow(p)]


def _run_page(page: Path, tmp_path: Path, monkeypatch, *, slow: bool) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    for block in _python_blocks(page):
        if block["slow"] and not slow:
            break
        if block["skip"]:
            continue
        where = f"{_page_id(page)}:{block['line']}"
        code = compile(block["source"], where, "exec")
        try:
            exec(code, namespace)  # noqa: S102 - executing our own documentation
        except Exception as err:  # noqa: BLE001 - re-raised with the block's location
            raise AssertionError(f"the example at {where} failed: {type(err).__name__}: {err}") from err
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.parametrize("page", _fast_params())
def test_examples_run(page, tmp_path, monkeypatch):
    """The ``python`` blocks of a page run, in order, in one namespace, up to its first slow block."""
    _run_page(page, tmp_path, monkeypatch, slow=False)


@pytest.mark.parametrize("page", _slow_params())
def test_slow_examples_run(page, tmp_path, monkeypatch):
    """Pages with slow blocks: all their blocks, in order (``make test-all``)."""
    _run_page(page, tmp_path, monkeypatch, slow=True)


def test_extractor_finds_the_examples():
    """The extractor sees fences, languages, indented fences and the skip marker."""
    text = textwrap.dedent(
        """\
        intro
        ```python
        a = 1
        ```
        <!-- skip -->

        ```python
        raise RuntimeError
        ```
        1. step

            ```python
            b = a + 1
            ```
        <!-- slow -->
        ```python
        c = 3
        ```
        ```bash
        make demo
        ```
        """
    )
    blocks = extract_blocks(text)
    assert [b["lang"] for b in blocks] == ["python", "python", "python", "python", "bash"]
    assert [b["skip"] for b in blocks] == [False, True, False, False, False]
    assert [b["slow"] for b in blocks] == [False, False, False, True, False]
    assert blocks[2]["source"].strip() == "b = a + 1"
    assert blocks[0]["line"] == 3
    # the real pages have examples, and skipped ones are the exception
    all_blocks = [b for p in _pages() for b in _python_blocks(p)]
    assert len(all_blocks) >= 10
    assert sum(b["skip"] for b in all_blocks) <= len(all_blocks) // 3


_IDENT = re.compile(r"^:::\s+(?P<path>[A-Za-z_][\w.]*)\s*$", re.MULTILINE)


def _reference_targets() -> list[tuple[str, str]]:
    out = []
    for page in _pages():
        for m in _IDENT.finditer(page.read_text(encoding="utf-8")):
            out.append((_page_id(page), m["path"]))
    return out


def _resolve(path: str):
    parts = path.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def test_api_reference_targets_exist():
    """Every ``::: object`` in the API pages names an object that imports (fast, without mkdocs)."""
    targets = _reference_targets()
    assert targets, "no ::: directives found in the docs"
    missing = []
    for page, path in targets:
        try:
            _resolve(path)
        except (ImportError, AttributeError) as err:
            missing.append(f"{page}: {path} ({type(err).__name__}: {err})")
    assert not missing, "API reference names objects that do not exist:\n" + "\n".join(missing)


def test_nav_pages_exist():
    """Every page in the mkdocs nav exists (a clearer message than the build's)."""
    yml = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = yml.split("\nnav:", 1)[1].split("\n\n", 1)[0]
    names = re.findall(r":\s*([\w./-]+\.md)\s*$", nav, flags=re.MULTILINE)
    assert names
    missing = [n for n in names if not (DOCS / n).exists()]
    assert not missing, f"pages named in mkdocs.yml's nav but missing from docs/: {missing}"


def test_no_control_characters():
    """No control characters in the pages: a formula written through a non-raw Python string turns ``\\rho``,
    ``\\beta``, ``\\alpha``, ``\\times`` into a carriage return, a backspace, a bell, a tab."""
    bad = []
    for page in [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]:
        for k, line in enumerate(page.read_bytes().split(b"\n"), 1):
            if re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", line):
                bad.append(f"{page.relative_to(ROOT)}:{k}: {line[:80]!r}")
    assert not bad, "control characters (write the formula with a raw string):\n" + "\n".join(bad)


def test_docs_build_strict(tmp_path):
    """``mkdocs build --strict`` succeeds: no broken links, no missing pages, no docstring warnings."""
    try:
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError as err:  # pragma: no cover - depends on the environment
        pytest.skip(f"mkdocs and mkdocstrings-python are not installed ({err}); install the 'docs' extra")
    exe = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    cmd = [exe] if exe else [sys.executable, "-m", "mkdocs"]
    site = tmp_path / "site"
    proc = subprocess.run(
        [*cmd, "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert "WARNING" not in proc.stderr, proc.stderr
    assert (site / "index.html").exists()
    assert (site / "math" / "index.html").exists()


def test_the_families_table_is_the_registry():
    """docs/vocabulary.md's table of the families, which the entry points' docstrings point to, has one row per
    registered family naming its model, solver options and four result types, in the registry's order."""
    from gradflow._registry import FAMILIES

    text = (ROOT / "docs" / "vocabulary.md").read_text()
    table = text.split("## The families", 1)[1].split("\n\n")[2]
    rows = [[cell.strip().strip("`") for cell in line.split("|")[1:-2]] for line in table.splitlines()[2:]]
    want = [
        [f.name, f.model_type.__name__, f.solver_type.__name__, *(t.__name__ for t in f.result_types)] for f in FAMILIES
    ]
    assert rows == want
