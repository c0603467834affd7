"""The pure core of harness evolution: signatures, clusters with noise, stable ids, judge suspicion, stop advice."""

import dataclasses

import pytest

from evaluation.evolution.clusters import ClusterConfig, assign_identities, cluster_failures
from evaluation.evolution.diagnosis import diagnose
from evaluation.evolution.signatures import (
    CaseRecord,
    error_class,
    group_by_signature,
    reason_kind,
    signature_of,
)
from evaluation.evolution.stopping import StopConfig, stop_advice
from harness.spec import parse_files, read_dir
from tests.conftest import DEMO_HARNESS
from tests.evaluation.builders import make_trace, tool_step
from tests.evaluation.evolution_builders import (
    cut_reply,
    denied_link,
    not_called,
    odd,
    passing,
    skill_missing,
)


@pytest.fixture(scope="module")
def spec():
    return parse_files(read_dir(DEMO_HARNESS))


def test_reason_kinds_and_error_classes():
    assert reason_kind("missing fact: '$71.20'") == "facts"
    assert reason_kind("[judge-a] no expected reply skill loaded (expected one of ['x'], loaded [])") == "skills"
    assert reason_kind('expected tool call not made: get_promotion({"link_id": "L001"})') == "tools"
    assert reason_kind("outcome 'deadline' is not a real answer") == "answered"
    assert reason_kind("The reply invents a 12% discount") == "other:the_reply_invents_a"
    assert error_class("timed out after 800 ms") == "timeout"
    assert error_class("no product with link id L999") == "not_found"
    assert error_class("permission denied: HTTP 403") == "permission"


def test_signature_reads_the_trace_deterministically():
    sig = signature_of(denied_link(1))
    assert (sig.verdict, sig.checks, sig.failing_tool, sig.error_class) == (
        "inaccurate", ("facts",), "get_product_info_by_link_id", "denied:validate-link-id-args")
    assert sig.skills_loaded == ("product-qa",) and sig.skills_missing == ()
    assert sig.tool_sequence == ("load_skill", "get_product_info_by_link_id")
    assert sig.last_step == "tool:get_product_info_by_link_id"
    assert signature_of(denied_link(2)) == sig  # same failure, same signature
    missing = signature_of(skill_missing(1))
    assert missing.skills_missing == ("product-qa",) and "skills" in missing.checks
    cut = signature_of(cut_reply(1))
    assert cut.hooks_blocking == ("reply-length",) and cut.last_step == "hook:reply-length"
    assert signature_of(not_called(1)).verdict == "ineffective"


def test_exact_signatures_group_first_and_passing_cases_are_left_out():
    records = [skill_missing(i) for i in range(3)] + [denied_link(i) for i in range(2)] + [passing(1), odd(0)]
    groups = group_by_signature(records)
    assert [len(g.case_ids) for g in groups] == [3, 2, 1]
    assert groups[0].case_ids == ("skill-0", "skill-1", "skill-2")
    assert all("pass-1" not in g.case_ids for g in groups)


def test_clusters_with_noise_as_the_long_tail(spec):
    records = ([skill_missing(i) for i in range(4)] + [denied_link(i) for i in range(3)]
               + [odd(i) for i in range(3)] + [passing(1), passing(2)])
    clustering = cluster_failures(records, spec)
    assert clustering.failures == 10 and clustering.total == 12
    assert [c.size for c in clustering.clusters] == [4, 3]
    first, second = clustering.clusters
    assert set(first.case_ids) == {f"skill-{i}" for i in range(4)}
    assert first.component.kind == "skill" and first.component.path == "skills/product-qa/SKILL.md"
    assert second.component.kind == "tool" and second.component.name == "get_product_info_by_link_id"
    assert first.harness_hash == spec.content_hash
    assert first.share == 0.4 and first.accuracy_lost == round(4 / 12, 4)
    assert first.centre_case in first.case_ids and first.boundary_case in first.case_ids
    assert first.passing_cases == ("pass-1", "pass-2")  # same skill, for contrast
    assert set(clustering.noise) == {"odd-0", "odd-1", "odd-2"}  # three unrelated one-offs: noise


def test_rare_signatures_cluster_across_groups_by_their_text(spec):
    # Three timeouts of three different tools: three exact signatures, one pattern in the text.
    records = []
    for i, tool in enumerate(("search_faq", "get_promotion", "get_order_status")):
        step = tool_step(tool, {}, error="timed out after 800 ms")
        records.append(CaseRecord(case_id=f"slow-{i}", category="faq", accuracy=0, effectiveness=0,
                                  reasons=("outcome 'fallback' is not a real answer", "missing fact: 'x'"),
                                  reply="Great question! Let me double-check that and get right back to you.",
                                  message="q", trace=make_trace("Great question! Let me double-check that.",
                                                                outcome="fallback", steps=[step])))
    records += [odd(0), odd(1)]
    clustering = cluster_failures(records, spec)
    assert len({signature_of(r).key for r in records[:3]}) == 3
    text_clusters = [c for c in clustering.clusters if c.source == "text"]
    assert len(text_clusters) == 1 and set(text_clusters[0].case_ids) == {"slow-0", "slow-1", "slow-2"}
    assert set(clustering.noise) == {"odd-0", "odd-1"}


def test_a_core_group_splits_when_its_texts_clearly_separate(spec):
    chat = [dataclasses.replace(skill_missing(i), reply="Hello from the studio, lovely to see you all tonight")
            for i in range(3)]
    vague = [dataclasses.replace(skill_missing(10 + i), reply="Could you tell me which item you mean exactly")
             for i in range(3)]
    clustering = cluster_failures(chat + vague, spec)
    assert sorted(c.size for c in clustering.clusters) == [3, 3]
    assert {c.source for c in clustering.clusters} == {"split"}
    assert len({c.cluster_id for c in clustering.clusters}) == 2
    # Six different replies with no structure among them: the group stays whole.
    replies = ["Hello there friend", "Welcome to the stream", "Nice to see you", "Thanks for joining us",
               "Great to have you here", "Good evening everyone"]
    mixed = [dataclasses.replace(skill_missing(i), reply=reply) for i, reply in enumerate(replies)]
    assert [c.size for c in cluster_failures(mixed, spec).clusters] == [6]
    assert [c.size for c in cluster_failures(chat + vague, spec, config=ClusterConfig(split_silhouette=1.01)
                                             ).clusters] == [6]


def test_cluster_ids_are_stable_across_diagnoses_of_successive_versions(spec):
    first = cluster_failures([skill_missing(i) for i in range(5)] + [denied_link(i) for i in range(3)], spec)
    previous = [{"cluster_id": c.cluster_id, "core": c.core, "terms": list(c.terms)} for c in first.clusters]
    # Next version: the skill cluster shrank (other cases), the link cluster is gone, a new one appeared.
    second = cluster_failures([skill_missing(20 + i) for i in range(2)] + [cut_reply(i) for i in range(3)],
                              spec, previous=previous)
    by_core = {c.core: c.cluster_id for c in second.clusters}
    skill_cluster = next(c for c in first.clusters if "missing:product-qa" in c.core)
    assert by_core[skill_cluster.core] == skill_cluster.cluster_id
    new_id = next(cid for core, cid in by_core.items() if core != skill_cluster.core)
    assert new_id not in {p["cluster_id"] for p in previous}
    again = cluster_failures([skill_missing(i) for i in range(5)] + [denied_link(i) for i in range(3)], spec)
    assert [c.cluster_id for c in again.clusters] == [c.cluster_id for c in first.clusters]  # deterministic


def test_identity_matching_takes_the_best_pair_once():
    clusters = cluster_failures([skill_missing(i) for i in range(3)], parse_files(read_dir(DEMO_HARNESS))).clusters
    previous = [{"cluster_id": "c-old", "core": "something else", "terms": list(clusters[0].terms)},
                {"cluster_id": "c-same", "core": clusters[0].core, "terms": []}]
    assert assign_identities(clusters, previous)[0].cluster_id == "c-same"


def test_judge_suspect_clusters_are_flagged_and_get_no_rule_edit(spec):
    # The judge says the price is missing, but the reply states it: check the evaluation, not the harness.
    wrong = [dataclasses.replace(skill_missing(i), reply="It's $71.20 today!",
                                 trace={**skill_missing(i).trace, "reply": "It's $71.20 today!"}) for i in range(3)]
    result = diagnose(wrong, spec)
    [cluster] = result.clustering.clusters
    assert cluster.judge_suspect and "contradict the trace" in cluster.suspect_reasons[0]
    assert result.proposals == ()
    calibrated = cluster_failures([denied_link(i) for i in range(3)], spec, calibration={"product_qa": 0.1})
    assert calibrated.clusters[0].judge_suspect and "human labels" in calibrated.clusters[0].suspect_reasons[0]
    assert not cluster_failures([denied_link(i) for i in range(3)], spec,
                                calibration={"product_qa": 0.9}).clusters[0].judge_suspect


def test_stop_advice_names_the_rule_that_fired(spec):
    def advice(records, **kw):
        return stop_advice(cluster_failures(records, spec), **kw)

    assert advice([passing(1)]).rule == "no-failures"
    assert advice([skill_missing(i) for i in range(4)]) .stop is False
    assert advice([skill_missing(i) for i in range(4)]).rule == "clusters-remain"
    assert advice([skill_missing(1), skill_missing(2), odd(0)]).rule == "sparse-long-tail"
    assert advice([skill_missing(1), skill_missing(2), skill_missing(3)] + [odd(i) for i in range(3)]).rule \
        == "noise-majority"
    many = [skill_missing(i) for i in range(5)]
    assert advice(many, gains=[0.1, 0.004, 0.002]).rule == "diminishing-returns"
    assert advice(many, gains=[0.1, -0.02]).rule == "last-round-regressed"
    assert advice(many, gains=[0.004, 0.05]).stop is False
    assert stop_advice(cluster_failures(many, spec), config=StopConfig(min_largest_cluster=6)).rule \
        == "sparse-long-tail"
