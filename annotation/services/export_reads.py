"""What an export reads, chunk by chunk (annotation.services.exporting writes it).

People's judgements of the project in (comparison, id) order, grouped by comparison, each with its
judgements.jsonl line (built by PostgreSQL: ``JudgementLineSql``; elsewhere ``raw_line``), in
chunks of judged comparisons; and each chunk's comparisons with their texts (``PairTexts``), read
by index: the comparisons, then their prompts and responses by id. A worker's export reads ahead
on two threads while it writes (``chunks_read_ahead``).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from contextlib import nullcontext
from itertools import groupby
from json.encoder import encode_basestring
from typing import NamedTuple, TypeVar

from django.db import connection, transaction
from django.db.models import CharField, F, Func, TextField

from annotation.models import Comparison, Judgement, Project, Prompt, Response
from annotation.services.read_ahead import read_ahead
from common.lookups import AnyOf
from common.roles import human_judgements

T = TypeVar("T")


class IsoformatUtc(Func):
    """A timestamp as the text ``datetime.isoformat()`` gives for it in UTC ("+00:00"; no fraction
    when the microseconds are 0), made by PostgreSQL: parsing three million timestamps in Python
    only to print them again was a tenth of a large export's time."""

    output_field = CharField()
    template = (
        "CASE WHEN date_trunc('second', %(expressions)s) = %(expressions)s"
        " THEN to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"+00:00\"')"
        " ELSE to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"
        " END"
    )


class JudgementLineSql(Func):
    """A judgements.jsonl line built by PostgreSQL: ``raw_line`` of the row, the same bytes
    (``to_json`` of a text escapes exactly as the JSON encoder's ``encode_basestring``: quote,
    backslash, the five short escapes, other control characters as lower-case ``\\u00xx``, and
    everything else, non-ASCII included, as it is). Expressions, in order: comparison id,
    username, choice, strength, shown side, elapsed ms, rationale, created_at (isoformat text).
    Filling three million lines in Python was a quarter of a million-comparison export."""

    output_field = TextField()

    def as_sql(self, compiler, connection, **extra_context):
        compiled = [compiler.compile(expression) for expression in self.source_expressions]
        cid, who, choice, strength, shown, elapsed, rationale, created = (s for s, _ in compiled)
        params = [param for _, part in compiled for param in part]

        def text(sql: str) -> str:
            return f"COALESCE(to_json({sql})::text, 'null')"

        def number(sql: str) -> str:
            return f"COALESCE(({sql})::text, 'null')"

        pieces = [
            "'{\"annotator\": '", text(who), "', \"choice\": '", text(choice),
            "', \"comparison_id\": '", number(cid), "', \"created_at\": '", text(created),
            "', \"elapsed_ms\": '", number(elapsed), "', \"rationale\": '", text(rationale),
            "', \"shown_left\": '", text(f"NULLIF({shown}, '')"), "', \"strength\": '",
            number(strength), "E'}\\n'",
        ]  # fmt: skip
        return "(" + " || ".join(pieces) + ")", params


# A judgement as the export reads it: (comparison id, choice, strength, its judgements.jsonl line).
JudgementRow = tuple[int, str, int, str]


def judgement_groups(project: Project) -> Iterator[tuple[int, list[JudgementRow]]]:
    """People's judgements of the project as (comparison id, its rows), in (comparison, pk) order,
    read through a server-side cursor in chunks: one comparison's rows in memory at a time. Each
    row's judgements.jsonl line is built by PostgreSQL (``JudgementLineSql``), elsewhere by
    ``raw_line``."""
    judgements = human_judgements(Judgement.objects.filter(comparison__project=project)).order_by(
        "comparison_id", "pk"
    )
    columns = (
        "comparison_id", "annotator__username", "choice", "strength", "shown_left", "elapsed_ms",
        "rationale",
    )  # fmt: skip
    if connection.vendor == "postgresql":
        line = JudgementLineSql(*columns, IsoformatUtc("created_at"))
        rows = judgements.values_list("comparison_id", "choice", "strength", line).iterator(
            chunk_size=5000
        )
    else:
        rows = (
            (row[0], row[2], row[3], raw_line(row))
            for row in judgements.values_list(*columns, "created_at").iterator(chunk_size=5000)
        )
    for cid, group in groupby(rows, key=operator.itemgetter(0)):
        yield cid, list(group)


Group = tuple[int, list[JudgementRow]]


def _chunks(groups: Iterator[Group], size: int) -> Iterator[list[Group]]:
    """``groups`` in lists of ``size`` (the last one shorter)."""
    chunk: list[Group] = []
    for group in groups:
        chunk.append(group)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# A judgements.jsonl line, what ``exporting._dump`` makes of the row's dict (keys sorted, ", " and ": "
# separators), filled in directly: three million dicts through the JSON encoder were a third of
# a large export's time. Strings go through the encoder's own string function (ensure_ascii off).
_RAW_LINE = (
    '{{"annotator": {}, "choice": {}, "comparison_id": {}, "created_at": {}, "elapsed_ms": {}, '
    '"rationale": {}, "shown_left": {}, "strength": {}}}\n'
)


def _json_text(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


def _json_int(value: int | None) -> str:
    return "null" if value is None else str(int(value))


def raw_line(row: tuple) -> str:
    """One judgements.jsonl line: ``exporting._dump`` of {comparison_id, annotator, choice, strength,
    shown_left (None for ""), elapsed_ms, rationale, created_at (isoformat)}, byte for byte."""
    cid, who, choice, strength, shown_left, elapsed, rationale, created = row
    return _RAW_LINE.format(
        _json_text(who),
        _json_text(choice),
        _json_int(cid),
        _json_text(created if isinstance(created, str) else created.isoformat()),
        _json_int(elapsed),
        _json_text(rationale),
        _json_text(shown_left or None),
        _json_int(strength),
    )


class PairTexts(NamedTuple):
    """What a pairs.jsonl row says of its comparison, read as plain columns (``chunk_texts``):
    building four model objects per comparison, with every timestamp parsed, cost about half of
    an export's time."""

    pk: int
    external_id: str
    prompt_id: int
    prompt_text: str
    prompt_messages: list | None
    prompt_metadata: object
    cluster: int | None
    a_text: str
    a_model: str
    b_text: str
    b_model: str


# The columns of a chunk's three reads (``chunk_texts``): comparisons, then their prompts and
# responses by id.
_COMPARISON_COLUMNS = ("pk", "external_id", "prompt_id", "response_a_id", "response_b_id")
_PROMPT_COLUMNS = ("pk", "text", "messages", "metadata", "cluster")
_RESPONSE_COLUMNS = ("pk", "text", "model_name")


def chunk_texts(project: Project, ids: list[int]) -> list[PairTexts]:
    """The texts of a chunk's comparisons ``ids`` (ascending), by id, in three index reads: the
    comparisons, then their prompts and their responses by id (``AnyOf``: one array parameter).
    A dense chunk's comparisons are read by their id range (the rows between that were not judged
    come too, and the caller skips them). One query joining the four tables let PostgreSQL pick a
    parallel scan of every prompt for each chunk: 60-65 ms a chunk against 15 ms for the three
    reads, half of a million-comparison export's time (``bench/bench_export.py``)."""
    comparisons = Comparison.objects.filter(project=project)
    if ids and ids[-1] - ids[0] < 2 * len(ids):
        comparisons = comparisons.filter(pk__gte=ids[0], pk__lte=ids[-1])
    else:
        comparisons = comparisons.filter(AnyOf(F("pk"), ids))
    rows = list(comparisons.order_by("pk").values_list(*_COMPARISON_COLUMNS))
    prompt_ids = sorted({row[2] for row in rows})
    response_ids = sorted({row[3] for row in rows} | {row[4] for row in rows})
    prompts = {
        row[0]: row[1:]
        for row in Prompt.objects.filter(AnyOf(F("pk"), prompt_ids)).values_list(*_PROMPT_COLUMNS)
    }
    responses = {
        row[0]: row[1:]
        for row in Response.objects.filter(AnyOf(F("pk"), response_ids)).values_list(
            *_RESPONSE_COLUMNS
        )
    }
    return [
        PairTexts(pk, external_id, prompt_id, *prompts[prompt_id], *responses[a], *responses[b])
        for pk, external_id, prompt_id, a, b in rows
    ]


def with_texts(
    project: Project, chunks: Iterator[list[Group]]
) -> Iterator[tuple[list[Group], list[PairTexts]]]:
    """Each chunk of judgement groups with its comparisons' texts, in order; closes ``chunks``."""
    try:
        for chunk in chunks:
            yield chunk, chunk_texts(project, [cid for cid, _ in chunk])
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def on_own_connection(items: Iterator[T], *, atomic: bool) -> Iterator[T]:
    """``items`` read on the running thread's own connection (in a transaction when ``atomic``),
    which is closed after."""
    try:
        with transaction.atomic() if atomic else nullcontext():
            yield from items
    finally:
        connection.close()


def chunks_read_ahead(
    project: Project, *, size: int
) -> Iterator[tuple[list[Group], list[PairTexts]]]:
    """The export's chunks (``size`` judged comparisons each) of judgement groups with their
    comparisons' texts, in order.

    A worker's export (on PostgreSQL, outside any transaction) reads ahead on two threads
    (``read_ahead``, two chunks each at most), each on a connection of its own: one the
    judgements, in a read-only transaction of its own, one the texts of the chunks it hands on.
    The database then works on the next chunks while this thread formats and writes the current
    one; in turns, at a million comparisons, the database's share was 30 s of 70. In a
    transaction the judgements' server-side cursor streams: outside one, Django declares it WITH
    HOLD, and PostgreSQL computes every row before the first comes back (19 s at 3,000,000
    judgements). This thread's progress writes stay outside that transaction, visible as made.

    Inside the caller's transaction (a service that exports under a lock, a test) the chunks are
    read here, in turns: other connections would not see the caller's uncommitted rows, and one
    Django connection is not shared between threads."""
    groups = _chunks(judgement_groups(project), size)
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return with_texts(project, groups)
    ahead = read_ahead(on_own_connection(groups, atomic=True), batch=1, depth=2)
    texts = on_own_connection(with_texts(project, ahead), atomic=False)
    return read_ahead(texts, batch=1, depth=2)
