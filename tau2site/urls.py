from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="tasks:explorer", permanent=False)),
    path("tasks/", include("apps.tasks.urls")),
    path("api/", include("apps.tasks.api_urls")),
    path("admin/", admin.site.urls),
]
