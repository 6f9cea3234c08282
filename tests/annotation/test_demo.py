"""The demo project: team prompts with SmolLM2 responses, accounts for every role, some judgements."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse

from annotation.demo import DEMO_COMPARISONS, DEMO_PASSWORD, demo_load
from annotation.models import Comparison, Judgement, Project, TaskAnswer, TaskItem
from common.errors import ConcordError

pytestmark = pytest.mark.django_db

ROWS = [json.loads(line) for line in DEMO_COMPARISONS.read_text().splitlines() if line.strip()]


def test_demo_file_is_varied_and_complete():
    """At least 60 prompts over six kinds, two non-empty responses each, from SmolLM2."""
    assert len(ROWS) >= 60
    categories = {row["metadata"]["category"] for row in ROWS}
    assert categories == {"coding", "advice", "facts", "writing", "safety", "reasoning"}
    assert all(row["response_a"].strip() and row["response_b"].strip() for row in ROWS)
    assert all(row["model_a"].startswith("smollm2-135m-instruct@") for row in ROWS)
    assert any(isinstance(row["prompt"], list) for row in ROWS), "no multi-turn prompt"
    judged = [row for row in ROWS if row.get("judgements")]
    assert judged and all(row["metadata"]["simulated_judgements"] for row in judged)


def test_load_demo_creates_project_accounts_and_judgements(capsys):
    call_command("load_demo")
    project = Project.objects.get(slug="demo")
    assert project.comparisons.count() == len(ROWS)
    expected = sum(len(row.get("judgements", [])) for row in ROWS)
    assert Judgement.objects.filter(comparison__project=project).count() == expected
    assert set(project.members.values_list("username", flat=True)) == {"ana", "ben", "chloe", "dev"}
    out = capsys.readouterr().out
    assert f"password {DEMO_PASSWORD!r}" in out and "rita" in out and "mel" in out


def test_load_demo_twice_changes_nothing():
    demo_load()
    counts = (Comparison.objects.count(), Judgement.objects.count())
    report = demo_load()
    assert (Comparison.objects.count(), Judgement.objects.count()) == counts
    assert report.imported.comparisons_created == 0


def test_demo_accounts_log_in_and_land_on_their_work(client):
    demo_load()
    assert client.login(username="ana", password=DEMO_PASSWORD)
    assert client.get("/").url == reverse("annotation:my-projects")
    page = client.get(reverse("annotation:my-projects")).content.decode()
    assert "Demo: SmolLM2 answers" in page
    assert get_user_model().objects.get(username="mel").is_staff


def test_demo_refuses_production(settings):
    settings.PRODUCTION = True
    with pytest.raises(ConcordError, match="cannot be loaded in production"):
        demo_load()
    assert not Project.objects.exists()


def _generate_demo_script():
    """scripts/generate_demo.py as a module (a script, not a package)."""
    import importlib.util

    from django.conf import settings

    path = settings.BASE_DIR / "scripts" / "generate_demo.py"
    spec = importlib.util.spec_from_file_location("generate_demo", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_generated_answer_with_a_nul_is_written_with_u_fffd_and_imports(tmp_path):
    """The demo generator's answers "Use x\\x00y." (a NUL the model sampled) and "Fine.": the
    file holds "Use x\\ufffdy.", and importing it into PostgreSQL stores that text (before: the
    import refused the row, a NUL cannot be stored)."""
    from annotation.services.importing import comparisons_import, project_get_or_create

    script = _generate_demo_script()
    careful = [script.Generation(text="Use x\x00y.", n_tokens=4, finished=True)]
    adventurous = [script.Generation(text="Fine.", n_tokens=2, finished=True)]
    row = {"id": "demo-nul", "category": "coding", "prompt": "Say something."}
    out = tmp_path / "comparisons.jsonl"
    script.write_comparisons([row], careful, adventurous, out=out, judged=0)
    written = json.loads(out.read_text())
    assert {written["response_a"], written["response_b"]} == {"Use x\ufffdy.", "Fine."}
    project, _ = project_get_or_create(slug="demo-nul")
    comparisons_import(project=project, lines=out)
    comparison = Comparison.objects.get(project=project)
    texts = {comparison.response_a.text, comparison.response_b.text}
    assert texts == {"Use x\ufffdy.", "Fine."}


def test_demo_has_rating_and_ranking_projects_with_answers_and_open_work():
    """The demo's rating and ranking projects: items, simulated answers on the first ones, and
    work left in ana's queue; a second load adds nothing."""
    report = demo_load()
    assert report.items_created["demo-rating"] == 24 and report.items_created["demo-ranking"] == 6
    rating = Project.objects.get(slug="demo-rating")
    assert rating.task_type == "rating" and rating.rating_thumbs
    assert rating.rating_aspects == ["helpfulness", "correctness", "verbosity"]
    ranking = Project.objects.get(slug="demo-ranking")
    assert all(i.positions.count() == 4 for i in TaskItem.objects.filter(project=ranking))
    assert TaskAnswer.objects.filter(item__project=rating).count() == 8 * 3
    assert TaskAnswer.objects.filter(item__project=ranking).count() == 3 * 3
    orders = TaskAnswer.objects.filter(item__project=ranking).values_list("order", flat=True)
    assert all(sorted(order) == [0, 1, 2, 3] for order in orders)  # position bias can be shown
    assert not TaskAnswer.objects.filter(annotator__username="ana").exists()
    again = demo_load()
    assert again.items_created == {"demo-rating": 0, "demo-ranking": 0}
