"""Pages that link to their next steps: a version's actions, a run's compare/annotate links, an empty workspace."""

import re

import pytest
from django.urls import reverse

from evaluation.models import EvalRun, EvalSet, EvalSetVersion

pytestmark = pytest.mark.django_db


def hrefs(html: str) -> list[str]:
    return [h.replace("&amp;", "&") for h in re.findall(r'<a [^>]*href="([^"]*)"', html)]


def test_version_page_offers_its_next_actions(client, members, harness):
    client.force_login(members["operator"])
    html = client.get("/w/acme/harnesses/avatar/v/1/").content.decode()
    links = hrefs(html)
    assert "/w/acme/playground/?harness=avatar&version=1" in links
    assert "/w/acme/eval/?harness=avatar&version=1#new-run" in links
    assert "/w/acme/harnesses/avatar/diff/?b=1" in links
    assert "/w/acme/harnesses/avatar/?version=1#promote" in links
    assert not re.search(r"<a (?![^>]*href=)[^>]*>", html), "every link has an href"

    # Each target honours the preselection it is handed.
    playground = client.get("/w/acme/playground/?harness=avatar&version=1").content.decode()
    assert re.search(r'<option value="1"\s+selected>avatar v1 \(head\)</option>', playground)
    assert playground.count(">avatar v1") == 1
    evaluation = client.get("/w/acme/eval/?harness=avatar&version=1").content.decode()
    assert 'name="version" value="v1"' in evaluation and "<option selected>avatar</option>" in evaluation
    detail = client.get("/w/acme/harnesses/avatar/?version=1").content.decode()
    assert re.search(r'<option value="1"\s+selected>v1', detail)
    assert client.get("/w/acme/harnesses/avatar/diff/?b=1").status_code == 200


def test_run_page_links_compare_annotate_and_agreement(client, members, workspace, harness):
    client.force_login(members["operator"])
    eval_set = EvalSet.objects.create(workspace=workspace, name="smoke", suite="ifeval")
    v1, v2 = (EvalSetVersion.objects.create(eval_set=eval_set, number=n, source="t", case_count=0) for n in (1, 2))
    run, peer, other_set, running = (
        EvalRun.objects.create(workspace=workspace, set_version=sv, harness=harness, harness_version=harness.head,
                               backend="scripted", status=status)
        for sv, status in ((v1, "done"), (v1, "done"), (v2, "done"), (v1, "running")))
    html = client.get(reverse("eval_run_detail", kwargs={"ws": "acme", "run_id": run.pk})).content.decode()
    offered = re.findall(r'<option value="(\d+)">', html)
    assert offered == [str(peer.pk)], "only finished runs of the same set version can be compared"
    assert f'name="baseline" value="{run.pk}"' in html
    assert {"/w/acme/eval/annotate/", "/w/acme/eval/agreement/"} <= set(hrefs(html))

    compare = client.get(f"/w/acme/eval/compare/?baseline={run.pk}&candidate={peer.pk}").content.decode()
    baseline_select, candidate_select = compare.split('name="candidate"', 1)
    assert re.findall(r'<option value="(\d+)" selected', baseline_select) == [str(run.pk)]
    assert re.findall(r'<option value="(\d+)" selected', candidate_select.split("</select>")[0]) == [str(peer.pk)]
    lonely = client.get(reverse("eval_run_detail", kwargs={"ws": "acme", "run_id": other_set.pk})).content.decode()
    assert "No other finished run of" in lonely and "/w/acme/eval/compare/" in hrefs(lonely)

    # A viewer cannot start a comparison: no form, but still a link to the stored ones.
    client.force_login(members["viewer"])
    html = client.get(reverse("eval_run_detail", kwargs={"ws": "acme", "run_id": run.pk})).content.decode()
    assert 'id="compare-with"' in html and 'name="candidate"' not in html and "/w/acme/eval/compare/" in hrefs(html)

    home = client.get("/w/acme/eval/").content.decode()
    assert {"/w/acme/eval/compare/", "/w/acme/eval/annotate/", "/w/acme/eval/agreement/"} <= set(hrefs(home))


def test_empty_workspace_says_what_to_do_first(client, members, workspace):
    client.force_login(members["operator"])
    html = client.get("/w/acme/").content.decode()
    assert 'id="first-steps"' in html
    assert {"/w/acme/harnesses/import/", "/w/acme/playground/", "/w/acme/eval/"} <= set(hrefs(html))


def test_first_steps_leave_once_a_harness_exists(client, members, harness):
    client.force_login(members["operator"])
    assert 'id="first-steps"' not in client.get("/w/acme/").content.decode()


def test_playground_preselects_an_older_version(client, members, actors, harness):
    from harness import services

    path = next(p for p in sorted(harness.head.files) if p.endswith("SKILL.md"))
    files = {**harness.head.files, path: harness.head.files[path] + "- one more rule\n"}
    services.version_commit(actor=actors["operator"], harness=harness, files=files, base_version=harness.head,
                            message="v2")
    client.force_login(members["operator"])
    html = client.get("/w/acme/playground/?harness=avatar&version=1").content.decode()
    assert '<option value="1" selected>avatar v1</option>' in html
    assert re.search(r'<option value="2"\s+>avatar v2 \(head\)', html)
