"""The warning of a failed assumption check (paper Assumptions 4.2–4.4; docs/math.md, *The assumptions, and how
gradflow checks them*), emitted at the line of the user's code that called gradflow."""

from __future__ import annotations

import os
import sys
import warnings

_PACKAGE = os.path.dirname(os.path.dirname(__file__)) + os.sep  # gradflow/, as the frames name their files


class AssumptionWarning(UserWarning):
    """An assumption of the paper's Theorem 4.5 (4.2, 4.3 or 4.4) failed a numerical check."""


def warn(message: str, category: type[Warning] = AssumptionWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the innermost frame outside the gradflow package: the
    caller's line, however deep inside gradflow the check ran."""
    frame, level = sys._getframe(1), 2  # stacklevel 2: the caller of this function
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
