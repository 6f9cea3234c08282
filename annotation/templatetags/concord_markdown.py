"""{% load concord_markdown %} ... {{ text|markdown }}: Markdown rendered and sanitised."""

from django import template
from django.utils.safestring import SafeString

from annotation.rendering import render_markdown

register = template.Library()


@register.filter(name="markdown")
def markdown_filter(text: str | None) -> SafeString:
    return render_markdown(text or "")
