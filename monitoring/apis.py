"""REST API of the monitoring app (one view per operation; schema by drf-spectacular).

- ``POST /api/projects/{slug}/judges/imported/`` (multipart ``file``, ``name``, ``description``,
  optional ``format`` jsonl | mt_bench): a judge's verdicts from a file as the next version of an
  imported judge -> 201 + what was stored; a bad file -> 400 with ``errors`` (one per bad line),
  nothing stored.

Project leads (ML engineers) only, as the annotation API (``annotation.apis.ProjectLeadApi``).
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.apis import ProjectLeadApi
from annotation.models import Project
from common.errors import ConcordError
from monitoring.services.judge_imports import VerdictFileError, judge_verdicts_import
from monitoring.stats.verdict_files import FORMATS


class JudgeImportOutput(serializers.Serializer):
    id = serializers.IntegerField(source="judge.pk")
    name = serializers.CharField(source="judge.name")
    version = serializers.IntegerField(source="judge.version")
    kind = serializers.CharField(source="judge.kind")
    comparisons = serializers.IntegerField()
    per_order = serializers.IntegerField()
    combined = serializers.IntegerField()
    inconsistent = serializers.IntegerField()


class JudgeImportApi(ProjectLeadApi):
    parser_classes = [MultiPartParser]

    class Input(serializers.Serializer):
        file = serializers.FileField()
        name = serializers.SlugField(max_length=60)
        description = serializers.CharField(max_length=5000)
        format = serializers.ChoiceField(choices=FORMATS, default="jsonl")

    @extend_schema(
        operation_id="judge_import",
        request={
            "multipart/form-data": inline_serializer(
                "JudgeImportInput",
                {
                    "file": serializers.FileField(),
                    "name": serializers.SlugField(max_length=60),
                    "description": serializers.CharField(),
                    "format": serializers.ChoiceField(choices=FORMATS, default="jsonl"),
                },
            )
        },
        responses={201: JudgeImportOutput},
    )
    def post(self, request: Request, slug: str) -> Response:
        project = get_object_or_404(Project, slug=slug)
        data = self.Input(data=request.data)
        data.is_valid(raise_exception=True)
        upload = data.validated_data["file"]
        try:
            lines = upload.read().decode("utf-8").splitlines()
        except UnicodeDecodeError as exc:
            raise ValidationError({"file": ["the file is not UTF-8 text"]}) from exc
        try:
            result = judge_verdicts_import(
                project=project, name=data.validated_data["name"],
                description=data.validated_data["description"], lines=lines,
                fmt=data.validated_data["format"], source_name=upload.name,
                created_by=request.user,
            )  # fmt: skip
        except VerdictFileError as exc:
            raise ValidationError({"file": [str(exc)], "errors": exc.errors}) from exc
        except ConcordError as exc:
            raise ValidationError({"non_field_errors": [str(exc)]}) from exc
        return Response(JudgeImportOutput(result).data, status=status.HTTP_201_CREATED)
