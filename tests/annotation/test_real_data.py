"""The third-party files in /work/shared/data import whole through the command, in their formats.

Skipped when the folder is absent (it is never part of the repository). Expected numbers come from
the files' own documentation: PandaLM's test set has 999 items labelled by three annotators, whose
pairwise Cohen's kappa the PandaLM paper reports as 0.85, 0.88 and 0.86; HH-RLHF's harmless-base
test split has 2,312 pairs; the MT-Bench turn-1 expert votes cover 910 (question, model pair)
comparisons with 1,689 votes, one of them a judge's repeat of the same verdict (1,688 judgements).
"""

import json
from itertools import combinations
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from annotation.agreement import cohen_kappa
from annotation.models import Comparison, Judgement, Project

DATA = Path("/work/shared/data")
pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(not DATA.is_dir(), reason="/work/shared/data is absent"),
]


def test_pandalm_test_set_imports_whole_with_its_published_agreement(capsys):
    call_command(
        "import_comparisons", str(DATA / "pandalm_testset-v1.json"),
        "--project", "pandalm", "--scalars-as-text",
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "format: pandalm (recognised from the fields)" in out
    assert "54 empty responses" in out
    project = Project.objects.get(slug="pandalm")
    assert project.comparisons.count() == 999
    assert Judgement.objects.filter(comparison__project=project).count() == 2997
    labels: dict[str, dict[int, str]] = {}
    for comparison_id, name, choice in Judgement.objects.values_list(
        "comparison_id", "annotator__username", "choice"
    ):
        labels.setdefault(name, {})[comparison_id] = choice
    ids = sorted(labels["pandalm-annotator1"])
    kappas = [
        round(cohen_kappa([labels[a][i] for i in ids], [labels[b][i] for i in ids]), 2)
        for a, b in combinations(sorted(labels), 2)
    ]
    assert kappas == [0.85, 0.88, 0.86]


def test_pandalm_boolean_responses_are_row_errors_by_default():
    with pytest.raises(CommandError, match="6 error"):
        call_command("import_comparisons", str(DATA / "pandalm_testset-v1.json"), "--project", "p")
    assert not Comparison.objects.exists()


def test_hh_rlhf_harmless_test_split_imports_whole(capsys):
    call_command(
        "import_comparisons", str(DATA / "hh-rlhf_harmless-base_test.jsonl.gz"), "--project", "hh"
    )
    assert "format: hh-rlhf" in capsys.readouterr().out
    assert Comparison.objects.filter(project__slug="hh").count() == 2312


def _fastchat_files(tmp_path: Path, votes: list[dict]) -> tuple[Path, Path]:
    """A question.jsonl and model_answer/ with a stand-in text for every question and model."""
    questions = sorted({v["question_id"] for v in votes})
    models = sorted({v["model_a"] for v in votes} | {v["model_b"] for v in votes})
    question_file = tmp_path / "question.jsonl"
    question_file.write_text(
        "".join(
            json.dumps({"question_id": q, "turns": [f"Question {q}"]}) + "\n" for q in questions
        )
    )
    answers = tmp_path / "model_answer"
    answers.mkdir()
    for model in models:
        (answers / f"{model}.jsonl").write_text(
            "".join(
                json.dumps({"question_id": q, "choices": [{"turns": [f"{model} on {q}"]}]}) + "\n"
                for q in questions
            )
        )
    return question_file, answers


def test_mt_bench_expert_votes_import_with_texts_given_by_file(tmp_path, capsys):
    path = DATA / "mt_bench_human_judgments_turn1.jsonl"
    votes = [json.loads(line) for line in path.read_text().splitlines()]
    question_file, answers = _fastchat_files(tmp_path, votes)
    call_command(
        "import_comparisons", str(path), "--project", "mt-bench",
        "--questions", str(question_file), "--answers", str(answers),
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "1689 rows" in out and "1 repeated vote counted once" in out
    assert Comparison.objects.count() == 910
    assert Judgement.objects.count() == 1688
    assert Judgement.objects.filter(annotator__username__startswith="expert_").exists()


def test_mt_bench_expert_votes_without_texts_are_refused_clearly(capsys):
    with pytest.raises(CommandError, match="1689 error"):
        call_command(
            "import_comparisons", str(DATA / "mt_bench_human_judgments_turn1.jsonl"),
            "--project", "mt",
        )  # fmt: skip
    assert "give --questions FILE and --answers DIR" in capsys.readouterr().err
    assert not Project.objects.filter(slug="mt").exists()
