"""The launch form refuses a snapshot whose rows the run's kind cannot train on (issue #32): each
kind accepts the row kinds it reads (pairs for the DPO family and the Bradley-Terry reward model,
ranked lists for Plackett-Luce, rated responses for aspect regression, pairs or thumbs for KTO,
prompts of any row for the online kinds), and the refusal names what the snapshot holds and what
the run needs."""

from __future__ import annotations

import pytest
from django.urls import reverse

from annotation.models import DatasetExport
from tests.factories import snapshot_of_pairs
from tests.helpers.clients import logged_in
from tests.helpers.launch_form import browser_data
from training.admin import CONFIG_PREFIX
from training.models import TrainingRun
from training.recipes.config import ConfigError
from training.recipes.kinds import ROW_KINDS, row_kinds_accepted
from training.services import snapshot_row_kind, snapshot_rows_check

pytestmark = pytest.mark.django_db
ADD = reverse("admin:training_trainingrun_add")
EVERY = tuple(ROW_KINDS)


@pytest.fixture
def snapshot(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    settings.VAR_DIR = tmp_path
    return snapshot_of_pairs(slug="rows", judged=False)


def _holding(snapshot, rows: str):
    """``snapshot`` as a snapshot of ``rows`` (its export says so in ``options["rows"]``)."""
    DatasetExport.objects.filter(snapshot=snapshot).update(options={"rows": rows})
    snapshot.export.refresh_from_db()
    return snapshot


@pytest.mark.parametrize(
    ("kind", "config", "accepted"),
    [
        ("dpo", {}, ("pairs",)),
        ("simpo", {}, ("pairs",)),
        ("orpo", {}, ("pairs",)),
        ("rm", {"loss": "bradley_terry"}, ("pairs",)),
        ("rm", {"loss": "plackett_luce"}, ("listwise",)),
        ("rm", {"loss": "aspect_regression"}, ("regression",)),
        ("kto", {"unpaired_data": None}, ("pairs", "kto")),
        ("kto", {"unpaired_data": "/data/thumbs.jsonl"}, EVERY),
        ("ppo", {}, EVERY),
        ("rloo", {}, EVERY),
        ("grpo", {}, EVERY),
    ],
)
def test_each_kind_accepts_the_rows_it_reads(kind, config, accepted):
    assert row_kinds_accepted(kind, config) == accepted


def test_an_export_that_does_not_say_holds_pairs(snapshot):
    """dataset_export's exports carry no ``rows`` option: their file is TRL-style pairs."""
    assert "rows" not in snapshot.export.options
    assert snapshot_row_kind(snapshot) == "pairs"
    assert snapshot_row_kind(_holding(snapshot, "listwise")) == "listwise"


def test_kto_on_ranked_lists_is_refused_naming_both(snapshot):
    """KTO reads its snapshot as preference pairs or labelled completions (a thumbs export), not
    ranked lists; the thumbs rows it accepts."""
    with pytest.raises(
        ConfigError, match=r"ranked lists.*KTO run trains on preference.*or labelled completions"
    ) as e:
        snapshot_rows_check(kind="kto", config={}, snapshot=_holding(snapshot, "listwise"))
    assert e.value.field == "snapshot"
    snapshot_rows_check(kind="kto", config={}, snapshot=_holding(snapshot, "kto"))


def _post(client, kind: str, snapshot, **settings):
    """The (kind, snapshot) form posted back unchanged but for ``settings``."""
    url = f"{ADD}?kind={kind}&snapshot={snapshot.pk}"
    data = {**browser_data(client.get(url).context["adminform"].form), "name": f"{kind} run"}
    data.update({CONFIG_PREFIX + k: v for k, v in settings.items()})
    return client.post(url, data)


def test_dpo_on_a_rankings_listwise_snapshot_is_refused_on_the_snapshot_field(
    ml_engineer, snapshot
):
    """A DPO run on ranked lists would fail in the worker: the form refuses it under the snapshot
    select, naming the ranked lists it holds and the preference pairs DPO needs; nothing saved."""
    response = _post(logged_in(ml_engineer), "dpo", _holding(snapshot, "listwise"))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["snapshot"]
    (message,) = errors["snapshot"]
    assert "holds ranked lists (prompt, responses, ranks" in message
    assert "a DPO run trains on preference pairs" in message and "another kind" in message
    assert not TrainingRun.objects.exists()


def test_plackett_luce_needs_listwise_rows_and_launches_on_them(ml_engineer, snapshot):
    """The reward model with loss plackett_luce on a pairs snapshot is refused (naming the loss);
    the same form on a listwise snapshot saves the draft."""
    client = logged_in(ml_engineer)
    response = _post(client, "rm", snapshot, loss="plackett_luce")
    (message,) = response.context["adminform"].form.errors["snapshot"]
    assert "holds preference pairs" in message
    assert "a Reward model with loss 'plackett_luce' run trains on ranked lists" in message
    assert not TrainingRun.objects.exists()
    response = _post(client, "rm", _holding(snapshot, "listwise"), loss="plackett_luce")
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert TrainingRun.objects.get().config["loss"] == "plackett_luce"
