from django.urls import path

from annotation.views import (
    agreement,
    clustering,
    items,
    labelling,
    people,
    projects,
    task_labelling,
)

app_name = "annotation"

urlpatterns = [
    path("", projects.my_projects, name="my-projects"),
    path("projects/", projects.project_overview, name="project-overview"),
    path("p/<slug:slug>/manage/", projects.project_manage, name="project-manage"),
    path("p/<slug:slug>/imports/", projects.import_upload, name="import-upload"),
    path("p/<slug:slug>/imports/<int:job_id>/", projects.import_status, name="import-status"),
    path(
        "p/<slug:slug>/imports/<int:job_id>/cancel/", projects.import_cancel, name="import-cancel"
    ),
    path("p/<slug:slug>/exports/", projects.export_create, name="export-create"),
    path(
        "p/<slug:slug>/export-jobs/<int:export_job_id>/",
        projects.export_job_page,
        name="export-job",
    ),
    path(
        "p/<slug:slug>/export-jobs/<int:export_job_id>/status/",
        projects.export_job_status,
        name="export-job-status",
    ),
    path(
        "p/<slug:slug>/export-jobs/<int:export_job_id>/cancel/",
        projects.export_job_cancel_view,
        name="export-job-cancel",
    ),
    path(
        "p/<slug:slug>/exports/<str:sha256>/<str:part>/",
        projects.export_download,
        name="export-download",
    ),
    path("p/<slug:slug>/label/", labelling.label, name="label"),
    path("p/<slug:slug>/label/last/", labelling.label_edit_last, name="label-edit-last"),
    path("p/<slug:slug>/label/ahead/", labelling.label_ahead, name="label-ahead"),
    path("p/<slug:slug>/label/history/", labelling.label_history, name="label-history"),
    path("p/<slug:slug>/label/<int:assignment_id>/", labelling.label_submit, name="label-submit"),
    path("p/<slug:slug>/label/<int:assignment_id>/skip/", labelling.label_skip, name="label-skip"),
    path("p/<slug:slug>/item/last/", task_labelling.item_edit_last, name="item-edit-last"),
    path("p/<slug:slug>/item/<int:lease_id>/", task_labelling.item_submit, name="item-submit"),
    path("p/<slug:slug>/item/<int:lease_id>/skip/", task_labelling.item_skip, name="item-skip"),
    path("p/<slug:slug>/clusters/", clustering.clusters, name="clusters"),
    path(
        "p/<slug:slug>/clusters/status/",
        clustering.clusters_status,
        name="clusters-status",
    ),
    path(
        "p/<slug:slug>/clusters/recluster/",
        clustering.clusters_recluster,
        name="clusters-recluster",
    ),
    path(
        "p/<slug:slug>/clusters/<int:cluster_id>/name/",
        clustering.cluster_rename,
        name="cluster-rename",
    ),
    path("p/<slug:slug>/agreement/", agreement.agreement_dashboard, name="agreement"),
    path("p/<slug:slug>/agreement/data/", agreement.agreement_data, name="agreement-data"),
    path(
        "p/<slug:slug>/agreement/refresh/",
        agreement.agreement_refresh,
        name="agreement-refresh",
    ),
    path(
        "p/<slug:slug>/agreement/annotators/<str:username>/",
        agreement.agreement_annotator,
        name="agreement-annotator",
    ),
    # Project settings and people (views.people).
    path("projects/new/", people.project_create, name="project-create"),
    path("p/<slug:slug>/settings/", people.project_settings, name="project-settings"),
    path(
        "p/<slug:slug>/settings/archive/",
        people.project_archive,
        name="project-archive",
    ),
    path(
        "p/<slug:slug>/settings/unarchive/",
        people.project_unarchive,
        name="project-unarchive",
    ),
    path("p/<slug:slug>/members/", people.project_members, name="project-members"),
    path(
        "p/<slug:slug>/members/<str:username>/remove/",
        people.member_remove,
        name="member-remove",
    ),
    path(
        "p/<slug:slug>/members/<str:username>/pause/",
        people.member_pause,
        name="member-pause",
    ),
    path(
        "p/<slug:slug>/members/<str:username>/resume/",
        people.member_resume,
        name="member-resume",
    ),
    path(
        "p/<slug:slug>/members/<str:username>/invite/",
        people.member_invite,
        name="member-invite",
    ),
    path("invite/<str:uidb64>/<str:token>/", people.invite_accept, name="invite"),
]

# Item browser (issue 18).
urlpatterns += [
    path("p/<slug:slug>/items/", items.items_browse, name="items"),
    path("p/<slug:slug>/items/<int:comparison_id>/", items.item_page, name="item"),
]

# Adjudication, flags and guidelines versions (issue 18).
from annotation.views import adjudication  # noqa: E402  (one block, for clean merges)

urlpatterns += [
    path("p/<slug:slug>/adjudicate/", adjudication.adjudicate, name="adjudicate"),
    path(
        "p/<slug:slug>/adjudicate/<int:comparison_id>/",
        adjudication.adjudicate_save,
        name="adjudicate-save",
    ),
    path(
        "p/<slug:slug>/label/<int:assignment_id>/flag/",
        adjudication.label_flag,
        name="label-flag",
    ),
]

# Project archives: the lead's download of the whole history (restore is a command).
from annotation.views import archives  # noqa: E402  (one block, for clean merges)

urlpatterns += [
    path(
        "p/<slug:slug>/settings/archive-file/",
        archives.project_archive_download,
        name="project-archive-file",
    ),
]
