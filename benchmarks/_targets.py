"""A benchmark target: a measured value against its goal, and the verdict every report prints.

Every benchmark that checks a target of the project's performance goals (fetch, sampling,
e2e, overlap) builds its verdicts with `check` and prints them with `verdict`, so that "met",
a gap and "not measured" mean the same thing in every report:

- ``met`` is True or False, or None where the value was not measured (None, NaN or infinite)
  or no goal applies;
- ``gap`` is how far a missed value lies from the goal, as a fraction of the goal (0.0 when
  met, None when not measured).
"""

from __future__ import annotations

import math
from typing import Any

AT_LEAST = ">="
AT_MOST = "<="


def measured(value: float | None) -> bool:
    """Whether ``value`` is a measurement: a finite number."""
    return value is not None and math.isfinite(value)


def check(value: float | None, goal: float | None, *, at_least: bool = True, **info: Any) -> dict:
    """The verdict of ``value >= goal`` (or ``value <= goal`` with ``at_least=False``).

    Returns ``{"value", "goal", "comparison", "met", "gap"}`` and the ``info`` items.
    """
    met: bool | None = None
    gap: float | None = None
    if goal is not None and measured(value):
        assert value is not None
        short = (goal - value) if at_least else (value - goal)
        met = bool(short <= 0)
        gap = max(0.0, short / abs(goal)) if goal else (0.0 if met else math.inf)
    return {
        "value": value,
        "goal": goal,
        "comparison": AT_LEAST if at_least else AT_MOST,
        "met": met,
        "gap": gap,
    } | info


def verdict(t: dict) -> str:
    """``met``, ``gap 12.5%`` or ``not measured``."""
    if t["met"] is None:
        return "not measured"
    return "met" if t["met"] else f"gap {t['gap']:.1%}"
