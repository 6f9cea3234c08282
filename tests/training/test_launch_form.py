"""The admin's launch form (/admin/training/trainingrun/add/): kind first, typed fields that
round-trip at their defaults, errors under their field, presets, writes through the audited services,
"Save and launch", the snapshot and reward-model pickers, and the refusals (a mismatched kind, a
launched run)."""

from __future__ import annotations

from typing import Any

import pytest
from django import forms
from django.urls import reverse

from annotation.models import DatasetExport
from tests.factories import snapshot_of_pairs
from tests.helpers.clients import logged_in
from tests.helpers.launch_form import browser_data, shown_value
from training import services
from training.admin import CONFIG_PREFIX, config_form_field
from training.models import RunEvent, TrainingRun
from training.recipes.config import config_fields
from training.recipes.kinds import config_class, kind_names
from training.recipes.presets import PRESETS, preset_values

pytestmark = pytest.mark.django_db
ADD = reverse("admin:training_trainingrun_add")


@pytest.fixture
def snapshot(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    settings.VAR_DIR = tmp_path
    return snapshot_of_pairs(slug="launch", judged=False)


@pytest.fixture
def reward_run(snapshot):
    """A succeeded reward-model run with a held-out accuracy, as the RL kinds need."""
    run = services.run_create(
        name="rm v1", kind="rm", base_model="smollm2-135m-instruct", snapshot=snapshot
    )
    TrainingRun.objects.filter(pk=run.pk).update(
        status="succeeded", summary={"eval/accuracy": 0.8125}
    )
    run.refresh_from_db()
    return run


def _page_form(client, url: str):
    response = client.get(url)
    assert response.status_code == 200, response
    return response.context["adminform"].form


def _defaults(kind: str, preset: str) -> dict[str, Any]:
    """The full settings a run saved from an unchanged form stores (JSON: tuples as lists)."""
    values = {}
    for spec in config_fields(config_class(kind)):
        if spec.name not in services.MANAGED_FIELDS:
            value = preset_values(preset, kind).get(spec.name, spec.default)
            values[spec.name] = list(value) if isinstance(value, tuple) else value
    return values


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        (kind, spec.name)
        for kind in kind_names()
        for spec in config_fields(config_class(kind))
        if spec.name not in services.MANAGED_FIELDS
    ],
)
def test_every_field_round_trips_through_its_form_field_at_its_default(kind, name):
    """Rendered at its default and posted back unchanged, each setting of each kind cleans to that
    default: what the reward_range text "(0.1, 1.0)" failed to do."""
    (spec,) = [s for s in config_fields(config_class(kind)) if s.name == name]
    field = config_form_field(spec)
    if isinstance(field.widget, forms.CheckboxInput):
        posted = {"x": "on"} if spec.default else {}
    else:
        posted = {"x": shown_value(field, field.prepare_value(spec.default))}
    assert field.clean(field.widget.value_from_datadict(posted, {}, "x")) == spec.default


@pytest.mark.parametrize(
    ("text", "value"),
    [("0.1, 1.0", (0.1, 1.0)), ("(0.1, 1.0)", (0.1, 1.0)), ("-1,1", (-1.0, 1.0)), ("", None)],
)
def test_reward_range_is_read_as_two_numbers(text, value):
    (spec,) = [s for s in config_fields(config_class("ppo")) if s.name == "reward_range"]
    assert config_form_field(spec).clean(text) == value


@pytest.mark.parametrize("text", ["0.1", "0.1, 0.5, 1.0", "low, high"])
def test_reward_range_refuses_other_text(text):
    (spec,) = [s for s in config_fields(config_class("ppo")) if s.name == "reward_range"]
    with pytest.raises(
        forms.ValidationError, match=r"2 numbers separated by commas, e\.g\. 0\.1, 1\.0"
    ):
        config_form_field(spec).clean(text)


def test_perturb_instructions_one_per_line():
    (spec,) = [s for s in config_fields(config_class("ppo")) if s.name == "perturb_instructions"]
    assert config_form_field(spec).clean("Be brief.\n\n Use a list. \n") == (
        "Be brief.",
        "Use a list.",
    )


def test_add_without_a_kind_shows_the_kind_picker(ml_engineer, snapshot):
    """Kind first: one card per kind, a link per preset, the snapshot kept in every link."""
    page = logged_in(ml_engineer).get(f"{ADD}?snapshot={snapshot.pk}").content.decode()
    for kind in kind_names():
        for preset in PRESETS:
            assert f"?snapshot={snapshot.pk}&amp;kind={kind}&amp;preset={preset.name}" in page
    assert "Dataset snapshot" in page and "cfg__" not in page


def test_a_post_without_a_kind_saves_nothing(ml_engineer, snapshot):
    response = logged_in(ml_engineer).post(ADD, {"name": "x", "snapshot": snapshot.pk})
    assert response.status_code == 200
    assert "Choose the kind of run first" in response.content.decode()
    assert not TrainingRun.objects.exists()


@pytest.mark.parametrize("kind", kind_names())
@pytest.mark.parametrize("preset", [p.name for p in PRESETS])
def test_each_kind_and_preset_saves_its_unchanged_form_with_every_value(
    kind, preset, ml_engineer, snapshot, reward_run
):
    """The form for (kind, preset) posted back unchanged (name, and for RL the reward model, filled
    in) creates a draft storing every resolved setting, audited as ``created``."""
    client = logged_in(ml_engineer)
    url = f"{ADD}?kind={kind}&preset={preset}&snapshot={snapshot.pk}"
    form = _page_form(client, url)
    data = {**browser_data(form), "name": f"{kind} {preset}"}
    assert data["snapshot"] == str(snapshot.pk)
    if kind in ("ppo", "rloo"):
        data["reward_model_run"] = str(reward_run.pk)
    response = client.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    run = TrainingRun.objects.get(name=f"{kind} {preset}")
    assert (run.kind, run.status, run.created_by) == (kind, "draft", ml_engineer)
    expected = _defaults(kind, preset)
    if kind in ("dpo", "kto"):  # None: Concord's shared cache, and the run stores which folder
        expected["reference_cache_dir"] = run.config["reference_cache_dir"]
        assert expected["reference_cache_dir"].endswith("cache/reference-logps")
    assert run.config == expected
    assert run.events.get().action == "created" and run.events.get().user == ml_engineer


def test_errors_stand_under_their_field(ml_engineer, snapshot, reward_run):
    """ConfigError.field puts the recipe's message under the setting; nothing is saved."""
    client = logged_in(ml_engineer)
    url = f"{ADD}?kind=ppo&snapshot={snapshot.pk}"
    data = {**browser_data(_page_form(client, url)), "name": "bad"}
    data["reward_model_run"] = str(reward_run.pk)
    data[CONFIG_PREFIX + "reward_range"] = "1.0, 0.1"
    response = client.post(url, data)
    errors = response.context["adminform"].form.errors
    assert errors[CONFIG_PREFIX + "reward_range"] == [
        "reward_range: need low < high, got (1.0, 0.1)"
    ]
    data[CONFIG_PREFIX + "reward_range"] = "0.1, 1.0"
    data[CONFIG_PREFIX + "minibatch_size"] = "99"
    errors = client.post(url, data).context["adminform"].form.errors
    assert list(errors) == [CONFIG_PREFIX + "minibatch_size"]
    assert not TrainingRun.objects.exclude(pk=reward_run.pk).exists()


def test_a_post_whose_kind_differs_from_the_form_is_refused(ml_engineer, snapshot):
    """The DPO form posted with kind=rm (a switch without the reload): refused, nothing saved, so
    no reward model gets DPO's learning rate."""
    client = logged_in(ml_engineer)
    url = f"{ADD}?kind=dpo&snapshot={snapshot.pk}"
    data = {**browser_data(_page_form(client, url)), "name": "mixed", "kind": "rm"}
    response = client.post(url, data)
    assert response.status_code == 200
    assert "This form holds DPO settings but the kind sent is Reward model" in (
        response.content.decode()
    )
    assert not TrainingRun.objects.exists()


def test_the_rl_kinds_pick_a_succeeded_reward_model_by_name(ml_engineer, snapshot, reward_run):
    """Only succeeded reward-model runs are offered, labelled by name, kind and eval accuracy; the
    rm and dpo forms have no reward-model field."""
    client = logged_in(ml_engineer)
    services.run_create(name="rm draft", kind="rm", base_model="smollm2-135m-instruct",
                        snapshot=snapshot)  # fmt: skip
    field = _page_form(client, f"{ADD}?kind=rloo").fields["reward_model_run"]
    labels = [label for value, label in field.choices if value]
    assert labels == [f"rm v1 · Reward model #{reward_run.pk} · eval accuracy 0.812"]
    assert "reward_model_run" not in _page_form(client, f"{ADD}?kind=dpo").fields
    assert "reward_model_run" not in _page_form(client, f"{ADD}?kind=rm").fields


def test_presets_fill_the_form(ml_engineer):
    client = logged_in(ml_engineer)
    form = _page_form(client, f"{ADD}?kind=ppo&preset=gpu")
    assert form[CONFIG_PREFIX + "bf16"].value() is True
    assert form[CONFIG_PREFIX + "device"].value() == "cuda"
    assert _page_form(client, f"{ADD}?kind=ppo&preset=cpu")[CONFIG_PREFIX + "device"].value() == (
        "cpu"
    )
    page = client.get(f"{ADD}?kind=ppo&preset=cpu").content.decode()
    assert "Quick look on CPU" in page and "GPU, bf16 + flash-attn" in page


def test_fieldsets_by_concern_common_ones_open(ml_engineer):
    """Every setting is in a section; the common sections are open, the rest collapsed."""
    response = logged_in(ml_engineer).get(f"{ADD}?kind=ppo")
    fieldsets = {fs.name: fs for fs in response.context["adminform"]}
    assert list(fieldsets)[1:] == [
        "Data", "Optimisation", "Algorithm", "Model", "Generation", "LoRA",
        "Precision and hardware", "Checkpoints and evaluation",
    ]  # fmt: skip
    assert "collapse" in fieldsets["LoRA"].classes
    assert "collapse" not in fieldsets["Optimisation"].classes
    assert "collapse" in fieldsets["Generation"].classes
    shown = {
        name for fs in fieldsets.values() for line in fs for f in line for name in [f.field.name]
    }
    settable = {CONFIG_PREFIX + s.name for s in config_fields(config_class("ppo"))
                if s.name not in services.MANAGED_FIELDS}  # fmt: skip
    assert settable <= shown


def test_train_on_this_export_opens_the_picker_with_its_snapshot(ml_engineer, snapshot):
    client = logged_in(ml_engineer)
    response = client.get(f"{ADD}?export={snapshot.export_id}&kind=rm")
    assert response.status_code == 302
    assert response.url == f"{ADD}?kind=rm&snapshot={snapshot.pk}"
    assert str(_page_form(client, response.url)["snapshot"].value()) == str(snapshot.pk)


def test_change_and_save_and_launch_are_audited(
    ml_engineer, snapshot, django_capture_on_commit_callbacks
):
    """A draft's change is a ``changed`` event with [old, new] per value; "Save and launch" queues
    it (task on the gpu queue after commit) and records ``launched``."""
    client = logged_in(ml_engineer)
    run = services.run_create(name="d", kind="dpo", base_model="smollm2-135m-instruct",
                              snapshot=snapshot, created_by=ml_engineer)  # fmt: skip
    url = reverse("admin:training_trainingrun_change", args=[run.pk])
    data = {**browser_data(_page_form(client, url)), CONFIG_PREFIX + "beta": "0.3"}
    for prefix in ("checkpoints", "events"):  # the read-only inlines' management forms
        data.update({f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0"})
    assert client.post(url, data).status_code == 302
    changed = run.events.get(action="changed")
    assert changed.detail == {"fields": {}, "config": {"beta": [0.1, 0.3]}}
    assert changed.user == ml_engineer
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(url, {**data, "_launch": "Save and launch"})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == "queued" and len(callbacks) == 1
    assert list(run.events.values_list("action", flat=True)) == ["created", "changed", "launched"]
    # A queued run's page shows its settings read only; a POST is refused, nothing changes.
    form = _page_form(client, url)
    assert (
        form.fields[CONFIG_PREFIX + "beta"].disabled and form[CONFIG_PREFIX + "beta"].value() == 0.3
    )
    refused = client.post(url, {**data, CONFIG_PREFIX + "beta": "0.5"})
    assert refused.status_code == 200 and "only a draft can be changed" in refused.content.decode()
    run.refresh_from_db()
    assert run.config["beta"] == 0.3


def test_config_with_a_text_reward_range_is_a_config_error_not_a_crash(snapshot, reward_run):
    """The service refuses the text the old form sent, naming the field."""
    from training.recipes.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        services.run_create(
            name="p", kind="ppo", base_model="smollm2-135m-instruct", snapshot=snapshot,
            reward_model_run=reward_run, config={"reward_range": "(0.1, 1.0)"},
        )  # fmt: skip
    assert caught.value.field == "reward_range"
    assert not RunEvent.objects.filter(run__kind="ppo").exists()


def test_the_export_list_links_to_the_form_with_the_snapshot(ml_engineer, snapshot):
    """The lead's export list (project manage page) offers "Train on this export"; following it
    ends on the kind picker with that export's snapshot chosen."""
    client = logged_in(ml_engineer)
    project = snapshot.export.project
    page = client.get(reverse("annotation:project-manage", args=[project.slug])).content.decode()
    link = f"{ADD}?export={snapshot.export_id}"
    assert f'href="{link}" data-testid="train-on-export">Train on this export' in page
    response = client.get(link, follow=True)
    assert response.redirect_chain == [(f"{ADD}?snapshot={snapshot.pk}", 302)]
    assert "Dataset snapshot" in response.content.decode()


def test_save_and_launch_from_the_add_form(
    ml_engineer, snapshot, django_capture_on_commit_callbacks
):
    """ "Save and launch" on a new run: created and launched in one go, both audited."""
    client = logged_in(ml_engineer)
    url = f"{ADD}?kind=rm&preset=cpu&snapshot={snapshot.pk}"
    data = {**browser_data(_page_form(client, url)), "name": "rm now", "_launch": "1"}
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(url, data)
    run = TrainingRun.objects.get(name="rm now")
    assert response.url == reverse("admin:training_trainingrun_change", args=[run.pk])
    assert run.status == "queued" and len(callbacks) == 1
    assert list(run.events.values_list("action", flat=True)) == ["created", "launched"]
    assert run.events.get(action="created").detail == {"config": run.config}


def test_run_update_changes_drafts_only(snapshot):
    run = services.run_create(name="d", kind="dpo", base_model="smollm2-135m-instruct",
                              snapshot=snapshot)  # fmt: skip
    fields = {"name": "d", "base_model": "smollm2-135m-instruct", "snapshot": snapshot}
    assert services.run_update(run=run, user=None, config=run.config, **fields) == run
    assert not run.events.filter(action="changed").exists()  # nothing changed, nothing recorded
    TrainingRun.objects.filter(pk=run.pk).update(status="failed")
    with pytest.raises(services.RunError, match="only a draft can be changed"):
        services.run_update(run=run, user=None, config={"beta": 0.5}, **fields)


def test_grpo_preselects_the_newest_reward_model_and_takes_verifiable_rewards_alone(
    ml_engineer, snapshot, reward_run
):
    """GRPO's reward model is optional: a new form has the newest succeeded one chosen (so it saves
    at its defaults); emptied, with a verifiable reward typed in, the run saves without one and
    stores the reward's line; emptied with no reward, the error stands under ``rewards``."""
    client = logged_in(ml_engineer)
    url = f"{ADD}?kind=grpo&snapshot={snapshot.pk}"
    form = _page_form(client, url)
    assert form["reward_model_run"].value() == reward_run.pk
    assert form.fields["reward_model_run"].required is False
    data = {**browser_data(form), "name": "rules only", "reward_model_run": ""}
    response = client.post(url, data)
    assert response.context["adminform"].form.errors[CONFIG_PREFIX + "rewards"] == [
        "rewards: name a verifiable reward or choose a reward model"
    ]
    data[CONFIG_PREFIX + "rewards"] = 'length_penalty {"target": 60}\nformat'
    data[CONFIG_PREFIX + "reward_weights"] = "1.0\n0.5"
    assert client.post(url, data).status_code == 302
    run = TrainingRun.objects.get(name="rules only")
    assert run.reward_model_run is None
    assert run.config["rewards"] == ['length_penalty {"target": 60}', "format"]
    assert run.config["reward_weights"] == [1.0, 0.5]


def test_grpo_without_any_reward_model_run_shows_an_error_not_a_crash(ml_engineer, snapshot):
    """No succeeded reward model anywhere and no verifiable reward: the unchanged GRPO form comes
    back with the error under ``rewards`` (a 200, not a 500) and saves nothing."""
    client = logged_in(ml_engineer)
    url = f"{ADD}?kind=grpo&snapshot={snapshot.pk}"
    data = {**browser_data(_page_form(client, url)), "name": "nothing scores"}
    response = client.post(url, data)
    assert response.status_code == 200
    assert CONFIG_PREFIX + "rewards" in response.context["adminform"].form.errors
    assert not TrainingRun.objects.exists()


def test_the_reward_models_loss_and_aspect_weights_launch_from_the_form(ml_engineer, snapshot):
    """The Reward model form offers ``loss`` (pairs, ranked lists, rated aspects) and
    ``aspect_weights`` in its Algorithm section; a pairs-only option beside plackett_luce is refused
    under its field, nothing saved; aspect_regression with weights saves them (issue #32)."""
    client = logged_in(ml_engineer)
    url = f"{ADD}?kind=rm&snapshot={snapshot.pk}"
    form = _page_form(client, url)
    assert form.fields[CONFIG_PREFIX + "loss"].choices == [
        (name, name) for name in ("bradley_terry", "plackett_luce", "aspect_regression")
    ]
    data = {**browser_data(form), "name": "listwise"}
    data[CONFIG_PREFIX + "loss"] = "plackett_luce"
    data[CONFIG_PREFIX + "ensemble_size"] = "2"
    errors = client.post(url, data).context["adminform"].form.errors
    assert list(errors) == [CONFIG_PREFIX + "ensemble_size"]
    assert not TrainingRun.objects.exists()
    data[CONFIG_PREFIX + "ensemble_size"] = "1"
    # aspect_regression trains on rated responses: a snapshot of regression rows.
    DatasetExport.objects.filter(snapshot=snapshot).update(options={"rows": "regression"})
    data[CONFIG_PREFIX + "loss"] = "aspect_regression"
    data[CONFIG_PREFIX + "aspect_weights"] = "helpfulness=0.65, verbosity=-0.4"
    assert client.post(url, data).status_code == 302
    saved = TrainingRun.objects.get(name="listwise").config
    assert (saved["loss"], saved["aspect_weights"]) == (
        "aspect_regression",
        "helpfulness=0.65, verbosity=-0.4",
    )
