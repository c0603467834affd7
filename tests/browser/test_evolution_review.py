"""The review flow in headless Chromium against Daphne and a real worker: ask for a diagnosis from the run page
(its split chosen there), read clusters, accept one proposal, reject one with a reason, make the candidate (off
the head), launch its eval, see the gate on the gate split beside the diagnosis split, promote the candidate from
the round page, and on the history page keep the best round by pointing a label at it."""

import json
import threading

import pytest
from django.db import connection
from playwright.sync_api import expect

from evaluation import services as eval_services
from evaluation.evolution.models import Proposal, Round
from evaluation.models import EvalRun
from harness.models import Harness, Label
from tests.live_servers import (
    child_env,
    log_in,
    requires_services,
    start_daphne,
    start_worker,
    stop,
)
from workspaces.access import Actor

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), requires_services]


def test_review_queue_accept_reject_candidate_and_eval(page, settings, workspace, harness, members,
                                                        purge_queue_fixture):
    settings.SCRIPTED_STEPS = json.loads(child_env()["HARNESSOPS_SCRIPTED_STEPS"])
    system = Actor.system("test")
    version = eval_services.eval_set_generate(actor=system, workspace=workspace, name="dev", suite="live_stream_qa",
                                              seed=3, n=12)
    run = eval_services.run_create(actor=system, workspace=workspace, set_version=version, harness=harness,
                                   version=harness.head, backend="scripted", concurrency=2, start=False)
    # Off the browser's event loop: the run publishes progress through async_to_sync.
    def execute():
        try:
            eval_services.run_execute(run_id=run.pk)
        finally:
            connection.close()  # the thread's own connection, or the test database cannot be dropped

    finished = threading.Thread(target=execute)
    finished.start()
    finished.join()
    assert EvalRun.objects.get(pk=run.pk).status == "done"
    daphne, base = start_daphne()
    # Twelve cases split in two are too few for the default gate (30 cases): this deployment relaxes it, as an
    # operator with a small eval set would, so the walk can reach the promotion.
    worker = start_worker(HARNESSOPS_EVOLUTION_GATE=json.dumps({"min_cases": 2, "max_drop": 1.0,
                                                                "max_safety_net_share": 1.0}))
    try:
        log_in(page, base, members["operator"])
        page.goto(f"{base}/w/acme/eval/runs/{run.pk}/")
        page.fill("#split-seed", "7")
        page.click("#diagnose")
        page.wait_for_url("**/evolution/diagnoses/*/")
        # The page polls while the job runs, then reloads with the clusters.
        expect(page.locator("#status strong[data-status=done]")).to_be_visible(timeout=90_000)
        expect(page.locator("#advice")).to_contain_text("rule:")
        expect(page.locator("#split")).to_contain_text("seed 7")
        expect(page.locator("section.cluster").first).to_be_visible()
        proposals = page.locator(".proposal[data-status=pending]")
        assert proposals.count() >= 2
        first_id = proposals.nth(0).get_attribute("id")
        second_id = proposals.nth(1).get_attribute("id")
        expect(page.locator(f"#{first_id} .diff .add").first).to_be_visible()  # the diff, highlighted

        page.locator(f"#{first_id} button.accept").click()
        expect(page.locator(f"#{first_id} .proposal-status")).to_have_text("accepted")
        page.locator(f"#{second_id} input[name=reason]").fill("adds <b>too</b> many triggers")
        page.locator(f"#{second_id} form.reject button").click()
        expect(page.locator(f"#{second_id} .proposal-status")).to_have_text("rejected")
        expect(page.locator(f"#{second_id}")).to_contain_text("adds <b>too</b> many triggers")  # escaped text

        page.click("#make-round")  # offered as soon as an edit is accepted, without a reload
        expect(page.locator("#round")).to_contain_text("author ai:evolution (rules:")
        expect(page.locator("#round")).to_contain_text("approved by operator")
        expect(page.locator("#off-head")).to_be_visible()
        page.click("#evaluate")
        expect(page.locator("#round-run")).to_be_visible()
        expect(page.locator("#gate")).to_be_visible(timeout=120_000)  # polled until the gate is in
        expect(page.locator("#gate-metrics")).to_contain_text("McNemar p")
        expect(page.locator("#gate")).to_contain_text("gate split (seed 7)")
        expect(page.locator("#split-figures tr[data-split=gate]")).to_be_visible()
        expect(page.locator("#split-figures tr[data-split=diagnosis]")).to_be_visible()
        page.click("#promote")
        expect(page.locator("#promotion")).to_contain_text("Promoted")
        assert Harness.objects.get(pk=harness.pk).head.number == 2

        # The history page, reached by clicking: both charts are drawn by Chart.js.
        page.click("text=Evolution history")
        expect(page.locator("#clusters-chart")).to_be_visible()
        assert page.evaluate("Chart.getChart(document.getElementById('clusters-chart')).data.datasets.length") >= 2
        assert page.evaluate("Chart.getChart(document.getElementById('rounds-chart')).data.labels") == ["v1", "v2"]
        expect(page.locator("#best-round")).to_contain_text("Best so far on the gate split")
        page.locator("#best-round input[name=label]").fill("staging")
        page.click("#keep-best")
        expect(page.locator("body")).to_contain_text("staging points at v")
        assert Label.objects.filter(harness=harness, name="staging").exists()
    finally:
        stop(worker)
        stop(daphne)
    accepted = Proposal.objects.get(pk=int(first_id.split("-")[1]))
    rejected = Proposal.objects.get(pk=int(second_id.split("-")[1]))
    assert accepted.status == "accepted" and rejected.reason == "adds <b>too</b> many triggers"
    evolution_round = Round.objects.get()
    assert evolution_round.status == "gated" and EvalRun.objects.get(pk=evolution_round.run_id).status == "done"
