from django.core.management.base import BaseCommand, CommandError
from django.http import Http404

from evaluation import selectors
from evaluation.services import EvalError, run_create, run_execute
from harness import selectors as harness_selectors
from workspaces.access import Actor
from workspaces.models import Workspace


class Command(BaseCommand):
    help = "Evaluate HARNESS@REF on SET@vN. Queued to a worker, or run here with --inline."

    def add_arguments(self, parser):
        parser.add_argument("harness", help="NAME@LABEL, NAME@v3 or NAME@<hash prefix>")
        parser.add_argument("eval_set", help="SET@vN")
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--backend", default="local")
        parser.add_argument("--judge", default="reference")
        parser.add_argument("--concurrency", type=int, default=None,
                            help="turns in flight; default: what the backend serves at once (local: 1)")
        parser.add_argument("--inline", action="store_true", help="execute in this process instead of a worker")

    def handle(self, harness, eval_set, workspace, backend, judge, concurrency, inline, **options):
        run = start_run(harness, eval_set, workspace=workspace, backend=backend, judge=judge,
                        concurrency=concurrency, inline=inline)
        self.stdout.write(f"run {run.pk}: {run.status}")
        for key, row in run.summary.items():
            self.stdout.write(f"  {key:<20} n={row['n']:<5} accuracy={row.get('accuracy')} "
                              f"effectiveness={row.get('effectiveness')}")


def start_run(harness, eval_set, *, workspace, backend, judge="reference", concurrency=None, inline=False):
    """Create a run of HARNESS@REF on SET@vN (shared by eval_run and replay); with inline, execute it here."""
    space = Workspace.objects.filter(slug=workspace).first()
    if space is None:
        raise CommandError(f"No workspace “{workspace}”.")
    try:
        name, _, ref = harness.partition("@")
        target = harness_selectors.harness_get(space, name)
        version = harness_selectors.version_resolve(target, ref or "production")
        set_name, _, number = eval_set.partition("@v")
        set_version = selectors.set_version_get(space, set_name, int(number or 0))
        run = run_create(actor=Actor.system("cli:eval_run"), workspace=space, set_version=set_version,
                         harness=target, version=version, backend=backend, judge=judge, concurrency=concurrency,
                         start=not inline)
    except (EvalError, Http404, ValueError) as exc:
        raise CommandError(str(exc)) from None
    if inline:
        run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run
