"""Eval sets and runs on the real database, with the scripted model and the reference judge."""

import json

import pytest

from evaluation import services
from evaluation.metrics.ifeval import mini_records
from evaluation.models import EvalResult, EvalRun
from evaluation.selectors import run_progress
from workspaces.access import Actor

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


def test_a_results_trace_keeps_the_prompt_it_sent_once_per_workspace(workspace, harness, scripted):
    from serving.models import PromptPart
    from serving.traces import joined_request

    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                         seed=3, n=6)
    run = make_run(workspace, harness, version)
    assert services.run_execute(run_id=run.pk) == "done"
    parts = dict(PromptPart.objects.filter(workspace=workspace).values_list("digest", "content"))
    asked = [r.trace["request"] for r in run.results.all() if r.trace.get("request")]
    assert asked and all("tools" not in request and request["messages"][0]["role"] == "system"
                         and "content" not in request["messages"][0] for request in asked)
    joined = [joined_request(request, parts) for request in asked]
    assert all(request is not None and request["messages"][0]["content"] and request["tools"] for request in joined)
    assert len(parts) <= 2 * len({json.dumps(request["messages"][0]["content"]) for request in joined})


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


# A turn the demo harness accepts at once: the reply skill loaded, then a reply the hooks let through.
ANSWERING = [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "casual-chat"}}]},
             "Hi! Welcome to the stream, great to have you here."]


def finished(workspace, harness, version, **kwargs):
    run = make_run(workspace, harness, version, **kwargs)
    services.run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run


def test_comparison_and_regression_gate(client, members, workspace, harness, scripted, settings):
    from evaluation.models import RunComparison

    settings.SCRIPTED_STEPS = ANSWERING
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                         seed=8, n=30)
    baseline, same = finished(workspace, harness, version), finished(workspace, harness, version)
    assert set(same.results.values_list("outcome", flat=True)) <= {"replied", "silent"}
    # The same scripted model twice, 30 paired cases: no delta, non-inferiority shown, the gate passes.
    passed = services.comparison_create(actor=SYSTEM, baseline=baseline, candidate=same)
    assert passed.passed and passed.verdict == "pass" and passed.metrics["accuracy"]["delta"] == 0, passed.reasons
    assert passed.gate["rule"] == "non_inferiority" and passed.gate["min_cases"] == 30
    assert passed.metrics["accuracy"]["mcnemar_p"] == 1.0
    # Make the baseline right everywhere and a candidate wrong everywhere: every case regresses.
    worse = finished(workspace, harness, version)
    EvalResult.objects.filter(run=baseline).update(accuracy=1, effectiveness=1)
    EvalResult.objects.filter(run=worse).update(accuracy=0, effectiveness=0)
    failed = services.comparison_create(actor=SYSTEM, baseline=baseline, candidate=worse,
                                        gate={"max_drop": 0.05, "confidence": 0.9})
    assert failed.passed is False and failed.verdict == "fail" and failed.reasons
    assert len(failed.metrics["accuracy"]["regressed"]) == 30 and failed.metrics["accuracy"]["delta"] == -1
    assert failed.metrics["accuracy"]["mcnemar_p"] == pytest.approx(2 / 2**30)
    # A run is never compared with itself, nor with a run on another set version.
    with pytest.raises(services.EvalError, match="cannot be compared with itself"):
        services.comparison_create(actor=SYSTEM, baseline=worse, candidate=worse)
    other = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="other", suite="live_stream_qa",
                                       seed=9, n=2)
    elsewhere = finished(workspace, harness, other)
    with pytest.raises(services.EvalError, match="same eval set version"):
        services.comparison_create(actor=SYSTEM, baseline=baseline, candidate=elsewhere)
    count = RunComparison.objects.count()
    client.force_login(members["operator"])
    page = client.post("/w/acme/eval/compare/", {"baseline": worse.pk, "candidate": worse.pk, "max_drop": "0.05",
                                                 "confidence": "0.95"}, follow=True).content.decode()
    assert "cannot be compared with itself" in page and RunComparison.objects.count() == count
    response = client.post("/w/acme/eval/compare/", {"baseline": baseline.pk, "candidate": same.pk,
                                                     "max_drop": "0.05", "confidence": "0.95",
                                                     "rule": "non_inferiority", "min_cases": "40"})
    assert response.status_code == 302
    page = client.get(response.url).content.decode()
    assert "Gate NOT ENOUGH EVIDENCE" in page and "only 30 paired cases (at least 40 needed)" in page
    assert "Exact McNemar p" in page


def test_two_runs_of_fallback_lines_do_not_pass_the_gate(workspace, harness, scripted, settings):
    """The issue's scenario: the model is down, every turn answers with the harness's fallback line."""
    settings.SCRIPTED_STEPS = [{"error": "model server unreachable"}]
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="down", suite="live_stream_qa",
                                         seed=21, n=30)
    baseline, candidate = finished(workspace, harness, version), finished(workspace, harness, version)
    outcomes = list(candidate.results.values_list("outcome", flat=True))
    assert outcomes.count("error") >= 28 and set(outcomes) <= {"error", "silent"}  # spam is blocked by a hook
    assert candidate.summary["overall"]["accuracy"] <= 2 / 30  # only a blocked spam message can be right
    comparison = services.comparison_create(actor=SYSTEM, baseline=baseline, candidate=candidate)
    assert comparison.verdict == "fail" and not comparison.passed
    assert any("ended in a fallback, deadline or error" in r for r in comparison.reasons)


def test_an_abstaining_judge_is_counted_not_scored(client, members, workspace, harness, scripted, settings):
    settings.SCRIPTED_STEPS = [*ANSWERING, "no verdict", "still none"]  # the judge model never gives JSON
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="abst", suite="live_stream_qa",
                                         seed=12, n=3)
    run = finished(workspace, harness, version, judge="harness")
    judged = run.results.exclude(outcome__in=("fallback", "deadline", "error"))
    assert judged and all(r.abstained and r.accuracy is None and r.effectiveness is None for r in judged)
    assert all(r.judge_hash and r.judge_models == ["scripted"] for r in judged)
    overall = run.summary["overall"]
    assert overall["abstained"] == judged.count() and overall["n"] == 3
    if overall["abstained"] == 3:
        assert overall["accuracy"] is None  # no verdict at all: no mean, not 0
    client.force_login(members["viewer"])
    page = client.get(f"/w/acme/eval/runs/{run.pk}/").content.decode()
    assert "Judge abstained" in page and "abstained" in page
    rows = [json.loads(line) for line in
            client.get(f"/w/acme/eval/runs/{run.pk}/?format=jsonl").content.decode().splitlines()]
    assert any(r["abstained"] and r["accuracy"] is None for r in rows)


def test_reasons_reach_the_page_as_text_not_entity_fragments(client, members, workspace, harness, scripted):
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="txt", suite="live_stream_qa",
                                         seed=2, n=1)
    run = finished(workspace, harness, version)
    # escaped, position 160 of the old join|truncatechars fell inside "&#x27;": "&#x2…" leaked to the page
    EvalResult.objects.filter(run=run).update(reasons=["x" * 155 + "'abc' & <b>"])
    client.force_login(members["viewer"])
    page = client.get(f"/w/acme/eval/runs/{run.pk}/").content.decode()
    assert "&#x2…" not in page and "&amp;#x" not in page
    assert "x" * 155 + "&#x27;abc…" in page


def test_eval_form_concurrency_follows_the_backend(client, members, workspace, harness, settings):
    settings.MODEL_BACKEND = "local"
    client.force_login(members["operator"])
    page = client.get("/w/acme/eval/").content.decode()
    assert 'name="concurrency" value=""' in page and "local (serves 1 at a time)" not in page
    assert "local (serves 1 at once)" in page and "answers one request at a time" in page
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="cc", suite="live_stream_qa",
                                         seed=2, n=1)
    for backend, expected in (("local", 1), ("scripted", 4)):
        run = services.run_create(actor=SYSTEM, workspace=workspace, set_version=version, harness=harness,
                                  version=harness.head, backend=backend, start=False)
        assert run.concurrency == expected == services.default_concurrency(backend)
    explicit = make_run(workspace, harness, version, concurrency=3)
    assert explicit.concurrency == 3


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
    # the agent answers (ANSWERING); the judge model, after two non-JSON tries, gives its verdict
    settings.SCRIPTED_STEPS = [*ANSWERING, json.dumps({"accuracy": 1, "effectiveness": 1, "reasons": ["ok"]})]
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="hj", suite="live_stream_qa",
                                         seed=12, n=3)
    run = make_run(workspace, harness, version, judge="harness")
    services.run_execute(run_id=run.pk)
    spoken = run.results.exclude(outcome="silent")
    assert spoken and all(r.judge_version.startswith("harness-judge/") for r in spoken)
    assert all(r.accuracy == 1 and not r.abstained for r in spoken)
    assert all(r.judge_models == ["scripted"] and len(r.judge_hash) == 64 for r in spoken)


def test_a_protected_label_moves_to_an_unproven_version_only_when_confirmed(client, members, workspace, harness,
                                                                           scripted, actors):
    from harness import services as harness_services
    from harness.models import Label
    from workspaces.models import AuditEvent

    first = harness.head
    harness_services.label_move(actor=actors["approver"], harness=harness, name="production", version=first,
                                reason="first placement: nothing to compare against yet")
    files = {**first.files, "harness.yaml": first.files["harness.yaml"].replace("reply_max_chars: 150",
                                                                                "reply_max_chars: 140")}
    target = harness_services.version_commit(actor=actors["operator"], harness=harness, files=files,
                                             message="shorter replies", base_version=first).version
    assert target.number == 2
    # no comparison at all: confirmation needed
    with pytest.raises(harness_services.StoreError, match="needs confirmation: v2 has no passed comparison"):
        harness_services.label_move(actor=actors["approver"], harness=harness, name="production", version=target,
                                    reason="ship")
    scripted.SCRIPTED_STEPS = ANSWERING
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="gate", suite="live_stream_qa",
                                         seed=13, n=6)
    baseline = finished(workspace, harness, version)
    candidate = services.run_create(actor=SYSTEM, workspace=workspace, set_version=version, harness=harness,
                                    version=target, backend="scripted", start=False)
    services.run_execute(run_id=candidate.pk)
    candidate.refresh_from_db()
    # 6 cases: not enough evidence, which is not a pass
    thin = services.comparison_create(actor=SYSTEM, baseline=baseline, candidate=candidate)
    assert thin.verdict == "not enough evidence"
    with pytest.raises(harness_services.StoreError, match="had not enough evidence"):
        harness_services.label_move(actor=actors["approver"], harness=harness, name="production", version=target,
                                    reason="ship")
    EvalResult.objects.filter(run=baseline).update(accuracy=1, effectiveness=1)
    EvalResult.objects.filter(run=candidate).update(accuracy=0, effectiveness=0)
    bad = services.comparison_create(actor=SYSTEM, baseline=baseline, candidate=candidate, gate={"min_cases": 5})
    assert bad.verdict == "fail"
    with pytest.raises(harness_services.StoreError, match="regression gate failed"):
        harness_services.label_move(actor=actors["approver"], harness=harness, name="production", version=target,
                                    reason="ship")
    harness_services.label_move(actor=actors["approver"], harness=harness, name="staging", version=target,
                                reason="unprotected labels are not gated")
    # the label panel shows each version's latest eval and gate verdict
    client.force_login(members["approver"])
    panel = client.get("/w/acme/harnesses/avatar/").content.decode()
    assert 'id="evidence"' in panel and f"run #{candidate.pk}" in panel and ">failed</a>" in panel
    assert "no comparison" in panel  # v1 was never a candidate
    assert "confirm moving a protected label to a version without a passed comparison" in panel
    # confirmed: it moves, and the audit log records what was confirmed
    move = harness_services.label_move(actor=actors["approver"], harness=harness, name="production",
                                       version=target, reason="hotfix, accepted risk", override=True)
    assert Label.objects.get(harness=harness, name="production").version == target and move.reason
    event = AuditEvent.objects.filter(action="label.move", target_label="avatar@production").order_by("-id").first()
    assert "regression gate failed" in event.after["override"][0]


def test_progress_comes_from_a_running_tally_not_a_reread_per_publish(workspace, harness, scripted, monkeypatch):
    """The runner reads the stored results once when it starts and once when it ends, however many cases
    and progress messages there are; each message counts what was saved so far."""
    from evaluation import selectors

    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="tally", suite="live_stream_qa",
                                         seed=12, n=16)
    run = make_run(workspace, harness, version, concurrency=4)
    reads, published = [], []
    real_tally = selectors.run_tally
    monkeypatch.setattr(services, "run_tally", lambda run_id: reads.append(run_id) or real_tally(run_id))
    monkeypatch.setattr(services, "publish_progress_sync", lambda run_id, payload: published.append(payload))
    monkeypatch.setattr(services, "PROGRESS_EVERY_S", -1)  # every saved case publishes
    assert services.run_execute(run_id=run.pk) == "done"
    run.refresh_from_db()
    assert reads == [run.pk, run.pk]
    done = [p["done"] for p in published]  # cases finishing together are saved (and published) together
    assert done == sorted(set(done[:-1])) + [16] and done[-2] == 16
    assert published[-1]["status"] == "done" and published[-1]["summary"] == run.summary == run_progress(run.pk)["summary"]
    assert published[-2]["summary"] == run.summary  # the running tally ends where the stored rows do


def test_comparison_bootstraps_each_metric_once(workspace, harness, scripted, settings, monkeypatch):
    from evaluation.metrics import compare

    settings.SCRIPTED_STEPS = ANSWERING
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="once", suite="live_stream_qa",
                                         seed=8, n=6)
    baseline, candidate = finished(workspace, harness, version), finished(workspace, harness, version)
    calls = []
    real = compare.bootstrap_ci
    monkeypatch.setattr(compare, "bootstrap_ci", lambda diffs, **kw: calls.append(1) or real(diffs, **kw))
    comparison = services.comparison_create(actor=SYSTEM, baseline=baseline, candidate=candidate,
                                            gate={"min_cases": 2})
    compared = [name for name in comparison.metrics if not name.startswith("_")]
    assert len(calls) == len(compared) and {"accuracy", "effectiveness"} <= set(compared)
    assert comparison.verdict == "pass", comparison.reasons


def test_a_run_leaves_the_garbage_collector_as_it_found_it(workspace, harness, scripted):
    """A run freezes what the process holds for its length and unfreezes after; in a web process (embedded mode
    runs jobs there) start-up is frozen already (console.asgi), and the run must not release that."""
    import gc

    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                         seed=6, n=3)
    already = gc.get_freeze_count()
    gc.freeze()  # as a web process's start-up left it
    try:
        assert services.run_execute(run_id=make_run(workspace, harness, version).pk) == "done"
        assert gc.get_freeze_count() >= already and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert services.run_execute(run_id=make_run(workspace, harness, version).pk) == "done"
    assert gc.get_freeze_count() == 0  # nothing was frozen before: the run's own freeze is gone
