"""Build the embedded default model (the committed harness-aware adapter merged into SmolLM2, as a GGUF)."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from training.default_model import DefaultModelError, build_default_gguf, manifest


class Command(BaseCommand):
    help = __doc__

    def handle(self, **options):
        info = manifest()
        if info is None:
            self.stdout.write("No trained default adapter is committed: the local backend serves the base model.")
            return
        try:
            path = build_default_gguf(settings.VAR_DIR)
        except DefaultModelError as error:
            raise CommandError(str(error)) from error
        self.stdout.write(f"Default model: {info['name']} -> {path}")
