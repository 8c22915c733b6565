from django.urls import path

from apps.agents import views

app_name = "agents"

urlpatterns = [
    path("", views.connect, name="connect"),
    path("playground/", views.playground, name="playground"),
]
