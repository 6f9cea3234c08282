"""Every page a lead, an annotator and a reviewer reach for the demo's rating and ranking projects
shows their items (count, answers, progress) or says, by type, which page to use: never a
pairwise "0 comparisons"."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from annotation.demo import DEMO_PASSWORD, demo_load
from annotation.models import Project, TaskAnswer, TaskItem
from annotation.services.exporting import dataset_export
from annotation.services.import_jobs import import_job_create
from common.errors import ConcordError

pytestmark = pytest.mark.django_db

ITEM_PROJECTS = ("demo-rating", "demo-ranking")
# Pages that work on comparisons: for an item project, the typed notice instead.
PAIRWISE_PAGES = (
    ("annotation:items", "The item browser"),
    ("annotation:clusters", "Prompt clusters"),
    ("annotation:adjudicate", "Adjudication"),
    ("monitoring:judges", "Model judges"),
)
# "0 comparisons", "0 pairs", "no comparisons yet"...: what a pairwise page says with nothing.
ZERO_PAIRS = re.compile(r"\b0 (comparisons|pairs|judgements)\b|No comparisons yet", re.IGNORECASE)


@pytest.fixture
def demo(client):
    demo_load()
    return client


def _page(client, username: str, url: str) -> str:
    assert client.login(username=username, password=DEMO_PASSWORD)
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def _figures(slug: str) -> tuple[int, int]:
    project = Project.objects.get(slug=slug)
    items = TaskItem.objects.filter(project=project).count()
    answers = TaskAnswer.objects.filter(item__project=project, repeat=False).count()
    assert items and answers, "the demo answers its first items"
    return items, answers


@pytest.mark.parametrize("slug", ITEM_PROJECTS)
def test_the_lead_pages_show_items_never_zero_comparisons(demo, slug):
    items, answers = _figures(slug)
    for name in ("project-manage", "project-settings", "project-members", "agreement"):
        html = _page(demo, "mel", reverse(f"annotation:{name}", args=[slug]))
        assert not ZERO_PAIRS.search(html), name
    manage = _page(demo, "mel", reverse("annotation:project-manage", args=[slug]))
    assert f"{items} items" in manage and f"{answers} answers" in manage
    assert "import_items" in manage and "Import comparisons" not in manage
    # The training export of its rows (item_dataset_export), not the pairwise consensus form.
    assert 'data-testid="item-export-form"' in manage and 'name="consensus"' not in manage
    assert (
        reverse("annotation:adjudicate", args=[slug]) not in manage
    )  # subnav: pairwise pages hidden
    people = _page(demo, "mel", reverse("annotation:project-members", args=[slug]))
    bens = TaskAnswer.objects.filter(item__project__slug=slug, annotator__username="ben")
    assert "<th>Answers</th>" in people
    assert f'<td class="judgements">{bens.filter(repeat=False).count()}</td>' in people
    # The Manage page's annotators table (the include the pairwise page shares) counts answers.
    assert "<th>Answers</th>" in manage
    assert f"<tr><td>ben</td><td>{bens.filter(repeat=False).count()}</td>" in manage
    overview = _page(demo, "mel", reverse("annotation:project-overview"))
    assert re.search(rf'data-testid="units-{slug}">{items} items<', overview)


@pytest.mark.parametrize("slug", ITEM_PROJECTS)
@pytest.mark.parametrize(("url_name", "page"), PAIRWISE_PAGES)
def test_pairwise_pages_say_the_type_and_where_to_go(demo, slug, url_name, page):
    items, answers = _figures(slug)
    html = _page(demo, "mel", reverse(url_name, args=[slug]))
    kind = Project.objects.get(slug=slug).task_type
    assert f"{page}: for pairwise projects only" in html
    assert f"is a <strong>{kind}" in html
    assert f"{items} items</strong>" in html and f"{answers} answers</strong>" in html
    assert reverse("annotation:agreement", args=[slug]) in html and "export_items" in html
    assert not ZERO_PAIRS.search(html)


def test_a_write_on_a_pairwise_page_is_refused_and_changes_nothing(demo):
    assert demo.login(username="mel", password=DEMO_PASSWORD)
    before = TaskAnswer.objects.count()
    response = demo.post(reverse("annotation:clusters-recluster", args=["demo-rating"]))
    assert response.status_code == 409 and b"for pairwise projects only" in response.content
    response = demo.post(reverse("annotation:adjudicate-save", args=["demo-ranking", 1]))
    assert response.status_code == 409
    assert TaskAnswer.objects.count() == before


@pytest.mark.parametrize("slug", ITEM_PROJECTS)
def test_the_annotator_sees_items_and_answers_in_her_list(demo, slug):
    project = Project.objects.get(slug=slug)
    items, _ = _figures(slug)
    mine = TaskAnswer.objects.filter(item__project=project, annotator__username="ben").count()
    html = _page(demo, "ben", reverse("annotation:my-projects"))
    row = html[html.index(f'href="/annotation/p/{slug}/label/"') :].split("</tr>")[0]
    assert f"{mine} answers" in row and f"{items} items" in row
    label = _page(demo, "ben", reverse("annotation:label", args=[slug]))
    assert not ZERO_PAIRS.search(label)


def test_the_reviewer_sees_items_in_the_project_list(demo):
    items, answers = _figures("demo-ranking")
    html = _page(demo, "rita", reverse("annotation:project-overview"))
    assert f"{items} items" in html and f"{answers} answers" in html
    assert not ZERO_PAIRS.search(html.split("demo-ranking")[1].split("</tr>")[0])


def test_an_upload_of_comparisons_and_a_pairwise_export_are_refused(demo):
    project = Project.objects.get(slug="demo-rating")
    upload = SimpleUploadedFile(
        "pairs.jsonl", b'{"prompt": "p", "response_a": "a", "response_b": "b"}\n'
    )
    with pytest.raises(ConcordError, match="rating project: uploads import pairwise comparisons"):
        import_job_create(project=project, upload=upload, created_by=None)
    with pytest.raises(ValueError, match=r"export its items with python manage\.py export_items"):
        dataset_export(project=project)
    assert not project.import_jobs.exists() and not project.exports.exists()
