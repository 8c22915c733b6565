from django.urls import path

from apps.inference import api, views

app_name = "inference"

urlpatterns = [
    path("models/", views.model_list, name="list"),
    path("models/refresh/", views.model_refresh, name="refresh"),
    path("api/models/", api.ModelList.as_view(), name="api-list"),
]
