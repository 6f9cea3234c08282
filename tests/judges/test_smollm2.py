"""The packaged SmolLM2-135M-Instruct as a local judge on 4 pairs, in both orders (slow: the real
model on CPU, 17 s an answer at 16 new tokens on 2 busy shared cores). A 135M model often answers
without a verdict in the asked format: those answers are kept as unparsed with the parser's reason,
never guessed."""

import pytest

from common.model_registry import model_get
from monitoring.models import JudgeOutput
from monitoring.selectors.judges import judge_report_data, judge_report_summary
from monitoring.services.judges import judge_create, judge_launch, judge_run
from tests.helpers.judge_world import JUDGE_MODEL

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_smollm2_judges_four_pairs_in_both_orders(judged_project):
    if not model_get(JUDGE_MODEL).ready:
        pytest.skip("SmolLM2 is not fetched (python manage.py fetch_models)")
    judged_project.comparisons.order_by("-pk")[0].delete()
    judged_project.comparisons.order_by("-pk")[0].delete()
    judge = judge_create(
        project=judged_project, name="smollm2", kind="local_llm", created_by=None,
        model_name=JUDGE_MODEL, max_new_tokens=16,
    )  # fmt: skip
    judge_launch(judge=judge)
    judge = judge_run(judge_id=judge.pk)
    assert judge.status == "succeeded", judge.error
    assert (judge.done, judge.total) == (8, 8)
    outputs = list(JudgeOutput.objects.filter(judge=judge))
    assert sorted((o.comparison_id, o.shown_first) for o in outputs) == sorted(
        (c, s) for c in judged_project.comparisons.values_list("pk", flat=True) for s in "ab"
    )
    for output in outputs:
        assert output.raw.strip() and output.seconds > 0
        assert bool(output.verdict) != bool(output.parse_error)
    parsed = {o.comparison_id for o in outputs if o.verdict}
    assert set(judge.annotator.judgements.values_list("comparison_id", flat=True)) == parsed
    summary = judge_report_summary(judge_report_data(judge=judge))
    assert summary["answers"] == 8 and summary["unparsed"] == 8 - summary["verdicts"]
    print(f"SmolLM2 judge: {summary['seconds_per_answer']} s per answer, "
          f"{summary['unparsed']} of 8 answers unparsed")  # fmt: skip
