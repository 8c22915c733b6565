from django.apps import AppConfig


class EvaluationsConfig(AppConfig):
    name = "apps.evaluations"
    label = "evaluations"
    verbose_name = "Evaluations"
