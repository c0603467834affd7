"""The training and evolution pages walked as a new operator would, in headless Chromium: every page reached by
clicking from the navigation, charts with axis titles and an empty state, the matrix's run table following its
runs without a reload, a refused matrix form keeping what was picked, and no text that reads like a Python
value on any of these pages."""

import re

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from evaluation.evolution.diagnosing import diagnosis_execute
from evaluation.evolution.models import Diagnosis
from evaluation.models import EvalCase, EvalResult, EvalRun, EvalSet, EvalSetVersion
from tests.browser.test_screens_stay_true import PYTHON_REPR, VISIBLE_TEXT, log_in
from tests.evaluation.evolution_builders import denied_link, passing, skill_missing
from training import services as training_services
from training.models import Checkpoint, CheckpointMatrix, TrainingJob, TrainingMetric
from workspaces.access import Actor

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SYSTEM = Actor.system("test")
SLOW = 60_000


def training_rows(workspace, harness):
    """A finished two-stage job with curves and checkpoints, a job that failed, and a matrix still queued."""
    done = TrainingJob.objects.create(
        workspace=workspace, name="hat-demo", base_model="smollm2-135m-instruct", stages=["sft", "opd"],
        config={"seed": 0}, status="done", stage="opd", stage_index=1, step=2, total_steps=2, attempts=1,
        created_by="operator", log_tail=["sft: kept 3 of 4 turns", "done: 2 checkpoint(s) registered"])
    done.harness_versions.add(harness.head)
    for step in (1, 2):
        TrainingMetric.objects.create(job=done, stage="sft", stage_index=0, step=step, total_steps=2,
                                      values={"loss": 3.0 - step, "learning_rate": 1e-5 * step})
        TrainingMetric.objects.create(job=done, stage="opd", stage_index=1, step=step, total_steps=2,
                                      values={"loss": 1.0 / step, "kl": 0.1 * step})
    sft = Checkpoint.objects.create(workspace=workspace, job=done, stage="sft", base_model="smollm2-135m-instruct",
                                    path="/ckpt/sft", metrics={"loss": 1.0}, harness_hashes=[harness.head.content_hash])
    opd = Checkpoint.objects.create(workspace=workspace, job=done, stage="opd", base_model="smollm2-135m-instruct",
                                    path="/ckpt/opd", parent=sft, metrics={"kl": 0.2},
                                    harness_hashes=[harness.head.content_hash])
    failed = TrainingJob.objects.create(
        workspace=workspace, name="hat-broken", base_model="smollm2-135m-instruct", stages=["sft"], config={},
        status="failed", attempts=1, created_by="operator",
        error=training_services.failure_sentence(KeyError("harnesses")))
    failed.harness_versions.add(harness.head)
    hv = EvalSet.objects.create(workspace=workspace, name="hv", suite="harness_variant")
    set_version = EvalSetVersion.objects.create(eval_set=hv, number=1, source="test", case_count=4)
    matrix = CheckpointMatrix.objects.create(workspace=workspace, set_version=set_version, created_by="operator")
    matrix.checkpoints.set([sft, opd])
    matrix.harness_versions.set([harness.head])
    matrix.runs.set([EvalRun.objects.create(workspace=workspace, set_version=set_version, harness=harness,
                                            harness_version=harness.head, backend=c.backend_name, status="queued",
                                            created_by="operator") for c in (sft, opd)])
    return done, failed, matrix


def diagnosed_run(workspace, harness) -> tuple[EvalRun, Diagnosis]:
    """A finished eval run whose failures form clusters, and its finished diagnosis."""
    qa = EvalSet.objects.create(workspace=workspace, name="dev", suite="live_stream_qa")
    set_version = EvalSetVersion.objects.create(eval_set=qa, number=1, source="test", case_count=8)
    run = EvalRun.objects.create(workspace=workspace, set_version=set_version, harness=harness,
                                 harness_version=harness.head, backend="scripted", status="done", total=8,
                                 created_by="operator", summary={"overall": {"n": 8, "accuracy": 0.25}})
    records = [*(skill_missing(i) for i in range(3)), *(denied_link(i) for i in range(3)), passing(0), passing(1)]
    for record in records:
        case = EvalCase.objects.create(set_version=set_version, case_id=record.case_id, category=record.category,
                                       data={"case_id": record.case_id, "category": record.category,
                                             "message": record.message,
                                             "expected": {"skills": list(record.expected_skills)}})
        EvalResult.objects.create(run=run, case=case, category=record.category, accuracy=record.accuracy,
                                  effectiveness=record.effectiveness, reasons=list(record.reasons),
                                  judge_version="reference", outcome=record.trace.get("outcome", "replied"),
                                  latency_ms=10, reply=record.reply, trace=record.trace)
    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head, run=run,
                                         created_by="operator", config={"proposer": None})
    assert diagnosis_execute(diagnosis_id=diagnosis.pk) == "done"
    assert diagnosis.proposals.filter(valid=True, status="pending").exists()  # the rules propose an edit
    return run, diagnosis


def no_python_on(page) -> None:
    text = page.evaluate(VISIBLE_TEXT)
    found = PYTHON_REPR.search(text)
    assert found is None, f"{page.url}: …{text[max(0, found.start() - 100):found.end() + 100]}…"


def y_title(page, canvas: str) -> str:
    return page.evaluate(f"Chart.getChart(document.getElementById('{canvas}')).options.scales.y.title.text")


@pytest.fixture
def patient(page):
    """Longer waits than the default five seconds: the browser shares two busy cores in CI."""
    page.set_default_timeout(SLOW)
    expect.set_options(timeout=SLOW)
    yield page
    expect.set_options(timeout=None)  # back to the default


def test_training_and_evolution_pages_by_clicking(live_server, patient, workspace, members, harness):
    page = patient
    done, failed, matrix = training_rows(workspace, harness)
    run, diagnosis = diagnosed_run(workspace, harness)
    log_in(page, live_server.url, "operator")  # this server hashes like the test process

    # Training: from the navigation to the job list, a finished job's curves, a failed job's reason.
    page.click("nav >> text=Training")
    expect(page.locator("h1")).to_have_text("Training")
    no_python_on(page)
    page.click(f"#jobs >> text=#{done.pk} hat-demo")
    expect(page.locator("#status")).to_have_text("done")
    expect(page.locator("#checkpoints tr")).to_have_count(3)  # header + the two checkpoints
    for canvas, title in (("chart-loss", "loss"), ("chart-kl", "KL divergence"), ("chart-lr", "learning rate"),
                          ("chart-rewards", "reward (mean per step)")):
        assert y_title(page, canvas) == title
        assert page.evaluate(f"Chart.getChart(document.getElementById('{canvas}')).options.scales.x.title.text") \
            == "step (all stages)"
    expect(page.locator("#chart-loss ~ .empty")).to_be_hidden()
    expect(page.locator("#chart-rewards ~ .empty")).to_be_visible()  # no RL stage: says so instead of blank axes
    no_python_on(page)
    page.go_back()
    page.click(f"#jobs >> text=#{failed.pk} hat-broken")
    expect(page.locator("#error")).to_contain_text("unexpected error")
    no_python_on(page)

    # The matrix: nothing finished yet says so; a run finishing updates the heat map and the run table.
    page.click("nav >> text=Training")
    page.click(f"a[href$='/training/matrix/{matrix.pk}/']")
    expect(page.locator("#matrix-empty")).to_contain_text("Not enough data yet")
    expect(page.locator("#runs")).to_contain_text("queued")
    no_python_on(page)
    page.evaluate("window.__sameDocument = true")
    first = matrix.runs.order_by("pk").first()
    EvalRun.objects.filter(pk=first.pk).update(status="done", summary={"overall": {"n": 4, "accuracy": 0.75}})
    row = page.locator("#runs tr", has_text=f"#{first.pk}")
    expect(row).to_contain_text("done")
    expect(row).to_contain_text("0.750")
    expect(page.locator("#cells")).to_contain_text("0.750")
    expect(page.locator("#matrix-empty")).to_have_count(0)
    expect(page.locator("#chart-matrix")).to_have_attribute("data-cells", "1")
    assert page.evaluate("window.__sameDocument") is True

    # A refused matrix form comes back with the checkpoint still picked and the reason in a sentence.
    page.click("nav >> text=Training")
    page.select_option("#new-matrix select[name=checkpoints]", [str(matrix.checkpoints.order_by("pk").last().pk)])
    page.click("#new-matrix button[type=submit]")
    expect(page.locator("#matrix-error")).to_have_text("No matrix started: Choose at least one harness version.")
    picked = page.eval_on_selector("#new-matrix select[name=checkpoints]",
                                   "s => [...s.selectedOptions].map(o => o.value)")
    assert picked == [str(matrix.checkpoints.order_by("pk").last().pk)]
    no_python_on(page)

    # Evolution: harness → Evolution → the diagnosis; and from the run page to the diagnosis made of it.
    page.click("nav >> text=Harnesses")
    page.click("main a[href$='/harnesses/avatar/']")
    page.click("#evolution-link")
    expect(page.locator("h1")).to_contain_text("Evolution history")
    expect(page.locator("#rounds-empty")).to_be_visible()  # no evaluated round: the chart says so
    no_python_on(page)
    page.click(f"text=#{diagnosis.pk} (v1, done)")
    expect(page.locator("#status strong[data-status=done]")).to_be_visible()
    expect(page.locator("section.cluster").first).to_be_visible()
    no_python_on(page)
    # Accepting an edit updates the candidate card too: it offers the candidate without a reload.
    proposal = diagnosis.proposals.filter(valid=True, status="pending").first()
    page.evaluate("window.__sameDocument = true")
    page.locator(f"#proposal-{proposal.pk} button.accept").click()
    expect(page.locator(f"#proposal-{proposal.pk} .proposal-status")).to_have_text("accepted")
    expect(page.locator("#make-round")).to_contain_text("from 1 accepted edit")
    assert page.evaluate("window.__sameDocument") is True
    page.click(f"a[href$='/eval/runs/{run.pk}/']")
    expect(page.locator("#run-diagnoses")).to_contain_text(f"diagnosis #{diagnosis.pk}")
    no_python_on(page)
    page.click(f"#run-diagnoses >> text=diagnosis #{diagnosis.pk}")
    expect(page).to_have_url(re.compile(reverse("diagnosis_detail", kwargs={"ws": "acme",
                                                                            "diagnosis_id": diagnosis.pk}) + "$"))
