from django.urls import path

from monitoring.views import eval_rounds as eval_views
from monitoring.views import hub as views_hub
from monitoring.views import judges as judge_views
from monitoring.views import runs as views

app_name = "monitoring"

urlpatterns = [
    path("", views.review_home, name="review-home"),
    path("overview/", views_hub.every_role_home, name="every-role-home"),
    path("runs/", views.runs_list, name="runs"),
    path("runs/compare/", views.runs_compare, name="runs-compare"),
    path("runs/<int:run_id>/", views.run_detail, name="run-detail"),
    path("runs/<int:run_id>/metrics.json", views.run_metrics, name="run-metrics"),
    path("runs/<int:run_id>/decision/", eval_views.run_decide, name="run-decide"),
    path("eval/", eval_views.rounds, name="eval-rounds"),
    path("eval/available.json", eval_views.round_prompts_available, name="eval-available"),
    path("eval/<int:round_id>/", eval_views.round_detail, name="eval-round"),
    path("eval/<int:round_id>/rate/", eval_views.rate, name="eval-rate"),
    path(
        "eval/<int:round_id>/rate/<int:assignment_id>/skip/",
        eval_views.rate_skip,
        name="eval-skip",
    ),
    path("eval/<int:round_id>/progress.json", eval_views.round_progress, name="eval-progress"),
    path("projects/<slug:slug>/judges/", judge_views.judges, name="judges"),
    path("projects/<slug:slug>/judges/import/", judge_views.judge_import, name="judge-import"),
    path("judges/<int:judge_id>/", judge_views.judge_report, name="judge-report"),
    path("judges/<int:judge_id>/launch/", judge_views.judge_relaunch, name="judge-relaunch"),
]
