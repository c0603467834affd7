from django.apps import AppConfig


class EvaluationConfig(AppConfig):
    name = "evaluation"
    verbose_name = "Evaluation"

    def ready(self):
        from evaluation.live_judging import queue_live_judging
        from evaluation.services import regression_gate_check
        from harness.services import register_promotion_check
        from serving.signals import live_trace_sampled

        register_promotion_check(regression_gate_check)  # a promotion past a failed regression gate is refused
        live_trace_sampled.connect(queue_live_judging, dispatch_uid="evaluation.queue_live_judging")
