from django.apps import AppConfig


class TrainingConfig(AppConfig):
    name = "training"
    verbose_name = "Training"

    def ready(self):
        # `checkpoint:<id>` becomes a backend name wherever a backend is named (replies, playground, eval runs).
        from training.serving import register_checkpoint_backends

        register_checkpoint_backends()
