"""Renamed names that keep working for one release (gradflow/_kit/_deprecation.py): each forwards to its new name
and warns once per use, at the caller's line, naming the replacement and the release that removes it."""

import pytest

from gradflow._kit._deprecation import REMOVED_IN, RenamedKeys, renamed, renamed_method, renamed_scales


class _Old:
    new = 3

    def twice(self, x):
        return 2 * x

    old = renamed("new", "old", "_Old")
    double = renamed_method("twice", "double", "_Old")


def test_a_renamed_attribute_and_method_forward_and_warn_at_the_callers_line():
    message = rf"^_Old.old is deprecated and will be removed in gradflow {REMOVED_IN}; use _Old.new \(CHANGELOG"
    with pytest.warns(DeprecationWarning, match=message) as record:
        assert _Old().old == 3
    assert len(record) == 1 and record[0].filename == __file__
    with pytest.warns(DeprecationWarning, match=r"^_Old.double\(\) is deprecated .* use _Old.twice\(\)"):
        assert _Old().double(4) == 8
    assert _Old.old.__doc__ == "Deprecated: use ``new``." and _Old.double.__name__ == "double"


def test_renamed_keys_read_with_a_warning():
    summary = RenamedKeys({"weights": 1.5}, {"beta": "weights"}, "Comparison.summary()")
    with pytest.warns(DeprecationWarning, match=r'Comparison.summary\(\)\["beta"\] is deprecated'):
        assert summary["beta"] == 1.5
    assert "beta" not in summary and list(summary) == ["weights"]
    with pytest.raises(KeyError):
        summary["b"]


def test_renamed_scale_keywords():
    with pytest.warns(DeprecationWarning, match=r"f\(alphas=...\) is deprecated .* use f\(alpha=...\)"):
        assert renamed_scales({"alphas": [0.1]}, None, None, who="f") == ([0.1], None)
    with pytest.warns(DeprecationWarning, match=r"f\(log_alphas=...\)"):
        assert renamed_scales({"log_alphas": [-3.0]}, None, None, who="f") == (None, [-3.0])
    assert renamed_scales({}, 0.5, None, who="f") == (0.5, None)
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="f: give alpha= alone"):
        renamed_scales({"alphas": [0.1]}, 0.2, None, who="f")
    with pytest.raises(TypeError, match="unexpected keyword argument 'alphaz'"):
        renamed_scales({"alphaz": 1}, None, None, who="f")
