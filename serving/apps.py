import os

from django.apps import AppConfig


class ServingConfig(AppConfig):
    name = "serving"
    verbose_name = "Platform API"

    def ready(self):
        # Registers the experiment selector with the reply API's version selection.
        from serving.experiments import routing  # noqa: F401

        # `make run` sets this for the serving process only, not for management commands or tests.
        if os.environ.get("HARNESSOPS_WARM_MODEL") == "1" and os.environ.get("RUN_MAIN") == "true":
            from serving.warmup import warm_in_background

            warm_in_background()
