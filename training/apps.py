from django.apps import AppConfig


class TrainingConfig(AppConfig):
    name = "training"
    verbose_name = "Training"

    def ready(self):
        # `checkpoint:<id>` becomes a backend name wherever a backend is named (replies, playground, eval runs),
        # and serving learns of checkpoints and the trained default through its model-source registry.
        from training.serving import register_with_serving

        register_with_serving()
