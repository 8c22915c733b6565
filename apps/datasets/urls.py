from django.urls import path

from apps.datasets import views

app_name = "datasets"
urlpatterns = [
    path("", views.dataset_page, name="page"),
    path("download/", views.dataset_download, name="download"),
    path("push/", views.dataset_push, name="push_new"),
    path("pushes/<int:pk>/", views.dataset_push_status, name="push"),
]
