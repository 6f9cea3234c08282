"""The item browser's selector: every filter, the keyset cursor, full-text search on PostgreSQL."""

from datetime import timedelta

import pytest
from django.contrib.postgres.search import SearchQuery
from django.db import connection
from django.utils import timezone

from annotation.models import Assignment, Comparison, ComparisonSearch, StoredConsensus
from annotation.selectors import search
from annotation.selectors.items import (
    ItemFilters,
    contains_search,
    cursor_encode,
    items_page,
    items_queryset,
    websearch_terms,
)
from annotation.services.consensus import consensus_refit
from annotation.services.labelling import Verdict, assignment_claim, judgement_submit
from common.errors import ConcordError
from common.roles import ANNOTATOR
from tests.factories import (
    JudgementFactory,
    ProjectFactory,
    UserFactory,
)
from tests.helpers.annotation_data import make_pair

pytestmark = pytest.mark.django_db


def _ids(project, **filters) -> set[int]:
    return set(
        items_queryset(project=project, filters=ItemFilters(**filters)).values_list("pk", flat=True)
    )


@pytest.fixture
def world():
    """Four comparisons in a project of overlap 2: untouched, leased, split (a/b), unanimous (a/a)
    and one single judgement on the gold item; annotators ann1 and ann2."""
    project = ProjectFactory(overlap=2)
    ann1, ann2 = UserFactory(username="ann1"), UserFactory(username="ann2")
    untouched = make_pair(project, prompt="How do volcanoes erupt?", ma="llama", mb="qwen")
    leased = make_pair(project, prompt="Explain photosynthesis", a="Plants use sunlight", ma="qwen")
    split = make_pair(project, prompt="Best pasta recipe", b="Boil the noodles")
    unanimous = make_pair(project, prompt="Translate hello")
    gold = make_pair(project, prompt="Capital of France")
    Comparison.objects.filter(pk=gold.pk).update(gold="a")
    Assignment.objects.create(
        comparison=leased,
        annotator=ann1,
        shown_left="a",
        expires_at=timezone.now() + timedelta(minutes=10),
    )
    JudgementFactory(comparison=split, annotator=ann1, choice="a")
    JudgementFactory(comparison=split, annotator=ann2, choice="b")
    JudgementFactory(comparison=unanimous, annotator=ann1, choice="a")
    JudgementFactory(comparison=unanimous, annotator=ann2, choice="a")
    JudgementFactory(comparison=gold, annotator=ann2, choice="a")
    return project, {
        "untouched": untouched.pk,
        "leased": leased.pk,
        "split": split.pk,
        "unanimous": unanimous.pk,
        "gold": gold.pk,
    }


def test_status_filters(world):
    """open: no judgement and no live lease; in progress: started, below the overlap; complete:
    overlap reached."""
    project, ids = world
    assert _ids(project, status="open") == {ids["untouched"]}
    assert _ids(project, status="in_progress") == {ids["leased"], ids["gold"]}
    assert _ids(project, status="complete") == {ids["split"], ids["unanimous"]}


def test_an_expired_lease_no_longer_counts_as_in_progress(world):
    project, ids = world
    Assignment.objects.filter(comparison_id=ids["leased"]).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    assert _ids(project, status="open") == {ids["untouched"], ids["leased"]}


def test_agreement_filters(world):
    project, ids = world
    assert _ids(project, agreement="unjudged") == {ids["untouched"], ids["leased"]}
    assert _ids(project, agreement="single") == {ids["gold"]}
    assert _ids(project, agreement="unanimous") == {ids["unanimous"]}
    assert _ids(project, agreement="disagreement") == {ids["split"]}


def test_agreement_split_in_an_old_url_reads_as_disagreement(world):
    """The item browser's "split" (judgements that differ) is now "disagreement" ("split" is the
    adjudication queue's "no majority"); a URL saved with ``agreement=split`` still filters the
    same comparisons, and its row reads "disagreement"."""
    project, ids = world
    filters = ItemFilters.from_params({"agreement": "split"})
    assert filters.agreement == "disagreement"
    page = items_page(project=project, filters=filters)
    assert [(row.id, row.agreement) for row in page.rows] == [(ids["split"], "disagreement")]


def test_gold_annotator_and_model_filters(world):
    project, ids = world
    assert _ids(project, gold="yes") == {ids["gold"]}
    assert ids["gold"] not in _ids(project, gold="no")
    assert _ids(project, annotator="ann1") == {ids["split"], ids["unanimous"]}
    assert _ids(project, model="llama") == {ids["untouched"]}
    assert _ids(project, model="qwen") == {ids["untouched"], ids["leased"]}
    assert _ids(project, model="qwen vs llama") == {ids["untouched"]}  # either order
    assert _ids(project, model="m2 vs qwen") == {ids["leased"]}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner")
def test_the_gold_filter_reads_its_partial_index(world):
    project, _ = world
    queryset = items_queryset(project=project, filters=ItemFilters(gold="yes")).order_by("id")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        sql, params = queryset.values("id")[:51].query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        assert "comparison_gold" in "\n".join(row[0] for row in cursor.fetchall())


def test_an_unknown_annotator_is_a_clear_error(world):
    project, _ = world
    with pytest.raises(ConcordError, match="no user named 'nobody'"):
        _ids(project, annotator="nobody")


def test_cluster_filter(world):
    project, ids = world
    Comparison.objects.get(pk=ids["split"]).prompt.__class__.objects.filter(
        comparisons__pk=ids["split"]
    ).update(cluster=4)
    assert _ids(project, cluster=4) == {ids["split"]}
    assert _ids(project, cluster=5) == set()


def test_origin_separates_imported_from_labelled_here():
    """A judgement submitted on the labelling screen leaves a finished assignment; an imported
    (here: written directly, as the import service does) judgement has none."""
    project = ProjectFactory(overlap=1, gold_every=0, repeat_every=0)
    annie = UserFactory(username="annie", role=ANNOTATOR)
    project.members.add(annie)
    labelled, imported = make_pair(project, prompt="one"), make_pair(project, prompt="two")
    JudgementFactory(comparison=imported, annotator=UserFactory(username="importer"))
    Comparison.objects.filter(pk=imported.pk).update(taken=1)
    assignment = assignment_claim(annotator=annie, project=project)
    assert assignment.comparison_id == labelled.pk
    judgement_submit(annotator=annie, assignment_id=assignment.pk, verdict=Verdict(pick="tie"))
    assert _ids(project, origin="here") == {labelled.pk}
    assert _ids(project, origin="imported") == {imported.pk}


def test_dawid_skene_margin_range(world):
    """The margin filter keeps the judged comparisons whose Dawid-Skene margin (the project's
    stored consensus, after a refit) lies in the range, bounds included; unjudged ones have no
    margin and never pass."""
    project, ids = world
    consensus_refit(project=project)
    judged = {ids["split"], ids["unanimous"], ids["gold"]}
    stored = StoredConsensus.objects.filter(project=project)
    assert sorted(stored.values_list("comparison_id", flat=True)) == sorted(judged)
    margins = dict(stored.values_list("comparison_id", "ds_margin"))
    assert margins[ids["unanimous"]] > margins[ids["split"]]
    cut = margins[ids["unanimous"]]
    assert _ids(project, margin_min=cut) == {pk for pk, m in margins.items() if m >= cut}
    below = (cut + margins[ids["split"]]) / 2
    assert _ids(project, margin_max=below) == {pk for pk, m in margins.items() if m <= below}
    assert _ids(project, margin_min=0.0, margin_max=1.0) == judged


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL full-text search")
def test_full_text_search_in_prompts_and_responses(world):
    """Stemmed English search: 'erupting' finds the prompt 'volcanoes erupt'; a word of response A
    ('sunlight') or response B ('noodles') finds its comparison; websearch 'or' and -word work,
    each on one text: the prompt 'pasta' has no 'noodles', so 'pasta -noodles' finds its pair."""
    project, ids = world
    assert _ids(project, q="erupting volcano") == {ids["untouched"]}
    assert _ids(project, q="sunlight") == {ids["leased"]}
    assert _ids(project, q="noodle") == {ids["split"]}
    assert _ids(project, q="noodles or sunlight") == {ids["split"], ids["leased"]}
    assert _ids(project, q="pasta -noodles") == {ids["split"]}  # each text is matched on its own
    assert _ids(project, q="the") == set()  # only a stop word: matches nothing


def test_websearch_terms_reads_phrases_or_and_negation():
    """PostgreSQL's websearch syntax, parsed for the search without full-text search: ``or`` splits
    alternatives (binding looser than the implicit "and"), quotes make a phrase (inner spaces
    collapsed), ``-`` negates a word or a phrase, punctuation around a word is dropped, ``OR`` is
    ``or``; only ``or`` and a bare ``-`` leave nothing to search for."""
    assert websearch_terms('pasta "boil the  noodles" or -sunlight') == [
        [(False, "pasta"), (False, "boil the noodles")],
        [(True, "sunlight")],
    ]
    assert websearch_terms('-"first answer" OR volcano?') == [
        [(True, "first answer")],
        [(False, "volcano")],
    ]
    assert websearch_terms("or - ") == []


def test_search_syntax_without_full_text_search(world):
    """``contains_search`` (SQLite's search: the demo's database) reads the same syntax as the
    full-text search: 'noodle' is in response B of the pasta pair; 'noodles or sunlight' finds both
    pairs that have one of them; each text is matched on its own, so 'pasta -noodles' finds the
    pasta pair by its prompt, while 'plants -sunlight' finds nothing (the only text with 'plants'
    also has 'sunlight'); a phrase needs its words together and in order. The old search looked
    for the whole string ('noodles or sunlight') and found nothing."""
    project, ids = world

    def found(words: str) -> set[int]:
        matching = Comparison.objects.filter(project=project).filter(contains_search(words))
        return set(matching.values_list("pk", flat=True))

    assert found("noodle") == {ids["split"]}
    assert found("noodles or sunlight") == {ids["split"], ids["leased"]}
    assert found("pasta -noodles") == {ids["split"]}
    assert found("plants") == {ids["leased"]}
    assert found("plants -sunlight") == set()
    assert found('"pasta recipe"') == {ids["split"]}
    assert found('"recipe pasta"') == set()
    assert found("or") == set()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL full-text search")
def test_the_search_reads_the_stored_documents_through_their_gin_index(world, monkeypatch):
    """Migration 0010's GIN index covers the three documents the search matches, and the planner
    can answer the search from it (sequential scans off, so the test does not hang on statistics
    of a tiny table): a rare word's ids are looked up in it, a common one is probed per comparison
    by key; the 0006 expression indexes are gone (nothing reads them)."""
    project, _ = world
    monkeypatch.setattr(search, "RARE_MATCHES", -1)  # the common word's plan
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE indexname LIKE '%%_text_search' "
            "OR indexname = 'comparisonsearch_documents'"
        )
        indexes = dict(cursor.fetchall())
    assert list(indexes) == ["comparisonsearch_documents"]
    assert (
        "USING gin (prompt_document, a_document, b_document)"
        in indexes["comparisonsearch_documents"]
    )
    queryset = items_queryset(project=project, filters=ItemFilters(q="volcano"))
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        sql, params = queryset.values("id").query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "comparisonsearch_documents" in plan or "annotation_comparisonsearch_pkey" in plan
    rare = ComparisonSearch.objects.filter(prompt_document=SearchQuery("volcano", config="english"))
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        sql, params = rare.values("comparison_id").query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        assert "comparisonsearch_documents" in "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL full-text search")
def test_the_triggers_keep_the_documents_when_texts_change(world):
    """A new comparison is searchable at once (the insert trigger), a prompt's or response's text
    edited in place is searched as it now reads, and a deleted comparison takes its documents."""
    project, _ = world
    pair = make_pair(project, prompt="glaciers calving", a="icebergs", b="fjords")
    assert _ids(project, q="glacier") == {pair.pk}
    pair.prompt.text = "deserts spreading"
    pair.prompt.save(update_fields=["text"])
    pair.response_b.text = "dunes"
    pair.response_b.save(update_fields=["text"])
    assert _ids(project, q="glacier") == set()
    assert _ids(project, q="desert") == {pair.pk}
    assert _ids(project, q="dune") == {pair.pk}
    assert _ids(project, q="fjord") == set()
    pk = pair.pk
    pair.delete()
    assert not ComparisonSearch.objects.filter(comparison_id=pk).exists()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL full-text search")
@pytest.mark.parametrize("import_path", ["copy", "rows"], indirect=True)
def test_imported_comparisons_are_searchable(import_path):
    """Both import paths' inserts (COPY's set-based INSERT ... SELECT, the ORM's bulk_create) fire
    the statement trigger: every imported comparison has its documents."""
    import json

    from annotation.services.importing import comparisons_import, project_get_or_create

    project = project_get_or_create(slug="searchable")[0]
    lines = [
        json.dumps({"prompt": f"Question {i} about comets", "response_a": f"tail {i}",
                    "response_b": f"nucleus {i}"})
        for i in range(30)
    ]  # fmt: skip
    comparisons_import(project=project, lines=lines)
    assert len(_ids(project, q="comet")) == 30
    assert len(_ids(project, q="nucleus")) == 30


def test_search_finds_nothing_in_another_project(world):
    project, _ = world
    other = ProjectFactory()
    make_pair(other, prompt="volcanoes elsewhere")
    assert _ids(other, q="volcanoes") != set()
    assert len(_ids(project, q="volcanoes")) == 1


def _walk(project, filters, page_size):
    """Every row, following next cursors from the first page; and back with previous cursors."""
    pages = [items_page(project=project, filters=filters, page_size=page_size)]
    while pages[-1].next_cursor:
        pages.append(
            items_page(
                project=project, filters=filters, after=pages[-1].next_cursor, page_size=page_size
            )
        )
    return pages


@pytest.mark.parametrize("order", ["id", "-id", "queue", "-judgements", "cluster"])
def test_keyset_pages_cover_every_row_once_in_both_directions(order):
    project = ProjectFactory()
    pairs = [make_pair(project, prompt=f"prompt {i}") for i in range(23)]
    for i, pair in enumerate(pairs[:9]):
        JudgementFactory(comparison=pair, choice="a")
        if i % 2:
            JudgementFactory(comparison=pair, choice="b")
    filters = ItemFilters.from_params({"order": order})
    pages = _walk(project, filters, page_size=5)
    forward = [row.id for page in pages for row in page.rows]
    assert sorted(forward) == sorted(p.pk for p in pairs)  # no duplicates, no gaps
    assert [len(page.rows) for page in pages] == [5, 5, 5, 5, 3]
    assert pages[0].previous_cursor is None and pages[-1].next_cursor is None
    backward = []
    page = pages[-1]
    while page.previous_cursor:
        page = items_page(
            project=project, filters=filters, before=page.previous_cursor, page_size=5
        )
        backward = [row.id for row in page.rows] + backward
    assert backward + [row.id for row in pages[-1].rows] == forward
    assert page.previous_cursor is None  # back at the first page


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL full-text search")
@pytest.mark.parametrize("rare", [True, False])
@pytest.mark.parametrize("order", ["id", "-id"])
def test_keyset_pages_under_search_and_margin_filters_cover_the_matches(order, rare, monkeypatch):
    """A page after a cursor in id order repeats the cursor's bound inside the search and margin
    subqueries: walking every page, forwards and back, gives exactly the filter's matches, whether
    the search reads its few ids first (rare) or tests each comparison (an EXISTS)."""
    if not rare:
        monkeypatch.setattr(search, "RARE_MATCHES", 0)
    project = ProjectFactory()
    pairs = [
        make_pair(project, prompt=("How do volcanoes erupt? " if i % 3 else "Bake bread ") + str(i))
        for i in range(23)
    ]
    for i, pair in enumerate(pairs):
        if i % 2:
            JudgementFactory(comparison=pair, choice="a")
            JudgementFactory(comparison=pair, choice="a" if i % 4 == 1 else "b")
    consensus_refit(project=project)
    for params in ({"q": "volcano"}, {"margin_min": "0.5"}, {"q": "volcano", "margin_min": "0"}):
        filters = ItemFilters.from_params({"order": order, **params})
        expected = set(
            items_queryset(project=project, filters=filters).values_list("pk", flat=True)
        )
        assert expected, params
        pages = _walk(project, filters, page_size=2)
        forward = [row.id for page in pages for row in page.rows]
        assert forward == sorted(expected, reverse=order == "-id"), params
        page, backward = pages[-1], []
        while page.previous_cursor:
            page = items_page(
                project=project, filters=filters, before=page.previous_cursor, page_size=2
            )
            backward = [row.id for row in page.rows] + backward
        assert backward + [row.id for row in pages[-1].rows] == forward, params


def test_keyset_is_stable_across_inserts():
    """Rows added while paging (they sort last by id) neither shift the next page nor repeat rows."""
    project = ProjectFactory()
    pairs = [make_pair(project, prompt=f"prompt {i}") for i in range(10)]
    filters = ItemFilters()
    first = items_page(project=project, filters=filters, page_size=4)
    assert [r.id for r in first.rows] == [p.pk for p in pairs[:4]]
    added = [make_pair(project, prompt=f"late {i}") for i in range(3)]
    second = items_page(project=project, filters=filters, after=first.next_cursor, page_size=4)
    assert [r.id for r in second.rows] == [p.pk for p in pairs[4:8]]
    rest = items_page(project=project, filters=filters, after=second.next_cursor, page_size=10)
    assert [r.id for r in rest.rows] == [p.pk for p in pairs[8:] + added]
    back = items_page(project=project, filters=filters, before=second.previous_cursor, page_size=4)
    assert [r.id for r in back.rows] == [p.pk for p in pairs[:4]]


def test_keyset_under_a_filter_and_counts(world):
    project, ids = world
    page = items_page(project=project, filters=ItemFilters(status="complete"), page_size=1)
    assert [r.id for r in page.rows] == [ids["split"]]
    assert (page.matching, page.matching_capped, page.total) == (2, False, 5)
    nxt = items_page(
        project=project, filters=ItemFilters(status="complete"), after=page.next_cursor, page_size=1
    )
    assert [r.id for r in nxt.rows] == [ids["unanimous"]] and nxt.next_cursor is None
    assert nxt.rows[0].agreement == "unanimous" and nxt.rows[0].status == "complete"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"status": "done"}, "status must be one of"),
        ({"order": "prompt"}, "order must be one of"),
        ({"margin_min": "x"}, "margin_min must be a number"),
        ({"margin_max": "2"}, "margin_max must be between 0 and 1"),
        ({"cluster": "one"}, "cluster must be a number"),
        ({"origin": "elsewhere"}, "origin must be one of"),
    ],
)
def test_bad_parameters_are_clear_errors(params, message):
    with pytest.raises(ConcordError, match=message):
        ItemFilters.from_params(params)


@pytest.mark.parametrize("cursor", ["garbage!", cursor_encode("text", 3), "W10"])
def test_a_damaged_cursor_is_a_clear_error(world, cursor):
    project, _ = world
    with pytest.raises(ConcordError, match="cursor is damaged"):
        items_page(project=project, filters=ItemFilters(), after=cursor)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the planner's estimate")
def test_a_count_above_the_estimate_threshold_is_the_planners_estimate(monkeypatch):
    """With ESTIMATE_FROM lowered to 5, 40 comparisons on two pages are counted by the planner's
    estimate (EXPLAIN: nothing scanned), rounded to two figures and marked estimated ("About" on
    the page), the matches and the project's total alike; a filter the planner expects to match
    fewer is counted exactly."""
    from annotation.selectors import items as items_selector

    monkeypatch.setattr(items_selector, "ESTIMATE_FROM", 5)
    project = ProjectFactory()
    for i in range(40):
        make_pair(project, prompt=f"prompt {i}")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE annotation_comparison")
    page = items_page(project=project, filters=ItemFilters(), page_size=10)
    estimate = items_selector.planner_estimate(Comparison.objects.filter(project=project))
    assert estimate is not None and estimate > 5
    assert page.matching_estimated and not page.matching_capped
    assert page.matching == items_selector._about(estimate)
    assert (page.total, page.total_estimated) == (items_selector._about(estimate), True)
    gold = items_page(project=project, filters=ItemFilters(gold="yes"), page_size=10)
    assert (gold.matching, gold.matching_estimated) == (0, False)  # one page: its rows, exactly


def test_estimates_are_shown_to_two_figures():
    from annotation.selectors.items import _about

    assert [_about(n) for n in (7, 42, 271_493, 1_000_000, 99_960)] == [
        7, 42, 270_000, 1_000_000, 100_000,
    ]  # fmt: skip
