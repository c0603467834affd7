from django.apps import AppConfig


class EvolutionConfig(AppConfig):
    name = "evaluation.evolution"
    label = "evolution"
    verbose_name = "Harness evolution"
    default_auto_field = "django.db.models.BigAutoField"
