"""URL map: home and login (common), one prefix per app, admin, API schema."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

handler500 = "common.views.server_error"

admin.site.site_header = "Concord administration"
admin.site.site_title = "Concord"

urlpatterns = [
    path("", include("common.urls")),
    path("annotation/", include("annotation.urls")),
    path("monitoring/", include("monitoring.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("annotation.api_urls")),
    path("api/", include("monitoring.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
]
