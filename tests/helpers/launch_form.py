"""The admin's launch form as a browser posts it back."""

from __future__ import annotations

from typing import Any

from django import forms


def browser_data(form) -> dict[str, Any]:
    """What a browser posts back for an unchanged form: each field's rendered value (checkboxes
    only when ticked, nothing for disabled fields)."""
    data: dict[str, Any] = {}
    for name, field in form.fields.items():
        if field.disabled:
            continue
        value = form[name].value()
        if isinstance(field.widget, forms.CheckboxInput):
            if value:
                data[name] = "on"
            continue
        data[name] = shown_value(field, value)
    return data


def shown_value(field: forms.Field, value: Any) -> str:
    """The text a browser sends for ``value`` as the widget renders it (a select: its option)."""
    shown = field.widget.format_value(value)
    if isinstance(shown, list):
        shown = shown[0] if shown else ""
    return "" if shown is None else str(shown)
