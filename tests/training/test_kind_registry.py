"""The kind registry (training.recipes.kinds) is the one list of kinds: a toy kind registered in
one place shows in the model's choices, the admin, the train command and the runs list."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from tests.factories import snapshot_of_pairs
from tests.helpers.clients import logged_in
from training import services
from training.models import REWARD_MODEL_KINDS, REWARD_MODEL_REQUIRED, TrainingRun
from training.recipes.config import ConfigError, TrainingConfig, _f
from training.recipes.kinds import KindSpec, registered

BEFORE = [
    ("rm", "Reward model"), ("dpo", "DPO"), ("simpo", "SimPO"), ("orpo", "ORPO"), ("kto", "KTO"),
    ("ppo", "PPO"), ("rloo", "RLOO"), ("grpo", "GRPO"),
]  # fmt: skip


@dataclass
class ToyConfig(TrainingConfig):
    """Toy preference tuning: a kind that exists only in this test."""

    toy_strength: float = _f(0.5, "how hard the toy pulls", section="Data")
    toy_mode: str = _f("calm", "the toy's mood", choices=("calm", "wild"))

    def __post_init__(self) -> None:
        super().__post_init__()
        self.kind = "toy"


TOY = KindSpec(
    name="toy",
    label="Toy kind",
    config_class=ToyConfig,
    recipe="tests.training.test_kind_registry:toy_recipe",
    headlines=((("toy/score",), "toy score"),),
    presets={"cpu": {"toy_strength": 0.25}},
)


@pytest.fixture
def toy_kind():
    """The toy kind in the registry for one test (removed after, whatever happens)."""
    with registered(TOY) as spec:
        yield spec


@pytest.mark.django_db
def test_the_model_choices_are_the_registry_kinds_unchanged():
    """Values, labels and order as the migrations hold them (no migration), and the reward-model
    kinds of the database constraint as before."""
    assert list(TrainingRun._meta.get_field("kind").choices) == BEFORE
    assert [(k.value, k.label) for k in TrainingRun.Kind] == BEFORE
    assert (REWARD_MODEL_KINDS, REWARD_MODEL_REQUIRED) == (("ppo", "rloo", "grpo"), ("ppo", "rloo"))
    out = StringIO()
    call_command("makemigrations", "training", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_a_toy_kind_is_a_choice_of_the_model(toy_kind):
    """Registered, the toy is the last choice, with its label shown for a run of it; gone after."""
    field = TrainingRun._meta.get_field("kind")
    assert list(field.choices)[-1] == ("toy", "Toy kind")
    assert TrainingRun(kind="toy").get_kind_display() == "Toy kind"
    field.clean("toy", TrainingRun(kind="toy"))  # a valid value of the field now


@pytest.mark.django_db
def test_a_toy_kind_has_its_card_select_sections_and_preset_in_the_admin(
    toy_kind, ml_engineer, tmp_path, settings
):
    """The kind picker has a Toy card (its config's first doc line, a link per preset); its form
    offers Toy in the kind select, shows toy_strength in Data (its field metadata) and toy_mode in
    Algorithm (the fallback), filled from the CPU preset's toy value 0.25, and takes no reward
    model."""
    settings.EXPORT_DIR, settings.VAR_DIR = tmp_path / "exports", tmp_path
    snapshot = snapshot_of_pairs(slug="toy", judged=False)
    add = reverse("admin:training_trainingrun_add")
    client = logged_in(ml_engineer)
    picker = client.get(f"{add}?snapshot={snapshot.pk}").content.decode()
    assert "Toy kind" in picker and "Toy preference tuning: a kind that exists only" in picker
    assert f"?snapshot={snapshot.pk}&amp;kind=toy&amp;preset=cpu" in picker
    response = client.get(f"{add}?snapshot={snapshot.pk}&kind=toy&preset=cpu")
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert ("toy", "Toy kind") in form.fields["kind"].choices
    assert "reward_model_run" not in form.fields
    assert form.fields["cfg__toy_strength"].initial == 0.25
    sections = {
        title: options["fields"] for title, options in response.context["adminform"].fieldsets
    }
    assert "cfg__toy_strength" in sections["Data"]
    assert sections["Algorithm"] == ["cfg__toy_mode"]


@pytest.mark.django_db
def test_the_services_create_a_toy_run_and_refuse_it_a_reward_model(toy_kind, tmp_path, settings):
    """run_create resolves the toy's settings from its dataclass (toy_strength 0.5, toy_mode calm);
    a reward-model run is refused naming the kinds that take one, as the registry says."""
    settings.EXPORT_DIR, settings.VAR_DIR = tmp_path / "exports", tmp_path
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    snapshot = snapshot_of_pairs(slug="toy", judged=False)
    run = services.run_create(
        name="toy 1", kind="toy", base_model="smollm2-135m-instruct", snapshot=snapshot
    )
    assert (run.config["toy_strength"], run.config["toy_mode"]) == (0.5, "calm")
    assert run.get_kind_display() == "Toy kind"
    rm = services.run_create(
        name="rm", kind="rm", base_model="smollm2-135m-instruct", snapshot=snapshot
    )
    TrainingRun.objects.filter(pk=rm.pk).update(status="succeeded")
    rm.refresh_from_db()
    with pytest.raises(
        services.RunError, match=r"^only PPO, RLOO and GRPO runs take a reward model$"
    ):
        services.run_create(
            name="toy 2", kind="toy", base_model="smollm2-135m-instruct", snapshot=snapshot,
            reward_model_run=rm,
        )  # fmt: skip
    assert not TrainingRun.objects.filter(name="toy 2").exists()


def test_a_reference_pass_needs_the_cache_field():
    """A kind whose recipe computes reference log-probs once must have reference_cache_dir (the
    services and the train command fill it): the spec is refused otherwise."""
    with pytest.raises(ConfigError, match=r"^toy: a kind with a reference pass needs"):
        dataclasses.replace(TOY, reference_pass=True)


@pytest.mark.django_db
def test_a_toy_run_shows_its_headline_in_the_runs_list(toy_kind, ml_engineer, tmp_path, settings):
    """The runs list reads the toy's headline from its spec: "toy score" at its last value, 0.875
    at step 2, beside the run's kind label."""
    from monitoring.selectors import runs as selectors

    settings.EXPORT_DIR = tmp_path / "exports"
    run = TrainingRun.objects.create(
        name="toy-run", kind="toy", base_model="smollm2-135m-instruct", status="running",
        snapshot=snapshot_of_pairs(slug="toy", judged=False),
    )  # fmt: skip
    for step, value in ((1, 0.5), (2, 0.875)):
        services.metrics_record(run_id=run.pk, step=step, metrics={"toy/score": value})
    (row,) = [row for row in selectors.runs_overview() if row["run"].pk == run.pk]
    assert [(h["label"], h["value"]) for h in row["headline"]] == [("toy score", 0.875)]
    page = logged_in(ml_engineer).get(reverse("monitoring:runs")).content.decode()
    assert "toy score 0.875" in page and "Toy kind" in page


@pytest.mark.django_db
def test_monitoring_reads_the_kinds_when_it_uses_them(toy_kind, ml_engineer, tmp_path, settings):
    """Registered after every module loaded, the toy is a choice of the runs list's kind filter
    (and filters it), its checkpoints are offered to eval rounds (a policy, not a reward model),
    and its page keeps no samples (its spec has no rollouts)."""
    from monitoring.selectors import runs as selectors
    from monitoring.views.eval_rounds import PolicyCheckpointField
    from monitoring.views.runs import RunsFilterForm
    from training.models import Checkpoint

    settings.EXPORT_DIR = tmp_path / "exports"
    run = TrainingRun.objects.create(
        name="toy-run", kind="toy", base_model="smollm2-135m-instruct", status="running",
        snapshot=snapshot_of_pairs(slug="toy", judged=False),
    )  # fmt: skip
    checkpoint = Checkpoint.objects.create(run=run, step=1, path=str(tmp_path))
    assert ("toy", "Toy kind") in RunsFilterForm().fields["kind"].choices
    assert ("toy", "Toy kind") in selectors.runs_filter_choices()["kinds"]
    assert RunsFilterForm({"kind": "toy"}).is_valid()
    page = logged_in(ml_engineer).get(reverse("monitoring:runs"), {"kind": "toy"}).content.decode()
    assert "toy-run" in page
    assert checkpoint in PolicyCheckpointField().queryset
    assert selectors.run_keeps_samples(run) is False
    assert selectors.run_keeps_samples(TrainingRun(kind="grpo")) is True


def test_the_train_command_offers_the_toy_kind_and_its_options(toy_kind):
    """--kind takes toy; the toy's fields are options of their own, prefixed with the one kind that
    has them (--toy-mode with its two choices); --list-options prints them; and on another kind
    a toy option is refused naming the toy."""
    from django.core.management import CommandError

    from training.management.commands.train import Command

    parser = Command().create_parser("manage.py", "train")
    actions = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    assert "toy" in actions["--kind"].choices
    assert actions["--toy-strength"].help == "toy: how hard the toy pulls"
    assert (actions["--toy-strength"].type, actions["--toy-mode"].choices) == (
        float,
        ("calm", "wild"),
    )
    assert "Toy kind" in parser.description
    out = StringIO()
    call_command("train", "--kind", "toy", "--list-options", stdout=out)
    assert "toy_strength" in out.getvalue() and "toy_mode" in out.getvalue()
    with pytest.raises(CommandError, match=r"^--toy-mode: only with --kind toy$"):
        call_command(
            "train", "--kind", "dpo", "--data", "d", "--model", "m", "--output", "o",
            "--toy-mode", "wild",
        )  # fmt: skip


def test_the_docs_kind_table_lists_the_registry_kinds_and_labels():
    """The user guide's "Choosing a kind" table (docs/guide/training-recipes.md, once the README's):
    one row per registered kind, in the registry's order, its name in the first column and its label
    in the second, nothing else."""
    from pathlib import Path

    from training.recipes.kinds import KINDS

    page = Path(__file__).resolve().parents[2] / "docs" / "guide" / "training-recipes.md"
    table = page.read_text().split("## Choosing a kind", 1)[1].split("\n\n", 2)[1]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    assert [(name.strip().strip("`"), label.strip()) for name, label in rows] == [
        (spec.name, spec.label) for spec in KINDS.values()
    ]
