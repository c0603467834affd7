from django.apps import AppConfig


class EvaluationConfig(AppConfig):
    name = "evaluation"
    verbose_name = "Evaluation"

    def ready(self):
        from evaluation.services import regression_gate_check
        from harness.services import register_promotion_check

        register_promotion_check(regression_gate_check)
