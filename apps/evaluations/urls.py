from django.urls import path

from apps.evaluations.views import jobs, live, results, submission

app_name = "evaluations"

urlpatterns = [
    # Starting and watching (views/live.py)
    path("new/", live.evaluation_new, name="new"),
    path("<int:pk>/", live.evaluation_detail, name="detail"),
    path("<int:pk>/state/", live.evaluation_state, name="state"),
    path("<int:pk>/pause/", live.evaluation_pause, name="pause"),
    path("<int:pk>/resume/", live.evaluation_resume, name="resume"),
    path("<int:pk>/stop/", live.evaluation_stop, name="stop"),
    path("<int:pk>/retry/", live.evaluation_retry, name="retry"),
    path("<int:pk>/baseline/", live.evaluation_baseline, name="baseline"),
    # History, results in and out, comparison (views/results.py)
    path("", results.evaluation_list, name="list"),
    path("<int:pk>.json", results.evaluation_json, name="json"),
    path("<int:pk>.csv", results.evaluation_csv, name="csv"),
    path("import/", results.evaluation_import, name="import"),
    path("compare/", results.evaluation_compare, name="compare"),
    path("submission/", submission.submission_page, name="submission"),
    # Imports and submission checks, done on a worker (views/jobs.py)
    path("jobs/<int:pk>/", jobs.job_detail, name="job"),
    path("<int:pk>/regrade/", jobs.evaluation_regrade, name="regrade"),
]
