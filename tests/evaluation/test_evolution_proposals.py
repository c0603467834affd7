"""Proposals: the rule catalogue on each signature it claims, every validation rejection, diffs, the proposer."""

import asyncio
import dataclasses
import json

import pytest

from evaluation.evolution.clusters import cluster_failures
from evaluation.evolution.diagnosis import case_texts, diagnose
from evaluation.evolution.patches import (
    PatchError,
    apply_diff,
    apply_onto,
    make_diff,
    merge_text,
    parse_diff,
    reverse_diff,
)
from evaluation.evolution.proposals import RULES, Proposal, propose_by_rules, trigger_phrases
from evaluation.evolution.proposer import HarnessProposer, parse_answer, proposer_spec, scripted_answer
from evaluation.evolution.validation import ValidationConfig, validate_proposal
from harness.model_protocol import ModelResponse, ToolCall
from harness.spec import parse_files, read_dir, to_files, validate
from serving.backends.scripted import ScriptedBackend
from tests.conftest import DEMO_HARNESS
from tests.evaluation.evolution_builders import cut_reply, denied_link, not_called, passing, skill_missing


@pytest.fixture(scope="module")
def spec():
    return parse_files(read_dir(DEMO_HARNESS))


def _rule_proposals(records, spec, rule):
    clustering = cluster_failures(records, spec)
    made = [p for p in propose_by_rules(clustering.clusters, {r.case_id: r for r in records}, spec)
            if p.generator == f"rules:{rule}"]
    return [validate_proposal(p, spec, case_texts=case_texts(records)) for p in made]


def _edited(spec, proposal):
    return parse_files(apply_diff(to_files(spec), proposal.diff))


# Diffs ---------------------------------------------------------------------------------------------

def test_diffs_round_trip_reverse_and_refuse_what_does_not_fit():
    old = {"a.md": "one\ntwo\nthree\n", "b.md": "x\ny"}
    new = {"a.md": "one\n2\nthree\nfour\n", "b.md": "x\nz", "c.md": "new\n"}
    diff = make_diff(old, new)
    assert apply_diff(old, diff) == new
    assert apply_diff(new, reverse_diff(diff)) == old
    with pytest.raises(PatchError, match="does not apply at line 2"):
        apply_diff({**old, "a.md": "one\nTWO\nthree\n"}, diff)
    with pytest.raises(PatchError, match="cut short"):
        parse_diff(diff.split("+four")[0])
    with pytest.raises(PatchError, match="changes no file"):
        parse_diff("")


# The rule catalogue ----------------------------------------------------------------------------------

def test_edits_of_different_lines_merge_three_way_and_overlapping_ones_conflict():
    base = {"a.md": "one\ntwo\nthree\nfour\nfive\n", "b.md": "x\n"}
    first = make_diff(base, {**base, "a.md": "one\ntwo and a half\nextra\nthree\nfour\nfive\n"})
    second = make_diff(base, {**base, "a.md": "one\ntwo\nthree\nfour\nFIVE\n"})
    other_file = make_diff(base, {**base, "b.md": "y\n"})
    current = apply_onto(base, base, first)
    with pytest.raises(PatchError):
        apply_diff(current, second)  # strict line numbers alone would call this a conflict
    merged = apply_onto(base, apply_onto(base, current, second), other_file)
    assert merged == {"a.md": "one\ntwo and a half\nextra\nthree\nfour\nFIVE\n", "b.md": "y\n"}
    assert apply_onto(base, current, first) == current  # the same edit twice is taken once
    clash = make_diff(base, {**base, "a.md": "one\n2\nthree\nfour\nfive\n"})
    with pytest.raises(PatchError, match="both edits change line 2 "):
        apply_onto(base, current, clash)
    adjacent = make_diff(base, {**base, "a.md": "one\ntwo\nTHREE\nfour\nfive\n"})
    with pytest.raises(PatchError, match="both edits change"):
        apply_onto(base, current, adjacent)  # touching changes are flagged, as git does
    assert merge_text("a\nb", "a\nb", "a\nc") == "a\nc"


def test_the_catalogue_lists_its_rules():
    assert set(RULES) == {"skill-trigger", "reply-length", "tool-argument-precondition", "tool-not-called"}


def test_skill_trigger_adds_the_viewers_phrases_to_the_missing_skills_description(spec):
    records = [skill_missing(i, message=m) for i, m in enumerate(
        ["what's the price tag on the knit", "price tag please for the knit", "knit price tag?"])]
    [proposal] = _rule_proposals(records, spec, "skill-trigger")
    assert proposal.valid, proposal.errors
    assert proposal.target == "skills/product-qa/SKILL.md" and proposal.diff.startswith("--- a/skills/product-qa/")
    description = _edited(spec, proposal).skill("product-qa").description
    assert '"price tag"' in description and description.startswith(spec.skill("product-qa").description)
    # The operator reads the rationale: names in words, not Python lists.
    assert "“price tag”" in proposal.rationale and "['" not in proposal.rationale and "loaded casual-chat" in (
        proposal.rationale)
    assert set(proposal.evidence) <= {r.case_id for r in records}
    assert trigger_phrases(["how much is it", "how much now"], "") == []  # stop words only: nothing to add


def test_reply_length_replaces_a_number_that_contradicts_the_setting(spec):
    block = next(b for b in spec.prompt if b.name == "constraints")
    broken_template = block.template.replace("{{ reply_max_chars }}", "400")
    broken = dataclasses.replace(spec, prompt=tuple(
        dataclasses.replace(b, template=broken_template, variables=("max_turns",)) if b.name == "constraints" else b
        for b in spec.prompt))
    [proposal] = _rule_proposals([cut_reply(i) for i in range(3)], broken, "reply-length")
    assert proposal.valid, proposal.errors
    fixed = next(b for b in _edited(broken, proposal).prompt if b.name == "constraints")
    assert "at most {{ reply_max_chars }} characters" in fixed.template and "reply_max_chars" in fixed.variables
    # Without a contradiction the constraint is stated, once.
    [stated] = _rule_proposals([cut_reply(i) for i in range(3)], spec, "reply-length")
    assert stated.valid and "state the fact asked for first" in stated.diff


def test_tool_precondition_states_the_schema_in_place_of_a_misleading_sentence(spec):
    tool = spec.tool("get_product_info_by_link_id")
    misleading = tool.description + " Pass the product's name as link_id."
    broken = dataclasses.replace(spec, tools=tuple(
        dataclasses.replace(t, description=misleading) if t.name == tool.name else t for t in spec.tools))
    [proposal] = _rule_proposals([denied_link(i) for i in range(3)], broken, "tool-argument-precondition")
    assert proposal.valid, proposal.errors
    description = _edited(broken, proposal).tool(tool.name).description
    assert "Pass the product's name" not in description
    assert "Precondition: link_id must be product link id" in description and "^L\\d{3}$" in description


def test_tool_not_called_adds_a_rule_to_the_loaded_skill(spec):
    [proposal] = _rule_proposals([not_called(i) for i in range(3)], spec, "tool-not-called")
    assert proposal.valid, proposal.errors
    skill = _edited(spec, proposal).skill("discount-promotion")
    assert "Call get_promotion before answering" in skill.body and "get_promotion" in skill.allowed_tools


def test_rules_ignore_signatures_they_do_not_claim(spec):
    assert _rule_proposals([passing(1)], spec, "skill-trigger") == []
    assert _rule_proposals([denied_link(i) for i in range(3)], spec, "skill-trigger") == []
    assert _rule_proposals([skill_missing(i) for i in range(3)], spec, "tool-argument-precondition") == []


# Validation: every rejection -----------------------------------------------------------------------

def _valid_proposal(spec) -> Proposal:
    records = [skill_missing(i, message=m) for i, m in enumerate(
        ["price tag on the knit", "knit price tag", "the price tag"])]
    [proposal] = _rule_proposals(records, spec, "skill-trigger")
    assert proposal.valid
    return dataclasses.replace(proposal, errors=())


def _errors(proposal, spec, **kw):
    return validate_proposal(proposal, spec, **kw).errors


def test_every_validation_rejection(spec):
    good = _valid_proposal(spec)
    assert _errors(good, spec) == ()

    [base] = _errors(dataclasses.replace(good, base_hash="0" * 64), spec)
    assert base.startswith("base:")

    [applies] = _errors(dataclasses.replace(good, diff=good.diff.replace(" name: product-qa", " name: other")), spec)
    assert applies.startswith("applies:") and "does not apply" in applies

    cut = "\n".join(good.diff.splitlines()[:-3]) + "\n"
    assert any(e.startswith("truncated:") and "cut short" in e for e in _errors(dataclasses.replace(good, diff=cut), spec))
    assert _errors(dataclasses.replace(good, finish_reason="length"), spec)[0].startswith("truncated:")

    invalid = make_diff(to_files(spec), {**to_files(spec), "skills/product-qa/SKILL.md":
                                         to_files(spec)["skills/product-qa/SKILL.md"].replace("kind: reply", "kind: nope")})
    assert any(e.startswith("spec:") for e in _errors(dataclasses.replace(good, diff=invalid), spec))

    path = "prompt/40-constraints.md"
    lost = make_diff(to_files(spec), {**to_files(spec), path: to_files(spec)[path].replace(
        "at most {{ reply_max_chars }} characters", "at most 150 characters")})
    errors = _errors(dataclasses.replace(good, diff=lost), spec)
    assert any(e.startswith("variables:") and "reply_max_chars" in e for e in errors)

    copied = _errors(good, spec, case_texts=["Also use it when a viewer asks about the knit"])
    assert any(e.startswith("copied:") for e in copied)
    assert _errors(good, spec, case_texts=["asks about"]) == ()  # four words are not a copy
    # Text the edited line already held is not copied by this edit (the description quoted it before).
    assert _errors(good, spec, case_texts=["is it good for sensitive skin"]) == ()

    assert _errors(good, spec, config=ValidationConfig(max_changed_lines=1))[0].startswith("size:")
    assert _errors(good, spec, config=ValidationConfig(max_chars=100))[0].startswith("size:")

    assert _errors(good, spec, rejected={good.fingerprint})[0].startswith("rejected:")
    nothing = make_diff({"harness.yaml": "a\n"}, {"harness.yaml": "a\n"})
    assert any(e.startswith("applies:") for e in _errors(dataclasses.replace(good, diff=nothing), spec))


def test_a_rejected_edit_is_not_proposed_again_as_a_candidate(spec):
    records = [denied_link(i) for i in range(3)]
    first = diagnose(records, spec)
    [proposal] = [p for p in first.proposals if p.valid]
    again = diagnose(records, spec, rejected={proposal.fingerprint})
    assert [p.valid for p in again.proposals] == [False]
    assert again.proposals[0].errors[0].startswith("rejected:")


# The proposer harness ---------------------------------------------------------------------------------

def test_proposer_harness_is_a_valid_spec_with_read_tools_and_a_diff_hook():
    spec = proposer_spec()
    assert validate(spec) == []
    assert {t.name for t in spec.tools} == {"fetch_case", "fetch_cluster_cases", "fetch_component"}
    assert {h.name for h in spec.hooks} == {"well-formed-diff", "require-diff"}


def _tool_calls(*calls) -> ModelResponse:
    return ModelResponse(tool_calls=tuple(ToolCall(f"c{i}", name, json.dumps(args)) for i, (name, args) in
                                          enumerate(calls)))


def test_a_scripted_model_run_by_the_runtime_produces_a_valid_diff(spec):
    records = [denied_link(i) for i in range(3)]
    [cluster] = cluster_failures(records, spec).clusters
    edited = dict(to_files(spec))
    path = "tools/get_product_info_by_link_id.json"
    edited[path] = edited[path].replace("Call this before stating any price, stock, size or spec.",
                                        "Call this before stating any price, stock, size or spec. Pass the link id "
                                        "(L + 3 digits), never the product's name.")
    diff = make_diff(to_files(spec), edited)
    answer = scripted_answer("The tool description never says link_id is not a name.",
                             "States the argument's form where the model reads it.", ["link-0", "link-1"], diff)
    backend = ScriptedBackend([
        _tool_calls(("load_skill", {"name": "read-failures"}), ("fetch_cluster_cases", {})),
        _tool_calls(("fetch_case", {"case_id": "link-0"}), ("fetch_component", {"path": path})),
        "I think the description is the problem.",  # not the form: the diff hook sends it back
        answer,
    ])
    proposer = HarnessProposer(lambda: backend, rejections=["too long"])
    proposal = asyncio.run(proposer(cluster, {r.case_id: r for r in records}, spec))
    assert proposal is not None
    assert proposal.generator == f"proposer:{proposer_spec().content_hash[:8]}/scripted"
    assert proposal.target == path and proposal.evidence == ("link-0", "link-1")
    assert validate_proposal(proposal, spec, case_texts=case_texts(records)).valid
    first_prompt = backend.calls[0].messages[-1]["content"]
    assert cluster.cluster_id in first_prompt and "too long" in first_prompt  # rejections are read
    tool_results = [m["content"] for m in backend.calls[2].messages if m.get("role") == "tool"]
    assert any("link-0" in t and "denied_by" in t for t in tool_results)
    assert any("get_product_info_by_link_id" in t and "|" in t for t in tool_results)  # numbered file text
    assert "[harness feedback]" in backend.calls[3].messages[-1]["content"]
    # The well-formed-diff hook sent the free-text answer back once; the second answer passed.
    assert proposer.runs == [{"cluster": cluster.cluster_id, "variant": 0, "model": "scripted", "outcome": "replied",
                              "reason": "", "model_calls": 4, "sent_back": 1}]


def test_a_proposer_that_never_answers_in_form_proposes_nothing(spec):
    records = [denied_link(i) for i in range(3)]
    [cluster] = cluster_failures(records, spec).clusters
    backend = ScriptedBackend(["no diff", "still none", "nothing"])
    proposer = HarnessProposer(lambda: backend)
    assert asyncio.run(proposer(cluster, {r.case_id: r for r in records}, spec)) is None
    [run] = proposer.runs
    assert run["outcome"] == "fallback" and run["sent_back"] == 2 and "retries exhausted" in run["reason"]
    # A diff block that is cut short (no hunk) does not pass the form either.
    cut = "HYPOTHESIS: h\nRATIONALE: r\nEVIDENCE: link-0\n```diff\n--- a/tools/x.json\n+++ b/tools/x.json\n```"
    proposer = HarnessProposer(lambda: ScriptedBackend([cut, cut, cut]))
    assert asyncio.run(proposer(cluster, {r.case_id: r for r in records}, spec)) is None
    assert proposer.runs[0]["outcome"] == "fallback"
    fields, diff = parse_answer("HYPOTHESIS: h\nRATIONALE: r\nEVIDENCE: a\n```diff\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b")
    assert fields == {"hypothesis": "h", "rationale": "r", "evidence": "a"} and diff.endswith("+b\n")


@pytest.mark.timeout(900)  # the real model on a shared 2-core machine: minutes, not seconds
def test_the_embedded_offline_model_as_proposer_fails_safely(spec):
    """SmolLM2-135M (the offline default) run as the proposer: whatever it writes, no malformed proposal comes
    out: either its answer passed the diff form (validation then judges the edit) or there is no proposal."""
    from serving.backends import create_backend

    records = [denied_link(i) for i in range(3)]
    [cluster] = cluster_failures(records, spec).clusters
    # The proposer harness as shipped, with a tighter budget so the test stays short on a loaded CPU.
    light = dataclasses.replace(proposer_spec(), settings=dataclasses.replace(
        proposer_spec().settings, max_turns=3, max_hook_retries=1, deadline_s=60))
    proposer = HarnessProposer(lambda: create_backend("local"), spec=light)
    proposal = asyncio.run(proposer(cluster, {r.case_id: r for r in records}, spec))
    [run] = proposer.runs
    print("offline proposer run:", run)
    assert run["model"] == "local" and run["model_calls"] >= 1
    if proposal is None:
        assert run["outcome"] != "replied"  # the form hooks refused its answers, or the turn ran out
    else:
        assert run["outcome"] == "replied" and proposal.diff.startswith(("--- a/", "--- /dev/null"))
        assert proposal.generator.endswith("/local")
