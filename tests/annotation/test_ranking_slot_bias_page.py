"""The ranking agreement page and ``manage.py agreement`` show position bias by screen slot, from
the display order stored with each answer (``TaskAnswer.order``)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from annotation.models import TaskAnswer
from tests.factories import UserFactory
from tests.helpers.clients import logged_in
from tests.helpers.task_items import ranking_project

pytestmark = pytest.mark.django_db


@pytest.fixture
def ranked():
    """One item of 3 responses, two answers. Ann saw stored order [0, 1, 2] and ranked it
    [1, 2, 3]: by slot [1, 2, 3]. Bo saw [1, 2, 0] and gave stored ranks [2, 1, 3]: slot 0 showed
    position 1 (rank 1), slot 1 position 2 (rank 3), slot 2 position 0 (rank 2), so by slot
    [1, 3, 2]. Friedman (worked out in test_ranking_slots): Q = 3 on 2 df, p = exp(-1.5) =
    0.2231; mean ranks by slot [1, 2.5, 2.5]."""
    project, (item,) = ranking_project(1, k=3)
    for name, order, ranks in (("ann", [0, 1, 2], [1, 2, 3]), ("bo", [1, 2, 0], [2, 1, 3])):
        TaskAnswer.objects.create(
            item=item, annotator=UserFactory(username=name), order=order, ranks=ranks
        )
    return project


def test_the_command_json_has_the_mean_rank_by_slot_and_the_test(ranked):
    out = StringIO()
    call_command("agreement", "--project", ranked.slug, "--json", stdout=out)
    slots = json.loads(out.getvalue())["position_bias"]["slots"]
    assert slots["test"] == "friedman" and slots["df"] == 2
    assert slots["statistic"] == pytest.approx(3.0)
    assert slots["p_value"] == pytest.approx(0.22313, abs=1e-5)
    assert slots["sizes"] == [
        {"k": 3, "n_rankings": 2, "mean_rank": [1.0, 2.5, 2.5], "expected": 2.0,
         "statistic": 3.0, "df": 2},
    ]  # fmt: skip
    text = StringIO()
    call_command("agreement", "--project", ranked.slug, stdout=text)
    assert "slot bias friedman chi2    3.000 on 2 df, p 0.223" in text.getvalue()
    assert "K=3: mean rank by slot [1.000, 2.500, 2.500]" in text.getvalue()


def test_the_page_shows_the_slots_the_test_and_single_parentheses(ranked, ml_engineer):
    page = logged_in(ml_engineer).get(reverse("annotation:agreement", args=[ranked.slug]))
    html = page.content.decode()
    counts = html.split('data-testid="agreement-counts">')[1].split("</p>")[0]
    assert "((" not in counts and "))" not in counts
    assert "2 answers on 1 items by 2 annotators · Ranking (order 3-8 responses)." in html
    assert "χ² = 3.000 on 2 degrees of freedom, p = 0.2231" in html
    assert "no evidence that the screen slot drives the ranks" in html
    means = html.split('data-testid="slot-means"')[1].split("</table>")[0]
    assert "<td>1.0</td><td>2.5</td><td>2.5</td>" in means and "2.0 expected" in means


def test_a_strong_slot_effect_is_called_out(ml_engineer):
    """Six answers that all rank the top slot best and the bottom one worst (by slot [1, 2, 3]):
    R = [6, 12, 18] against 12, Q = 12 * 72 / (6 * 3 * 4) = 12 on 2 df, p = exp(-6) = 0.0025."""
    project, items = ranking_project(2, k=3, overlap=3)
    for n in range(6):
        TaskAnswer.objects.create(
            item=items[n % 2], annotator=UserFactory(), order=[n % 3, (n + 1) % 3, (n + 2) % 3],
            ranks=[[1, 2, 3], [3, 1, 2], [2, 3, 1]][n % 3],
        )  # fmt: skip
    html = logged_in(ml_engineer).get(reverse("annotation:agreement", args=[project.slug]))
    text = html.content.decode()
    assert "χ² = 12.000 on 2 degrees of freedom, p = 0.0025" in text
    assert "the screen slot drives the ranks" in text
