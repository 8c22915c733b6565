from django.urls import path

from apps.runs import views
from apps.runs.views import review_auto

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("new/tasks/", views.run_task_picker, name="task_picker"),
    path("compare/", views.run_compare, name="compare"),
    path("review/", views.review_queue, name="review_queue"),
    path("<int:pk>/", views.run_detail, name="detail"),
    path("<int:pk>.json", views.run_json, name="json"),
    path("<int:pk>/stop/", views.run_stop, name="stop"),
    path("<int:pk>/rerun/", views.run_rerun, name="rerun"),
    path("<int:pk>/fork/", views.run_fork, name="fork"),
    path("<int:pk>/labels/", views.label_add, name="label_add"),
    path("<int:pk>/labels/slot/", views.label_slot, name="label_slot"),
    path("<int:pk>/labels/<int:label_pk>/delete/", views.label_delete, name="label_delete"),
    path("<int:pk>/autoreview/", review_auto.autoreview_run, name="autoreview"),
    path(
        "autoreview/evaluations/<int:pk>/",
        review_auto.autoreview_evaluation,
        name="autoreview_evaluation",
    ),
    path(
        "autoreview/evaluations/<int:pk>/stop/",
        review_auto.standing_review_stop,
        name="standing_review_stop",
    ),
    path(
        "<int:pk>/labels/<int:label_pk>/accept/", review_auto.finding_accept, name="finding_accept"
    ),
    path(
        "<int:pk>/labels/<int:label_pk>/dismiss/",
        review_auto.finding_dismiss,
        name="finding_dismiss",
    ),
    path("<int:pk>/labels/<int:label_pk>/edit/", review_auto.finding_edit, name="finding_edit"),
]
