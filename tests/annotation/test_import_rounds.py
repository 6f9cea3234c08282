"""The import written in rounds while it is read (PostgreSQL's COPY path writes every WRITE_LINES
staged rows; the row path in chunks), and the worker thread that reads ahead of it."""

import json
import threading
from pathlib import Path

import pytest
from django.db import connection

from annotation.models import Comparison, Judgement, Prompt
from annotation.parsing import ImportValidationError
from annotation.services import importing
from annotation.services.importing import ImportOptions, comparisons_import, project_get_or_create
from annotation.services.read_ahead import read_ahead

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("import_path")]


def _row(i: int, **fields) -> str:
    row = {"prompt": f"Question {i}?", "response_a": f"A{i}", "response_b": f"B{i}"}
    row.update(fields)
    return json.dumps(row)


@pytest.fixture
def small_rounds(monkeypatch):
    """Rounds of 300 staged rows, COPYs of 100: a file of 1,000 rows is written in four rounds."""
    monkeypatch.setattr(importing, "WRITE_LINES", 300)
    monkeypatch.setattr(importing, "COPY_ROWS", 100)
    monkeypatch.setattr(importing, "CHUNK_ROWS", 50)


def test_rows_of_one_comparison_in_several_rounds_count_and_merge_exactly(small_rounds):
    """Row 5's comparison was in the project before: its rows in the first and the last round
    count it once as already present. Row 10's comparison is created in the first round and gets
    a second annotator's judgement (its overlap slot) and its prompt's answer in the last."""
    project = project_get_or_create(slug="rounds")[0]
    comparisons_import(
        project=project, lines=[_row(5, judgements=[{"annotator": "old", "choice": "a"}])]
    )
    lines = [_row(i, judgements=[{"annotator": f"ann{i % 3}", "choice": "a"}]) for i in range(1000)]
    lines.append(_row(5, judgements=[{"annotator": "late", "choice": "b"}]))
    lines.append(_row(10, judgements=[{"annotator": "late", "choice": "tie"}], answer="20"))
    phases = []
    result = comparisons_import(project=project, lines=lines, progress=lambda *a: phases.append(a))
    assert (result.rows, result.comparisons_created, result.comparisons_existing) == (1002, 999, 1)
    assert (result.judgements_created, result.judgements_existing) == (1002, 0)
    assert Comparison.objects.get(prompt__text="Question 5?").taken == 3
    assert Comparison.objects.get(prompt__text="Question 10?").taken == 2
    assert Prompt.objects.get(text="Question 10?").metadata == {"answer": "20"}
    positions = list(
        Comparison.objects.order_by("queue_position").values_list("prompt__text", flat=True)
    )
    assert positions[:3] == ["Question 5?", "Question 0?", "Question 1?"]  # file order
    assert phases[-1] == ("importing", 1002, 1002)
    again = comparisons_import(project=project, lines=lines)
    assert (again.comparisons_created, again.comparisons_existing) == (0, 1000)
    assert (again.judgements_created, again.judgements_existing) == (0, 1002)


def test_a_bad_row_after_rounds_were_written_leaves_nothing(small_rounds):
    """All or nothing: rounds written before the bad row (line 901) roll back with it, and every
    error of the file is listed, those after the first too."""
    project = project_get_or_create(slug="refused")[0]
    lines = [_row(i) for i in range(1000)]
    lines[900] = _row(900, gold="maybe")
    lines[950] = _row(950, judgements=[{"annotator": "x", "choice": "c"}])
    with pytest.raises(ImportValidationError) as refused:
        comparisons_import(project=project, lines=lines)
    assert [(e.line, e.field) for e in refused.value.errors] == [
        (901, "gold"),
        (951, "judgements[0].choice"),
    ]
    assert not Comparison.objects.exists() and not Prompt.objects.exists()
    assert not Judgement.objects.exists()


def test_skip_invalid_writes_every_round_but_the_bad_rows(small_rounds, tmp_path):
    project = project_get_or_create(slug="skipping")[0]
    path = tmp_path / "rows.jsonl"
    lines = [_row(i) for i in range(1000)]
    lines[100] = _row(100, gold="maybe")
    lines[900] = _row(900, gold="maybe")
    path.write_text("\n".join(lines) + "\n")
    result = comparisons_import(
        project=project, lines=path, options=ImportOptions(skip_invalid=True)
    )
    assert (result.rows, result.rows_rejected, result.comparisons_created) == (1000, 2, 998)
    lines_out = Path(result.rejects_path).read_text().splitlines()
    rejected = [json.loads(line)["line"] for line in lines_out]
    assert rejected == [101, 901]


def test_read_ahead_keeps_the_order_and_raises_where_the_reading_failed():
    def numbers():
        yield from range(25)
        raise ValueError("broken at 25")

    seen = []
    with pytest.raises(ValueError, match="broken at 25"):
        for n in read_ahead(numbers(), batch=4, depth=2):
            seen.append(n)
    assert seen == list(range(24))  # the batch that failed (24) never comes: the import fails
    assert list(read_ahead(iter(range(10)), batch=3, depth=1)) == list(range(10))


def test_read_ahead_stops_its_worker_and_closes_the_source_when_the_caller_stops():
    closed = threading.Event()

    def endless():
        try:
            n = 0
            while True:
                yield n
                n += 1
        finally:
            closed.set()

    ahead = read_ahead(endless(), batch=10, depth=2)
    assert [next(ahead) for _ in range(5)] == [0, 1, 2, 3, 4]
    ahead.close()
    assert closed.wait(5)
    assert not any(t.name == "read-ahead" for t in threading.enumerate())


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL full-text search")
def test_search_documents_of_shared_texts_equal_each_text_s_own(small_rounds):
    """Migration 0022's insert trigger computes each distinct prompt's and response's document
    once per statement: what it stores equals ``to_tsvector('english', text)`` of every
    comparison's own prompt and responses (four answers to each question, in all six pairs, over
    several rounds; a response shared by three pairs, a prompt by six)."""
    project = project_get_or_create(slug="shared-texts")[0]
    answers = ["The ocean reflects the sky", "Scattering of sunlight", "Nitrogen glows", "Magic"]
    lines = [
        json.dumps({"prompt": f"Why is the sky blue, asked {q} times?", "response_a": a,
                    "response_b": b, "model_a": "m1", "model_b": "m2"})
        for q in range(120)
        for i, a in enumerate(answers)
        for b in answers[i + 1 :]
    ]  # fmt: skip
    result = comparisons_import(project=project, lines=lines)
    assert result.comparisons_created == 720
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE "
            "s.prompt_document = to_tsvector('english'::regconfig, p.text) "
            "AND s.a_document = to_tsvector('english'::regconfig, ra.text) "
            "AND s.b_document = to_tsvector('english'::regconfig, rb.text)) "
            "FROM annotation_comparison c "
            "JOIN annotation_comparisonsearch s ON s.comparison_id = c.id "
            "JOIN annotation_prompt p ON p.id = c.prompt_id "
            "JOIN annotation_response ra ON ra.id = c.response_a_id "
            "JOIN annotation_response rb ON rb.id = c.response_b_id "
            "WHERE c.project_id = %s",
            [project.pk],
        )
        assert cursor.fetchone() == (720, 720)
        cursor.execute(
            "SELECT prosrc FROM pg_proc WHERE proname = %s",
            ["annotation_comparison_search_inserted"],
        )
        assert "prompts AS MATERIALIZED" in cursor.fetchone()[0]  # 0022's function
