"""An eval round draws only prompts neither model trained on (prompt_selectors.prompts_held_out):
the run of the fixture trained on 2 prompts of the project ("Trained on: ..."), and the 8 PAIRS
came after its export. Asking for more prompts than are held out is refused with the count."""

import json

import pytest
from django.urls import reverse

from annotation.models import Prompt
from annotation.services.exporting import dataset_export
from annotation.services.importing import comparisons_import, project_get_or_create
from monitoring.models import EvalRound
from monitoring.selectors import prompts as prompt_selectors
from monitoring.services.eval_rounds import EvalError
from tests.helpers.clients import logged_in
from tests.helpers.eval_rounds import BASELINE, TRAINED_PAIRS, make_round
from tests.helpers.tiny_models import PAIRS
from training import services
from training.models import Checkpoint

pytestmark = pytest.mark.django_db
HELD_OUT = {p for p, _, _ in PAIRS}
TRAINED = {row["prompt"] for row in TRAINED_PAIRS}


def _round_prompts(round_: EvalRound) -> set[str]:
    return set(Prompt.objects.filter(pk__in=round_.prompt_ids).values_list("text", flat=True))


def test_a_round_of_every_held_out_prompt_has_none_the_run_trained_on(run_with_checkpoints):
    """10 prompts in the project, 2 in the run's training file: a round of 8 is exactly the 8
    held-out prompts (before, it drew from all 10, the trained ones among them)."""
    round_ = make_round(run_with_checkpoints, size=8)
    assert _round_prompts(round_) == HELD_OUT
    assert round_.size == 8


def test_the_held_out_count_and_its_message(run_with_checkpoints):
    """8 of the 10 prompts are held out; the message names the run and the most a round takes."""
    run = run_with_checkpoints
    held = prompt_selectors.prompts_held_out(
        project=run.snapshot.export.project, checkpoint=run.checkpoints.get(step=4)
    )
    assert (held.n_project, held.n_available, len(held.trained_ids)) == (10, 8, 2)
    assert held.message() == (
        f"8 of the 10 prompts of eval are held out (not in the training data of run #{run.pk}): "
        "a round can use at most 8."
    )


def test_asking_for_more_prompts_than_are_held_out_is_refused_and_creates_nothing(
    run_with_checkpoints,
):
    """500 asked, 8 held out: refused with the count (before, a round of all 10 prompts, the
    trained ones included, was created without a word)."""
    with pytest.raises(EvalError) as caught:
        make_round(run_with_checkpoints, size=500)
    assert str(caught.value) == (
        "500 prompts asked for. 8 of the 10 prompts of eval are held out (not in the training "
        f"data of run #{run_with_checkpoints.pk}): a round can use at most 8."
    )
    assert not EvalRound.objects.exists()


def test_a_project_whose_every_prompt_was_trained_on_is_refused(run_with_checkpoints):
    """A second project holding only copies of the 2 trained prompts: nothing is held out (the
    same prompt text counts as trained on, whichever project the run's export came from)."""
    copy, _ = project_get_or_create(slug="copy")
    comparisons_import(project=copy, lines=[json.dumps(r) for r in TRAINED_PAIRS])
    with pytest.raises(EvalError) as caught:
        make_round(run_with_checkpoints, project=copy, size=1)
    assert str(caught.value) == (
        "None of the 2 prompts of copy is held out: every one is in the training data of run "
        f"#{run_with_checkpoints.pk}. Import prompts the model did not train on (they are held "
        "out until an export that trains a model includes them)."
    )


def test_a_baseline_checkpoints_training_prompts_are_left_out_too(run_with_checkpoints):
    """A baseline checkpoint of a second run trained on 3 of the PAIRS: a round against it keeps
    5 prompts, the ones neither run trained on."""
    run = run_with_checkpoints
    project = run.snapshot.export.project
    labelled = [p for p, _, _ in PAIRS[:3]]
    rows = [
        {"prompt": p, "response_a": c, "response_b": r,
         "judgements": [{"annotator": "tess", "choice": "a"}]}
        for p, c, r in PAIRS[:3]
    ]  # fmt: skip
    comparisons_import(project=project, lines=[json.dumps(r) for r in rows])
    other = services.run_create(
        name="other", kind="dpo", base_model=BASELINE,
        snapshot=services.snapshot_for(export=dataset_export(project=project)),
        config={"max_steps": 4}, created_by=None,
    )  # fmt: skip
    baseline = Checkpoint.objects.create(run=other, step=1, path=run.checkpoints.get(step=2).path)
    with pytest.raises(EvalError, match="at most 5"):
        make_round(run, size=6, baseline_model="", baseline_checkpoint=baseline)
    round_ = make_round(run, size=5, baseline_model="", baseline_checkpoint=baseline)
    assert _round_prompts(round_) == HELD_OUT - set(labelled)
    assert not _round_prompts(round_) & TRAINED


def test_the_forms_question_is_answered_in_json(run_with_checkpoints, ml_engineer):
    """The new-round form's question: 8 of 10 for step 4 and the eval project; without a
    checkpoint, a 400 saying what to choose."""
    client, url = logged_in(ml_engineer), reverse("monitoring:eval-available")
    checkpoint = run_with_checkpoints.checkpoints.get(step=4)
    answer = client.get(url, {"checkpoint": checkpoint.pk, "project": "eval"}).json()
    assert (answer["available"], answer["total"]) == (8, 10)
    assert answer["message"].startswith("8 of the 10 prompts of eval are held out")
    refused = client.get(url, {"project": "eval"})
    assert (refused.status_code, refused.json()) == (
        400,
        {"error": "choose a checkpoint and a project"},
    )
