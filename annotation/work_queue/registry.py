"""The task types the work queue knows, by name. A new type is a plug-in
(work_queue.plugins.TaskTypePlugin) and one ``register`` call.

Two kinds of registration:
- ``REGISTRY``: a project's ``task_type`` (pairwise, rating, ranking), registered here; their items
  live in annotation's tables.
- ``HOSTED``: types another app runs on the queue over its own tables, registered by that app when
  it loads (``register(plugin, hosted=True)``: monitoring's ``eval_rating``, the eval rounds'
  rating of checkpoint answers, from MonitoringConfig.ready). The queue imports none of them, so
  apps keep depending one way (monitoring -> annotation).
"""

from __future__ import annotations

from annotation.models import Project
from annotation.work_queue.pairwise import PairwiseType
from annotation.work_queue.plugins import AnswerError, RankingType, RatingType, TaskTypePlugin

REGISTRY: dict[str, TaskTypePlugin] = {}
HOSTED: dict[str, TaskTypePlugin] = {}


def register(plugin: TaskTypePlugin, *, hosted: bool = False) -> TaskTypePlugin:
    """Add ``plugin`` under its name, as a project task type or (``hosted``) as a type another app
    hosts; a second plug-in of a name already known is refused."""
    if plugin.name in REGISTRY or plugin.name in HOSTED:
        raise ValueError(f"task type {plugin.name!r} is already registered")
    (HOSTED if hosted else REGISTRY)[plugin.name] = plugin
    return plugin


def task_type_named(name: str) -> TaskTypePlugin:
    """The plug-in registered as ``name`` (either kind); AnswerError naming the known ones
    otherwise."""
    plugin = REGISTRY.get(name) or HOSTED.get(name)
    if plugin is None:
        known = sorted([*REGISTRY, *HOSTED])
        raise AnswerError(f"unknown task type {name!r}; expected one of {known}")
    return plugin


def task_type_of(project: Project) -> TaskTypePlugin:
    """The plug-in of ``project``'s task type."""
    try:
        return REGISTRY[project.task_type]
    except KeyError:
        raise AnswerError(
            f"unknown task type {project.task_type!r}; expected one of {sorted(REGISTRY)}"
        ) from None


register(PairwiseType())
register(RatingType())
register(RankingType())
