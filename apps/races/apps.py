from django.apps import AppConfig


class RacesConfig(AppConfig):
    name = "apps.races"
    label = "races"
