"""factory_boy factories for the annotation domain and users of each role; dataset snapshots of the
tiny preference pairs and training runs on them (``snapshot_of_pairs``, ``training_run``)."""

import json
from typing import Any

import factory
from django.contrib.auth import get_user_model

from annotation.models import Comparison, Judgement, Project, Prompt, Response
from annotation.parsing import content_hash
from annotation.services.exporting import dataset_export
from annotation.services.importing import comparisons_import, project_get_or_create
from common.roles import role_assign
from tests.helpers.tiny_models import PAIRS
from training import services as training_services
from training.models import DatasetSnapshot, TrainingRun


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", "correct horse battery")

    @factory.post_generation
    def role(self, create: bool, extracted: str | None, **kwargs) -> None:
        """UserFactory(role="Annotator") puts the user in that role's group."""
        self.save()
        if create and extracted:
            role_assign(user=self, role=extracted)


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    name = factory.Sequence(lambda n: f"Project {n}")
    slug = factory.Sequence(lambda n: f"project-{n}")
    overlap = 3


class PromptFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Prompt

    project = factory.SubFactory(ProjectFactory)
    text = factory.Sequence(lambda n: f"Prompt number {n}?")
    content_hash = factory.LazyAttribute(lambda o: content_hash(o.text))


class ResponseFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Response

    prompt = factory.SubFactory(PromptFactory)
    text = factory.Sequence(lambda n: f"Answer {n}.")
    model_name = "test-model"
    content_hash = factory.LazyAttribute(lambda o: content_hash(o.text))


class ComparisonFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Comparison

    project = factory.SubFactory(ProjectFactory)
    prompt = factory.SubFactory(PromptFactory, project=factory.SelfAttribute("..project"))
    response_a = factory.SubFactory(ResponseFactory, prompt=factory.SelfAttribute("..prompt"))
    response_b = factory.SubFactory(ResponseFactory, prompt=factory.SelfAttribute("..prompt"))
    content_hash = factory.Sequence(lambda n: f"{n:064d}")


class JudgementFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Judgement

    comparison = factory.SubFactory(ComparisonFactory)
    annotator = factory.SubFactory(UserFactory, role="Annotator")
    choice = "a"
    strength = 1
    shown_left = "a"
    elapsed_ms = 12_000


def snapshot_of_pairs(*, slug: str, judged: bool = True) -> DatasetSnapshot:
    """The 8 tiny preference pairs (``PAIRS``) imported into project ``slug``, exported and
    snapshotted (``settings.EXPORT_DIR`` decides where). ``judged``: each pair has one judgement,
    annotator u1 choosing response a at strength 2; else the pairs come without judgements."""
    project, _ = project_get_or_create(slug=slug)
    judgements = [{"annotator": "u1", "choice": "a", "strength": 2}] if judged else None
    rows = [
        {"prompt": p, "response_a": c, "response_b": r}
        | ({"judgements": judgements} if judgements else {})
        for p, c, r in PAIRS
    ]
    comparisons_import(project=project, lines=[json.dumps(row) for row in rows])
    return training_services.snapshot_for(export=dataset_export(project=project))


def training_run(
    *,
    snapshot: DatasetSnapshot,
    kind: str = "dpo",
    name: str = "tiny run",
    config: dict[str, Any] | None = None,
    base_model: str = "smollm2-135m-instruct",
    created_by: Any = None,
    reward_model_run: TrainingRun | None = None,
) -> TrainingRun:
    """A draft run created through the service (settings validated by the recipe, audited), on the
    registry's SmolLM2 name (tests put a tiny model there)."""
    return training_services.run_create(
        name=name,
        kind=kind,
        base_model=base_model,
        snapshot=snapshot,
        config=config or {},
        created_by=created_by,
        reward_model_run=reward_model_run,
    )
