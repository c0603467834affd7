"""Writes for evaluation: eval sets (import, generate), runs (create, execute, cancel)."""

import asyncio
import gc
import json
import logging
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from evaluation.execution import ERRORED, SUITES, errored_outcome, evaluate_case
from evaluation.models import EvalCase, EvalResult, EvalRun, EvalSet, EvalSetVersion
from evaluation.progress import publish_progress_sync
from evaluation.selectors import Tally, progress_payload, run_tally
from harness import selectors as harness_selectors
from harness.models import Harness, HarnessVersion
from harness.runtime import HttpPolicy
from harness.simulator.cases import Case
from serving.backends import backend_names
from serving.backends.openai import close_shared_clients
from serving.model_config import backend_for
from serving.traces import prompt_parts_store, split_request
from workspaces import webhooks
from workspaces.access import ADMIN, WRITE, Actor, require
from workspaces.identifiers import check_identifier
from workspaces.jobs import enqueue
from workspaces.models import Workspace
from workspaces.services import archived_set, audit_record

log = logging.getLogger(__name__)
MAX_CASES = 20_000
CATEGORY_MAX = 40  # EvalCase.category
IFEVAL_KEYS = ("key", "prompt", "instruction_id_list", "kwargs")


class EvalError(ValueError):
    """A request evaluation refuses, with a message for the user."""


def parse_cases(suite: str, lines: list[str]) -> list[dict]:
    """Parse JSONL into case dicts; every bad line is reported with its number, and nothing is kept."""
    if suite not in SUITES:
        raise EvalError(f"Unknown suite “{suite}”; choose one of {', '.join(SUITES)}.")
    cases, errors, seen = [], [], set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError("a case must be a JSON object ({…})")
            if suite == "ifeval":
                missing = [k for k in IFEVAL_KEYS if k not in data]
                if missing:
                    raise ValueError(f"missing {', '.join(missing)}")
                data = {**data, "case_id": str(data["key"]), "category": "ifeval"}
            else:
                Case.from_dict(data)  # validates the shape
                check_identifier(data["category"], field="category", max_length=CATEGORY_MAX)
            if data["case_id"] in seen:
                raise ValueError(f"duplicate case_id {data['case_id']}")
            seen.add(data["case_id"])
            cases.append(data)
        except KeyError as exc:  # str(KeyError) is the key's repr
            errors.append(f"line {number}: the field “{exc.args[0]}” is missing")
        except (ValueError, TypeError) as exc:
            errors.append(f"line {number}: {exc}")
    if errors:
        raise EvalError("; ".join(errors[:20]) + (f" (and {len(errors) - 20} more)" if len(errors) > 20 else ""))
    if not cases:
        raise EvalError("The file holds no cases.")
    if len(cases) > MAX_CASES:
        raise EvalError(f"At most {MAX_CASES} cases per set version.")
    return cases


@transaction.atomic
def eval_set_add_version(*, actor: Actor, workspace: Workspace, name: str, suite: str, cases: list[dict],
                         source: str, description: str = "") -> EvalSetVersion:
    """A new immutable version of set `name` (created on first use) holding `cases`."""
    require(actor, workspace, WRITE)
    check_identifier(name, field="eval set name")
    eval_set, _ = EvalSet.objects.get_or_create(workspace=workspace, name=name,
                                                defaults={"suite": suite, "description": description})
    if eval_set.suite != suite:
        raise EvalError(f"{name} is a {eval_set.suite} set; it cannot take {suite} cases.")
    number = (eval_set.versions.aggregate(n=Max("number"))["n"] or 0) + 1
    version = EvalSetVersion.objects.create(eval_set=eval_set, number=number, source=source[:200],
                                            case_count=len(cases), created_by=actor.label)
    EvalCase.objects.bulk_create([EvalCase(set_version=version, case_id=c["case_id"], category=c["category"], data=c)
                                  for c in cases])
    audit_record(actor=actor, workspace=workspace, action="eval_set.version", target_type="eval_set",
                 target_id=version.pk, target_label=str(version), after={"cases": len(cases), "source": source})
    return version


def eval_set_archive(*, actor: Actor, eval_set: EvalSet, archived: bool = True) -> EvalSet:
    """Hide a set from lists and pickers (or bring it back); its versions and runs are kept."""
    require(actor, eval_set.workspace, WRITE)
    archived_set(actor=actor, obj=eval_set, kind="eval_set", label=eval_set.name, archived=archived)
    return eval_set


def eval_set_delete(*, actor: Actor, eval_set: EvalSet) -> None:
    """Delete a set that no run has used (admin); a used set is evidence and can only be archived."""
    require(actor, eval_set.workspace, ADMIN)
    with transaction.atomic():
        locked = EvalSet.objects.select_for_update().get(pk=eval_set.pk)
        runs = EvalRun.objects.filter(set_version__eval_set=locked).count()
        if runs:
            raise EvalError(f"{runs} run(s) used this set; archive it instead.")
        versions = list(locked.versions.values_list("number", flat=True))
        audit_record(actor=actor, workspace=locked.workspace, action="eval_set.delete", target_type="eval_set",
                     target_id=locked.pk, target_label=locked.name,
                     before={"suite": locked.suite, "versions": versions}, after=None)
        locked.delete()


def eval_set_generate(*, actor: Actor, workspace: Workspace, name: str, suite: str, seed: int, n: int,
                      fault_rate: float = 0.5, perturbation_rate: float = 0.5) -> EvalSetVersion:
    """Simulated cases (Live-Stream QA, Harness-Variant or Robustness) from a seeded world. Robustness
    cases get forced tool faults (`fault_rate`) and prompt perturbations (`perturbation_rate`)."""
    from harness.simulator import generate_cases, generate_room

    if suite == "ifeval":
        raise EvalError("IFEval sets are imported from IFEval JSONL, not simulated.")
    if not 1 <= n <= MAX_CASES:
        raise EvalError(f"Choose between 1 and {MAX_CASES} cases.")
    cases = generate_cases(seed, n, room=generate_room(seed))
    if suite == "robustness":
        cases = _with_perturbations(_with_faults(cases, seed, fault_rate), seed, perturbation_rate)
    data = [{**c.to_dict(), "suite": suite} for c in cases]
    return eval_set_add_version(actor=actor, workspace=workspace, name=name, suite=suite, cases=data,
                                source=f"simulator seed={seed} n={n}")


def _with_faults(cases: list[Case], seed: int, rate: float) -> list[Case]:
    """Force one fault on one expected tool of a share of the cases (deterministic by seed)."""
    import dataclasses
    import random

    from harness.simulator.cases import FAULTS

    rng = random.Random(seed)
    out = []
    for case in cases:
        tools = [t.name for t in case.expected.tools]
        if tools and rng.random() < rate:
            case = dataclasses.replace(case, faults={rng.choice(tools): rng.choice(FAULTS)})
        out.append(case)
    return out


def _with_perturbations(cases: list[Case], seed: int, rate: float) -> list[Case]:
    """Perturb the message of a share of the cases that expect a reply (deterministic by seed; kinds in turn)."""
    import random

    from evaluation.perturbations import KINDS, perturb

    rng = random.Random(f"perturb:{seed}")
    out, turn = [], 0
    for case in cases:
        if not case.expected.silent and rng.random() < rate:
            case = perturb(case, rng, kind=KINDS[turn % len(KINDS)])
            turn += 1
        out.append(case)
    return out


# How many turns each backend serves at once, i.e. the most an eval run should keep in flight. The offline
# model generates one reply at a time (one llama.cpp context behind a lock): at concurrency 4 the other turns
# wait in line, hit the 15 s deadline and the run measures queueing, not the harness.
BACKEND_CONCURRENCY = {"local": 1, "openai": 8, "scripted": 4}


def default_concurrency(backend: str) -> int:
    """The default `concurrency` of a run on `backend` (what it can serve at once; 1 when unknown)."""
    return BACKEND_CONCURRENCY.get(backend, 1)


def run_create(*, actor: Actor, workspace: Workspace, set_version: EvalSetVersion, harness: Harness,
               version: HarnessVersion, backend: str, judge: str = "reference", concurrency: int | None = None,
               queue: str = "cpu", start: bool = True) -> EvalRun:
    """Create a run and (unless start=False) queue it; the job starts after the transaction commits.
    Without `concurrency`, the backend's own (`default_concurrency`)."""

    require(actor, workspace, WRITE)
    if concurrency is None:
        concurrency = default_concurrency(backend)
    if set_version.eval_set.workspace_id != workspace.pk or harness.workspace_id != workspace.pk:
        raise EvalError("The set and the harness must belong to this workspace.")
    if version.harness_id != harness.pk:
        raise EvalError("That version belongs to another harness.")
    if not 1 <= concurrency <= 64:
        raise EvalError("Concurrency must be between 1 and 64.")
    if queue not in ("cpu", "gpu"):
        raise EvalError("Queue must be cpu or gpu.")
    resolve_judge(judge, backend)  # unknown judges fail here, not in the worker
    backend_for(backend, workspace=workspace)  # likewise for backends (scripted in production, foreign checkpoints)
    with transaction.atomic():
        run = EvalRun.objects.create(
            workspace=workspace, set_version=set_version, harness=harness, harness_version=version, backend=backend,
            judge=judge, concurrency=concurrency, queue=queue, total=set_version.case_count, created_by=actor.label,
            config={"suite": set_version.eval_set.suite, "backend": backend, "judge": judge,
                    "concurrency": concurrency, "harness_hash": version.content_hash, "set": str(set_version)},
        )
        audit_record(actor=actor, workspace=workspace, action="eval_run.create", target_type="eval_run",
                     target_id=run.pk, target_label=str(run), after=run.config)
        if start:
            transaction.on_commit(lambda: enqueue("evaluation.execute_run", args=[run.pk], queue=queue))
    return run


def run_cancel(*, actor: Actor, run: EvalRun) -> EvalRun:
    require(actor, run.workspace, WRITE)
    if run.status in (EvalRun.Status.QUEUED, EvalRun.Status.RUNNING):
        EvalRun.objects.filter(pk=run.pk).update(cancel_requested=True)
        if run.status == EvalRun.Status.QUEUED:
            EvalRun.objects.filter(pk=run.pk).update(status=EvalRun.Status.CANCELLED, finished_at=timezone.now())
        audit_record(actor=actor, workspace=run.workspace, action="eval_run.cancel", target_type="eval_run",
                     target_id=run.pk, target_label=str(run))
    run.refresh_from_db()
    return run


# Execution (inside the worker) ---------------------------------------------------------------------

def _drain(outcomes: queue.Queue) -> list:
    """The next item (waiting for it), then whatever else is already there, up to the end marker None."""
    items = [outcomes.get()]
    while items[-1] is not None:
        try:
            items.append(outcomes.get_nowait())
        except queue.Empty:
            break
    return items


def _save_result(run: EvalRun, case: EvalCase, outcome) -> EvalResult | None:
    """Store one case's result; None if it was already stored (a re-delivered task), never twice. Its trace keeps
    the system message and tool schemas it sent by digest, stored once per workspace (serving.traces)."""
    trace, parts = split_request(outcome.trace) if isinstance(outcome.trace, dict) else (outcome.trace, {})
    try:
        with transaction.atomic():
            prompt_parts_store(run.workspace_id, parts)
            return EvalResult.objects.create(
                run=run, case=case, category=case.category, accuracy=outcome.accuracy,
                effectiveness=outcome.effectiveness, scores=outcome.scores, reasons=list(outcome.reasons),
                judge_version=outcome.judge_version[:200], outcome=outcome.outcome, latency_ms=outcome.latency_ms,
                reply=outcome.reply, trace=trace, abstained=outcome.abstained,
                judge_models=list(outcome.judge_models), judge_hash=outcome.judge_hash,
            )
    except IntegrityError:
        return None


def judge_models() -> dict:
    """The configured judge models by name (settings.JUDGE_MODELS), validated."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    from evaluation.judges.judge_models import parse_judge_models

    try:
        return parse_judge_models(settings.JUDGE_MODELS)
    except ValueError as exc:
        raise ImproperlyConfigured(f"HARNESSOPS_JUDGE_MODELS: {exc}") from exc


def resolve_judge(name: str, backend: str | None):
    """A judge by name. `harness` is the Agent-as-a-Judge; `harness:a,b` votes over judge models a and b
    (names of configured judge models, or backend names); plain `harness` uses settings.JUDGE_DEFAULT, or
    else the run's backend."""
    from django.conf import settings

    from evaluation.judges import get_judge
    from evaluation.judges.harness_judge import HarnessJudge

    if name == "harness" or name.startswith("harness:"):
        names = [m.strip() for m in name.partition(":")[2].split(",") if m.strip()]
        names = names or list(settings.JUDGE_DEFAULT) or [backend or settings.MODEL_BACKEND]
        configured = judge_models()
        factories = []
        for model in names:
            if model in configured:
                factories.append(configured[model].factory())
            else:
                if model not in backend_names():
                    raise EvalError(f"Unknown judge model “{model}”; configured judge models: "
                                    f"{', '.join(sorted(configured)) or '(none)'}; backends: "
                                    f"{', '.join(backend_names())}.")
                backend_for(model)  # refuses scripted in production
                factories.append((model, lambda model=model: backend_for(model)))
        return HarnessJudge(factories)
    return get_judge(name)


PROGRESS_EVERY_S = 0.5  # live progress at most this often (each message costs a summary of the tally)


def run_execute(*, run_id: int) -> str:
    """Evaluate the run's remaining cases with bounded concurrency; resumable and cancellable.

    The agent turns run concurrently on an event loop in a helper thread; every database write
    (one row per finished case) happens here, in the calling thread, as outcomes arrive.
    """
    with _what_the_process_holds_frozen():
        return _execute(run_id)


@contextmanager
def _what_the_process_holds_frozen() -> Iterator[None]:
    """What the process holds now (Django, the modules) outlives the run: frozen, a full collection walks only
    what the run makes. Unfrozen walks of it all stopped a run's cases 177 ms, and the loading of its cases
    and spec ~100 ms. Unfrozen after, so it is collected as before, unless something was frozen already (a
    server's or worker's start-up), which unfreezing would release too."""
    owned = gc.get_freeze_count() == 0
    if owned:
        gc.freeze()
    try:
        yield
    finally:
        if owned:
            gc.unfreeze()


def _execute(run_id: int) -> str:
    run = EvalRun.objects.select_related("harness_version", "set_version__eval_set").get(pk=run_id)
    if run.status in (EvalRun.Status.DONE, EvalRun.Status.CANCELLED):
        return run.status
    EvalRun.objects.filter(pk=run_id).update(status=EvalRun.Status.RUNNING,
                                             started_at=run.started_at or timezone.now())
    done = set(EvalResult.objects.filter(run_id=run_id).values_list("case_id", flat=True))
    pending = [c for c in EvalCase.objects.filter(set_version=run.set_version) if c.pk not in done]
    spec = harness_selectors.version_spec(run.harness_version)
    judge = resolve_judge(run.judge, run.backend)
    suite = run.set_version.eval_set.suite
    http_policy = HttpPolicy(allowed_hosts=tuple(run.workspace.tool_hosts or ()))  # as for live replies
    outcomes: queue.Queue = queue.Queue()
    cancel = threading.Event()

    def evaluate_all() -> None:
        try:
            asyncio.run(_evaluate_all(run, pending, spec, judge, suite, outcomes.put, cancel, http_policy))
        except BaseException as exc:  # handed to the calling thread, which records the failure
            outcomes.put(exc)
        finally:
            outcomes.put(None)

    tally = run_tally(run_id)  # read once; each case saved below is added to it
    worker = threading.Thread(target=evaluate_all, name=f"eval-run-{run_id}", daemon=True)
    worker.start()
    try:
        failure = _saved_as_they_finish(run, worker, outcomes, tally, cancel)
    except BaseException:
        # A write failed (the database went away): the turns still to start stop here; the cases not stored are
        # evaluated again by the task's retry, which resumes from the stored rows.
        cancel.set()
        raise
    if failure is not None:
        log.error("eval run %s failed: %s", run_id, failure)
        EvalRun.objects.filter(pk=run_id).update(status=EvalRun.Status.FAILED, error=str(failure)[:2000],
                                                 finished_at=timezone.now())
        raise failure
    cancelled = cancel.is_set() or EvalRun.objects.filter(pk=run_id, cancel_requested=True).exists()
    status = EvalRun.Status.CANCELLED if cancelled else EvalRun.Status.DONE
    final = run_tally(run_id)  # from the stored rows: exact even if another delivery saved some of them
    errored = EvalResult.objects.filter(run_id=run_id, outcome=ERRORED)
    first_error = errored.order_by("pk").values_list("trace", flat=True).first()
    note = (f"{errored.count()} of {final.done} case(s) errored and count as failed; first: "
            f"{first_error.get('error', '')}")[:2000] if first_error is not None else ""
    EvalRun.objects.filter(pk=run_id).update(status=status, summary=final.summary(), finished_at=timezone.now(),
                                             error=note)
    publish_progress_sync(run_id, progress_payload(run_id, status, run.total, final))
    return status


def _saved_as_they_finish(run: EvalRun, worker: threading.Thread, outcomes: queue.Queue, tally: Tally,
                          cancel: threading.Event) -> BaseException | None:
    """Store each case's outcome as `worker` hands it over, publish progress, pass on a cancel; returns the
    worker's failure (None when it finished)."""
    last_published = last_cancel_check = 0.0
    failure, finished = None, False
    while not finished:
        items = _drain(outcomes)
        finished = items and items[-1] is None
        pairs = []
        for item in items:
            if isinstance(item, BaseException):
                failure = item
            elif item is not None:
                pairs.append(item)
        # Every case that finished meanwhile in one commit (a commit per case bounded the run on SQLite).
        with transaction.atomic():
            saved = [row for case, outcome in pairs if (row := _save_result(run, case, outcome)) is not None]
        for row in saved:
            tally.add(row)
        now = time.monotonic()
        if now - last_cancel_check > 0.5:
            last_cancel_check = now
            if EvalRun.objects.filter(pk=run.pk, cancel_requested=True).exists():
                cancel.set()
        # Progress at most every PROGRESS_EVERY_S, from the running tally (no re-read of the results so far).
        if saved and now - last_published > PROGRESS_EVERY_S:
            last_published = now
            publish_progress_sync(run.pk, progress_payload(run.pk, EvalRun.Status.RUNNING, run.total, tally))
    worker.join()
    return failure


async def _evaluate_all(run: EvalRun, pending: list[EvalCase], spec, judge, suite: str, emit, cancel,
                        http_policy=None) -> None:
    """Evaluate `pending` with at most run.concurrency turns in flight; `emit((case, outcome))` each result."""
    semaphore = asyncio.Semaphore(run.concurrency)

    async def one(case: EvalCase) -> None:
        async with semaphore:
            if cancel.is_set():
                return
            backend = backend_for(run.backend)
            try:
                outcome = await evaluate_case(suite=suite, data=case.data, spec=spec, backend=backend, judge=judge,
                                              http_policy=http_policy)
            except Exception as exc:  # this case is recorded as errored; the others go on
                log.warning("eval run %s: case %s errored", run.pk, case.pk, exc_info=True)
                outcome = errored_outcome(exc)
            finally:
                close = getattr(backend, "aclose", None)
                if close is not None:
                    await close()
            emit((case, outcome))

    try:
        await asyncio.gather(*(one(case) for case in pending))
    finally:
        await close_shared_clients()  # this run's loop ends here: close its pooled HTTP clients


def cases_evaluate(*, run: EvalRun, files: dict[str, str], case_ids) -> dict[str, tuple[float | None, float | None]]:
    """Evaluate some of `run`'s cases again on other harness files (same set, backend, judge and tool hosts),
    storing nothing: case id → (accuracy, effectiveness), None for an abstention or a case whose evaluation
    errored (unlike a run, where it counts as failed: here the question is what the files change). For
    what-if questions (leave-one-out attribution, trying a proposed edit)."""
    from harness.spec import parse_files

    spec = parse_files(files)
    cases = list(EvalCase.objects.filter(set_version=run.set_version, case_id__in=list(case_ids)).order_by("id"))
    judge = resolve_judge(run.judge, run.backend)
    suite = run.set_version.eval_set.suite
    http_policy = HttpPolicy(allowed_hosts=tuple(run.workspace.tool_hosts or ()))
    found: dict[str, tuple[float | None, float | None]] = {}

    def collect(item) -> None:
        case, outcome = item  # an errored case is not known to fail because of the files: (None, None)
        found[case.case_id] = (None, None) if outcome.outcome == ERRORED else (outcome.accuracy, outcome.effectiveness)

    def evaluate() -> None:
        asyncio.run(_evaluate_all(run, cases, spec, judge, suite, collect, threading.Event(), http_policy))

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # the usual case (a worker, a thread of the embedded server): no loop here yet
        evaluate()
        return found
    # Called under a running event loop (a test driving a browser): the turns get a loop of their own thread.
    failure: list[BaseException] = []
    thread = threading.Thread(target=lambda: _capture(evaluate, failure), name=f"cases-evaluate-{run.pk}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return found


def _capture(fn, failures: list) -> None:
    try:
        fn()
    except BaseException as exc:  # handed to the calling thread
        failures.append(exc)


DEFAULT_GATE = {"metrics": ["accuracy", "effectiveness"], "max_drop": 0.02, "confidence": 0.95, "method": "bootstrap",
                "rule": "non_inferiority", "min_cases": 30, "max_safety_net_share": 0.5}
SAFETY_NETS = ("fallback", "deadline", "error")


def comparison_create(*, actor: Actor, baseline: EvalRun, candidate: EvalRun, gate: dict | None = None,
                      case_ids=None, split: str = ""):
    """Compare two finished runs of the same set version and apply the regression gate; stored and audited.

    `case_ids` restricts the comparison (and the gate) to those cases, e.g. an evolution run's gate split;
    they are kept in the stored rule with `split` naming them, so the page says which cases were compared."""
    from evaluation.metrics.compare import RULES, RegressionGate, compare_runs
    from evaluation.models import RunComparison

    require(actor, candidate.workspace, WRITE)
    if baseline.workspace_id != candidate.workspace_id:
        raise EvalError("Both runs must belong to this workspace.")
    if baseline.pk == candidate.pk:
        raise EvalError(f"Run #{candidate.pk} cannot be compared with itself: choose a different baseline run.")
    if baseline.set_version_id != candidate.set_version_id:
        raise EvalError(f"Run #{baseline.pk} used {baseline.set_version} and run #{candidate.pk} used "
                        f"{candidate.set_version}: compare runs of the same eval set version (paired cases).")
    if baseline.status != EvalRun.Status.DONE or candidate.status != EvalRun.Status.DONE:
        raise EvalError("Both runs must be done.")
    rule = {**DEFAULT_GATE, **(gate or {})}
    try:
        max_drop, confidence = float(rule["max_drop"]), float(rule["confidence"])
        min_cases = int(rule["min_cases"])
    except (TypeError, ValueError):
        raise EvalError("max_drop and confidence must be numbers, min_cases a whole number.") from None
    if not (0 <= max_drop <= 1 and 0.5 <= confidence < 1):
        raise EvalError("max_drop must be within 0..1 and confidence within 0.5..1.")
    if min_cases < 2:
        raise EvalError("min_cases must be at least 2.")
    if rule["rule"] not in RULES:
        raise EvalError(f"The gate rule must be one of {', '.join(RULES)}.")
    rule.update(max_drop=max_drop, confidence=confidence, min_cases=min_cases)
    only = set(case_ids) if case_ids is not None else None
    if only is not None:
        rule.update(split=split or "chosen cases", case_ids=sorted(only))

    def per_case(run: EvalRun) -> dict:
        # An abstention leaves accuracy/effectiveness None: unpaired, never compared as a 0.
        return {case_id: {**scores, "accuracy": acc, "effectiveness": eff,
                          "safety_net": float(outcome in SAFETY_NETS)}
                for case_id, acc, eff, scores, outcome in run.results.values_list(
                    "case__case_id", "accuracy", "effectiveness", "scores", "outcome")
                if only is None or case_id in only}

    a, b = per_case(baseline), per_case(candidate)
    gate = RegressionGate(metrics=tuple(rule["metrics"]), max_drop=max_drop, confidence=confidence,
                          method=rule["method"], rule=rule["rule"], min_cases=min_cases,
                          max_safety_net_share=rule["max_safety_net_share"])
    # One comparison (one bootstrap per metric) serves both the stored metrics and the gate's verdict.
    reported = {m for run in (a, b) for row in run.values() for m in row}
    comparison = compare_runs(a, b, sorted(reported | set(gate.metrics)), confidence=confidence,
                              method=rule["method"], n_resamples=gate.n_resamples, seed=gate.seed)
    verdict = gate.evaluate(comparison, candidate=b)
    metrics = {name: {"n": m.n, "baseline": m.baseline_mean, "candidate": m.candidate_mean, "delta": m.delta,
                      "ci_low": m.ci_low, "ci_high": m.ci_high, "mcnemar_p": m.mcnemar_p,
                      "regressed": list(m.regressed), "improved": list(m.improved), "unpaired": list(m.unpaired)}
               for name, m in comparison.metrics.items() if name in reported}
    def abstentions(run: EvalRun) -> int:
        rows = run.results.filter(abstained=True)
        return (rows if only is None else rows.filter(case__case_id__in=only)).count()

    abstained = {"baseline": abstentions(baseline), "candidate": abstentions(candidate)}
    with transaction.atomic():
        stored = RunComparison.objects.create(
            workspace=candidate.workspace, baseline=baseline, candidate=candidate, gate=rule, passed=verdict.passed,
            verdict=verdict.verdict, reasons=list(verdict.reasons),
            metrics=_finite({**metrics, "_abstained": abstained}), created_by=actor.label)
        audit_record(actor=actor, workspace=candidate.workspace, action="eval.compare", target_type="run_comparison",
                     target_id=stored.pk, target_label=f"run {baseline.pk} → run {candidate.pk}",
                     after={"verdict": verdict.verdict, "reasons": list(verdict.reasons)})
        webhooks.emit(candidate.workspace, "gate.verdict", {
            "comparison": stored.pk, "baseline_run": baseline.pk, "candidate_run": candidate.pk,
            "passed": verdict.passed, "verdict": verdict.verdict, "reasons": list(verdict.reasons),
            "harness": candidate.harness.name, "version": candidate.harness_version.number, "actor": actor.label})
    return stored


def _finite(value):
    """JSON has no NaN: undefined statistics are stored as null."""
    import math

    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def regression_gate_check(harness: Harness, version: HarnessVersion) -> str:
    """Why moving a protected label to `version` needs confirmation: no comparison with it as the candidate
    has passed the regression gate (none yet, or the latest one failed or had not enough evidence)."""
    from evaluation.models import RunComparison

    latest = (RunComparison.objects.filter(candidate__harness_version=version).order_by("-created_at", "-id")
              .first())
    if latest is None:
        return f"v{version.number} has no passed comparison (no run of it was compared against a baseline)"
    if latest.passed:
        return ""
    if latest.verdict == "not enough evidence":
        return (f"v{version.number} has no passed comparison: comparison #{latest.pk} had not enough evidence "
                f"({'; '.join(latest.reasons)[:300]})")
    return f"the regression gate failed (comparison #{latest.pk}: {'; '.join(latest.reasons)[:300]})"
