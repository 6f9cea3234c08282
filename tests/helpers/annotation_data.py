"""Small annotation data sets shared by several test modules."""

from __future__ import annotations

import json

from annotation.services.importing import comparisons_import, project_get_or_create
from tests.factories import ComparisonFactory, PromptFactory, ResponseFactory


def project_with_votes():
    """Project "exp": four comparisons, votes from two annotators on three of them."""
    project, _ = project_get_or_create(slug="exp")
    rows = [
        {"prompt": "P1", "response_a": "good", "response_b": "bad", "model_a": "m1", "model_b": "m2",
         "judgements": [{"annotator": "u1", "choice": "a", "strength": 3, "shown_left": "b",
                         "elapsed_ms": 4000},
                        {"annotator": "u2", "choice": "a", "strength": 1}]},
        {"prompt": [{"role": "user", "content": "P2"}], "response_a": "x", "response_b": "y",
         "judgements": [{"annotator": "u1", "choice": "b", "strength": 2}]},
        {"prompt": "P3", "response_a": "p", "response_b": "q",
         "judgements": [{"annotator": "u1", "choice": "tie"}]},
        {"prompt": "P4", "response_a": "n", "response_b": "o"},
    ]  # fmt: skip
    comparisons_import(project=project, lines=[json.dumps(r) for r in rows])
    return project


def make_pair(project, prompt="A prompt", a="first answer", b="second answer", ma="m1", mb="m2"):
    prompt = PromptFactory(project=project, text=prompt)
    return ComparisonFactory(
        project=project,
        prompt=prompt,
        response_a=ResponseFactory(prompt=prompt, text=a, model_name=ma),
        response_b=ResponseFactory(prompt=prompt, text=b, model_name=mb),
    )
