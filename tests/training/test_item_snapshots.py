"""Training runs on a rating or ranking project's export (issue #32): the run's ``data`` is the
export's data file (``listwise.jsonl``, ``aspects.jsonl``, ``kto.jsonl``; pairs.jsonl for a
pairwise export), the recipes' loaders read those files as ``item_dataset_export`` writes them,
the launch form accepts a Plackett-Luce reward model on a listwise snapshot and refuses DPO there,
and a Plackett-Luce reward model trains on the tiny model from the frozen rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from django.urls import reverse

from annotation.services.item_exports import item_dataset_export
from tests.factories import snapshot_of_pairs
from tests.helpers.clients import logged_in
from tests.helpers.launch_form import browser_data
from tests.helpers.recipes import tiny_pair_values
from tests.helpers.task_items import answered_ranking, answered_rating
from training.admin import CONFIG_PREFIX
from training.models import TrainingRun
from training.recipes import KTOConfig, RewardModelConfig
from training.recipes.kto_data import load_kto_examples
from training.recipes.ranked_data import load_ranked_lists, load_rated_responses
from training.recipes.reward_model import train_reward_model
from training.services import run_managed_values, snapshot_for, snapshot_rows_check

pytestmark = pytest.mark.django_db
ADD = reverse("admin:training_trainingrun_add")
BASE = "smollm2-135m-instruct"  # a registry name; the run's paths are only read here


@pytest.fixture(autouse=True)
def _folders(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    settings.VAR_DIR = tmp_path


def _snapshot(project, row_format: str):
    return snapshot_for(export=item_dataset_export(project=project, row_format=row_format))


def _data(run: TrainingRun) -> Path:
    return Path(run_managed_values(run)["data"])


def _run(snapshot, kind: str, **config) -> TrainingRun:
    return TrainingRun.objects.create(
        name=f"{kind} run", kind=kind, base_model=BASE, snapshot=snapshot, config=config
    )


def test_the_run_reads_its_exports_data_file():
    """A run's ``data``: listwise.jsonl of a listwise snapshot, aspects.jsonl of a regression
    one, kto.jsonl of a thumbs one, pairs.jsonl of a pairwise export (no ``data_file``)."""
    ranking, rating = answered_ranking(2), answered_rating(2)
    cases = [
        (_snapshot(ranking, "listwise"), "rm", "listwise.jsonl"),
        (_snapshot(rating, "aspects"), "rm", "aspects.jsonl"),
        (_snapshot(rating, "kto"), "kto", "kto.jsonl"),
        (snapshot_of_pairs(slug="pairwise", judged=False), "dpo", "pairs.jsonl"),
    ]
    for snapshot, kind, name in cases:
        data = _data(_run(snapshot, kind))
        assert data == Path(snapshot.export.folder) / name and data.is_file()


def test_the_loaders_read_the_frozen_rows():
    """Plackett-Luce reads the listwise rows, aspect regression the aspect means on [1, 5]
    (4.0 and 3.0 -> 0.75 and 0.5), KTO the thumbs file as labelled completions without
    ``unpaired_data`` (the file's first row says so)."""
    lists, skipped = load_ranked_lists(
        Path(_snapshot(answered_ranking(2), "listwise").export.folder) / "listwise.jsonl"
    )
    assert len(lists) + skipped == 2 and all(len(row.responses) == 4 for row in lists)
    rating = answered_rating(2)
    rated, aspects = load_rated_responses(
        Path(_snapshot(rating, "aspects").export.folder) / "aspects.jsonl"
    )
    assert aspects == ("helpfulness", "correctness")
    assert [row.targets for row in rated] == [{"helpfulness": 0.75, "correctness": 0.5}] * 2
    kto = Path(_snapshot(rating, "kto").export.folder) / "kto.jsonl"
    config = KTOConfig(model="m", data=str(kto), output_dir="out")
    examples = load_kto_examples(config)
    assert [(e.prompt, e.completion, e.desirable) for e in examples] == [
        ((("user", "Question 0?"),), "Answer 0.", True),
        ((("user", "Question 1?"),), "Answer 1.", True),
    ]


def test_the_launch_check_follows_the_snapshots_rows():
    """Listwise: the Plackett-Luce reward model yes, DPO no; thumbs: KTO yes (its own data,
    without unpaired_data), DPO no."""
    from training.recipes.config import ConfigError

    listwise = _snapshot(answered_ranking(1), "listwise")
    snapshot_rows_check(kind="rm", config={"loss": "plackett_luce"}, snapshot=listwise)
    with pytest.raises(ConfigError, match="holds ranked lists"):
        snapshot_rows_check(kind="dpo", config={}, snapshot=listwise)
    thumbs = _snapshot(answered_rating(1), "kto")
    snapshot_rows_check(kind="kto", config={}, snapshot=thumbs)
    with pytest.raises(ConfigError, match="holds labelled completions"):
        snapshot_rows_check(kind="dpo", config={}, snapshot=thumbs)


def _post(client, kind: str, export, **config):
    """The run form of ``kind`` on ``export``'s snapshot posted back but for ``config``."""
    url = f"{ADD}?kind={kind}&snapshot={snapshot_for(export=export).pk}"
    data = {**browser_data(client.get(url).context["adminform"].form), "name": f"{kind} run"}
    data.update({CONFIG_PREFIX + k: v for k, v in config.items()})
    return client.post(url, data)


def test_the_launch_form_takes_a_plackett_luce_model_on_a_listwise_export(ml_engineer):
    """On a ranking's listwise export: DPO is refused under the
    snapshot field, the reward model with loss plackett_luce saves, and its data is the
    export's listwise.jsonl."""
    export = item_dataset_export(project=answered_ranking(2), row_format="listwise")
    client = logged_in(ml_engineer)
    refused = _post(client, "dpo", export)
    assert refused.status_code == 200
    (message,) = refused.context["adminform"].form.errors["snapshot"]
    assert "holds ranked lists" in message and not TrainingRun.objects.exists()
    saved = _post(client, "rm", export, loss="plackett_luce")
    assert saved.status_code == 302, saved.context["adminform"].form.errors
    run = TrainingRun.objects.get()
    assert run.snapshot.export == export and run.config["loss"] == "plackett_luce"
    assert _data(run) == Path(export.folder) / "listwise.jsonl"


def test_a_plackett_luce_reward_model_trains_on_a_ranking_export(tiny_llama_dir, tmp_path):
    """Four items ranked by three people, frozen as listwise rows: two epochs on the tiny model
    read every list (no tie makes a list all-tied) and give finite losses."""
    export = item_dataset_export(project=answered_ranking(4), row_format="listwise")
    data = Path(export.folder) / "listwise.jsonl"
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    values = tiny_pair_values(
        tiny_llama_dir, data, tmp_path / "out", loss="plackett_luce", batch_size=2, epochs=2,
        max_length=64, eval_fraction=0.0,
    )  # fmt: skip
    result = train_reward_model(RewardModelConfig(**values))
    assert result.summary["lists"] == len(rows) == 4
    metrics = (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(line)["loss"] for line in metrics if '"loss"' in line]
    assert losses and all(math.isfinite(loss) for loss in losses)
