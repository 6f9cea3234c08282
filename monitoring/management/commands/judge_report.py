"""python manage.py judge_report --project SLUG --judge NAME [--judge-version N] [--json]"""

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.models import Project
from monitoring.models import Judge
from monitoring.selectors.judges import judge_get, judge_report_data, judge_report_summary


class Command(BaseCommand):
    help = (
        "A model judge measured like an annotator against the project's humans: Cohen's kappa "
        "against each human and their consensus, swap-flip rate, position and length bias, gold "
        "accuracy, unparsed answers."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--judge", required=True, help="judge name")
        parser.add_argument("--judge-version", type=int, help="judge version (default: the newest)")
        parser.add_argument("--json", dest="as_json", action="store_true", help="one JSON object")

    def handle(
        self, *args, project: str, judge: str, judge_version: int | None, as_json: bool, **options
    ) -> None:
        version = judge_version
        try:
            target = Project.objects.get(slug=project)
            found = judge_get(project=target, name=judge, version=version)
        except Project.DoesNotExist as exc:
            raise CommandError(f"no project with slug {project!r}") from exc
        except Judge.DoesNotExist as exc:
            raise CommandError(
                f"no judge {judge!r} (version {version or 'newest'}) in {project!r}"
            ) from exc
        summary = judge_report_summary(judge_report_data(judge=found))
        if as_json:
            self.stdout.write(json.dumps(summary, sort_keys=True))
            return
        self.stdout.write(format_summary(summary))


VOTES = (
    "votes agreeing with ties / without: judge vs humans {judge_human} (n={judge_human_n}) / "
    "{judge_human_no_ties} (n={judge_human_no_ties_n}); humans vs humans {human_human} "
    "(n={human_human_n}) / {human_human_no_ties} (n={human_human_no_ties_n})"
)


def _f(value: object) -> str:
    return "n/a" if value is None else str(value)


def format_summary(s: dict) -> str:
    """The summary as the lines the command prints."""
    lines = [
        f"{s['judge']} v{s['version']} ({s['kind']}) on {s['project']}: {s['status']}, "
        f"{s['answers']} answers, {s['verdicts']} verdicts on {s['items']} pairs, "
        f"{_f(s['seconds_per_answer'])} s per answer"
        + (f", tie band {s['tie_band']}" if s["tie_band"] is not None else ""),
        *([f"imported: {s['description']}"] if s["description"] else []),
        f"kappa vs human consensus: {_f(s['kappa_consensus'])} (n={s['kappa_consensus_n']})",
        VOTES.format(**{key: _f(value) for key, value in s["vote_agreement"].items()}),
    ]
    lines += [
        f"kappa vs {row['annotator']}: {_f(row['kappa'])} (n={row['n']})"
        for row in s["kappa_per_human"]
    ]
    lines += [
        f"swap-flip rate: {_f(s['swap_flip_rate'])} ({s['swap_flips']} of "
        f"{s['swap_decisive_pairs']} pairs decisive in both orders; same verdict "
        f"{_f(s['swap_same_rate'])} of {s['swap_pairs']})"
        + (
            f"; {s['swap_undetailed']} pairs disagreed across orders without per-order verdicts, "
            f"so at most {_f(s['swap_flip_rate_high'])}"
            if s["swap_undetailed"]
            else ""
        ),
        f"position bias: {_f(s['position_bias'])} (first shown picked {_f(s['position_first_share'])}"
        f" of {s['position_n']}, 95% CI {_f(s['position_low'])}..{_f(s['position_high'])}, "
        f"p={_f(s['position_p_value'])})",
        f"length bias: {_f(s['length_bias'])} (longer picked {_f(s['length_longer_share'])} of "
        f"{_f(s['length_n'])}; humans {_f(s['length_human_share'])})",
        f"gold accuracy: {_f(s['gold_accuracy'])} (n={s['gold_n']})",
        f"tie rate: {_f(s['tie_rate'])}",
        f"unparsed answers: {s['unparsed']}",
    ]
    lines += [
        f"  pair {e['comparison']} ({e['shown_first']} first): {e['reason']}"
        for e in s["unparsed_examples"]
    ]
    return "\n".join(lines)
