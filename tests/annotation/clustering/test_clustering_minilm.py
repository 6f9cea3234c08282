"""The real packaged all-MiniLM-L6-v2 on the 72 demo prompts: paraphrases share a cluster,
unrelated prompts do not (about 10 s on CPU: loading the model and embedding)."""

import json
from pathlib import Path

import pytest

from annotation.models import Prompt
from annotation.parsing import content_hash
from annotation.services import clustering as service
from tests.factories import ProjectFactory

DEMO_PROMPTS = Path(__file__).resolve().parents[3] / "demo" / "prompts.jsonl"
# The three deliberate paraphrase pairs of the demo set.
PARAPHRASES = [
    ("demo-001", "demo-007"),  # reverse a Python list / a list in backwards order
    ("demo-013", "demo-019"),  # fall asleep faster / get to sleep more quickly
    ("demo-025", "demo-030"),  # the capital of Australia / Australia's capital
]

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def _load_demo_prompts(project) -> dict[str, int]:
    ids = {}
    for line in DEMO_PROMPTS.read_text().splitlines():
        row = json.loads(line)
        messages = row["prompt"] if isinstance(row["prompt"], list) else None
        text = messages[-1]["content"] if messages else row["prompt"]
        prompt = Prompt.objects.create(
            project=project,
            text=text,
            messages=messages,
            content_hash=content_hash(row["prompt"]),
            metadata={"id": row["id"]},
        )
        ids[row["id"]] = prompt.pk
    return ids


def test_minilm_puts_paraphrases_together_and_unrelated_prompts_apart():
    """k chosen by silhouette: each pair in one cluster, the three pairs in three clusters; a second
    run embeds nothing."""
    project = ProjectFactory(slug="demo-clusters")
    ids = _load_demo_prompts(project)
    run, _ = service.clustering_run_request(project=project)
    run = service.clustering_run_execute(run_id=run.pk)
    assert run.n_embedded == 72 and run.k >= 3
    cluster = dict(Prompt.objects.filter(project=project).values_list("id", "cluster"))
    pair_clusters = [(cluster[ids[a]], cluster[ids[b]]) for a, b in PARAPHRASES]
    assert all(a == b for a, b in pair_clusters), pair_clusters
    assert len({a for a, _ in pair_clusters}) == 3, pair_clusters

    again, _ = service.clustering_run_request(project=project)
    assert service.clustering_run_execute(run_id=again.pk).n_embedded == 0
