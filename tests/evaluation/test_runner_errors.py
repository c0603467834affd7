"""The eval runner: one case whose evaluation raises is recorded as errored; the run goes on and finishes."""

import pytest

from evaluation import services
from evaluation.execution import ERRORED_REASON
from evaluation.judges import get_judge, register_judge
from workspaces.access import Actor

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")


def test_one_failing_case_is_recorded_as_errored_and_the_run_finishes(workspace, harness, settings):
    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = ["Thanks for asking! Let me check that for you."]
    version = services.eval_set_generate(actor=SYSTEM, workspace=workspace, name="lsqa", suite="live_stream_qa",
                                         seed=7, n=6)
    doomed = version.cases.order_by("id")[2].data["case_id"]
    reference = get_judge("reference")

    def flaky(case, trace):
        if case.case_id == doomed:
            raise RuntimeError("judge crashed on this case")
        return reference(case, trace)

    register_judge("test-flaky", flaky, replace=True)
    run = services.run_create(actor=SYSTEM, workspace=workspace, set_version=version, harness=harness,
                              version=harness.head, backend="scripted", judge="test-flaky", concurrency=3,
                              start=False)
    assert services.run_execute(run_id=run.pk) == "done"
    run.refresh_from_db()
    assert run.status == "done" and run.results.count() == 6 and run.summary["overall"]["n"] == 6
    errored = run.results.get(outcome="errored")
    assert errored.case.data["case_id"] == doomed
    assert (errored.accuracy, errored.effectiveness) == (0.0, 0.0)  # an error is never a success
    assert "RuntimeError: judge crashed on this case" in errored.trace["error"]  # for whoever debugs it
    assert errored.reasons == [ERRORED_REASON] and "RuntimeError" not in ERRORED_REASON  # the page says it in words
    assert run.error.startswith("1 of 6 case(s) errored")
    assert not run.results.exclude(pk=errored.pk).filter(outcome="errored").exists()
