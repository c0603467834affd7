"""Eval sets and runs on the real database, with the scripted model and the reference judge."""

import json

import pytest

from console.access import Actor
from evaluation import services
from evaluation.metrics.ifeval import mini_records
from evaluation.models import EvalResult, EvalRun
from evaluation.selectors import run_progress

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")


@pytest.fixture
def scripted(settings):
    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = ["Thanks for asking! Let me check that for you."]
    return settings


def make_run(workspace, harness, version, **kwargs):
    return services.run_create(actor=SYSTEM, workspace=workspace, set_version=version, harness=harness,
                               version=harness.head, backend="scripted", start=False, **kwargs)


def test_generated_set_is_versioned_and_runs_resumably(workspace, harness, scripted):
    first = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                       seed=3, n=12)
    second = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                        seed=4, n=5)
    assert (first.number, first.case_count, second.number) == (1, 12, 2)
    run = make_run(workspace, harness, first, concurrency=3)
    assert services.run_execute(run_id=run.pk) == "done"
    run.refresh_from_db()
    assert run.results.count() == 12 and run.status == "done" and run.summary["overall"]["n"] == 12
    assert 0 <= run.summary["overall"]["accuracy"] <= 1
    irrelevant = run.results.filter(category="irrelevant")
    assert all(r.accuracy == 1 for r in irrelevant)  # silent refusal is the right answer there
    # A re-delivered task finds every case done: nothing is counted twice.
    EvalRun.objects.filter(pk=run.pk).update(status="running")
    services.run_execute(run_id=run.pk)
    assert run.results.count() == 12


def test_resume_after_partial_run_counts_each_case_once(workspace, harness, scripted):
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                         seed=5, n=8)
    run = make_run(workspace, harness, version)
    services.run_execute(run_id=run.pk)
    kept = list(run.results.order_by("id").values_list("case_id", flat=True)[:3])
    EvalResult.objects.filter(run=run).exclude(case_id__in=kept).delete()  # as if the worker died after 3 cases
    EvalRun.objects.filter(pk=run.pk).update(status="running")
    services.run_execute(run_id=run.pk)
    assert run.results.count() == 8 and set(kept) <= set(run.results.values_list("case_id", flat=True))


def test_cancel_stops_a_run(workspace, harness, scripted):
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                         seed=6, n=6)
    run = make_run(workspace, harness, version)
    services.run_cancel(actor=SYSTEM, run=run)
    run.refresh_from_db()
    assert run.status == "cancelled" and services.run_execute(run_id=run.pk) == "cancelled"
    assert run.results.count() == 0


@pytest.mark.parametrize("suite", ["robustness", "harness_variant"])
def test_other_simulated_suites(workspace, harness, scripted, suite):
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name=suite, suite=suite, seed=7, n=6)
    run = make_run(workspace, harness, version)
    assert services.run_execute(run_id=run.pk) == "done"
    assert run.results.count() == 6
    if suite == "robustness":
        assert any(r.scores.get("tool_call_correctness") is not None or len(r.scores) > 2 for r in run.results.all())
    else:  # the variant's spec differs from the original: the trace's harness hash says so
        assert all(r.trace["harness_hash"] != harness.head.content_hash for r in run.results.all())


def test_ifeval_suite_imports_jsonl_and_scores(workspace, harness, scripted):
    lines = [json.dumps(r) for r in mini_records()]
    cases = services.parse_cases("ifeval", lines)
    version = services.eval_set_add_version(actor=SYSTEM, workspace=workspace, name="ifeval-mini", suite="ifeval",
                                            cases=cases, source="mini")
    run = make_run(workspace, harness, version)
    services.run_execute(run_id=run.pk)
    run.refresh_from_db()
    overall = run.summary["overall"]
    assert overall["n"] == len(lines) and "instruction_level_strict" in overall and "prompt_loose" in overall


def test_bad_jsonl_is_refused_whole(workspace):
    good = json.dumps(mini_records()[0])
    with pytest.raises(services.EvalError, match="line 2"):
        services.parse_cases("ifeval", [good, "{broken", json.dumps({"key": 1})])
    with pytest.raises(services.EvalError, match="line 1"):
        services.parse_cases("live_stream_qa", [json.dumps({"case_id": "x"})])


def test_run_create_validates(workspace, harness, foreign_harness, scripted):
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="s", suite="live_stream_qa",
                                         seed=1, n=2)
    with pytest.raises(services.EvalError):
        services.run_create(actor=SYSTEM, workspace=workspace, set_version=version, harness=foreign_harness,
                            version=foreign_harness.head, backend="scripted", start=False)
    with pytest.raises(services.EvalError):
        make_run(workspace, harness, version, concurrency=0)
    with pytest.raises(KeyError):
        make_run(workspace, harness, version, judge="nope")


def test_progress_snapshot_and_console_pages(client, members, workspace, harness, scripted):
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                         seed=2, n=4)
    run = make_run(workspace, harness, version)
    services.run_execute(run_id=run.pk)
    progress = run_progress(run.pk)
    assert progress["done"] == progress["total"] == 4 and progress["status"] == "done"
    client.force_login(members["viewer"])
    page = client.get(f"/w/acme/eval/runs/{run.pk}/").content.decode()
    assert "Run #" in page and "lsqa@v1" in page
    csv_body = client.get(f"/w/acme/eval/runs/{run.pk}/?format=csv").content.decode()
    assert csv_body.startswith("case_id,category,accuracy") and len(csv_body.splitlines()) == 5
    result = run.results.first()
    assert client.get(f"/w/acme/eval/runs/{run.pk}/results/{result.pk}/").status_code == 200
    assert len(client.get("/w/acme/eval/sets/lsqa/v/1/?format=jsonl").content.decode().splitlines()) == 4


def test_comparison_and_regression_gate(client, members, workspace, harness, scripted, settings):
    from evaluation.models import RunComparison

    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                         seed=8, n=10)
    baseline = make_run(workspace, harness, version)
    services.run_execute(run_id=baseline.pk)
    same = make_run(workspace, harness, version)
    services.run_execute(run_id=same.pk)
    baseline.refresh_from_db()
    same.refresh_from_db()
    # The same scripted model twice: no delta, the gate passes.
    passed = services.comparison_create(actor=SYSTEM, baseline=baseline, candidate=same)
    assert passed.passed and passed.metrics["accuracy"]["delta"] == 0
    # Make the baseline right everywhere and a candidate wrong everywhere: every case regresses.
    worse = make_run(workspace, harness, version)
    services.run_execute(run_id=worse.pk)
    worse.refresh_from_db()
    EvalResult.objects.filter(run=baseline).update(accuracy=1, effectiveness=1)
    EvalResult.objects.filter(run=worse).update(accuracy=0, effectiveness=0)
    failed = services.comparison_create(actor=SYSTEM, baseline=baseline, candidate=worse,
                                        gate={"max_drop": 0.05, "confidence": 0.9})
    assert failed.passed is False and failed.reasons
    assert len(failed.metrics["accuracy"]["regressed"]) == 10 and failed.metrics["accuracy"]["delta"] == -1
    other = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="other", suite="live_stream_qa",
                                       seed=9, n=2)
    elsewhere = make_run(workspace, harness, other)
    services.run_execute(run_id=elsewhere.pk)
    elsewhere.refresh_from_db()
    with pytest.raises(services.EvalError, match="same eval set version"):
        services.comparison_create(actor=SYSTEM, baseline=baseline, candidate=elsewhere)
    client.force_login(members["operator"])
    response = client.post("/w/acme/eval/compare/", {"baseline": worse.pk, "candidate": worse.pk,
                                                     "max_drop": "0.05", "confidence": "0.95"})
    assert response.status_code == 302
    page = client.get(response.url).content.decode()
    assert "Gate PASSED" in page and RunComparison.objects.count() >= 2


def test_replay_command_prints_deployment_figures(workspace, harness, scripted, capsys):
    from django.core.management import call_command

    services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="replay", suite="live_stream_qa", seed=4, n=5)
    call_command("replay", "avatar@v1", "replay@v1", workspace="acme", backend="scripted", concurrency=2)
    out = capsys.readouterr().out
    for figure in ("wall_p50_ms", "wall_p95_ms", "ttft_p50_ms", "decode_tokens_per_s", "success_rate",
                   "within_deadline", "turns_per_s"):
        assert figure in out
    assert "run " in out and ": done" in out


def test_run_with_the_harness_judge_records_its_version(workspace, harness, scripted, settings):
    settings.SCRIPTED_STEPS = [json.dumps({"accuracy": 1, "effectiveness": 1, "reasons": ["ok"]})]
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="hj", suite="live_stream_qa",
                                         seed=12, n=3)
    run = make_run(workspace, harness, version, judge="harness")
    services.run_execute(run_id=run.pk)
    spoken = run.results.exclude(outcome="silent")
    assert spoken and all(r.judge_version.startswith("harness-judge/") for r in spoken)
    assert all(r.accuracy == 1 for r in spoken)


def test_a_failed_gate_blocks_promotion_to_production_unless_overridden(workspace, harness, scripted, actors):
    from harness import services as harness_services
    from harness.models import Label

    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="gate", suite="live_stream_qa",
                                         seed=13, n=6)
    baseline, candidate = make_run(workspace, harness, version), make_run(workspace, harness, version)
    for run in (baseline, candidate):
        services.run_execute(run_id=run.pk)
        run.refresh_from_db()
    EvalResult.objects.filter(run=baseline).update(accuracy=1, effectiveness=1)
    EvalResult.objects.filter(run=candidate).update(accuracy=0, effectiveness=0)
    assert not services.comparison_create(actor=SYSTEM, baseline=baseline, candidate=candidate).passed
    with pytest.raises(harness_services.StoreError, match="regression gate failed"):
        harness_services.label_move(actor=actors["approver"], harness=harness, name="production",
                                    version=harness.head, reason="ship")
    harness_services.label_move(actor=actors["approver"], harness=harness, name="staging", version=harness.head,
                                reason="unprotected labels are not gated")
    move = harness_services.label_move(actor=actors["approver"], harness=harness, name="production",
                                       version=harness.head, reason="hotfix, accepted risk", override=True)
    assert Label.objects.get(harness=harness, name="production").version == harness.head and move.reason
