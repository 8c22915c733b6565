from django.urls import path

from apps.notifications import views

app_name = "notifications"

urlpatterns = [
    path("", views.subscription_list, name="list"),
    path("new/", views.subscription_form, name="new"),
    path("<int:pk>/", views.subscription_detail, name="detail"),
    path("<int:pk>/edit/", views.subscription_form, name="edit"),
    path("<int:pk>/delete/", views.subscription_delete, name="delete"),
    path("<int:pk>/secret/", views.subscription_secret, name="secret"),
    path("<int:pk>/test/", views.subscription_test, name="test"),
    path("<int:pk>/log/", views.delivery_log, name="log"),
    path(
        "<int:pk>/deliveries/<int:delivery_pk>/redeliver/",
        views.delivery_redeliver,
        name="redeliver",
    ),
]
