"""Export: majority consensus with agreement and margin, ties by option, immutable hashed snapshots."""

import json
from datetime import UTC, datetime

import pytest
from django.core.management import call_command

from annotation.models import DatasetExport
from annotation.services.exporting import Vote, dataset_export, majority_consensus
from annotation.services.importing import comparisons_import
from tests.helpers.annotation_data import project_with_votes

pytestmark = pytest.mark.django_db


def test_unanimous_much_better_has_margin_one():
    """Three votes for a at strength 3: agreement 1, margin 3*3/(3*3) = 1."""
    result = majority_consensus([Vote("a", 3)] * 3)
    assert (result.choice, result.agreement, result.margin) == ("a", 1.0, 1.0)


def test_split_vote_margin_is_signed_and_scaled():
    """Votes b/3, b/1, a/2: b wins with agreement 2/3; margin (3 + 1 - 2) / (3 * 3) = 2/9."""
    result = majority_consensus([Vote("b", 3), Vote("b", 1), Vote("a", 2)])
    assert result.choice == "b"
    assert result.agreement == pytest.approx(2 / 3, abs=1e-6)
    assert result.margin == pytest.approx(2 / 9, abs=1e-6)


def test_equal_votes_for_a_and_b_make_a_tie():
    assert majority_consensus([Vote("a", 1), Vote("b", 1)]).choice == "tie"
    assert majority_consensus([Vote("a", 1), Vote("b", 2), Vote("tie", 1)]).choice == "tie"


def test_tie_votes_count_as_neither_side_in_the_margin():
    """a/2, tie, a/1: a wins 2 of 3; margin (2 + 0 + 1) / (3 * 3) = 1/3."""
    result = majority_consensus([Vote("a", 2), Vote("tie", 1), Vote("a", 1)])
    assert result.margin == pytest.approx(1 / 3, abs=1e-6)


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_export_contents_and_provenance(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"
    project = project_with_votes()
    export = dataset_export(project=project)
    assert (export.n_pairs, export.n_judgements, export.n_ties_dropped) == (2, 4, 1)
    pairs = _read(tmp_path / "exports" / "exp" / export.sha256 / "pairs.jsonl")
    first, second = pairs
    assert (first["prompt"], first["chosen"], first["rejected"]) == ("P1", "good", "bad")
    assert first["margin"] == pytest.approx(4 / 6, abs=1e-6)  # (3 + 1) / (2 * 3)
    assert (first["n_judgements"], first["agreement"], first["consensus"]) == (2, 1.0, "majority")
    assert (first["model_chosen"], first["model_rejected"]) == ("m1", "m2")
    assert second["prompt"] == [{"role": "user", "content": "P2"}]
    assert (second["chosen"], second["rejected"]) == ("y", "x")
    assert (first["chosen_side"], second["chosen_side"]) == ("a", "b")
    raw = _read(tmp_path / "exports" / "exp" / export.sha256 / "judgements.jsonl")
    assert len(raw) == 4
    assert {"annotator": "u1", "choice": "a", "strength": 3, "shown_left": "b",
            "elapsed_ms": 4000}.items() <= raw[0].items()  # fmt: skip


def test_annotator_aware_training_reads_an_export_as_exported(tmp_path, settings):
    """The reward model's reader joins the export's raw rows to its pairs by comparison id and
    chosen side: every a/b vote, relative to the chosen response, with the side it was shown on."""
    from training.recipes.data import judgements_file_for, load_judged_pairs

    settings.EXPORT_DIR = tmp_path / "exports"
    export = dataset_export(project=project_with_votes())
    pairs_path = tmp_path / "exports" / "exp" / export.sha256 / "pairs.jsonl"
    judgements = judgements_file_for(pairs_path)
    assert judgements is not None and judgements.name == "judgements.jsonl"
    pairs, votes = load_judged_pairs(pairs_path, judgements)
    assert [(p.chosen, p.rejected) for p in pairs] == [("good", "bad"), ("y", "x")]
    assert sorted((v.pair, v.annotator, v.prefers_chosen, v.chosen_shown_left) for v in votes) == [
        (0, "u1", True, False),  # chose a = chosen, shown on the right
        (0, "u2", True, None),
        (1, "u1", True, None),  # chose b = chosen
    ]


def test_keep_ties_option(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path
    export = dataset_export(project=project_with_votes(), keep_ties=True)
    pairs = _read(tmp_path / "exp" / export.sha256 / "pairs.jsonl")
    tie = [p for p in pairs if p["tie"]]
    assert len(pairs) == 3 and len(tie) == 1 and tie[0]["margin"] == 0


def test_same_content_same_snapshot_new_content_new_snapshot(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path
    project = project_with_votes()
    first = dataset_export(project=project)
    assert dataset_export(project=project) == first
    comparisons_import(
        project=project,
        lines=[json.dumps({"prompt": "P5", "response_a": "r", "response_b": "s",
                           "judgements": [{"annotator": "u2", "choice": "b"}]})],
    )  # fmt: skip
    second = dataset_export(project=project)
    assert second.sha256 != first.sha256
    assert DatasetExport.objects.count() == 2
    assert (tmp_path / "exp" / first.sha256 / "pairs.jsonl").is_file()  # the old one is untouched


def test_export_command_writes_both_files(tmp_path, settings, capsys):
    settings.EXPORT_DIR = tmp_path / "store"
    project_with_votes()
    out = tmp_path / "out" / "train.jsonl"
    call_command("export_dataset", "--project", "exp", "--out", str(out))
    assert len(_read(out)) == 2
    assert len(_read(tmp_path / "out" / "train.judgements.jsonl")) == 4
    assert "2 pairs, 4 judgements, 1 ties dropped" in capsys.readouterr().out


def test_dawid_skene_posterior_as_consensus():
    """Posterior a .8, b .15, tie .05: a wins with agreement .8 and margin .8 - .15 = .65."""
    from annotation.services.exporting import dawid_skene_consensus

    result = dawid_skene_consensus({"a": 0.8, "b": 0.15, "tie": 0.05, "both_bad": 0.0})
    assert (result.choice, result.agreement) == ("a", 0.8)
    assert result.margin == pytest.approx(0.65, abs=1e-6)


def test_export_with_dawid_skene(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path
    export = dataset_export(project=project_with_votes(), consensus="dawid_skene")
    pairs = _read(tmp_path / "exp" / export.sha256 / "pairs.jsonl")
    assert pairs and all(p["consensus"] == "dawid_skene" for p in pairs)
    assert pairs[0]["chosen"] == "good" and 0 < pairs[0]["margin"] <= 1
    with pytest.raises(ValueError, match="unknown consensus rule"):
        dataset_export(project=project_with_votes(), consensus="vibes")


@pytest.mark.parametrize(
    "row",
    [
        (1, "ana", "a", 2, "b", None, "", "2026-01-01T00:00:00+00:00"),
        (
            12345678901,
            'zoë "q"',
            "tie",
            1,
            "",
            0,
            "a\nb\t\u2028 é 日本 \\ \x01",
            "2026-01-01T00:00:00.5+00:00",
        ),
        (3, "x", "both_bad", 3, None, 99999, "ok", "2026-12-03T13:00:00.000004+00:00"),
    ],
)
def test_a_judgement_line_is_the_json_encoders_byte_for_byte(row):
    """judgements.jsonl lines are filled in directly, not through a dict and the JSON encoder:
    the same bytes for non-ASCII text, quotes, control characters, nulls and an empty side."""
    from annotation.services.export_reads import raw_line

    cid, who, choice, strength, shown_left, elapsed, rationale, created = row
    expected = json.dumps(
        {
            "comparison_id": cid, "annotator": who, "choice": choice, "strength": strength,
            "shown_left": shown_left or None, "elapsed_ms": elapsed, "rationale": rationale,
            "created_at": created,
        },
        ensure_ascii=False,
        sort_keys=True,
    )  # fmt: skip
    assert raw_line(row) == expected + "\n"


def test_judgement_lines_from_the_database_are_the_json_encoders_byte_for_byte(tmp_path):
    """On PostgreSQL the database builds each judgements.jsonl line (elsewhere ``raw_line``):
    usernames and rationales with every control character, quotes, backslashes, U+2028 and
    non-ASCII text, a null elapsed time, an empty side and a timestamp with microseconds give the
    bytes of ``json.dumps(row, ensure_ascii=False, sort_keys=True)``."""
    from annotation.services.exporting import JUDGEMENTS_FILE, _write_files
    from tests.factories import ComparisonFactory, JudgementFactory, UserFactory

    comparison = ComparisonFactory()
    awkward = "".join(map(chr, range(1, 32))) + ' "q" \\ / \u2028 \x7f é 日本 😀'
    made = [
        JudgementFactory(comparison=comparison, annotator=UserFactory(username='zoë "q"'),
                         rationale=awkward, shown_left="", elapsed_ms=None, choice="tie"),
        JudgementFactory(comparison=comparison, annotator=UserFactory(username="ana"),
                         rationale="", strength=3, choice="b"),
    ]  # fmt: skip
    Judgement = type(made[0])
    Judgement.objects.filter(pk=made[0].pk).update(
        created_at=datetime(2026, 3, 1, 12, 0, 0, 4, tzinfo=UTC)
    )
    _write_files(comparison.project, tmp_path, keep_ties=True, min_judgements=1,
                 consensus_rule="majority")  # fmt: skip
    expected = []
    for judgement in Judgement.objects.filter(pk__in=[j.pk for j in made]).order_by("pk"):
        row = {
            "comparison_id": judgement.comparison_id, "annotator": judgement.annotator.username,
            "choice": judgement.choice, "strength": judgement.strength,
            "shown_left": judgement.shown_left or None, "elapsed_ms": judgement.elapsed_ms,
            "rationale": judgement.rationale,
            "created_at": judgement.created_at.astimezone(UTC).isoformat(),
        }  # fmt: skip
        expected.append(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    assert (tmp_path / JUDGEMENTS_FILE).read_text(encoding="utf-8") == "".join(expected)
    assert awkward in json.loads(expected[0])["rationale"]
