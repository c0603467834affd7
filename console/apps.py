from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "HarnessOps console"

    def ready(self) -> None:
        from console import checks  # noqa: F401  (registers the front-end check)
