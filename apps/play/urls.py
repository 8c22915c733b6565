from django.urls import path

from apps.play import views

app_name = "play"

urlpatterns = [
    path("", views.play_index, name="index"),
    path("new/", views.play_new, name="new"),
    path("<int:pk>/", views.play_detail, name="detail"),
    path("<int:pk>/state/", views.play_state, name="state"),
    path("<int:pk>/say/", views.play_say, name="say"),
    path("<int:pk>/tool/", views.play_tool, name="tool"),
    path("<int:pk>/end/", views.play_end, name="end"),
    path("<int:pk>/retry/", views.play_retry, name="retry"),
]
