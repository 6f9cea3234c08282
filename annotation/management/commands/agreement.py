"""python manage.py agreement --project SLUG [--json] [--intervals] [--boot N]"""

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.models import Project, TaskType
from annotation.selectors.agreement import judges_vote_agreement
from annotation.services.agreement import agreement_summary, project_agreement
from annotation.work_queue.registry import task_type_of


class Command(BaseCommand):
    help = (
        "Agreement and annotator bias of a project: percent agreement, Fleiss' kappa (full-overlap "
        "comparisons), Krippendorff's alpha, Gwet's AC1, Cohen's kappa per annotator pair."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument(
            "--json", dest="as_json", action="store_true", help="print one JSON object"
        )
        parser.add_argument(
            "--intervals",
            action="store_true",
            help='add "intervals": 95%% bootstrap intervals of the coefficients',
        )
        parser.add_argument(
            "--boot", type=int, default=1000, help="bootstrap replicates (default 1000)"
        )
        parser.add_argument("--seed", type=int, default=0)

    def handle(
        self, *args, project: str, as_json: bool, intervals: bool, boot: int, seed: int, **options
    ) -> None:
        try:
            target = Project.objects.get(slug=project)
        except Project.DoesNotExist as exc:
            raise CommandError(f"no project with slug {project!r}") from exc
        if boot < 0:
            raise CommandError("--boot must be 0 or more")
        if target.task_type != TaskType.PAIRWISE:
            report = task_type_of(target).agreement(target)
            self.stdout.write(_dumps(report) if as_json else _task_text(target, report))
            return
        want_intervals = intervals or not as_json
        result = project_agreement(project=target, n_boot=boot if want_intervals else 0, seed=seed)
        summary = agreement_summary(result, intervals=want_intervals)
        if as_json:
            if not intervals:
                summary.pop("intervals", None)
            judges = judges_vote_agreement(project=target)
            if judges:  # only then: the keys without a judge stay those of ARCHITECTURE.md
                summary["judges"] = judges
            self.stdout.write(_dumps(summary))
            return
        self._write_text(target, summary)

    def _write_text(self, project: Project, summary: dict) -> None:
        out = self.stdout
        out.write(
            f"{project.slug}: {summary['n_judgements']} judgements on {summary['n_items']} "
            f"comparisons by {summary['n_annotators']} annotators"
        )
        for name in (
            "percent_agreement",
            "percent_agreement_no_ties",
            "fleiss_kappa",
            "krippendorff_alpha",
            "gwet_ac1",
        ):
            low, high = summary["intervals"][name]
            out.write(f"  {name:<26} {_fmt(summary[name])}  95% CI [{_fmt(low)}, {_fmt(high)}]")
        flagged = [row for row in summary["annotators"] if row["flags"]]
        out.write(f"  annotators flagged: {len(flagged)}")
        for row in flagged:
            out.write(f"    {row['annotator']}: {', '.join(row['flags'])}")


def _task_text(project: Project, report: dict) -> str:
    """A rating or ranking project's report as lines of text (the --json report's main figures)."""
    lines = [
        f"{project.slug} ({report['task_type']}): {report['n_answers']} answers on "
        f"{report['n_items']} items by {report['n_annotators']} annotators"
    ]
    for aspect, figures in report.get("aspects", {}).items():
        lines.append(
            f"  {aspect:<20} alpha ordinal {_fmt(figures['alpha_ordinal'])}"
            f"  interval {_fmt(figures['alpha_interval'])}"
        )
    if report["task_type"] == TaskType.RANKING:
        lines.append(f"  kendall_w                  {_fmt(report['kendall_w'])}")
        lines.append(f"  mean_kendall_tau           {_fmt(report['mean_kendall_tau'])}")
        if report["pairwise"]:
            lines.append(f"  pairwise fleiss_kappa      {_fmt(report['pairwise']['fleiss_kappa'])}")
        if report["position_bias"]:
            bias = report["position_bias"]
            lines.append(f"  position bias tau          {_fmt(bias['tau'])}")
            slots = bias["slots"]
            lines.append(
                f"  slot bias friedman chi2    {_fmt(slots['statistic'])} on {slots['df']} df,"
                f" p {_fmt(slots['p_value'])}"
            )
            for size in slots["sizes"]:
                means = ", ".join(_fmt(value).strip() for value in size["mean_rank"])
                lines.append(f"    K={size['k']}: mean rank by slot [{means}]")
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "  n/a" if value is None else f"{value:.3f}"


def _dumps(data: dict) -> str:
    return json.dumps(data, ensure_ascii=False, allow_nan=False)
