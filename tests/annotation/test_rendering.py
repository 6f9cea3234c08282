"""Markdown rendering reuses one parser per thread: nothing of one text leaks into the next, and
threads never share a parser."""

import threading
from html.parser import HTMLParser

from annotation.rendering import ALLOWED_TAGS, render_markdown
from tests.helpers.xss_payloads import XSS_PAYLOADS


def test_a_reference_defined_in_one_text_does_not_link_in_the_next():
    """Reference definitions live in the parser; they are cleared after every text."""
    first = render_markdown("[docs][1]\n\n[1]: https://example.com/docs")
    assert 'href="https://example.com/docs"' in first
    second = render_markdown("[docs][1]")
    assert "href" not in second and "[docs][1]" in second


class _Elements(HTMLParser):
    """Every element and attribute of an HTML fragment (text, escaped tags included, is ignored)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.found.append((tag, attrs))


def test_the_xss_corpus_renders_inert_when_the_parser_is_reused():
    """The same parser converting the whole corpus twice in a row: only allowed elements, no event
    handler, no script URL (the browser test checks the pages themselves)."""
    for payload in XSS_PAYLOADS * 2:
        elements = _Elements()
        elements.feed(render_markdown(payload))
        for tag, attrs in elements.found:
            assert tag in ALLOWED_TAGS, (payload, tag)
            for name, value in attrs:
                assert not name.startswith("on"), (payload, name)
                assert not (value or "").lower().startswith("javascript"), (payload, value)


def test_threads_render_their_own_texts():
    """Eight threads converting different texts at once each get their own text back."""
    results: dict[int, list[str]] = {}

    def work(n: int) -> None:
        results[n] = [render_markdown(f"**thread {n}** line {i}") for i in range(200)]

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for n, rendered in results.items():
        assert rendered == [f"<p><strong>thread {n}</strong> line {i}</p>" for i in range(200)], n
