"""The streamed export (issue 30) writes exactly what the export wrote before it streamed: the same
bytes in pairs.jsonl and judgements.jsonl and the same counts, for every consensus rule and option,
with chunks small enough that every comparison boundary is crossed."""

import json
import random

import pytest

from annotation.models import Adjudication, Comparison, Project
from annotation.services import exporting
from annotation.services.importing import comparisons_import
from tests.factories import UserFactory
from tests.helpers.export_reference import write_files_before_streaming

pytestmark = pytest.mark.django_db

OPTIONS = [
    {"keep_ties": False, "min_judgements": 1, "consensus_rule": "majority"},
    {"keep_ties": True, "min_judgements": 2, "consensus_rule": "majority"},
    {"keep_ties": True, "min_judgements": 1, "consensus_rule": "dawid_skene"},
    {"keep_ties": False, "min_judgements": 1, "consensus_rule": "adjudicated"},
    {"keep_ties": True, "min_judgements": 1, "consensus_rule": "adjudicated",
     "fallback": "dawid_skene"},
]  # fmt: skip


@pytest.fixture
def project():
    """40 comparisons: texts and conversations, some with reference answers, 0 to 4 votes each
    from 6 annotators (every choice and strength), 3 adjudicated."""
    rng = random.Random(7)
    rows = []
    for i in range(40):
        prompt = f"prompt {i} é" if i % 3 else [{"role": "user", "content": f"turn {i}"}]
        votes = [
            {"annotator": f"u{k}", "choice": rng.choice(["a", "b", "a", "tie", "both_bad"]),
             "strength": rng.randint(1, 3), "elapsed_ms": rng.randint(500, 9000)}
            for k in rng.sample(range(6), rng.randint(0, 4))
        ]  # fmt: skip
        rows.append(
            {"prompt": prompt, "response_a": f"a{i}", "response_b": f"b{i}", "model_a": "m1",
             "model_b": "m2", "judgements": votes, **({"answer": str(i)} if i % 4 == 0 else {})}
        )  # fmt: skip
    project = Project.objects.create(name="stream", slug="stream", overlap=3)
    comparisons_import(project=project, lines=[json.dumps(r) for r in rows])
    lead = UserFactory(username="lead")
    for comparison in Comparison.objects.filter(project=project).order_by("pk")[5:8]:
        Adjudication.objects.create(
            comparison=comparison, choice="b", shown_left="a", decided_by=lead
        )
    return project


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
def test_streamed_files_equal_the_files_written_before_streaming(project, options, tmp_path,
                                                                 monkeypatch):  # fmt: skip
    monkeypatch.setattr(exporting, "EXPORT_CHUNK", 3)
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    expected = write_files_before_streaming(project, before, **options)
    calls = []
    written = exporting._write_files(
        project, after, **options, progress=lambda done, total: calls.append((done, total))
    )
    assert written == expected
    assert expected[0] > 10
    for name in (exporting.PAIRS_FILE, exporting.JUDGEMENTS_FILE):
        assert (after / name).read_bytes() == (before / name).read_bytes(), name
    judged = calls[-1][1]
    assert calls[-1] == (judged, judged) and len(calls) == -(-judged // 3)
    assert [done for done, _ in calls] == sorted({done for done, _ in calls})


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_outside_a_transaction_the_reads_run_ahead_on_their_own_connection(project, tmp_path,
                                                                           monkeypatch):  # fmt: skip
    """A worker's export runs outside any transaction: on PostgreSQL a thread then reads the
    chunks ahead in a transaction of its own (the judgements' cursor streams instead of being
    computed whole first). The files are the same bytes, the progress the same, and the
    caller's connection is left as it was (no transaction, still usable)."""
    from django.db import connection

    monkeypatch.setattr(exporting, "EXPORT_CHUNK", 3)
    options = OPTIONS[0]
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    expected = write_files_before_streaming(project, before, **options)
    assert not connection.in_atomic_block
    calls = []
    written = exporting._write_files(
        project, after, **options, progress=lambda done, total: calls.append((done, total))
    )
    assert written == expected
    for name in (exporting.PAIRS_FILE, exporting.JUDGEMENTS_FILE):
        assert (after / name).read_bytes() == (before / name).read_bytes(), name
    assert calls[-1][0] == calls[-1][1] and len(calls) == -(-calls[-1][1] // 3)
    assert not connection.in_atomic_block and Comparison.objects.filter(project=project).exists()
