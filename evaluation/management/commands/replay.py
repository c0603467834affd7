from django.core.management.base import BaseCommand

from evaluation.management.commands.eval_run import start_run
from evaluation.selectors import run_replay


class Command(BaseCommand):
    help = ("Deployment replay: evaluate HARNESS@REF on SET@vN at a given concurrency, in this process, "
            "and print P50/P95 wall latency, TTFT, decode tokens/s, success and the share within the deadline.")

    def add_arguments(self, parser):
        parser.add_argument("harness")
        parser.add_argument("eval_set")
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--backend", default="local")
        parser.add_argument("--concurrency", type=int, default=None,
                            help="requests in flight; default: what the backend serves at once (local: 1)")

    def handle(self, harness, eval_set, workspace, backend, concurrency, **options):
        run = start_run(harness, eval_set, workspace=workspace, backend=backend, concurrency=concurrency, inline=True)
        self.stdout.write(f"run {run.pk}: {run.status}")
        for key, value in run_replay(run).items():
            shown = f"{value:.3f}" if isinstance(value, float) else value
            self.stdout.write(f"  {key:<20} {shown}")
