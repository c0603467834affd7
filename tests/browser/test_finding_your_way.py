"""From a run page an operator reaches compare, annotate and agreement by clicking, not by typing URLs."""

import pytest
from django.urls import reverse

from evaluation.models import EvalCase, EvalResult, EvalRun, EvalSet, EvalSetVersion
from tests.live_servers import log_in, requires_services, start_daphne, stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, requires_services]


def two_runs(workspace, harness) -> tuple[EvalRun, EvalRun]:
    eval_set = EvalSet.objects.create(workspace=workspace, name="smoke", suite="ifeval")
    set_version = EvalSetVersion.objects.create(eval_set=eval_set, number=1, source="test", case_count=1)
    case = EvalCase.objects.create(set_version=set_version, case_id="c1", category="format",
                                   data={"key": 1, "prompt": "p", "category": "format"})
    runs = []
    for accuracy in (1, 0):
        run = EvalRun.objects.create(workspace=workspace, set_version=set_version, harness=harness,
                                     harness_version=harness.head, backend="scripted", total=1, status="done")
        EvalResult.objects.create(run=run, case=case, category="format", accuracy=accuracy, effectiveness=accuracy,
                                  reasons=[], judge_version="j", outcome="replied", latency_ms=1, reply="hi",
                                  trace={"steps": []})
        runs.append(run)
    return runs[0], runs[1]


def test_compare_annotate_and_agreement_are_reached_by_clicking(page, workspace, harness, members):
    baseline, candidate = two_runs(workspace, harness)
    daphne, base = start_daphne()
    try:
        log_in(page, base, members["admin"])
        page.goto(base + reverse("evaluation_home", kwargs={"ws": workspace.slug}))
        page.click(f"text=#{baseline.pk}")
        page.wait_for_url(f"**/eval/runs/{baseline.pk}/")

        # Compare with…: only the other run of the same set version is offered; the pair arrives preselected.
        assert page.locator("#compare-with select[name=candidate] option").all_inner_texts() == [
            f"#{candidate.pk} avatar@v1 · scripted"]
        page.click("#compare-with button")
        page.wait_for_url("**/eval/compare/?*")
        assert page.input_value("select[name=baseline]") == str(baseline.pk)
        assert page.input_value("select[name=candidate]") == str(candidate.pk)
        page.click("button:has-text('Compare')")
        page.wait_for_selector("#gate")
        assert f"run #{baseline.pk} → run #{candidate.pk}" in page.inner_text("#gate")

        page.go_back()
        page.go_back()
        page.wait_for_url(f"**/eval/runs/{baseline.pk}/")
        page.click("#annotate-link")
        page.wait_for_url("**/eval/annotate/")
        assert page.locator("h1").count() == 1

        page.goto(base + reverse("eval_run_detail", kwargs={"ws": workspace.slug, "run_id": baseline.pk}))
        page.click("#next-steps >> text=Judge–human agreement")
        page.wait_for_url("**/eval/agreement/")

        # The Evaluation home links agreement too.
        page.goto(base + reverse("evaluation_home", kwargs={"ws": workspace.slug}))
        page.click("#agreement-link")
        page.wait_for_url("**/eval/agreement/")
    finally:
        stop(daphne)
