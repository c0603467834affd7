from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from evaluation.services import EvalError, eval_set_add_version, eval_set_generate, parse_cases
from workspaces.access import Actor
from workspaces.identifiers import InvalidIdentifier
from workspaces.models import Workspace


class Command(BaseCommand):
    help = "Add an eval set version: simulated (--seed/--n) or imported from JSONL (--jsonl)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--workspace", required=True)
        parser.add_argument("--suite", required=True, choices=["live_stream_qa", "harness_variant", "robustness", "ifeval"])
        parser.add_argument("--jsonl", help="path to a JSONL file (IFEval records for --suite ifeval)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--n", type=int, default=50)

    def handle(self, name, workspace, suite, jsonl, seed, n, **options):
        space = Workspace.objects.filter(slug=workspace).first()
        if space is None:
            raise CommandError(f"No workspace “{workspace}”.")
        actor = Actor.system("cli:eval_set")
        try:
            if jsonl:
                cases = parse_cases(suite, Path(jsonl).read_text(encoding="utf-8").splitlines())
                version = eval_set_add_version(actor=actor, workspace=space, name=name, suite=suite, cases=cases,
                                               source=f"file {Path(jsonl).name}")
            else:
                version = eval_set_generate(actor=actor, workspace=space, name=name, suite=suite, seed=seed, n=n)
        except (EvalError, InvalidIdentifier, OSError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{version}: {version.case_count} cases ({version.source})")
