"""The demo project's simulated annotators have known habits (scripts/generate_demo.py): ana is
careful; ben lets the left side decide 55% of the time, chloe the longer response 55% of the time;
dev guesses 40% of the time and takes about 6 s a judgement (the others 21-38 s). On its 36
judgements each, the report must find each habit, and flag nothing on ana."""

import pytest

from annotation.demo import DEMO_COMPARISONS, DEMO_SLUG, demo_load
from annotation.models import Project
from annotation.services.agreement import agreement_summary, project_agreement

pytestmark = pytest.mark.django_db


@pytest.fixture
def annotators() -> dict[str, dict]:
    if not DEMO_COMPARISONS.is_file():
        pytest.skip("demo/comparisons.jsonl is not generated")
    demo_load()
    result = project_agreement(project=Project.objects.get(slug=DEMO_SLUG), n_boot=200)
    return {row["annotator"]: row for row in agreement_summary(result)["annotators"]}


def test_each_demo_habit_is_flagged(annotators):
    assert "position_bias" in annotators["ben"]["flags"]
    assert "length_bias" in annotators["chloe"]["flags"]
    assert "fast" in annotators["dev"]["flags"]
    assert annotators["ana"]["flags"] == []


def test_the_careful_annotator_agrees_most_with_the_others(annotators):
    """ana agrees with the others' majority more often than anyone, though her mean kappa is low:
    her teammates are the noisy ones (which is why low_agreement is relative to the team)."""
    best = max(annotators, key=lambda name: annotators[name]["loo_agreement"])
    assert best == "ana"
    assert annotators["ana"]["mean_kappa"] == max(row["mean_kappa"] for row in annotators.values())
