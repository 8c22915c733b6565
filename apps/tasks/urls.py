from django.urls import path

from apps.tasks import views

app_name = "tasks"

urlpatterns = [
    path("", views.explorer, name="explorer"),
    path("<slug:domain>/", views.domain_detail, name="domain"),
    # τ² task ids may hold brackets, colons and slashes (telecom's are long and structured).
    path("<slug:domain>/<path:task_id>/", views.task_detail, name="detail"),
]
