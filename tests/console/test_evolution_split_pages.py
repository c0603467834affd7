"""Evolution pages for splits and judge-suspect clusters as an operator meets them: the run page's diagnose form
refuses a bad seed or an unknown gate set in words and stores nothing; a judge-suspect cluster offers its cases
to label or fix, and the annotation page opens the chosen case."""

import pytest
from django.urls import reverse

from evaluation.evolution.models import Cluster, Diagnosis
from evaluation.models import EvalCase, EvalResult, EvalRun, EvalSet, EvalSetVersion

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client, members, harness):
    client.force_login(members["operator"])
    return client


@pytest.fixture
def run(workspace, harness):
    qa = EvalSet.objects.create(workspace=workspace, name="qa", suite="live_stream_qa")
    set_version = EvalSetVersion.objects.create(eval_set=qa, number=1, source="t", case_count=4)
    done = EvalRun.objects.create(workspace=workspace, set_version=set_version, harness=harness,
                                  harness_version=harness.head, backend="scripted", status="done", total=4)
    for i in range(4):
        case = EvalCase.objects.create(set_version=set_version, case_id=f"c{i}", category="product_qa",
                                       data={"message": f"price {i}?"})
        EvalResult.objects.create(run=done, case=case, category="product_qa", accuracy=0, effectiveness=0,
                                  judge_version="vote(a,b)", outcome="replied", latency_ms=1, reply="hi",
                                  trace={"judge_votes": [{"judge": "a", "accuracy": 0}, {"judge": "b", "accuracy": 1}]})
    return done


def test_the_diagnose_form_refuses_bad_split_input_in_words(operator, run):
    url = reverse("evolution_diagnose", kwargs={"ws": "acme", "run_id": run.pk})
    for form, words in (({"seed": "abc"}, "split seed must be a whole number"),
                        ({"gate_share": "x"}, "gate share must be a percentage"),
                        ({"gate_share": "99"}, "gate share must be between"),
                        ({"gate_set": "nope@v1"}, "No eval set version")):
        page = operator.post(url, form, follow=True).content.decode()
        assert words in page, (form, page[:300])
    assert not Diagnosis.objects.exists()
    operator.post(url, {"seed": "9", "gate_share": "25"})
    split = Diagnosis.objects.get().split
    assert split["kind"] == "seeded" and split["seed"] == 9 and split["gate_share"] == 0.25
    assert len(split["gate_case_ids"]) == 1 and len(split["diagnosis_case_ids"]) == 3


def test_a_judge_suspect_cluster_links_its_cases_to_label_or_fix(operator, workspace, harness, run):
    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head, run=run,
                                         created_by="t", status="done", summary={"total": 4, "failures": 4})
    Cluster.objects.create(diagnosis=diagnosis, cluster_id="c-1", rank=1, title="inaccurate", core="x", size=4,
                           share=1, accuracy_lost=1, effectiveness_lost=1, judge_suspect=True,
                           data={"case_ids": ["c0", "c1", "c2", "c3"], "suspect_reasons": ["the judges disagree"]})
    page = operator.get(reverse("diagnosis_detail", kwargs={"ws": "acme", "diagnosis_id": diagnosis.pk})).content.decode()
    results = {r.case.case_id: r.pk for r in EvalResult.objects.filter(run=run).select_related("case")}
    for pk in results.values():
        assert f'href="/w/acme/eval/annotate/?result={pk}"' in page
    assert "fix it in qa@v1" in page and "No harness edit is proposed" in page
    annotate = operator.get(f"/w/acme/eval/annotate/?result={results['c2']}").content.decode()
    assert "c2 · product_qa" in annotate
