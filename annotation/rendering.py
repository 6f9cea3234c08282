"""Markdown to sanitised HTML for prompts, responses and guidelines.

LLM output often contains HTML. Raw HTML in the source is shown as text (the Markdown parser's HTML
handling is switched off, so ``<script>`` appears literally and never becomes an element); the result
is then cleaned with nh3 (an allow-list sanitiser) as a second line of defence: no script, no event
handlers, no style, no images, no iframes or other remote content; links keep only http(s)/mailto
targets and get rel="noopener noreferrer nofollow".
"""

from __future__ import annotations

import threading

import markdown
import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown.extensions import Extension

ALLOWED_TAGS = {
    "p", "br", "hr", "strong", "em", "b", "i", "u", "s", "del", "code", "pre", "kbd", "samp",
    "blockquote", "ul", "ol", "li", "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td", "a", "sup", "sub", "span",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "code": {"class"}, "th": {"align"}, "td": {"align"}}
MAX_RENDER_CHARS = 200_000


class _RawHtmlAsText(Extension):
    """Treat raw HTML blocks and inline tags as text (they are escaped like any other text)."""

    def extendMarkdown(self, md: markdown.Markdown) -> None:
        md.preprocessors.deregister("html_block")
        md.inlinePatterns.deregister("html")


_parsers = threading.local()


def _parser() -> markdown.Markdown:
    """This thread's Markdown parser: building one costs more than most conversions (the labelling
    page converts four texts), and a parser must not be shared between threads."""
    parser = getattr(_parsers, "parser", None)
    if parser is None:
        parser = markdown.Markdown(
            extensions=["fenced_code", "tables", "sane_lists", _RawHtmlAsText()]
        )
        _parsers.parser = parser
    return parser


def render_markdown(text: str) -> SafeString:
    """Render ``text`` (Markdown, possibly with raw HTML) to inert HTML safe to put in a page."""
    parser = _parser()
    try:
        html = parser.convert(text[:MAX_RENDER_CHARS])
    finally:
        parser.reset()  # nothing of one text (footnotes, references) carries over to the next
    cleaned = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )
    return mark_safe(cleaned)  # noqa: S308 - cleaned by nh3's allow-list above  # nosec B308 B703
