"""``{{ value|metric_value }}``: a metric as the run pages write it, the same as charts.js's
``fmt``: 4 decimals with trailing zeros dropped (0.6, 12.3457); below 0.001 or from 100000 on,
scientific with 4 significant digits, trailing zeros dropped and a two-digit exponent (5e-06,
1.235e-04, 1.5e+05), so a learning rate of 5e-06 never reads "0.0000"."""

from __future__ import annotations

import math

from django import template

register = template.Library()


@register.filter
def metric_value(value: object) -> str:
    """``value`` (a number) as text; an en dash (as charts.js writes) for None, non-numbers and
    non-finite values."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "\u2013"
    size = abs(value)
    if size != 0 and (size < 0.001 or size >= 100_000):
        mantissa, exponent = f"{value:.3e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{exponent}"  # Python writes the exponent with a sign and 2+ digits
    text = f"{round(value, 4):.4f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text
