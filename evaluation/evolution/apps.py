from django.apps import AppConfig


class EvolutionConfig(AppConfig):
    name = "evaluation.evolution"
    label = "evolution"
    verbose_name = "Harness evolution"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Declares the proposer's run-supplied tool targets, which the store's binding check knows.
        from evaluation.evolution import proposer  # noqa: F401
