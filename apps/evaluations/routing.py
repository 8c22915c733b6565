from django.urls import path

from apps.evaluations.consumers import EvaluationConsumer

websocket_urlpatterns = [path("ws/evaluations/<int:pk>/", EvaluationConsumer.as_asgi())]
