from django.urls import path

from annotation import views, views_agreement, views_clustering, views_projects

app_name = "annotation"

urlpatterns = [
    path("", views.my_projects, name="my-projects"),
    path("projects/", views.project_overview, name="project-overview"),
    path("p/<slug:slug>/manage/", views.project_manage, name="project-manage"),
    path("p/<slug:slug>/imports/", views.import_upload, name="import-upload"),
    path("p/<slug:slug>/imports/<int:job_id>/", views.import_status, name="import-status"),
    path("p/<slug:slug>/exports/", views.export_create, name="export-create"),
    path(
        "p/<slug:slug>/exports/<str:sha256>/<str:part>/",
        views.export_download,
        name="export-download",
    ),
    path("p/<slug:slug>/label/", views.label, name="label"),
    path("p/<slug:slug>/label/last/", views.label_edit_last, name="label-edit-last"),
    path("p/<slug:slug>/label/ahead/", views.label_ahead, name="label-ahead"),
    path("p/<slug:slug>/label/history/", views.label_history, name="label-history"),
    path("p/<slug:slug>/label/<int:assignment_id>/", views.label_submit, name="label-submit"),
    path("p/<slug:slug>/label/<int:assignment_id>/skip/", views.label_skip, name="label-skip"),
    path("p/<slug:slug>/clusters/", views_clustering.clusters, name="clusters"),
    path(
        "p/<slug:slug>/clusters/status/",
        views_clustering.clusters_status,
        name="clusters-status",
    ),
    path(
        "p/<slug:slug>/clusters/recluster/",
        views_clustering.clusters_recluster,
        name="clusters-recluster",
    ),
    path(
        "p/<slug:slug>/clusters/<int:cluster_id>/name/",
        views_clustering.cluster_rename,
        name="cluster-rename",
    ),
    path("p/<slug:slug>/agreement/", views_agreement.agreement_dashboard, name="agreement"),
    path("p/<slug:slug>/agreement/data/", views_agreement.agreement_data, name="agreement-data"),
    path(
        "p/<slug:slug>/agreement/refresh/",
        views_agreement.agreement_refresh,
        name="agreement-refresh",
    ),
    path(
        "p/<slug:slug>/agreement/annotators/<str:username>/",
        views_agreement.agreement_annotator,
        name="agreement-annotator",
    ),
    # Project settings and people (views_projects).
    path("projects/new/", views_projects.project_create, name="project-create"),
    path("p/<slug:slug>/settings/", views_projects.project_settings, name="project-settings"),
    path(
        "p/<slug:slug>/settings/archive/",
        views_projects.project_archive,
        name="project-archive",
    ),
    path(
        "p/<slug:slug>/settings/unarchive/",
        views_projects.project_unarchive,
        name="project-unarchive",
    ),
    path("p/<slug:slug>/members/", views_projects.project_members, name="project-members"),
    path(
        "p/<slug:slug>/members/<str:username>/remove/",
        views_projects.member_remove,
        name="member-remove",
    ),
    path(
        "p/<slug:slug>/members/<str:username>/pause/",
        views_projects.member_pause,
        name="member-pause",
    ),
    path(
        "p/<slug:slug>/members/<str:username>/resume/",
        views_projects.member_resume,
        name="member-resume",
    ),
    path(
        "p/<slug:slug>/members/<str:username>/invite/",
        views_projects.member_invite,
        name="member-invite",
    ),
    path("invite/<str:uidb64>/<str:token>/", views_projects.invite_accept, name="invite"),
]
