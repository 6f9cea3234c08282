"""Judge services on tiny models built from configs: creation with a machine annotator that cannot
log in, versions, the reward-model and local-LLM jobs (both orders, resumable), the combined verdict
stored as a judgement, and the report against the humans only."""

import json

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from annotation.agreement.judges import reward_verdicts
from annotation.models import Judgement
from monitoring.models import Judge, JudgeOutput
from monitoring.selectors import judges as judge_selectors
from monitoring.services import judges as judge_services
from monitoring.services.judges import JudgeError, judge_create, judge_launch, judge_run
from tests.helpers.judge_world import JUDGE_MODEL, judge_outputs_by_hand, reward_model_judge

pytestmark = pytest.mark.django_db


def _run(judge):
    judge_launch(judge=judge)
    return judge_run(judge_id=judge.pk)


def test_machine_annotator_cannot_log_in_and_is_listed_as_machine(judged_project, reward_run):
    """The judge's account has no usable password and is inactive: no login, ever; the selector
    that other code uses to leave machines out of human lists names it."""
    judge = reward_model_judge(judged_project, reward_run)
    machine = judge.annotator
    assert not machine.has_usable_password() and not machine.is_active
    assert not Client().login(username=machine.username, password="")
    assert judge_selectors.machine_annotator_ids() == {machine.pk}
    humans = set(
        get_user_model().objects.filter(username__startswith="ann").values_list("pk", flat=True)
    )
    assert not humans & judge_selectors.machine_annotator_ids()


def test_a_name_used_again_makes_the_next_version_with_its_own_annotator(
    judged_project, reward_run
):
    first = reward_model_judge(judged_project, reward_run)
    second = reward_model_judge(judged_project, reward_run, tie_band=0.5)
    assert (first.version, second.version) == (1, 2)
    assert first.annotator_id != second.annotator_id


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "Bad Name", "kind": "reward_model"}, "must be a slug"),
        ({"name": "x", "kind": "gpt"}, "kind must be one of"),
        ({"name": "x", "kind": "reward_model", "reward_run": None}, "needs a reward-model run"),
        ({"name": "x", "kind": "reward_model", "tie_band": -1.0}, "tie_band must be >= 0"),
        ({"name": "x", "kind": "local_llm", "model_name": JUDGE_MODEL,
          "template": "Judge {prompt} and {response_a}"}, "{response_b}"),
        ({"name": "x", "kind": "local_llm", "model_name": JUDGE_MODEL,
          "max_new_tokens": 0}, "max_new_tokens"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_and_nothing_is_written(
    judged_project, reward_run, judge_models, kwargs, message
):
    users = get_user_model().objects.count()
    kwargs = {"reward_run": reward_run, **kwargs}
    with pytest.raises(JudgeError, match=message.replace("{", r"\{").replace("}", r"\}")):
        judge_create(project=judged_project, created_by=None, **kwargs)
    assert not Judge.objects.exists() and get_user_model().objects.count() == users


def test_a_policy_run_is_not_a_reward_model(judged_project, reward_run):
    reward_run.kind = "dpo"
    reward_run.save()
    with pytest.raises(JudgeError, match="need a succeeded rm run"):
        reward_model_judge(judged_project, reward_run)


def test_reward_model_judge_answers_both_orders_with_the_calibrated_band(
    judged_project, reward_run
):
    """12 answers (6 pairs x 2 orders) with r(A) - r(B) kept; the verdicts follow the band
    calibrated on the humans' majority labels; both orders agree (scores ignore the order), so
    each judgement is the answers' verdict, with a blank shown_left (both orders combined)."""
    judge = _run(reward_model_judge(judged_project, reward_run))
    assert judge.status == "succeeded", judge.error
    assert (judge.done, judge.total) == (12, 12)
    assert judge.tie_band is not None and judge.tie_band >= 0
    outputs = list(JudgeOutput.objects.filter(judge=judge).order_by("comparison", "shown_first"))
    assert [o.shown_first for o in outputs] == ["a", "b"] * 6
    for output in outputs:
        scores = json.loads(output.raw)
        assert output.score_diff == pytest.approx(scores["score_a"] - scores["score_b"], abs=1e-6)
        expected = reward_verdicts(np.array([output.score_diff]), tie_band=judge.tie_band)[0]
        assert output.verdict == ("a", "b", "tie")[expected] and output.seconds > 0
    judgements = Judgement.objects.filter(annotator=judge.annotator).order_by("comparison")
    assert [j.choice for j in judgements] == [o.verdict for o in outputs[::2]]
    assert {j.shown_left for j in judgements} == {""}


def test_a_fixed_band_is_kept(judged_project, reward_run):
    judge = _run(reward_model_judge(judged_project, reward_run, tie_band=1000.0))
    assert judge.tie_band == 1000.0 and judge.tie_band_kappa is None
    assert set(JudgeOutput.objects.filter(judge=judge).values_list("verdict", flat=True)) == {"tie"}


def test_the_job_resumes_where_it_stopped_and_never_rewrites_answers(judged_project, reward_run):
    """A crashed job (here: 5 answers deleted, status failed) launched again answers only the
    missing ones; the answers it kept are the same rows."""
    judge = _run(reward_model_judge(judged_project, reward_run))
    kept = dict(JudgeOutput.objects.filter(judge=judge).values_list("pk", "created_at")[5:])
    JudgeOutput.objects.filter(judge=judge).exclude(pk__in=kept).delete()
    Judge.objects.filter(pk=judge.pk).update(status="failed")
    judge = _run(Judge.objects.get(pk=judge.pk))
    assert judge.status == "succeeded" and judge.done == 12
    again = dict(
        JudgeOutput.objects.filter(judge=judge, pk__in=kept).values_list("pk", "created_at")
    )
    assert again == kept


def test_a_message_for_a_finished_job_does_nothing(judged_project, reward_run):
    judge = _run(reward_model_judge(judged_project, reward_run))
    before = list(JudgeOutput.objects.values_list("pk", flat=True))
    assert judge_run(judge_id=judge.pk).status == "succeeded"
    assert list(JudgeOutput.objects.values_list("pk", flat=True)) == before
    with pytest.raises(JudgeError, match="already queued"):
        judge_launch(judge=judge_launch(judge=judge))


def test_a_new_version_writes_its_own_rows(judged_project, reward_run):
    first = _run(reward_model_judge(judged_project, reward_run, tie_band=1000.0))
    second = _run(reward_model_judge(judged_project, reward_run, tie_band=0.0))
    assert JudgeOutput.objects.filter(judge=first).count() == 12
    assert JudgeOutput.objects.filter(judge=second).count() == 12
    assert set(
        Judgement.objects.filter(annotator=first.annotator).values_list("choice", flat=True)
    ) == {"tie"}
    assert Judgement.objects.filter(annotator=second.annotator).exclude(choice="tie").exists()


def test_local_llm_judge_keeps_every_raw_answer_and_its_parse(judged_project, judge_models):
    """The tiny random Llama answers gibberish: 12 answers stored, each either a verdict or the
    parser's reason; only comparisons with a verdict get a judgement."""
    judge = judge_create(
        project=judged_project, name="llm", kind="local_llm", created_by=None,
        model_name=JUDGE_MODEL, max_new_tokens=8,
    )  # fmt: skip
    judge = _run(judge)
    assert judge.status == "succeeded", judge.error
    outputs = JudgeOutput.objects.filter(judge=judge)
    assert outputs.count() == 12
    for output in outputs:
        assert bool(output.verdict) != bool(output.parse_error) and output.seconds > 0
    parsed = set(outputs.exclude(verdict="").values_list("comparison_id", flat=True))
    judged = set(
        Judgement.objects.filter(annotator=judge.annotator).values_list("comparison_id", flat=True)
    )
    assert judged == parsed


def test_combined_verdict_rule(judged_project, reward_run):
    """Both orders agree: that verdict; they disagree: a tie; one unparsed: the other, with its
    order as shown_left; both unparsed: no judgement."""
    judge = reward_model_judge(judged_project, reward_run)
    comparisons = judge_outputs_by_hand(judge, [("a", "a"), ("a", "b"), ("", "b"), ("", "")])
    assert judge_services.judge_verdicts_store(judge=judge) == 3
    stored = {
        j.comparison_id: (j.choice, j.shown_left, j.elapsed_ms)
        for j in Judgement.objects.filter(annotator=judge.annotator)
    }
    assert stored == {
        comparisons[0].pk: ("a", "", 500),
        comparisons[1].pk: ("tie", "", 500),
        comparisons[2].pk: ("b", "b", 250),
    }


def test_report_measures_the_judge_against_the_humans_only(judged_project, reward_run):
    """The judge gives ann1's verdict (the majority where there is one) on every pair in both
    orders: kappa 1 with the consensus on the 5 pairs that have one (a, b, tie has none), no
    flips, and the three people (not the judge) in the per-human rows.
    Position: of 12 decisive verdicts (5 a-majority pairs and 1 b-majority pair), the response
    shown first won when its side won: 5 of the 10 "a" answers plus 1 of the 2 "b" = 6 of 12."""
    judge = reward_model_judge(judged_project, reward_run)
    majority = ["a", "a", "a", "a", "b", "a"]
    judge_outputs_by_hand(judge, [(m, m) for m in majority])
    judge_services.judge_verdicts_store(judge=judge)
    summary = judge_selectors.judge_report_summary(judge_selectors.judge_report_data(judge=judge))
    assert summary["kappa_consensus"] == 1.0 and summary["kappa_consensus_n"] == 5
    assert [row["annotator"] for row in summary["kappa_per_human"]] == ["ann1", "ann2", "ann3"]
    assert summary["kappa_per_human"][0]["kappa"] == 1.0
    assert (summary["swap_flips"], summary["swap_flip_rate"]) == (0, 0.0)
    assert (summary["position_n"], summary["position_first_share"]) == (12, 0.5)
    assert summary["unparsed"] == 0 and summary["answers"] == 12
    assert summary["seconds_per_answer"] == 0.25


def test_report_counts_unparsed_answers_with_examples(judged_project, reward_run):
    judge = reward_model_judge(judged_project, reward_run)
    judge_outputs_by_hand(judge, [("a", ""), ("", "")])
    summary = judge_selectors.judge_report_summary(judge_selectors.judge_report_data(judge=judge))
    assert summary["unparsed"] == 3 and len(summary["unparsed_examples"]) == 3
    assert summary["unparsed_examples"][0]["reason"] == "no verdict found"


def test_command_prints_the_figures(judged_project, reward_run, capsys):
    judge = reward_model_judge(judged_project, reward_run)
    judge_outputs_by_hand(judge, [("a", "a"), ("a", "b")])
    judge_services.judge_verdicts_store(judge=judge)
    call_command("judge_report", "--project", "judged", "--judge", "rm")
    text = capsys.readouterr().out
    assert "kappa vs human consensus:" in text and "swap-flip rate: 0.5 (1 of 2" in text
    assert "position bias:" in text and "length bias:" in text
    call_command("judge_report", "--project", "judged", "--judge", "rm", "--json")
    assert json.loads(capsys.readouterr().out)["swap_flips"] == 1


def test_command_runs_a_judge_in_process(judged_project, reward_run, capsys):
    call_command(
        "judge_run", "--project", "judged", "--judge", "rm", "--reward-run", str(reward_run.pk)
    )
    assert "rm v1: succeeded, 12/12 answers" in capsys.readouterr().out
