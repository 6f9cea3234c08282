"""{% load concord_labels %} ... {{ turn.role|role_label }}: a stored value as a person reads it."""

from django import template

register = template.Library()

# The roles of a conversation's turns (annotation.parsing.ROLES), as the screens name them.
ROLE_LABELS = {"system": "System", "user": "User", "assistant": "Assistant"}


@register.filter(name="role_label")
def role_label(role: str) -> str:
    """``"assistant"`` -> ``"Assistant"``; a role outside the map is capitalised."""
    return ROLE_LABELS.get(role, str(role).capitalize())
