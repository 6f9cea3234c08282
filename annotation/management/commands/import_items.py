"""python manage.py import_items FILE --project SLUG --format FORMAT [--task-type rating|ranking]"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation import formats
from annotation.models import Project, TaskType
from annotation.services.task_items import (
    TaskImportError,
    project_task_setup,
    task_items_import,
)


class Command(BaseCommand):
    help = (
        "Import rating or ranking items (UltraFeedback, HelpSteer2, OASST-style ranked replies, "
        "Concord's item rows); all or nothing. A missing project is created with --task-type."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--format", required=True, choices=sorted(formats.ITEM_READERS))
        parser.add_argument(
            "--task-type",
            choices=[TaskType.RATING.value, TaskType.RANKING.value],
            help="the task type of a project created by this import",
        )
        parser.add_argument(
            "--aspects", default="", help="a new rating project's aspects, comma-separated"
        )
        parser.add_argument(
            "--thumbs", action="store_true", help="a new rating project asks for thumbs"
        )

    def handle(
        self, *args, path: Path, project: str, format: str, task_type, aspects, thumbs, **options
    ) -> None:
        target = Project.objects.filter(slug=project).first()
        if target is None:
            if task_type is None:
                raise CommandError(f"no project {project!r}; give --task-type to create it")
            names = [a for a in aspects.split(",") if a.strip()]
            if not names and not thumbs:  # a rating project learns its aspects from the file
                target = Project.objects.create(slug=project, name=project, task_type=task_type)
            else:
                target = self._created(project, task_type, names, thumbs)
        elif task_type is not None and target.task_type != task_type:
            raise CommandError(f"{project} is a {target.task_type} project, not {task_type}")
        if not path.is_file():
            raise CommandError(f"no file {path}")
        try:
            result = task_items_import(project=target, path=path, format=format)
        except TaskImportError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"{target.slug}: {result.items_created} items created, {result.items_existing} already "
            f"there; {result.answers_created} answers created, {result.answers_existing} already "
            f"there; {result.annotators_created} annotator accounts created"
        )

    def _created(self, slug: str, task_type: str, names: list[str], thumbs: bool) -> Project:
        target = Project.objects.create(slug=slug, name=slug)
        try:
            return project_task_setup(
                project=target,
                actor=None,
                task_type=task_type,
                rating_aspects=names,
                rating_thumbs=thumbs,
            )
        except TaskImportError as exc:
            target.delete()
            raise CommandError(str(exc)) from exc
