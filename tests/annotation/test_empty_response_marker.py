"""An imported empty (or whitespace-only) response is shown as a visible marker, not a blank box."""

import json

import pytest
from django.urls import reverse

from annotation.services.importing import comparisons_import, project_get_or_create
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("empty", ["", "  \n "])
def test_label_screen_marks_the_empty_response(annotator, empty):
    project = project_get_or_create(slug="empties")[0]
    project.members.add(annotator)
    row = {"prompt": "Say something.", "response_a": "Something.", "response_b": empty}
    comparisons_import(project=project, lines=[json.dumps(row)])
    page = logged_in(annotator).get(reverse("annotation:label", args=["empties"]))
    html = page.content.decode()
    assert page.status_code == 200
    assert html.count('data-testid="empty-response"') == 1
    assert "(empty response)" in html and "Something." in html
