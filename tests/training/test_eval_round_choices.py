"""The eval-round form offers only checkpoints of policy runs (a reward model cannot answer prompts),
by run name, kind and step, and ``?checkpoint=ID`` chooses one."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from annotation.services.exporting import dataset_export
from annotation.services.importing import comparisons_import, project_get_or_create
from monitoring.views.eval_rounds import RoundForm
from tests.helpers.clients import logged_in
from tests.helpers.tiny_models import PAIRS
from training import services
from training.models import Checkpoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def checkpoints(tmp_path, settings):
    """Step 2 of a DPO run, step 5 of a reward-model run and step 3 of a SimPO run."""
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    project, _ = project_get_or_create(slug="evals")
    rows = [{"prompt": p, "response_a": c, "response_b": r} for p, c, r in PAIRS]
    comparisons_import(project=project, lines=[json.dumps(r) for r in rows])
    snapshot = services.snapshot_for(export=dataset_export(project=project))
    made = {}
    for kind, step in (("dpo", 2), ("rm", 5), ("simpo", 3)):
        run = services.run_create(
            name=f"{kind} run", kind=kind, base_model="smollm2-135m-instruct", snapshot=snapshot
        )
        folder = tmp_path / "ckpt" / kind  # on disk: only those are offered
        folder.mkdir(parents=True)
        made[kind] = Checkpoint.objects.create(run=run, step=step, path=str(folder))
    return made


def test_only_policy_checkpoints_are_offered_by_name_kind_and_step(checkpoints):
    form = RoundForm()
    for field in ("checkpoint", "baseline_checkpoint"):
        labels = [label for value, label in form.fields[field].choices if value]
        assert labels == [
            f"simpo run · SimPO #{checkpoints['simpo'].run_id} · step 3",
            f"dpo run · DPO #{checkpoints['dpo'].run_id} · step 2",
        ]


def test_a_reward_model_checkpoint_is_refused(checkpoints):
    form = RoundForm({"checkpoint": checkpoints["rm"].pk, "size": 10, "ci_width": 0.1,
                      "max_new_tokens": 16, "project": "evals"})  # fmt: skip
    assert not form.is_valid() and "checkpoint" in form.errors


def test_the_checkpoint_in_the_address_is_chosen(checkpoints, ml_engineer):
    pk = checkpoints["dpo"].pk
    response = logged_in(ml_engineer).get(reverse("monitoring:eval-rounds") + f"?checkpoint={pk}")
    assert response.context["form"]["checkpoint"].value() == str(pk)
    assert f'<option value="{pk}" selected>' in response.content.decode()
