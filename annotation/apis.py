"""REST API of the annotation app (one view per operation; schema by drf-spectacular).

- ``POST /api/projects/{slug}/imports/`` (multipart ``file``, optional ``format``, ``skip_invalid``,
  ``scalars_as_text``): queue an import -> 202 + job.
- ``GET /api/projects/{slug}/imports/{id}/``: the job's status, progress and errors.
- ``POST /api/projects/{slug}/imports/{id}/cancel/``: cancel it (queued: at once; running: it
  stops at its next progress report and imports nothing) -> 200 + the job; 409 once finished.
- ``POST /api/projects/{slug}/exports/``: freeze an export -> 201 + snapshot (hash, counts); a
  rating or ranking project's export takes ``format`` (its training rows: listwise or pairs, kto or
  aspects; annotation.services.item_exports) instead of the pairwise consensus options. With
  ``?async=1`` the export is queued on the worker instead (a large project's export takes longer
  than a request should) -> 202 + the export job, whose ``url`` the client polls; ``hf`` (async
  only) also builds the Hugging Face dataset zip.
- ``GET /api/projects/{slug}/exports/jobs/{id}/``: the export job's status, progress, error and,
  once done, its export (hash, counts).
- ``POST /api/projects/{slug}/exports/jobs/{id}/cancel/``: cancel it (queued: at once; running:
  it stops within about a second) -> 200 + the job; 409 when it has finished.

Project leads (ML engineers) only; others get 403 (authenticated) or 401/403 (anonymous). A token
scoped to another project gets 403.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.formats import FORMAT_NAMES
from annotation.models import ExportJob, ImportJob, Project, TaskType
from annotation.services.export_jobs import (
    export_job_cancel,
    export_job_create,
    export_job_progress,
)
from annotation.services.exporting import CONSENSUS_RULES, dataset_export
from annotation.services.import_jobs import (
    import_job_cancel,
    import_job_create,
    import_job_progress,
)
from annotation.services.item_exports import SNAPSHOT_ROWS, item_dataset_export
from annotation.services.task_export import TaskExportError
from common.api_auth import TokenProjectScope
from common.errors import ConcordError
from common.roles import ML_ENGINEER, has_role


class IsProjectLead(BasePermission):
    message = "Only ML engineers (project leads) may do this."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return has_role(request.user, ML_ENGINEER)


class ProjectLeadApi(APIView):
    """An endpoint of project ``slug`` for its leads; a project-scoped API token reaches only its
    own project (TokenProjectScope)."""

    permission_classes = [IsAuthenticated, TokenProjectScope, IsProjectLead]


class ImportJobOutput(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField(
        help_text="The job lifecycle's state: queued, running, succeeded, failed or cancelled."
    )
    status_label = serializers.CharField(help_text="The state in the words the pages show.")
    cancel_requested = serializers.BooleanField(
        help_text="Asked to stop while running: it stops at its next progress report."
    )
    file = serializers.CharField()
    phase = serializers.CharField(help_text="While running: validating or importing.")
    rows_done = serializers.IntegerField(allow_null=True)
    rows_total = serializers.IntegerField(allow_null=True)
    rows_per_s = serializers.IntegerField(allow_null=True)
    eta_s = serializers.IntegerField(allow_null=True, help_text="Seconds left in this phase.")
    errors = serializers.ListField(child=serializers.DictField())
    error_count = serializers.IntegerField()
    summary = serializers.CharField(allow_blank=True)
    format = serializers.CharField()
    rows_rejected = serializers.IntegerField()


class ImportCreateApi(ProjectLeadApi):
    parser_classes = [MultiPartParser]

    class Input(serializers.Serializer):
        file = serializers.FileField()
        format = serializers.ChoiceField(choices=FORMAT_NAMES, default="auto")
        skip_invalid = serializers.BooleanField(default=False)
        scalars_as_text = serializers.BooleanField(default=False)

    @extend_schema(
        operation_id="import_create",
        request={
            "multipart/form-data": inline_serializer(
                "ImportInput",
                {
                    "file": serializers.FileField(),
                    "format": serializers.ChoiceField(choices=FORMAT_NAMES, default="auto"),
                    "skip_invalid": serializers.BooleanField(default=False),
                    "scalars_as_text": serializers.BooleanField(default=False),
                },
            )
        },
        responses={202: ImportJobOutput},
    )
    def post(self, request: Request, slug: str) -> Response:
        project = get_object_or_404(Project, slug=slug)
        data = self.Input(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            choices = dict(data.validated_data)
            job = import_job_create(
                project=project, upload=choices.pop("file"), created_by=request.user, **choices
            )
        except ConcordError as exc:
            raise ValidationError({"file": [str(exc)]}) from exc
        return Response(
            ImportJobOutput(import_job_progress(job)).data, status=status.HTTP_202_ACCEPTED
        )


class ImportDetailApi(ProjectLeadApi):
    @extend_schema(responses=ImportJobOutput)
    def get(self, request: Request, slug: str, job_id: int) -> Response:
        job = get_object_or_404(ImportJob, pk=job_id, project__slug=slug)
        return Response(ImportJobOutput(import_job_progress(job)).data)


class ImportCancelApi(ProjectLeadApi):
    @extend_schema(operation_id="import_cancel", request=None, responses=ImportJobOutput)
    def post(self, request: Request, slug: str, job_id: int) -> Response:
        job = get_object_or_404(ImportJob, pk=job_id, project__slug=slug)
        try:
            import_job_cancel(job=job)
        except ConcordError as exc:  # it has finished: nothing to cancel
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        job.refresh_from_db()
        return Response(ImportJobOutput(import_job_progress(job)).data)


class ExportOutput(serializers.Serializer):
    """An export snapshot: what the synchronous export answers (201)."""

    sha256 = serializers.CharField()
    n_pairs = serializers.IntegerField()
    n_judgements = serializers.IntegerField()
    n_ties_dropped = serializers.IntegerField()
    options = serializers.DictField()
    created_at = serializers.DateTimeField()


class ExportFigures(ExportOutput):
    """An export job's export: the snapshot, its id and whether its Hugging Face zip is built."""

    id = serializers.IntegerField()
    hf_ready = serializers.BooleanField(help_text="Whether its Hugging Face zip is built.")


class ExportJobOutput(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.SerializerMethodField(help_text="This job's API address (poll it).")
    status = serializers.CharField(
        help_text="The job lifecycle's state: queued, running, succeeded, failed or cancelled."
    )
    status_label = serializers.CharField(help_text="The state in the words the pages show.")
    phase = serializers.CharField(
        allow_blank=True, help_text="While running: exporting or building the Hugging Face zip."
    )
    rows_done = serializers.IntegerField()
    rows_total = serializers.IntegerField(allow_null=True)
    rows_per_s = serializers.IntegerField(allow_null=True)
    eta_s = serializers.IntegerField(allow_null=True, help_text="Seconds left in this phase.")
    progress_text = serializers.CharField(allow_blank=True)
    error = serializers.CharField(allow_blank=True)
    cancel_requested = serializers.BooleanField(
        help_text="Asked to stop while running: it stops at its next progress write."
    )
    options = serializers.DictField()
    build_hf = serializers.BooleanField()
    export = ExportFigures(allow_null=True, help_text="Once made: the export (hash, counts).")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_url(self, job: dict) -> str:
        request = self.context["request"]
        return request.build_absolute_uri(
            reverse("api-export-job-detail", args=[self.context["slug"], job["id"]])
        )


def _export_job_answer(request: Request, slug: str, job: ExportJob, **kwargs: object) -> Response:
    context = {"request": request, "slug": slug}
    return Response(ExportJobOutput(export_job_progress(job), context=context).data, **kwargs)


def _export_job_of(slug: str, export_job_id: int) -> ExportJob:
    return get_object_or_404(
        ExportJob.objects.select_related("export"), pk=export_job_id, project__slug=slug
    )


class ExportJobDetailApi(ProjectLeadApi):
    @extend_schema(operation_id="export_job_detail", responses=ExportJobOutput)
    def get(self, request: Request, slug: str, export_job_id: int) -> Response:
        return _export_job_answer(request, slug, _export_job_of(slug, export_job_id))


class ExportJobCancelApi(ProjectLeadApi):
    @extend_schema(operation_id="export_job_cancel", request=None, responses=ExportJobOutput)
    def post(self, request: Request, slug: str, export_job_id: int) -> Response:
        job = _export_job_of(slug, export_job_id)
        try:
            export_job_cancel(job=job)
        except ConcordError as exc:  # it has finished: nothing to cancel
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        job.refresh_from_db()
        return _export_job_answer(request, slug, job)


def _async_asked(request: Request) -> bool:
    return request.query_params.get("async", "").lower() in ("1", "true", "yes")


class ExportCreateApi(ProjectLeadApi):
    class Input(serializers.Serializer):
        keep_ties = serializers.BooleanField(default=False)
        min_judgements = serializers.IntegerField(default=1, min_value=1, max_value=1000)
        consensus = serializers.ChoiceField(choices=CONSENSUS_RULES, default="majority")
        format = serializers.ChoiceField(choices=tuple(SNAPSHOT_ROWS), required=False)
        hf = serializers.BooleanField(default=False)

    @extend_schema(
        operation_id="export_create",
        request=inline_serializer(
            "ExportInput",
            {
                "keep_ties": serializers.BooleanField(default=False),
                "min_judgements": serializers.IntegerField(default=1, min_value=1),
                "consensus": serializers.ChoiceField(choices=CONSENSUS_RULES, default="majority"),
                "format": serializers.ChoiceField(
                    choices=tuple(SNAPSHOT_ROWS),
                    required=False,
                    help_text="A rating or ranking project's training rows (its only option).",
                ),
                "hf": serializers.BooleanField(
                    default=False,
                    help_text="With ?async=1: also build the Hugging Face dataset zip.",
                ),
            },
        ),
        parameters=[
            OpenApiParameter(
                "async",
                bool,
                description="1: queue the export on the worker and answer 202 with the job "
                "(poll its url) instead of exporting within the request (201).",
            )
        ],
        responses={
            202: ExportJobOutput,
            201: ExportOutput,
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        project = get_object_or_404(Project, slug=slug)
        data = self.Input(data=request.data)
        data.is_valid(raise_exception=True)
        options = dict(data.validated_data)
        row_format = options.pop("format", None)
        build_hf = options.pop("hf")
        if row_format is not None and project.task_type == TaskType.PAIRWISE:
            raise ValidationError({"format": ["only for a rating or ranking project's export"]})
        if _async_asked(request):
            return self._queue(
                request, project, row_format=row_format, build_hf=build_hf, **options
            )
        if build_hf:
            raise ValidationError(
                {"hf": ["the Hugging Face zip is built by a queued export: ?async=1"]}
            )
        try:
            if project.task_type != TaskType.PAIRWISE:
                export = item_dataset_export(
                    project=project, row_format=row_format or "", created_by=request.user
                )
            else:
                export = dataset_export(project=project, created_by=request.user, **options)
        except (ValueError, TaskExportError) as exc:  # cannot be exported as asked (named in exc)
            raise ValidationError({"detail": [str(exc)]}) from exc
        return Response(ExportOutput(export).data, status=status.HTTP_201_CREATED)

    def _queue(
        self, request: Request, project: Project, *, row_format: str | None, **options: object
    ) -> Response:
        """The export queued as a job (202 + the job), or 400 naming the option refused."""
        try:
            job = export_job_create(
                project=project, created_by=request.user, row_format=row_format, **options
            )
        except ConcordError as exc:
            raise ValidationError({"detail": [str(exc)]}) from exc
        context = {"request": request, "slug": project.slug}
        output = ExportJobOutput(export_job_progress(job), context=context).data
        return Response(
            output, status=status.HTTP_202_ACCEPTED, headers={"Location": output["url"]}
        )
