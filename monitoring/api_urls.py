from django.urls import path

from monitoring import apis

urlpatterns = [
    path(
        "projects/<slug:slug>/judges/imported/",
        apis.JudgeImportApi.as_view(),
        name="api-judge-import",
    ),
]
