"""The task types the work queue knows, by name (a project's ``task_type``). A new type is a
plug-in (work_queue.plugins.TaskTypePlugin) and one ``register`` call here."""

from __future__ import annotations

from annotation.models import Project
from annotation.work_queue.pairwise import PairwiseType
from annotation.work_queue.plugins import AnswerError, RankingType, RatingType, TaskTypePlugin

REGISTRY: dict[str, TaskTypePlugin] = {}


def register(plugin: TaskTypePlugin) -> TaskTypePlugin:
    """Add ``plugin`` under its name (a second plug-in of the same name is refused)."""
    if plugin.name in REGISTRY:
        raise ValueError(f"task type {plugin.name!r} is already registered")
    REGISTRY[plugin.name] = plugin
    return plugin


def task_type_named(name: str) -> TaskTypePlugin:
    """The plug-in registered as ``name``; AnswerError naming the known ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise AnswerError(
            f"unknown task type {name!r}; expected one of {sorted(REGISTRY)}"
        ) from None


def task_type_of(project: Project) -> TaskTypePlugin:
    """The plug-in of ``project``'s task type."""
    return task_type_named(project.task_type)


register(PairwiseType())
register(RatingType())
register(RankingType())
