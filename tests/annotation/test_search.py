"""The item browser's search syntax (issue 30): ``*substring*`` terms beside words, phrases, ``or``
and -word, on both of PostgreSQL's plans (a rare part read from its index first, a common one tested
row by row) and on contains (SQLite's search)."""

import pytest
from django.db import connection

from annotation.models import Comparison
from annotation.selectors import search
from annotation.selectors.items import ItemFilters, items_queryset
from annotation.selectors.search import Term, contains_search, search_terms
from common.errors import ConcordError
from tests.factories import ProjectFactory
from tests.helpers.annotation_data import make_pair

pytestmark = pytest.mark.django_db
postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's search")


@pytest.fixture
def pairs():
    project = ProjectFactory()
    ids = {
        "volcano": make_pair(project, prompt="How do Volcanoes erupt?", a="Magma rises", b="Lava"),
        "pasta": make_pair(project, prompt="Best pasta recipe", a="Boil the noodles", b="Bake it"),
        "percent": make_pair(project, prompt="Discount of 50% off", a="half price", b="full"),
        "snake": make_pair(project, prompt="Rename my_variable please", a="done", b="no"),
    }
    other = ProjectFactory()
    make_pair(other, prompt="Volcanoes elsewhere", a="x", b="y")  # another project's: never found
    return project, {name: pair.pk for name, pair in ids.items()}


def _found(project, words: str) -> set[int]:
    return set(
        items_queryset(project=project, filters=ItemFilters(q=words)).values_list("pk", flat=True)
    )


def test_a_star_at_either_end_makes_a_substring_term():
    assert search_terms('*olcan* pasta -*ood* "a  b" or erupt*') == [
        [
            Term(False, "olcan", True),
            Term(False, "pasta"),
            Term(True, "ood", True),
            Term(False, "a b"),
        ],
        [Term(False, "erupt", True)],
    ]


@pytest.fixture(params=["rare", "common"])
def plan(request, monkeypatch):
    """Both of PostgreSQL's plans: every part read from its index first, or tested row by row."""
    monkeypatch.setattr(search, "RARE_MATCHES", 10_000 if request.param == "rare" else -1)
    return request.param


@postgres_only
def test_substrings_match_inside_words_in_any_text_case_insensitively(pairs, plan):
    project, ids = pairs
    assert _found(project, "*OLCAN*") == {ids["volcano"]}  # inside "Volcanoes", any case
    assert _found(project, "*oodle*") == {ids["pasta"]}  # a response's text
    assert _found(project, "agma*") == {ids["volcano"]}
    assert _found(project, "*zzz*") == set()


@postgres_only
def test_like_wildcards_in_a_substring_are_plain_characters(pairs, plan):
    project, ids = pairs
    assert _found(project, "*50%*") == {ids["percent"]}
    assert _found(project, "*y_v*") == {ids["snake"]}
    assert _found(project, "*e_r*") == set()  # "_" is not "any one character"


@postgres_only
def test_substrings_combine_with_words_phrases_or_and_negation(pairs, plan):
    project, ids = pairs
    assert _found(project, "recipe *oodle*") == {ids["pasta"]}
    assert _found(project, "recipe -*oodle*") == set()
    assert _found(project, "-*oodle*") == {ids["volcano"], ids["percent"], ids["snake"]}
    assert _found(project, "*olcan* or *ariab*") == {ids["volcano"], ids["snake"]}
    assert _found(project, '"pasta recipe" or *alf pri*') == {ids["pasta"], ids["percent"]}


@postgres_only
def test_words_alone_keep_the_full_text_search_on_both_plans(pairs, plan):
    project, ids = pairs
    assert _found(project, "erupting") == {ids["volcano"]}  # stemmed
    assert _found(project, "pasta or discount") == {ids["pasta"], ids["percent"]}
    assert _found(project, "pasta -recipe") == set()  # each text on its own: the prompt has both


def test_a_substring_shorter_than_three_characters_is_refused(pairs):
    project, _ = pairs
    with pytest.raises(ConcordError, match=r"at least 3 characters; got 'ol'"):
        _found(project, "*ol*")


def test_contains_reads_a_substring_as_contains(pairs):
    """SQLite's search (contains) reads ``*olcan*`` as contains "olcan", as PostgreSQL does."""
    project, ids = pairs
    rows = Comparison.objects.filter(project=project)
    assert set(rows.filter(contains_search("*olcan*")).values_list("pk", flat=True)) == {
        ids["volcano"]
    }
    assert ids["pasta"] not in set(
        rows.filter(contains_search("-*oodle*")).values_list("pk", flat=True)
    )
