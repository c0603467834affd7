from django.apps import AppConfig


class HarnessConfig(AppConfig):
    name = "harness"
    verbose_name = "Harness registry"

    def ready(self):
        from django.conf import settings

        from harness.spec import cel_parser

        cel_parser.DIRECTORY = settings.VAR_DIR / "cache"  # CEL's parser, built by the first process only
