from django.urls import path

from apps.schedules import views

app_name = "schedules"

urlpatterns = [
    path("", views.schedule_list, name="list"),
    path("evaluations/<int:pk>/", views.schedule_create, name="create"),
    path("<int:pk>/", views.schedule_detail, name="detail"),
    path("<int:pk>/pause/", views.schedule_pause, name="pause"),
    path("<int:pk>/resume/", views.schedule_resume, name="resume"),
    path("<int:pk>/delete/", views.schedule_delete, name="delete"),
]
