"""``python manage.py cluster_prompts --project SLUG [--k K]``: cluster a project's prompts now.

Runs in this process (no worker needed): embeds the prompts not embedded yet, clusters, stores the
run and sets each prompt's cluster. Prints one line per cluster, or one JSON object with ``--json``.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.models import Project
from annotation.selectors.clustering import cluster_rows
from annotation.services.clustering import (
    ClusteringError,
    clustering_run_execute,
    clustering_run_request,
)


class Command(BaseCommand):
    help = "Embed (what is missing) and cluster a project's prompts; store the clusters."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="The project's slug.")
        parser.add_argument(
            "--k", type=int, default=None, help="Number of clusters (default: best silhouette)."
        )
        parser.add_argument(
            "--json", dest="as_json", action="store_true", help="Print one JSON object."
        )

    def handle(self, *args, project: str, k: int | None, as_json: bool, **options) -> None:
        target = Project.objects.filter(slug=project).first()
        if target is None:
            raise CommandError(f"no project with slug {project!r}")
        try:
            run, created = clustering_run_request(project=target, k=k)
            if not created:
                raise CommandError(
                    f"clustering run {run.pk} of {project!r} is already {run.status}"
                )
            run = clustering_run_execute(run_id=run.pk)
        except ClusteringError as exc:
            raise CommandError(str(exc)) from exc
        rows = cluster_rows(run=run)
        if as_json:
            self.stdout.write(_json_summary(run, rows))
            return
        score = "n/a" if run.silhouette is None else f"{run.silhouette:.3f}"
        self.stdout.write(
            f"{run.n_prompts} prompts ({run.n_embedded} newly embedded) in {run.k} clusters, "
            f"silhouette {score} (run {run.pk})"
        )
        for row in rows:
            c = row.cluster
            self.stdout.write(
                f"  {c.label:>3}  {c.size:>6}  {c.share:6.1%}  {', '.join(c.top_terms[:5])}"
            )


def _json_summary(run, rows) -> str:
    return json.dumps(
        {
            "run": run.pk,
            "k": run.k,
            "silhouette": run.silhouette,
            "n_prompts": run.n_prompts,
            "n_embedded": run.n_embedded,
            "clusters": [
                {
                    "label": r.cluster.label,
                    "name": r.cluster.name,
                    "size": r.cluster.size,
                    "share": r.cluster.share,
                    "top_terms": r.cluster.top_terms,
                    "central_prompt_ids": r.cluster.central_prompt_ids,
                }
                for r in rows
            ],
        }
    )
