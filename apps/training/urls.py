from django.urls import path

from apps.training import views

app_name = "training"

urlpatterns = [
    path("", views.training_list, name="list"),
    path("<int:pk>/", views.training_detail, name="detail"),
    path("<int:pk>/live/", views.training_live, name="live"),
]
