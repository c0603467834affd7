"""Issue 14's console polish, page by page: no Python internals on screen, bad filter and form values reported,
trace filters that live in the URL, the prompt a trace sent, what each experiment arm runs, the model's state."""

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from evaluation.models import Annotation, EvalCase, EvalResult, EvalRun, EvalSet, EvalSetVersion
from harness import services as harness_services
from serving.experiments.lifecycle import experiment_create, experiment_start, experiment_stop
from serving.experiments.selectors import experiment_snapshot
from serving.models import Experiment, Trace
from serving.selectors import trace_sent_request
from tests.serving.test_reply_api import LOAD_AND_LOOK
from workspaces.access import Actor
from workspaces.models import AuditEvent

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")
# What a Python value printed as itself looks like on a page (after HTML escaping of the quotes).
REPR = re.compile(r"\{&#x27;|\[\(&#x27;|\{'|\[\('|Traceback|&lt;object |<object |ZERO_NEGATIVE_VARIANCE|invalid literal")


def no_internals(html: str) -> str:
    found = REPR.search(html)
    assert found is None, f"Python internals on the page: …{html[max(0, found.start() - 120):found.end() + 120]}…"
    return html


def send(client, message, version="label:production"):
    return client.post("/w/acme/playground/", {"harness": "avatar", "version": version, "backend": "scripted",
                                               "room": "demo-room", "viewer_id": "v1", "message": message},
                       HTTP_HX_REQUEST="true")


# Traces -----------------------------------------------------------------------------------------


def test_trace_version_filter_takes_a_label_vn_or_harness_at_vn(operator, settings, harness):
    settings.SCRIPTED_STEPS = [LOAD_AND_LOOK, "It is $71.2 now."]
    send(operator, "price?")
    files, v1_hash = dict(harness.head.files), harness.head.content_hash
    path = next(p for p in sorted(files) if p.endswith("SKILL.md"))
    harness_services.version_commit(actor=SYSTEM, harness=harness, files={**files, path: files[path] + "- x\n"},
                                    base_version=harness.head, message="v2")
    send(operator, "what about v2?", version="2")
    for value in ("production", "v1", "avatar@v1", "avatar@production", "avatar@1", f"avatar@{v1_hash[:10]}"):
        html = operator.get("/w/acme/traces/", {"version": value}).content.decode()
        assert "price?" in html and "what about v2?" not in html, value
    for value in ("v2", "avatar@v2", "avatar@2"):
        html = operator.get("/w/acme/traces/", {"version": value}).content.decode()
        assert "what about v2?" in html and "price?" not in html, value
    both = operator.get("/w/acme/traces/", {"version": "avatar"}).content.decode()
    assert "price?" in both and "what about v2?" in both


@pytest.mark.parametrize(("params", "message"), [
    ({"min_latency_ms": "abc"}, "Min latency: “abc” is not a number of milliseconds"),
    ({"min_latency_ms": "-5"}, "Min latency: “-5” is not a number"),
    ({"outcome": "exploded"}, "Outcome: “exploded” is not one of replied"),
    ({"source": "fax"}, "Source: “fax” is not one of api"),
    ({"version": "nonsense"}, "Version: “nonsense” is not a harness, a label, vN or harness@vN."),
    ({"version": "avatar@v9"}, "Version: avatar has no version 9."),
    ({"version": "ghost@v1"}, "Version: there is no harness named “ghost”."),
])
def test_bad_trace_filters_are_reported_not_dropped(operator, params, message):
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        response = operator.get("/w/acme/traces/", params, **headers)
        assert response.status_code == 422
        assert message in response.content.decode()


def test_trace_pagination_keeps_the_filters_and_the_url_is_the_state(operator, workspace, harness):
    Trace.objects.bulk_create([
        Trace(workspace=workspace, trace_id=f"t{i:03d}", source="api", room_id="demo-room", viewer_id="v",
              harness=harness, harness_version=harness.head, arm="label:production", backend="scripted",
              outcome="replied", message=f"m{i}", reply="r", latency_ms=10 + i, hooks_fired=[], data={},
              created_at=timezone.now()) for i in range(55)])
    page = operator.get("/w/acme/traces/", {"outcome": "replied", "min_latency_ms": "12"})
    html = page.content.decode()
    assert "53 trace(s) · page 1 of 2" in html
    older = re.search(r'id="older" href="([^"]+)"', html).group(1).replace("&amp;", "&")
    assert "outcome=replied" in older and "min_latency_ms=12" in older and "page=2" in older
    second = operator.get("/w/acme/traces/" + older).content.decode()
    assert "page 2 of 2" in second and 'value="12"' in second  # the form shows the filters it came with
    assert 'hx-push-url="true"' in html  # filtering by htmx updates the address bar too
    assert page["Vary"] and "HX-Request" in page["Vary"]
    fragment = operator.get("/w/acme/traces/", {"outcome": "replied"}, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in fragment
    restore = operator.get("/w/acme/traces/", {"outcome": "replied"}, HTTP_HX_REQUEST="true",
                           HTTP_HX_HISTORY_RESTORE_REQUEST="true").content.decode()
    assert "<html" in restore  # the back button after a cache miss gets the whole page


def test_the_trace_page_shows_the_exact_prompt_and_tool_schemas(operator, settings):
    settings.SCRIPTED_STEPS = [LOAD_AND_LOOK, "It is $71.2 now."]
    send(operator, "price of the sweater?")
    trace = Trace.objects.get()
    sent = trace_sent_request(trace)
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert "price of the sweater?" in sent["messages"][1]["content"]
    assert "get_product_info_by_link_id" in {t["function"]["name"] for t in sent["tools"]}
    html = no_internals(operator.get(f"/w/acme/traces/{trace.trace_id}/").content.decode())
    assert 'id="sent-tools"' in html and "Sent to the model" in html
    assert "Merino Crew-Neck Sweater" in html  # the room catalogue inside the system message
    assert "&quot;link_id&quot;" in html  # a tool's JSON schema, as JSON


# Playground -------------------------------------------------------------------------------------


def test_playground_says_which_model_answers_and_why_the_fallback_was_sent(operator, settings):
    settings.SCRIPTED_STEPS = ["Hi!", "Hi!", "Hi!"]  # never loads a reply skill: the hook rejects every reply
    page = no_internals(operator.get("/w/acme/playground/").content.decode())
    assert 'id="model-state"' in page and "a fixed script" in page and "no turns yet" in page
    turn = no_internals(send(operator, "hello").content.decode())
    assert "The hook require-reply-skill rejected the model&#x27;s reply 3 time(s)" in turn
    assert "fallback line was sent" in turn
    page = operator.get("/w/acme/playground/").content.decode()
    assert "output tokens/s of model time" in page and "(last 1 turn)" in page
    assert "viewer:" not in page.split('id="dialogue"')[1]  # the conversation is a table, not "role: text"


# Harness pages ----------------------------------------------------------------------------------


def test_hsa_preview_reports_a_bad_seed_and_shows_the_mapping_as_tables(operator):
    url = "/w/acme/harnesses/avatar/v/1/augment/"
    bad = operator.get(url, {"seed": "abc"})
    assert bad.status_code == 422 and "The seed must be a whole number; abc is not one." in bad.content.decode()
    unknown = operator.get(url, {"dimension": "colour", "seed": "1"})
    assert unknown.status_code == 422 and "Unknown dimension colour" in unknown.content.decode()
    good = no_internals(operator.get(url, {"seed": "7"}).content.decode())
    assert 'id="mapping"' in good and "Renamed skills" in good and 'id="operations"' in good


def test_version_page_has_a_table_of_contents_and_shows_hook_conditions(operator):
    html = no_internals(operator.get("/w/acme/harnesses/avatar/v/1/").content.decode())
    assert 'id="toc"' in html and 'href="#hooks"' in html and 'id="hooks"' in html and 'id="files"' in html
    assert "size(loaded_reply_skills) == 0" in html  # the CEL expression itself, not just "cel"
    assert "args.discount_pct &gt; vars.max_discount_pct" in html
    assert 'id="file-hooksrequire-reply-skillyaml"' in html and 'href="#file-hooksrequire-reply-skillyaml"' in html


def test_a_label_move_by_htmx_also_swaps_the_version_history(operator, harness):
    response = operator.post("/w/acme/harnesses/avatar/labels/move/",
                             {"label": "staging", "version": "1", "reason": "try"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and 'data-label="staging"' in html
    assert '<table id="history" hx-swap-oob="true">' in html
    history = html.split('<table id="history" hx-swap-oob="true">')[1]
    assert "staging" in history and "production" in history


def test_audit_log_shows_changes_as_a_table(operator):
    html = no_internals(operator.get("/w/acme/audit/").content.decode())
    assert AuditEvent.objects.filter(action="label.move").exists()
    assert 'class="values changes"' in html and "<th>reason</th>" in html


# Evaluation pages -------------------------------------------------------------------------------


@pytest.fixture
def judged_case(workspace, harness, members):
    eval_set = EvalSet.objects.create(workspace=workspace, name="qa", suite="live_stream_qa")
    version = EvalSetVersion.objects.create(eval_set=eval_set, number=1, source="test", case_count=1)
    data = {"case_id": "c1", "category": "price", "message": "how much?", "viewer_id": "v",
            "room": {"products": [{"link_id": "L1", "name": "Sweater", "price": 10, "specs": {"size": "M"}}]},
            "dialogue": [{"role": "viewer", "text": "hello"}, {"role": "assistant", "text": "hi there"}],
            "expected": {"silent": False, "facts": ["10"], "forbidden": ["free"], "skills": ["product-qa"],
                         "tools": [{"name": "get_product_info_by_link_id", "arguments": {"link_id": "L1"}}]}}
    case = EvalCase.objects.create(set_version=version, case_id="c1", category="price", data=data)
    run = EvalRun.objects.create(workspace=workspace, set_version=version, harness=harness,
                                 harness_version=harness.head, backend="scripted", total=1, status="done")
    result = EvalResult.objects.create(run=run, case=case, category="price", accuracy=1, effectiveness=1,
                                       reasons=[], judge_version="j1", outcome="replied", latency_ms=1,
                                       reply="It is 10.", trace={"steps": []})
    Annotation.objects.create(result=result, annotator=members["admin"], accuracy=0, effectiveness=0.5)
    return result


def test_expected_facts_dialogue_and_room_are_tables_and_sentences(operator, judged_case):
    run = judged_case.run
    result_page = no_internals(operator.get(
        reverse("eval_result_detail", kwargs={"ws": "acme", "run_id": run.pk, "result_id": judged_case.pk})
    ).content.decode())
    assert "A correct reply states: “10”" in result_page and "It must not claim: “free”" in result_page
    assert "get_product_info_by_link_id" in result_page and "<td>Avatar</td>" not in result_page
    assert "hi there" in result_page and ">Avatar<" in result_page
    annotate = no_internals(operator.get(reverse("annotate", kwargs={"ws": "acme"})).content.decode())
    assert "Sweater" in annotate and "<th>link_id</th>" in annotate and "viewer: hello" not in annotate
    set_page = no_internals(operator.get(reverse("eval_set_detail", kwargs={"ws": "acme", "name": "qa",
                                                                           "number": 1})).content.decode())
    assert "A correct reply states" in set_page
    bad = operator.get(reverse("eval_set_detail", kwargs={"ws": "acme", "name": "qa", "number": 1}),
                       {"category": "nope"})
    assert bad.status_code == 422 and "Category: “nope” is not in this set; it has price." in bad.content.decode()


def test_agreement_confusion_matrix_is_a_table(operator, judged_case):
    html = no_internals(operator.get(reverse("agreement", kwargs={"ws": "acme"})).content.decode())
    assert 'class="values confusion"' in html and "judge ↓ · human →" in html


@pytest.mark.parametrize(("form", "message"), [
    ({"name": "s", "suite": "live_stream_qa", "seed": "abc"}, "No set created: Seed: “abc” is not a whole number."),
    ({"name": "s", "suite": "live_stream_qa", "n": "lots"}, "Number of cases: “lots” is not a whole number."),
])
def test_bad_eval_form_values_are_reported_not_coerced(operator, form, message):
    response = operator.post(reverse("eval_set_create", kwargs={"ws": "acme"}), form, follow=True)
    assert message in response.content.decode()
    assert not EvalSet.objects.exists()


def test_bad_annotation_and_compare_values_are_reported(operator, judged_case):
    response = operator.post(reverse("annotate", kwargs={"ws": "acme"}),
                             {"result": judged_case.pk, "accuracy": "x", "effectiveness": "1"}, follow=True)
    assert "Accuracy: “x” is not a whole number." in response.content.decode()
    compare = operator.post(reverse("eval_compare", kwargs={"ws": "acme"}), {"baseline": "one", "candidate": "2"})
    assert "Baseline run: “one” is not a whole number." in no_internals(compare.content.decode())


# Experiments ------------------------------------------------------------------------------------


def test_experiment_form_reports_bad_numbers(operator, harness):
    url = reverse("experiment_new", kwargs={"ws": "acme"})
    cases = [
        ({"arms": "control abc react\nh 0.5 label:production"}, "Arm line 1, weight: “abc” is not a number."),
        ({"arms": "control 0.5 react\nh 0.5 label:production", "coverage": "most"}, "Coverage: “most” is not a number."),
        ({"arms": "control 0.5 react\nh 0.5 label:production", "coverage": "2"}, "Coverage: 2 is above the maximum of 1."),
        ({"arms": "control 0.5 react\nh 0.5 label:production", "latency_p95_ms": "fast"},
         "Latency P95 limit (ms): “fast” is not a number."),
        ({"arms": "control 0.5"}, "Arm line 1 has 2 word(s)"),
    ]
    for form, message in cases:
        response = operator.post(url, {"key": "k", "harness": "avatar", **form}, follow=True)
        assert message in no_internals(response.content.decode()), form
    assert not Experiment.objects.exists()


def test_experiment_page_shows_arms_thresholds_and_a_decision_that_fits_its_state(operator, workspace, harness):
    experiment = experiment_create(actor=SYSTEM, workspace=workspace, key="skills-vs-react", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "treatment", "weight": 1, "kind": "label", "label": "production", "backend": "scripted"}],
        guardrails={"latency_p95_ms": 4000, "min_samples": 30})
    url = reverse("experiment_detail", kwargs={"ws": "acme", "key": experiment.key})
    draft = no_internals(operator.get(url).content.decode())
    assert experiment_snapshot(experiment)["decision"]["status"] == "not started"
    assert 'id="arms"' in draft and "ReAct baseline" in draft and ">v1</a>" in draft
    assert "(where the label points now)" in draft and "scripted" in draft and "(the deployment's default)" in draft
    assert "latency P95 above <strong>4000 ms</strong>" in draft and "after 30 samples" in draft
    assert "judge accuracy: no limit set" in draft

    experiment_start(actor=SYSTEM, experiment=experiment)
    running = experiment_snapshot(experiment)
    assert running["decision"]["status"] == "keep running"
    assert "not enough data yet: 0 in control and 0 in treatment" in running["decision"]["rule"]
    assert all("ZERO" not in (m.get("note") or "") for m in running["metrics"])

    experiment_stop(actor=SYSTEM, experiment=experiment, reason="enough for today")
    stopped = experiment_snapshot(experiment)["decision"]
    assert stopped["status"] == "stopped" and "enough for today" in stopped["rule"]
    assert "no clear difference" in stopped["rule"]
    no_internals(operator.get(url).content.decode())
