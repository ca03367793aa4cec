"""CHANGELOG.md lists every renamed name, with its replacement (each warns: the families' tests check that)."""

import inspect
import re
from pathlib import Path

import gradflow

CHANGELOG = Path(__file__).resolve().parents[1] / "CHANGELOG.md"


def _deprecated() -> list[tuple[str, str, str]]:
    """``(class, old, new)`` for every deprecated attribute of gradflow's public classes."""
    out = []
    for name in gradflow.__all__:
        cls = getattr(gradflow, name)
        if not inspect.isclass(cls):
            continue
        for attr, value in vars(cls).items():
            doc = getattr(value.fget if isinstance(value, property) else value, "__doc__", None) or ""
            found = re.match(r"Deprecated: use ``(\w+)``", doc)
            if found:
                out.append((name, attr, found[1]))
    return out


def test_every_renamed_name_is_in_the_changelog():
    text = CHANGELOG.read_text()
    vocabulary = text[text.index("### Vocabulary") : text.index("### Added")]
    renamed = _deprecated()
    assert len(renamed) >= 9
    for cls, old, new in renamed:
        call = "()" if callable(getattr(getattr(gradflow, cls), old)) else ""
        row = f"| `{cls}.{old}{call}` | `{cls}.{new}{call}` |"
        assert row in vocabulary, row
    for old in ("alphas", "log_alphas"):
        assert f"`compare_limits({old}=...)`" in vocabulary
