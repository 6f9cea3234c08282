"""The item browser's search: words, phrases, ``or``, -word and ``*substring*`` over a comparison's
prompt and both responses.

Syntax (docs/guide/item-browser.md): words must all appear (stemmed on PostgreSQL: ``erupt``
finds "erupts"); ``"a phrase"`` in that order; ``or`` between alternatives; ``-word`` or
``-"a phrase"`` must not appear; a word with a ``*`` at either end is a substring, matched
anywhere in the text, inside words too, without stemming (``*volc*`` finds "Volcanoes"), and needs
at least SUBSTRING_MIN characters. Case never matters.

PostgreSQL: words and phrases through each comparison's stored ``tsvector`` documents
(``ComparisonSearch``, one GIN index, migration 0010); substrings through ``pg_trgm`` GIN indexes on
prompt and response texts (migration 0013). Each part is planned by how many texts it matches, by
the planner's estimate (EXPLAIN, nothing run): a rare one (at most RARE_MATCHES) is looked up in
its index first and the page reads those ids; a common one is tested on each comparison the page
walks in its order (it finds a page of matches in a few hundred rows). SQLite (the demo) reads the
same syntax as case-insensitive contains (``contains_search``): no stemming there.
"""

from __future__ import annotations

import json
import operator
import re
import string
from dataclasses import dataclass
from functools import reduce

from django.contrib.postgres.search import SearchQuery
from django.db import connection
from django.db.models import BooleanField, Exists, F, Func, OuterRef, Q, QuerySet, Value

from annotation.models import ComparisonSearch, Project, Prompt, Response
from common.errors import ConcordError

SUBSTRING_MIN = 3  # characters a *substring* needs: pg_trgm's index reads 3-letter pieces
RARE_MATCHES = 20_000  # at most this many matching texts by estimate: start at the index
_SEARCH_TOKEN = re.compile(r'(-?)"([^"]*)"?|(\S+)')
_TEXTS = ("prompt__text", "response_a__text", "response_b__text")


@dataclass(frozen=True)
class Term:
    """One search term: its text (a word, a phrase with single spaces, or a substring's characters),
    whether it is negated (``-``) and whether it is a ``*substring*``."""

    negated: bool
    text: str
    substring: bool = False


def search_terms(words: str) -> list[list[Term]]:
    """``words`` parsed: alternatives (``or`` between them), each a list of terms that must all
    hold. ``or`` binds looser than the implicit "and", as in ``websearch_to_tsquery``.
    Punctuation around a word is dropped; a star at either end of a word makes it a substring."""
    alternatives: list[list[Term]] = [[]]
    for match in _SEARCH_TOKEN.finditer(words):
        sign, phrase, word = match.groups()
        if word is not None:
            if word.lower() == "or":
                alternatives.append([])
                continue
            bare = word.lstrip("-")
            substring = bare.startswith("*") or bare.endswith("*")
            text = bare.strip("*") if substring else bare.strip(string.punctuation)
            term = Term(word.startswith("-"), text, substring)
        else:
            term = Term(bool(sign), " ".join(phrase.split()))
        if term.text:
            alternatives[-1].append(term)
    return [terms for terms in alternatives if terms]


def websearch_terms(words: str) -> list[list[tuple[bool, str]]]:
    """``search_terms`` as (negated, text) pairs: ``a b or -c`` is
    ``[[(False, "a"), (False, "b")], [(True, "c")]]``; a phrase's inner spaces collapsed."""
    return [[(t.negated, t.text) for t in terms] for terms in search_terms(words)]


def contains_search(words: str) -> Q:
    """The syntax of ``words`` over case-insensitive contains, for databases without PostgreSQL's
    full-text search (SQLite, the demo's), with PostgreSQL's rules: words and phrases hold in one
    text on its own (the prompt, or either response, satisfies them all), a substring in any of the
    three (a negated one: in none). No stemming: ``noodle`` finds "noodles", ``sorting`` not
    "sort". Nothing to search for (only ``or`` or punctuation) matches nothing."""
    alternatives = search_terms(words)
    if not alternatives:
        return Q(pk__in=[])

    def contains(column: str, t: Term) -> Q:
        found = Q(**{f"{column}__icontains": t.text})
        return ~found if t.negated else found

    def alternative(terms: list[Term]) -> Q:
        parts = []
        words_only = [t for t in terms if not t.substring]
        if words_only:
            parts.append(
                reduce(
                    operator.or_,
                    (reduce(operator.and_, (contains(c, t) for t in words_only)) for c in _TEXTS),
                )
            )
        for t in (t for t in terms if t.substring):
            anywhere = reduce(operator.or_, (Q(**{f"{c}__icontains": t.text}) for c in _TEXTS))
            parts.append(~anywhere if t.negated else anywhere)
        return reduce(operator.and_, parts)

    return reduce(operator.or_, (alternative(terms) for terms in alternatives))


def planner_estimate(queryset: QuerySet) -> int | None:
    """The rows PostgreSQL's planner expects ``queryset`` to return (EXPLAIN, nothing run); None
    on other databases."""
    if connection.vendor != "postgresql":
        return None
    sql, params = queryset.values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def _rare_ids(queryset: QuerySet, column: str) -> list[int] | None:
    """``column`` of the rows of ``queryset`` when the planner expects at most RARE_MATCHES and
    there are (read from its index); None when they are many (test them row by row instead)."""
    estimate = planner_estimate(queryset)
    if estimate is None or estimate > RARE_MATCHES:
        return None
    ids = list(queryset.order_by().values_list(column, flat=True)[: RARE_MATCHES + 1])
    return ids if len(ids) <= RARE_MATCHES else None


def _fulltext(project: Project, words: str, bound: dict[str, int] | None = None) -> Q:
    """Comparisons with a text matching ``words`` (websearch syntax) in their stored documents.
    ``bound``: a filter on ``comparison_id`` the caller applies anyway (see ``search_filter``)."""
    query = SearchQuery(words, search_type="websearch", config="english")
    match = Q(prompt_document=query) | Q(a_document=query) | Q(b_document=query)
    documents = ComparisonSearch.objects.filter(match, **(bound or {}))
    rare = _rare_ids(documents.filter(comparison__project=project), "comparison_id")
    if rare is not None:
        return Q(pk__in=rare)
    return Q(Exists(documents.filter(comparison_id=OuterRef("pk"))))


class _ILike(Func):
    """``text ILIKE pattern`` (what a pg_trgm GIN index serves; Django's icontains is
    ``UPPER(text) LIKE UPPER(pattern)``, which it does not)."""

    arg_joiner = " ILIKE "
    template = "%(expressions)s"
    output_field = BooleanField()


def _substring(project: Project, text: str) -> Q:
    """Comparisons whose prompt or either response contains ``text`` (case-insensitive)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    pattern = Value(f"%{escaped}%")
    prompts = _rare_ids(
        Prompt.objects.filter(project=project).filter(_ILike(F("text"), pattern)), "id"
    )
    responses = _rare_ids(
        Response.objects.filter(prompt__project=project).filter(_ILike(F("text"), pattern)), "id"
    )
    if prompts is not None and responses is not None:
        return (
            Q(prompt_id__in=prompts)
            | Q(response_a_id__in=responses)
            | Q(response_b_id__in=responses)
        )
    return reduce(operator.or_, (Q(_ILike(F(column), pattern)) for column in _TEXTS))


def _phrase(term: Term) -> str:
    text = f'"{term.text}"' if " " in term.text else term.text
    return ("-" if term.negated else "") + text


def search_filter(project: Project, words: str, *, bound: dict[str, int] | None = None) -> Q:
    """Comparisons of ``project`` matching ``words`` (the syntax of this module's docstring).
    ConcordError for a substring shorter than SUBSTRING_MIN characters.

    ``bound``: a lookup on ``comparison_id`` (e.g. {"comparison_id__gt": 500001}) that the caller
    also applies to the comparisons, repeated in the stored documents' subquery: PostgreSQL does
    not carry an outer id range into it, and its merge would read the documents from the first.
    """
    alternatives = search_terms(words)
    for terms in alternatives:
        for term in terms:
            if term.substring and len(term.text) < SUBSTRING_MIN:
                raise ConcordError(
                    f"q: a *substring* needs at least {SUBSTRING_MIN} characters; got {term.text!r}"
                )
    if connection.vendor != "postgresql":
        return contains_search(words)
    if not any(t.substring for terms in alternatives for t in terms):
        return _fulltext(project, words, bound) if alternatives else Q(pk__in=[])
    matches = []
    for terms in alternatives:
        parts = []
        words_part = " ".join(_phrase(t) for t in terms if not t.substring)
        if words_part:
            parts.append(_fulltext(project, words_part, bound))
        for term in (t for t in terms if t.substring):
            found = _substring(project, term.text)
            parts.append(~found if term.negated else found)
        matches.append(reduce(operator.and_, parts))
    return reduce(operator.or_, matches)
