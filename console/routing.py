"""Websocket routes. Consumers authenticate and join workspace-scoped groups."""

from django.urls import path

from console.consumers import ExperimentConsumer, RunProgressConsumer, TrainingJobConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:run_id>/", RunProgressConsumer.as_asgi()),
    path("ws/experiments/<int:experiment_id>/", ExperimentConsumer.as_asgi()),
    path("ws/training/jobs/<int:job_id>/", TrainingJobConsumer.as_asgi()),
]
