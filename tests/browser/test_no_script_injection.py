"""Script-bearing text in every user-supplied field, stored straight in the database (as older releases or a
careless script could): every page that shows it — server-rendered, swapped in by htmx, or drawn live from a
websocket — answers 200 and runs none of it."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from evaluation.models import EvalCase, EvalResult, EvalRun, EvalSet, EvalSetVersion
from harness import services as harness_services
from harness.models import Harness, Label, LabelMove
from serving.models import ApiKey, Arm, Experiment, Rollup, Room, Trace
from tests.live_servers import log_in, requires_services, start_daphne, stop
from workspaces.access import Actor
from workspaces.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, requires_services]

# Each sets window.__xss if it ever runs. Short enough for the narrowest columns (category: 40).
IMG = "<img src=x onerror=window.__xss=1>"
SCRIPT = "<script>window.__xss=1</script>"
SVG = "<svg onload=window.__xss=1>"
SYSTEM = Actor.system("test")


def plant(workspace, harness, demo_files) -> dict:
    """Bad text in every field a page shows, bypassing the validators on purpose."""
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    bad = harness_services.harness_create(actor=SYSTEM, workspace=workspace, name="tmp", files=demo_files,
                                          message=IMG + " commit message")
    Harness.objects.filter(pk=bad.pk).update(name=SCRIPT, description=SVG)  # a name with '/' in it, too
    label = Label.objects.create(harness=harness, name=IMG, version=harness.head)
    LabelMove.objects.create(label=label, to_version=harness.head, actor_kind="user", actor_label=SVG,
                             reason=SCRIPT + " label note")

    eval_set = EvalSet.objects.create(workspace=workspace, name=SCRIPT, suite="ifeval", description=IMG)
    set_version = EvalSetVersion.objects.create(eval_set=eval_set, number=1, source=SVG, case_count=1,
                                                created_by=IMG)
    case = EvalCase.objects.create(set_version=set_version, case_id=SVG, category=IMG,
                                   data={"key": 1, "prompt": IMG, "message": SCRIPT, "category": IMG})
    run = EvalRun.objects.create(workspace=workspace, set_version=set_version, harness=harness,
                                 harness_version=harness.head, backend="scripted", total=1, created_by=IMG,
                                 status="done", error=SCRIPT)
    result = EvalResult.objects.create(run=run, case=case, category=IMG, accuracy=0, effectiveness=0,
                                       reasons=[SCRIPT], judge_version="j", outcome="replied", latency_ms=1,
                                       reply=IMG, trace={"steps": [{"kind": "model", "at_ms": 1, "content": SVG}]})

    experiment = Experiment.objects.create(workspace=workspace, key=IMG, seed="s", harness=harness, created_by=SVG,
                                           status="stopped", stop_reason=SCRIPT + IMG, started_at=timezone.now())
    arms = [Arm.objects.create(experiment=experiment, index=0, name=SCRIPT, weight=0.5, kind="react"),
            Arm.objects.create(experiment=experiment, index=1, name=SVG, weight=0.5, kind="label", label=IMG)]
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=3)
    for minute in range(3):  # enough buckets for the uplift chart, which labels each line with its arm
        for arm, views in zip(arms, (2, 3), strict=True):
            Rollup.objects.create(experiment=experiment, arm=arm, bucket=start + timedelta(minutes=minute), users=5,
                                  sum_y=5 * views, sum_y2=5 * views * views)

    trace = Trace.objects.create(workspace=workspace, trace_id="t-xss", room_id=IMG, viewer_id=SVG, harness=harness,
                                 harness_version=harness.head, arm=f"exp:{IMG}:{SVG}", backend="scripted",
                                 outcome="replied", message=IMG, reply=SCRIPT, latency_ms=5, hooks_fired=[SVG],
                                 data={"trace_id": "t-xss", "outcome": "replied", "hooks_fired": [SVG],
                                       "steps": [{"kind": "tool", "at_ms": 1, "name": IMG, "arguments": {"q": SVG},
                                                  "result": SCRIPT}]},
                                 created_at=timezone.now())
    ApiKey.objects.create(workspace=workspace, name=IMG, prefix="deadbeef", secret_hash="0" * 64, scopes=["read"],
                          created_by=SCRIPT)
    Room.objects.create(workspace=workspace, room_id="demo-room", title=IMG, harness=harness,
                        context={"room_id": "demo-room", "title": IMG, "currency": "$", "products": [], "faq": [],
                                 "promotions": [], "orders": []})
    AuditEvent.objects.create(workspace=workspace, actor_kind="user", actor_label=SVG, action="harness.create",
                              target_type="harness", target_label=SCRIPT, after={"name": IMG})
    return {"bad_harness": SCRIPT, "eval_set": SCRIPT, "run": run, "result": result, "experiment": experiment,
            "trace": trace}


def test_no_stored_text_runs_as_script(page, workspace, harness, members, demo_files):
    planted = plant(workspace, harness, demo_files)
    ws = workspace.slug
    run, result = planted["run"], planted["result"]
    pages = [
        reverse("harness_list", kwargs={"ws": ws}),
        reverse("harness_detail", kwargs={"ws": ws, "name": "avatar"}),
        reverse("harness_detail", kwargs={"ws": ws, "name": SCRIPT}),
        reverse("version_detail", kwargs={"ws": ws, "name": SCRIPT, "number": 1}),
        reverse("version_diff", kwargs={"ws": ws, "name": SCRIPT}),
        reverse("evaluation_home", kwargs={"ws": ws}),
        reverse("eval_set_detail", kwargs={"ws": ws, "name": SCRIPT, "number": 1}) + "?category=" + IMG,
        reverse("eval_result_detail", kwargs={"ws": ws, "run_id": run.pk, "result_id": result.pk}),
        reverse("annotate", kwargs={"ws": ws}),
        reverse("eval_compare", kwargs={"ws": ws}),
        reverse("experiment_list", kwargs={"ws": ws}),
        reverse("trace_list", kwargs={"ws": ws}),
        reverse("trace_detail", kwargs={"ws": ws, "trace_id": "t-xss"}),
        reverse("audit_log", kwargs={"ws": ws}),
        reverse("key_list", kwargs={"ws": ws}),
        reverse("member_list", kwargs={"ws": ws}),
    ]
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    daphne, base = start_daphne()
    try:
        log_in(page, base, members["admin"])

        def nothing_ran(where: str) -> None:
            page.wait_for_load_state("networkidle")  # let any injected <img> fail and fire its handler
            page.wait_for_timeout(300)
            assert page.evaluate("window.__xss") is None, f"script ran on {where}"

        def visit(path: str) -> None:
            response = page.goto(base + path)
            assert response.status == 200, f"{path} answered {response.status}"
            nothing_ran(path)

        for path in pages:
            visit(path)
        page.goto(base + pages[0])
        assert SCRIPT in page.inner_text("body")  # shown, as text

        # Live pages: drawn by script from a websocket snapshot (arm names, categories, stop reason).
        visit(reverse("eval_run_detail", kwargs={"ws": ws, "run_id": run.pk}))
        page.wait_for_function("Number(document.getElementById('progress').dataset.updates) >= 1")
        assert IMG in page.inner_text("#summary")
        nothing_ran("the run page after its live update")
        visit(reverse("experiment_detail", kwargs={"ws": ws, "key": IMG}))
        page.wait_for_function("Number(document.getElementById('decision').dataset.updates) >= 2")
        assert SCRIPT in page.inner_text("#metrics") and SVG in page.inner_text("#guardrails")
        # The charts are canvases (Chart.js): a stored name is drawn as pixels, never parsed as markup.
        assert IMG in page.inner_text("#banner") and SVG in page.inner_text("#decision")
        nothing_ran("the experiment dashboard after its live update")

        # The playground swaps a server-rendered turn in with htmx.
        visit(reverse("playground", kwargs={"ws": ws}))
        page.select_option("select[name=harness]", "avatar")
        page.select_option("select[name=backend]", "scripted")
        page.fill("input[name=message]", IMG + SCRIPT)
        page.fill("input[name=viewer_id]", "v1")
        page.click("#send")
        page.wait_for_selector(".turn")
        assert IMG + SCRIPT in page.inner_text(".turn")
        nothing_ran("the playground after the htmx swap")
        visit(reverse("trace_list", kwargs={"ws": ws}))  # now with the playground's trace as well

        assert page.evaluate("window.__xss") is None and dialogs == []
    finally:
        stop(daphne)
