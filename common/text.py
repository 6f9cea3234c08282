"""Text as PostgreSQL can store it (pure Python, no Django).

PostgreSQL's text type cannot hold the NUL character (U+0000), and a model may sample it (a byte-level
tokenizer has a token for byte 0). One rule for every model text Concord stores (kept training samples,
eval-round answers, judge answers, the demo's generated responses): NUL becomes U+FFFD, the
replacement character, so the text keeps its length and shows where the odd character was.
"""

from __future__ import annotations

NUL = "\x00"
REPLACEMENT = "\ufffd"


def storable_text(value: object) -> str:
    """``value`` as text PostgreSQL can store: ``str(value)`` with each NUL replaced by U+FFFD
    ("a\\x00b" -> "a\\ufffdb"); anything else is kept as it is."""
    return str(value).replace(NUL, REPLACEMENT)
