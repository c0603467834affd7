"""Charts in Chromium: Chart.js draws them on a canvas when there is data, and an explicit "not enough data"
state takes their place when there is not (run history, scores per category, latency distributions, the
experiment's change, uplift over time and latency per arm)."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from evaluation.models import EvalCase, EvalResult, EvalRun, EvalSet, EvalSetVersion
from serving.experiments.lifecycle import experiment_arm_label
from serving.models import Arm, Experiment, Rollup, Trace
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def viewer_page(live_server, page, members):
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "viewer")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    yield page, live_server.url
    assert errors == []


def expect_drawn(page, canvas_id: str) -> None:
    canvas = page.locator(f"#{canvas_id}")
    expect(canvas).to_have_attribute("data-state", "drawn")
    expect(canvas).to_be_visible()
    box = canvas.bounding_box()
    assert box["width"] > 100 and box["height"] > 100
    assert int(canvas.get_attribute("data-points")) > 0
    assert page.evaluate(f"Chart.getChart(document.getElementById('{canvas_id}')) !== undefined")
    figure = canvas.locator("xpath=ancestor::figure[1]")
    expect(figure.locator(".chart-empty")).to_be_hidden()


def expect_empty(page, canvas_id: str) -> None:
    canvas = page.locator(f"#{canvas_id}")
    expect(canvas).to_have_attribute("data-state", "empty")
    expect(canvas).to_be_hidden()
    empty = canvas.locator("xpath=ancestor::figure[1]").locator(".chart-empty")
    expect(empty).to_be_visible()
    expect(empty).to_contain_text("Not enough data yet")


def make_run(workspace, harness, set_version, *, accuracy: float, status="done", results=()) -> EvalRun:
    now = timezone.now()
    run = EvalRun.objects.create(workspace=workspace, set_version=set_version, harness=harness,
                                 harness_version=harness.head, backend="scripted", total=len(results) or 2,
                                 created_by="t", status=status, started_at=now, finished_at=now if status == "done" else None,
                                 summary={"overall": {"n": 2, "accuracy": accuracy, "effectiveness": accuracy / 2}})
    for case, category, score, latency, outcome in results:
        EvalResult.objects.create(run=run, case=case, category=category, accuracy=score, effectiveness=score,
                                  judge_version="j", outcome=outcome, latency_ms=latency, reply="ok", trace={})
    return run


def test_evaluation_charts_and_their_empty_states(viewer_page, workspace, harness):
    page, base = viewer_page
    page.goto(f"{base}/w/acme/eval/")
    expect_empty(page, "chart-history")

    eval_set = EvalSet.objects.create(workspace=workspace, name="lsqa", suite="lsqa")
    set_version = EvalSetVersion.objects.create(eval_set=eval_set, number=1, source="t", case_count=3, created_by="t")
    cases = [EvalCase.objects.create(set_version=set_version, case_id=f"c{i}", category=c, data={})
             for i, c in enumerate(["product_qa", "product_qa", "chit_chat"])]
    queued = make_run(workspace, harness, set_version, accuracy=0.5, status="queued")
    page.goto(f"{base}/w/acme/eval/runs/{queued.pk}/")
    expect_empty(page, "chart-categories")
    expect_empty(page, "chart-latency")

    first = make_run(workspace, harness, set_version, accuracy=0.6)
    page.goto(f"{base}/w/acme/eval/")
    expect_empty(page, "chart-history")  # one finished run is not a history
    run = make_run(workspace, harness, set_version, accuracy=0.8, results=[
        (cases[0], "product_qa", 1, 900, "replied"), (cases[1], "product_qa", 0, 15500, "deadline"),
        (cases[2], "chit_chat", 1, 300, "replied")])
    page.goto(f"{base}/w/acme/eval/")
    expect_drawn(page, "chart-history")
    labels = page.evaluate("Chart.getChart(document.getElementById('chart-history')).data.labels")
    assert labels == [f"#{first.pk}", f"#{run.pk}"]

    page.goto(f"{base}/w/acme/eval/runs/{run.pk}/")
    expect_drawn(page, "chart-categories")
    expect_drawn(page, "chart-latency")
    chart = page.evaluate("""(() => { const c = Chart.getChart(document.getElementById('chart-latency'));
        return {labels: c.data.labels, sets: c.data.datasets.map((d) => [d.label, d.data]),
                y: c.options.scales.y.title.text}; })()""")
    assert chart["labels"][0] == "< 250 ms" and chart["labels"][-1] == "≥ 15 s" and chart["y"] == "cases"
    sets = dict(chart["sets"])
    assert sum(sets["replied"]) == 2 and sets["deadline"][-1] == 1
    categories = page.evaluate("Chart.getChart(document.getElementById('chart-categories')).data.labels")
    assert sorted(categories) == ["chit_chat", "product_qa"]


def test_experiment_charts_and_their_empty_states(viewer_page, workspace, harness):
    page, base = viewer_page
    started = timezone.now() - timedelta(minutes=10)
    experiment = Experiment.objects.create(workspace=workspace, key="greeting", seed="s", harness=harness,
                                           created_by="t", status="running", started_at=started)
    arms = [Arm.objects.create(experiment=experiment, index=0, name="control", weight=0.5, kind="react"),
            Arm.objects.create(experiment=experiment, index=1, name="treatment", weight=0.5, kind="label",
                               label="production")]
    page.goto(f"{base}/w/acme/experiments/greeting/")
    for canvas in ("chart-interval", "chart-uplift", "chart-latency"):
        expect_empty(page, canvas)

    bucket = started.replace(second=0, microsecond=0)
    for minute in range(3):
        for arm, mean in zip(arms, (2.0, 2.2), strict=True):
            Rollup.objects.create(experiment=experiment, arm=arm, bucket=bucket + timedelta(minutes=minute), users=300,
                                  sum_y=300 * mean, sum_y2=300 * (mean * mean + 1))
    for i, (arm, latency) in enumerate([(arms[0], 800), (arms[0], 1200), (arms[1], 600), (arms[1], 16000)]):
        Trace.objects.create(workspace=workspace, trace_id=f"t{i}", room_id="r", viewer_id=f"v{i}", harness=harness,
                             harness_version=harness.head, arm=experiment_arm_label("greeting", arm.name),
                             backend="scripted", outcome="replied", message="hi", reply="hello", latency_ms=latency,
                             data={}, created_at=timezone.now())
    page.goto(f"{base}/w/acme/experiments/greeting/")
    for canvas in ("chart-interval", "chart-uplift", "chart-latency"):
        expect_drawn(page, canvas)
    uplift = page.evaluate("""(() => { const c = Chart.getChart(document.getElementById('chart-uplift'));
        return {labels: c.data.labels.length, data: c.data.datasets.map((d) => [d.label, d.data]),
                y: c.options.scales.y.title.text}; })()""")
    assert uplift["labels"] == 3 and uplift["y"] == "uplift vs control (%)"
    [(label, values)] = uplift["data"]
    assert label == "treatment" and values[-1] == pytest.approx(10.0)
    latency = page.evaluate("""Chart.getChart(document.getElementById('chart-latency')).data.datasets
        .map((d) => [d.label, d.data])""")
    assert latency[0][0] == "control (2 replies)" and sum(latency[0][1]) == pytest.approx(100)
    assert latency[1][1][-1] == pytest.approx(50)  # half of the treatment's replies past the 15 s deadline


def test_tokens_a_turn_per_version_and_per_arm(viewer_page, workspace, harness):
    page, base = viewer_page
    page.goto(f"{base}/w/acme/harnesses/avatar/")
    expect_empty(page, "chart-usage")
    experiment = Experiment.objects.create(workspace=workspace, key="tokens", seed="s", harness=harness,
                                           created_by="t", status="running", started_at=timezone.now() - timedelta(minutes=5))
    arms = [Arm.objects.create(experiment=experiment, index=0, name="control", weight=0.5, kind="react"),
            Arm.objects.create(experiment=experiment, index=1, name="treatment", weight=0.5, kind="label",
                               label="production")]
    for i, (arm, prompt) in enumerate([(arms[0], 900), (arms[0], 1100), (arms[1], 400), (arms[1], 600)]):
        Trace.objects.create(workspace=workspace, trace_id=f"k{i}", room_id="r", viewer_id=f"v{i}", harness=harness,
                             harness_version=harness.head, arm=experiment_arm_label("tokens", arm.name),
                             backend="scripted", outcome="replied", message="hi", reply="hello", latency_ms=500,
                             tokens_in=prompt, tokens_cached=prompt // 2, tokens_out=20, data={},
                             created_at=timezone.now())
    page.goto(f"{base}/w/acme/harnesses/avatar/")
    expect_drawn(page, "chart-usage")
    series = page.evaluate("""Chart.getChart(document.getElementById('chart-usage')).data.datasets
        .map((d) => [d.label, d.data])""")
    assert dict(series)["prompt P50"] == [750] and dict(series)["completion P95"] == [20]
    page.goto(f"{base}/w/acme/experiments/tokens/")
    table = page.locator("#guardrails")
    expect(table).to_contain_text("Prompt tokens P50 / P95")
    expect(table.locator("tr", has_text="control")).to_contain_text("1000 / 1090")
    expect(table.locator("tr", has_text="treatment")).to_contain_text("500 / 590")
