"""The warning of a failed assumption check (gradflow/_kit/_assumptions.py): attributed to the caller's line outside
gradflow, however deep inside it the check ran."""

import warnings

import pytest

from gradflow._kit._assumptions import AssumptionWarning, warn


def test_the_warning_is_the_callers():
    with pytest.warns(AssumptionWarning, match="^4.3 failed$") as record:
        warn("4.3 failed")
    assert record[0].filename == __file__ and issubclass(AssumptionWarning, UserWarning)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn("a tie", UserWarning)
    assert caught[0].category is UserWarning and caught[0].filename == __file__
