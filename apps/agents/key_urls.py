"""A person's studio API keys, at ``/accounts/keys/`` (where people look for what is theirs);
the keys are the agents app's."""

from django.urls import path

from apps.agents import views

app_name = "keys"

urlpatterns = [
    path("", views.api_keys, name="list"),
    path("<int:pk>/revoke/", views.api_key_revoke, name="revoke"),
]
