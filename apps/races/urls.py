from django.urls import path

from apps.races import views

app_name = "races"

urlpatterns = [
    path("", views.race_list, name="list"),
    path("new/", views.race_new, name="new"),
    path("<int:pk>/", views.race_detail, name="detail"),
    path("<int:pk>/lanes/", views.race_lanes, name="lanes"),
]
