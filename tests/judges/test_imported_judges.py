"""Imported judges: verdicts from a file (CLI, page, API) as the next version of a judge of kind
"imported", measured by the judge report like any judge and never counted as a person.

The project is tests/judges/conftest.py's six pairs (pair-0 .. pair-5), labelled by ann1..ann3.
"""

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from annotation.models import Judgement
from common.api_tokens import api_token_create
from common.roles import is_machine_account
from monitoring.models import Judge, JudgeOutput
from monitoring.selectors.judges import judge_report_data, judge_report_summary
from monitoring.services.judge_imports import VerdictFileError, judge_verdicts_import
from monitoring.services.judges import JudgeError, judge_launch
from tests.conftest import logged_in
from tests.judges.conftest import ROWS

pytestmark = pytest.mark.django_db
PROVENANCE = "test verdicts written by hand"


def _lines(*rows: dict) -> list[str]:
    return [json.dumps(row) for row in rows]


def _import(project, *rows: dict, fmt: str = "jsonl", name: str = "ext"):
    return judge_verdicts_import(
        project=project, name=name, description=PROVENANCE, lines=_lines(*rows), fmt=fmt
    )


def _outputs(judge) -> list[tuple[str, str, str, bool]]:
    return sorted(
        (c, s, v, d)
        for c, s, v, d in JudgeOutput.objects.filter(judge=judge).values_list(
            "comparison__external_id", "shown_first", "verdict", "orders_disagree"
        )
    )


def _summary(judge) -> dict:
    return judge_report_summary(judge_report_data(judge=judge))


def test_combined_verdicts_keep_ties_and_inconsistent_pairs(judged_project, tmp_path, capsys):
    """The command imports one combined verdict per pair by external id: a, b, tie and an
    order-inconsistent pair (stored as a tie whose orders disagreed). Swap figures: 3 pairs known
    consistent (pair-0 a, pair-1 b, pair-2 tie), 1 inconsistent -> same verdict on 3 of 4; 2 decisive
    pairs, no flip known; at most (0 + 1) / (2 + 1) = 1/3 flips. No position bias is measurable
    (no per-order verdict). Kappa etc. use the combined verdict, the inconsistent pair a tie."""
    path = tmp_path / "verdicts.jsonl"
    rows = [("pair-0", "a"), ("pair-1", "b"), ("pair-2", "tie"), ("pair-3", "inconsistent")]
    path.write_text("\n".join(_lines(*({"id": i, "verdict": v} for i, v in rows))) + "\n")
    call_command(
        "import_judge_verdicts", "--project", "judged", "--judge", "gpt", "--file", str(path),
        "--description", PROVENANCE,
    )  # fmt: skip
    assert capsys.readouterr().out.strip() == (
        "gpt v1 (imported) on judged: 4 comparisons, 0 with per-order verdicts, 4 combined "
        "(1 inconsistent across orders)"
    )
    judge = Judge.objects.get(name="gpt")
    assert (judge.kind, judge.status, judge.description, judge.source_name) == (
        "imported", "succeeded", PROVENANCE, "verdicts.jsonl"
    )  # fmt: skip
    assert _outputs(judge) == [
        ("pair-0", "", "a", False), ("pair-1", "", "b", False), ("pair-2", "", "tie", False),
        ("pair-3", "", "tie", True),
    ]  # fmt: skip
    choices = dict(
        Judgement.objects.filter(annotator=judge.annotator).values_list(
            "comparison__external_id", "choice"
        )
    )
    assert choices == {"pair-0": "a", "pair-1": "b", "pair-2": "tie", "pair-3": "tie"}
    s = _summary(judge)
    assert (s["verdicts"], s["items"], s["swap_pairs"], s["swap_same_rate"]) == (4, 4, 4, 0.75)
    assert (s["swap_decisive_pairs"], s["swap_flips"], s["swap_undetailed"]) == (2, 0, 1)
    assert (s["swap_flip_rate"], s["swap_flip_rate_high"]) == (0.0, 0.3333)
    assert (s["position_n"], s["position_bias"]) == (0, None)
    assert s["seconds_per_answer"] is None and s["description"] == PROVENANCE
    call_command("judge_report", "--project", "judged", "--judge", "gpt")
    assert "1 pairs disagreed across orders without per-order verdicts, so at most 0.3333" in (
        capsys.readouterr().out
    )


def test_both_orders_on_one_line_matched_by_texts_either_way_round(judged_project):
    """A row names pair-1 by its texts with the responses swapped: its a_first (its A, the stored
    B, shown first) says a (its A = stored b) and b_first says b (stored a): stored as b-first: b and
    a-first: a, which disagree -> a flip, combined as a tie. pair-0 in stored orientation, both
    orders a -> a. Swap: 2 pairs, 1 decisive flip of 2 decisive pairs; position: the first-shown
    response won 3 of 4 decisive verdicts (pair-1 both times, pair-0 with A first)."""
    prompt0, a0, b0, _ = ROWS[0]
    prompt1, a1, b1, _ = ROWS[1]
    result = _import(
        judged_project,
        {"prompt": prompt0, "response_a": a0, "response_b": b0, "a_first": "a", "b_first": "a"},
        {"prompt": prompt1, "response_a": b1, "response_b": a1, "a_first": "a", "b_first": "b"},
    )
    assert (result.comparisons, result.per_order, result.combined) == (2, 2, 0)
    assert _outputs(result.judge) == [
        ("pair-0", "a", "a", False), ("pair-0", "b", "a", False),
        ("pair-1", "a", "a", False), ("pair-1", "b", "b", False),
    ]  # fmt: skip
    assert dict(
        Judgement.objects.filter(annotator=result.judge.annotator).values_list(
            "comparison__external_id", "choice"
        )
    ) == {"pair-0": "a", "pair-1": "tie"}
    s = _summary(result.judge)
    assert (s["swap_pairs"], s["swap_decisive_pairs"], s["swap_flips"]) == (2, 2, 1)
    assert (s["swap_flip_rate"], s["swap_flip_rate_high"], s["swap_undetailed"]) == (0.5, 0.5, 0)
    assert (s["position_n"], s["position_first_share"]) == (4, 0.75)


def test_one_order_only_and_by_comparison_id(judged_project):
    """One order alone is that order's verdict, by Concord's id."""
    comparison = judged_project.comparisons.get(external_id="pair-4")
    result = _import(judged_project, {"comparison_id": comparison.pk, "b_first": "b"})
    assert _outputs(result.judge) == [("pair-4", "b", "b", False)]
    judgement = Judgement.objects.get(annotator=result.judge.annotator)
    assert (judgement.choice, judgement.shown_left) == ("b", "b")


def test_a_bad_file_names_every_bad_line_and_writes_nothing(judged_project):
    """Unknown id, a pair given twice, a bad verdict, both kinds of verdict on one line, no
    comparison named, not JSON: each line named; no judge, machine account or verdict is left."""
    users = get_user_model().objects.count()
    with pytest.raises(VerdictFileError) as caught:
        judge_verdicts_import(
            project=judged_project, name="ext", description=PROVENANCE, fmt="jsonl",
            lines=[
                json.dumps({"id": "pair-0", "verdict": "a"}),
                json.dumps({"id": "nope", "verdict": "a"}),
                json.dumps({"id": "pair-0", "verdict": "b"}),
                json.dumps({"id": "pair-1", "verdict": "A"}),
                json.dumps({"id": "pair-2", "verdict": "a", "a_first": "a"}),
                json.dumps({"verdict": "a"}),
                "{not json",
            ],
        )  # fmt: skip
    assert [e.split(":")[0] for e in caught.value.errors] == [
        f"line {n}" for n in (2, 3, 4, 5, 6, 7)
    ]
    assert "no comparison with id 'nope'" in caught.value.errors[0]
    assert "already has a verdict on line 1" in caught.value.errors[1]
    assert str(caught.value).startswith("6 bad line(s), nothing imported: line 2: id:")
    assert not Judge.objects.exists() and not JudgeOutput.objects.exists()
    assert get_user_model().objects.count() == users


def test_an_imported_judge_needs_a_description_and_has_no_job(judged_project):
    with pytest.raises(JudgeError, match="description"):
        judge_verdicts_import(
            project=judged_project, name="ext", description=" ", lines=[], fmt="jsonl"
        )
    judge = _import(judged_project, {"id": "pair-0", "verdict": "a"}).judge
    with pytest.raises(JudgeError, match="is imported: it has no job"):
        judge_launch(judge=judge)
    assert is_machine_account(judge.annotator) and not judge.annotator.is_active
    again = _import(judged_project, {"id": "pair-0", "verdict": "b"}).judge
    assert (again.version, again.annotator_id != judge.annotator_id) == (2, True)


def test_mt_bench_rows_match_the_importers_pairs(tmp_path, db):
    """FastChat rows name their models either way round; g1/g2 give the two orders (game 1 shows
    model_1 first). claude-v1 < gpt-4, so a row with model_1 = gpt-4 is the stored pair swapped."""
    from tests.annotation.test_mt_bench_turn2 import _fastchat, _jsonl, _vote

    questions, answers = _fastchat(tmp_path)
    votes = _jsonl(tmp_path / "votes.jsonl", [_vote("gpt-4", "claude-v1", "model_a", "e1", 1)])
    call_command(
        "import_comparisons", str(votes), "--project", "mt", "--format", "mt-bench",
        "--questions", str(questions), "--answers", str(answers),
    )  # fmt: skip
    from annotation.models import Project

    project = Project.objects.get(slug="mt")
    row = {"question_id": 81, "model_1": "gpt-4", "model_2": "claude-v1", "turn": 1,
           "g1_winner": "model_1", "g2_winner": "tie"}  # fmt: skip
    judge = _import(project, row, fmt="mt_bench").judge
    # g1: gpt-4 (stored b) shown first, gpt-4 won -> shown b, verdict b; g2: claude first, tie.
    assert _outputs(judge) == [
        ("mt-bench:81:turn1:claude-v1|gpt-4", "a", "tie", False),
        ("mt-bench:81:turn1:claude-v1|gpt-4", "b", "b", False),
    ]
    released = {"question_id": 81, "model_a": "gpt-4", "model_b": "claude-v1", "turn": 1,
                "winner": "tie", "release_winner": "tie (inconsistent)"}  # fmt: skip
    assert _outputs(_import(project, released, fmt="mt_bench", name="rel").judge) == [
        ("mt-bench:81:turn1:claude-v1|gpt-4", "", "tie", True)
    ]
    with pytest.raises(VerdictFileError, match="line 1: id: no comparison with id"):
        _import(project, {**row, "turn": 2}, fmt="mt_bench", name="t2")


def test_upload_page_imports_and_refuses_a_bad_file(judged_project, ml_engineer):
    client = logged_in(ml_engineer)
    url = reverse("monitoring:judge-import", args=["judged"])
    assert client.get(url).status_code == 200
    bad = SimpleUploadedFile("v.jsonl", b'{"id": "nope", "verdict": "a"}\n')
    page = client.post(url, {"name": "ext", "description": "x", "format": "jsonl", "file": bad})
    assert page.status_code == 400
    assert "line 1: id: no comparison with id &#x27;nope&#x27;" in page.content.decode()
    assert not Judge.objects.exists()
    good = SimpleUploadedFile("v.jsonl", b'{"id": "pair-0", "verdict": "a"}\n')
    page = client.post(url, {"name": "ext", "description": "x", "format": "jsonl", "file": good})
    judge = Judge.objects.get()
    assert page.status_code == 302 and page.url == reverse(
        "monitoring:judge-report", args=[judge.pk]
    )
    report = client.get(page.url).content.decode()
    assert "Imported verdicts from <code>v.jsonl</code>: x" in report
    listing = client.get(reverse("monitoring:judges", args=["judged"])).content.decode()
    assert "Run again" not in listing and "judge-import-link" in listing


def test_api_imports_with_a_project_token_and_refuses_a_bad_file(judged_project, ml_engineer):
    token = api_token_create(
        user=ml_engineer, name="judges", project_id=judged_project.pk
    ).plaintext
    client = Client()
    url = reverse("api-judge-import", args=["judged"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    bad = SimpleUploadedFile("v.jsonl", b'{"id": "pair-0", "verdict": "maybe"}\n')
    answer = client.post(url, {"name": "ext", "description": "x", "file": bad}, **auth)
    assert answer.status_code == 400
    assert answer.json()["errors"] == [
        'line 1: verdict: must be "a" | "b" | "tie" | "inconsistent", got \'maybe\''
    ]
    good = SimpleUploadedFile("v.jsonl", b'{"id": "pair-0", "a_first": "a", "b_first": "b"}\n')
    answer = client.post(url, {"name": "ext", "description": "x", "file": good}, **auth)
    assert answer.status_code == 201
    body = answer.json()
    assert {k: body[k] for k in ("name", "version", "kind", "comparisons", "per_order")} == {
        "name": "ext", "version": 1, "kind": "imported", "comparisons": 1, "per_order": 1
    }  # fmt: skip
