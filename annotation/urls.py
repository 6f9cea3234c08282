from django.urls import path

from annotation import views

app_name = "annotation"

urlpatterns = [
    path("", views.my_projects, name="my-projects"),
    path("projects/", views.project_overview, name="project-overview"),
]
