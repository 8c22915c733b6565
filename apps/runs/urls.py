from django.urls import path

from apps.runs import views

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("compare/", views.run_compare, name="compare"),
    path("<int:pk>/", views.run_detail, name="detail"),
    path("<int:pk>.json", views.run_json, name="json"),
    path("<int:pk>/stop/", views.run_stop, name="stop"),
]
