from django.urls import path

from annotation import apis

urlpatterns = [
    path("projects/<slug:slug>/imports/", apis.ImportCreateApi.as_view(), name="api-import-create"),
    path(
        "projects/<slug:slug>/imports/<int:job_id>/",
        apis.ImportDetailApi.as_view(),
        name="api-import-detail",
    ),
    path(
        "projects/<slug:slug>/imports/<int:job_id>/cancel/",
        apis.ImportCancelApi.as_view(),
        name="api-import-cancel",
    ),
    path("projects/<slug:slug>/exports/", apis.ExportCreateApi.as_view(), name="api-export-create"),
    path(
        "projects/<slug:slug>/exports/jobs/<int:export_job_id>/",
        apis.ExportJobDetailApi.as_view(),
        name="api-export-job-detail",
    ),
    path(
        "projects/<slug:slug>/exports/jobs/<int:export_job_id>/cancel/",
        apis.ExportJobCancelApi.as_view(),
        name="api-export-job-cancel",
    ),
]
