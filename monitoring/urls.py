from django.urls import path

from monitoring import views

app_name = "monitoring"

urlpatterns = [
    path("", views.review_home, name="review-home"),
    path("runs/", views.runs_list, name="runs"),
    path("runs/<int:run_id>/", views.run_detail, name="run-detail"),
    path("runs/<int:run_id>/metrics.json", views.run_metrics, name="run-metrics"),
]
