"""factory_boy factories for the annotation domain and users of each role."""

import factory
from django.contrib.auth import get_user_model

from annotation.models import Comparison, Judgement, Project, Prompt, Response
from annotation.parsing import content_hash
from common.roles import role_assign


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
