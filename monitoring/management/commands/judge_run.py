"""python manage.py judge_run --project SLUG --judge NAME (--reward-run ID [--tie-band X] |
--model NAME [--template FILE] [--max-new-tokens N] |
--endpoint URL --served-model NAME [--api-key-env VAR] [--max-concurrency N] [--timeout S]
[--template FILE] [--max-new-tokens N])

Creates the next version of a judge and runs its job in this process (scripts, measurements); the
web page sends the same job to the gpu queue instead. Prints the job's status and progress.
"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.models import Project
from common.errors import ConcordError
from monitoring.models import Judge
from monitoring.services.judges import judge_create, judge_run_here
from monitoring.stats.judging import DEFAULT_TEMPLATE
from training.models import TrainingRun


class Command(BaseCommand):
    help = "Create the next version of a model judge and run it here, on every pair of the project."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--judge", required=True, help="judge name (a slug)")
        kind = parser.add_mutually_exclusive_group(required=True)
        kind.add_argument("--reward-run", type=int, help="a succeeded reward-model run's id")
        kind.add_argument("--model", help="a generative model of the registry")
        kind.add_argument(
            "--endpoint", help="an OpenAI-compatible API's base URL, e.g. http://host:8000/v1"
        )
        parser.add_argument("--served-model", default="", help="--endpoint: the served model")
        parser.add_argument(
            "--api-key-env", default="", help="--endpoint: the variable holding the API key"
        )
        parser.add_argument("--max-concurrency", type=int, default=4, help="--endpoint")
        parser.add_argument("--timeout", type=float, default=60.0, help="--endpoint: seconds")
        parser.add_argument("--tie-band", type=float, help="reward units (default: calibrated)")
        parser.add_argument("--template", type=Path, help="a judging prompt file")
        parser.add_argument("--max-new-tokens", type=int, default=256)

    def handle(self, *args, **o) -> None:
        try:
            project = Project.objects.get(slug=o["project"])
            template = o["template"].read_text() if o["template"] else DEFAULT_TEMPLATE
            if o["reward_run"] is not None:
                run = TrainingRun.objects.get(pk=o["reward_run"])
                judge = judge_create(
                    project=project, name=o["judge"], kind=Judge.Kind.REWARD_MODEL,
                    created_by=None, reward_run=run, tie_band=o["tie_band"],
                )  # fmt: skip
            elif o["model"] is not None:
                judge = judge_create(
                    project=project, name=o["judge"], kind=Judge.Kind.LOCAL_LLM, created_by=None,
                    model_name=o["model"], template=template, max_new_tokens=o["max_new_tokens"],
                )  # fmt: skip
            else:
                judge = judge_create(
                    project=project, name=o["judge"], kind=Judge.Kind.OPENAI, created_by=None,
                    endpoint_url=o["endpoint"], model_name=o["served_model"],
                    api_key_env=o["api_key_env"], max_concurrency=o["max_concurrency"],
                    timeout_s=o["timeout"], template=template, max_new_tokens=o["max_new_tokens"],
                )  # fmt: skip
        except (Project.DoesNotExist, TrainingRun.DoesNotExist, OSError, ConcordError) as exc:
            raise CommandError(str(exc)) from exc
        judge = judge_run_here(judge=judge)
        self.stdout.write(
            f"{judge.name} v{judge.version}: {judge.status}, {judge.done}/{judge.total} answers"
            + (f"\n{judge.error}" if judge.error else "")
        )
        if judge.status != Judge.Status.SUCCEEDED:
            raise CommandError(f"judge {judge.name} v{judge.version} {judge.status}")
