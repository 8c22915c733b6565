from django.urls import path

from apps.connections import views

app_name = "connections"

urlpatterns = [
    path("", views.connection_list, name="list"),
    path("new/", views.connection_form, name="new"),
    path("base-url/", views.base_url_field, name="base_url"),
    path("<int:pk>/", views.connection_detail, name="detail"),
    path("<int:pk>/edit/", views.connection_form, name="edit"),
    path("<int:pk>/delete/", views.connection_delete, name="delete"),
    path("<int:pk>/test/", views.connection_test_view, name="test"),
]
