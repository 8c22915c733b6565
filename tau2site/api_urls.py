"""The JSON API's root, ``/api/``: the tasks' and the evaluations' endpoints (reads,
and starting and controlling evaluations) and their OpenAPI schema.
It composes several apps, so it lives here."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from apps.evaluations import api as evaluations_api
from apps.schedules import api as schedules_api
from apps.tasks import api

app_name = "api"

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's script as a file: the CSP allows no inline script.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="docs"),
    path("domains/", api.DomainList.as_view(), name="domains"),
    path("domains/<slug:domain>/", api.DomainDetail.as_view(), name="domain"),
    path("tasks/", api.TaskList.as_view(), name="tasks"),
    path("tasks/<slug:domain>/<path:task_id>/", api.TaskDetail.as_view(), name="task"),
    path("evaluations/", evaluations_api.EvaluationList.as_view(), name="evaluations"),
    path("evaluations/<int:pk>/", evaluations_api.EvaluationDetail.as_view(), name="evaluation"),
    path("evaluations/<int:pk>/pause/", evaluations_api.EvaluationPause.as_view(), name="pause"),
    path("evaluations/<int:pk>/resume/", evaluations_api.EvaluationResume.as_view(), name="resume"),
    path("evaluations/<int:pk>/stop/", evaluations_api.EvaluationStop.as_view(), name="stop"),
    path("evaluations/<int:pk>/retry/", evaluations_api.EvaluationRetry.as_view(), name="retry"),
    path(
        "evaluations/<int:pk>/baseline/",
        evaluations_api.EvaluationBaseline.as_view(),
        name="baseline",
    ),
    path(
        "evaluations/<int:pk>/schedule/",
        schedules_api.EvaluationScheduleCreate.as_view(),
        name="schedule",
    ),
]
