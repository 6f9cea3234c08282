"""The judge report page gives shares in plain words: percentages and percentage points, never a
raw 0-1 number like "same verdict on 1.0"."""

import pytest
from django.urls import reverse

from monitoring.models import JudgeOutput
from monitoring.services.judges import judge_create, judge_verdicts_store
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db


def test_the_report_gives_shares_as_percentages(judged_project, reward_run, ml_engineer):
    """Two pairs judged in both orders: pair 0 gets "a" both times (the same verdict), pair 1 "a"
    with a shown first and "b" with b shown first (a flip). Same verdict on 1 of 2 pairs: 50%;
    the first-shown answer won 3 of the 4 decisive verdicts: 75%, 25 points above an unbiased
    50%; no tie: 0%."""
    judge = judge_create(
        project=judged_project, name="rm", kind="reward_model", created_by=None,
        reward_run=reward_run,
    )  # fmt: skip
    first, second = list(judged_project.comparisons.order_by("pk"))[:2]
    for comparison, shown_first, verdict in [
        (first, "a", "a"), (first, "b", "a"), (second, "a", "a"), (second, "b", "b"),
    ]:  # fmt: skip
        JudgeOutput.objects.create(
            judge=judge, comparison=comparison, shown_first=shown_first, raw="x",
            verdict=verdict, seconds=1.0,
        )  # fmt: skip
    judge_verdicts_store(judge=judge)
    body = logged_in(ml_engineer).get(reverse("monitoring:judge-report", args=[judge.pk]))
    body = body.content.decode()
    assert "1 flips on 2 pairs decisive in both orders" in body
    assert "the same verdict in both orders on 50% of them" in body
    assert 'data-testid="flip-rate">50%<' in body
    assert "first-shown response picked in 75% of 4 decisive verdicts" in body
    assert 'data-testid="position-bias">+25 points<' in body
    assert "<tr><th>Tie rate</th><td>0%</td>" in body
