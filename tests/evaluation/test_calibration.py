"""Human calibration: several annotators label cases in the console; the agreement page compares the judge."""

import pytest

from evaluation import services
from evaluation.calibration import agreement_report, annotation_queue
from evaluation.models import Annotation
from tests.conftest import make_user
from workspaces.access import Actor
from workspaces.models import Membership, Role

pytestmark = pytest.mark.django_db


def test_annotation_queue_and_agreement(client, workspace, harness, members, settings):
    settings.MODEL_BACKEND = "scripted"
    settings.SCRIPTED_STEPS = ["Thanks!"]
    version = services.eval_set_generate(actor=Actor.system("t"), workspace=workspace, name="cal",
                                         suite="live_stream_qa", seed=2, n=4)
    run = services.run_create(actor=Actor.system("t"), workspace=workspace, set_version=version, harness=harness,
                              version=harness.head, backend="scripted", start=False)
    services.run_execute(run_id=run.pk)
    results = list(run.results.order_by("id"))
    annotators = [members["operator"], members["approver"]]
    third = make_user("annotator3")
    Membership.objects.create(workspace=workspace, user=third, role=Role.OPERATOR)
    annotators.append(third)
    # Each annotator labels every case through the console; two agree with the judge, one always says 0.
    for n, user in enumerate(annotators):
        client.force_login(user)
        for _ in results:
            page = client.get("/w/acme/eval/annotate/")
            result = page.context["result"]
            label = 0 if n == 2 else int(result.accuracy)
            response = client.post("/w/acme/eval/annotate/", {"result": result.pk, "accuracy": label,
                                                              "effectiveness": "0" if n == 2 else "1"})
            assert response.status_code == 302
        assert annotation_queue(workspace, user).count() == 0  # everything labelled once by this user
    assert Annotation.objects.count() == 3 * len(results)
    again = client.post("/w/acme/eval/annotate/", {"result": results[0].pk, "accuracy": 1, "effectiveness": "1"})
    assert again.status_code == 302 and Annotation.objects.count() == 3 * len(results)  # no double label

    report = agreement_report(workspace)
    accuracy = next(r for r in report["rows"] if r.metric == "accuracy")
    assert accuracy.n == len(results) and accuracy.judge_version == "reference/v1"
    assert accuracy.percent == 1.0  # the majority (two of three annotators) agrees with the judge everywhere
    assert report["inter_annotator"]["accuracy"] is None or report["inter_annotator"]["accuracy"] <= 1
    page = client.get("/w/acme/eval/agreement/").content.decode()
    assert "reference/v1" in page and "Cohen" in page
