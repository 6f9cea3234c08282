"""Plain-words formats for monitoring pages: shares as percentages, signed differences as
percentage points, a dash for a figure that is not defined (None or NaN)."""

from __future__ import annotations

import math

from django import template

register = template.Library()

DASH = "\u2013"  # an en dash, as the other pages show an undefined figure


def _undefined(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


@register.filter(name="percent")
def percent(value: float | None, digits: int = 0) -> str:
    """A share in [0, 1] as a percentage: 1.0 -> "100%", 0.125 -> "13%" (``digits`` decimals)."""
    if _undefined(value):
        return DASH
    return f"{float(value) * 100:.{int(digits)}f}%"


@register.filter(name="points")
def points(value: float | None, digits: int = 0) -> str:
    """A signed difference of two shares in percentage points: 0.125 -> "+13 points"."""
    if _undefined(value):
        return DASH
    return f"{float(value) * 100:+.{int(digits)}f} points"
