from django.urls import path

from apps.accounts import views

app_name = "accounts"

urlpatterns = [
    path("sign-in/", views.signin, name="signin"),
    path("sign-out/", views.signout, name="signout"),
    path("dev-login/", views.dev_login, name="dev_login"),
]
