"""Evolution you can believe: a diagnosis split and a gate split, candidates off the head promoted by a person,
the best round kept by an audited label move, and an AI actor that may only propose. PostgreSQL; the evals
run in-process with the scripted model (the worker's path, `round_finish`, called directly)."""

import re

import pytest
from django.core.exceptions import PermissionDenied

from evaluation import services as eval_services
from evaluation.evolution import decisions, diagnosing, rounds, selectors
from evaluation.evolution.errors import EvolutionError
from evaluation.evolution.models import Diagnosis, Round
from evaluation.evolution.splits import fitted, stratified_split
from evaluation.models import EvalResult, RunComparison
from harness import services as harness_services
from harness.models import Harness, Label
from serving.services import api_key_create
from tests.live_servers import requires_services
from workspaces.access import Actor
from workspaces.models import AuditEvent
from workspaces.services import membership_set

pytestmark = [requires_services]


@pytest.fixture
def finished_run(workspace, harness, settings):
    """A done run of the demo harness on 24 simulated cases with the scripted model (it fails many): half of
    them are the diagnosis split, enough to cluster."""
    import json

    from evaluation.models import EvalRun
    from tests.live_servers import child_env

    settings.SCRIPTED_STEPS = json.loads(child_env()["HARNESSOPS_SCRIPTED_STEPS"])
    system = Actor.system("test")
    version = eval_services.eval_set_generate(actor=system, workspace=workspace, name="dev", suite="live_stream_qa",
                                              seed=3, n=24)
    run = eval_services.run_create(actor=system, workspace=workspace, set_version=version, harness=harness,
                                   version=harness.head, backend="scripted", concurrency=2, start=False)
    assert eval_services.run_execute(run_id=run.pk) == "done"
    return EvalRun.objects.get(pk=run.pk)


# The split itself (pure) ----------------------------------------------------------------------------

def test_the_split_is_seeded_stratified_disjoint_and_complete():
    cases = [(f"{cat}-{i}", cat) for cat in ("qa", "chat", "promo") for i in range(7)] + [("lonely-0", "lonely")]
    split = stratified_split(cases, seed=3)
    assert set(split.diagnosis) | set(split.gate) == {c for c, _ in cases}
    assert not set(split.diagnosis) & set(split.gate)
    for category in ("qa", "chat", "promo"):  # every category on both sides
        assert any(c.startswith(category) for c in split.gate) and any(c.startswith(category) for c in split.diagnosis)
    assert stratified_split(list(reversed(cases)), seed=3) == split  # the seed decides, not the order
    assert stratified_split(cases, seed=4) != split
    with pytest.raises(ValueError):
        stratified_split(cases, gate_share=1.0)


def test_disagreeing_splits_are_called_fitted():
    up = {"accuracy": {"delta": 0.3, "ci_low": 0.1}}
    assert "fitted to the diagnosis cases" in fitted(up, {"accuracy": {"delta": -0.05, "ci_low": -0.2}})
    assert "significant only on the diagnosis" in fitted(up, {"accuracy": {"delta": 0.05, "ci_low": -0.1}})
    assert fitted(up, {"accuracy": {"delta": 0.25, "ci_low": 0.05}}) == ""


# Splits through a diagnosis and a round ------------------------------------------------------------

@pytest.mark.django_db
def test_no_diagnosis_case_reaches_the_gate_figures(workspace, harness, members, finished_run, monkeypatch):
    person = Actor.for_user(members["operator"])
    diagnosis = diagnosing.diagnosis_request(actor=person, run=finished_run, seed=5)
    split = diagnosis.split
    diagnosis_ids, gate_ids = set(split["diagnosis_case_ids"]), set(split["gate_case_ids"])
    assert split["kind"] == "seeded" and split["seed"] == 5 and diagnosis_ids and gate_ids
    assert diagnosis_ids | gate_ids == set(finished_run.set_version.cases.values_list("case_id", flat=True))
    assert diagnosing.diagnosis_execute(diagnosis_id=diagnosis.pk) == "done"
    diagnosis.refresh_from_db()

    # The diagnosis, its clusters, the rules' evidence and trigger phrases read only the diagnosis split.
    read = {cid for c in diagnosis.clusters.all() for cid in c.data["case_ids"]}
    assert read and read <= diagnosis_ids
    assert diagnosis.summary["total"] <= len(diagnosis_ids)
    for proposal in diagnosis.proposals.all():
        assert set(proposal.evidence) <= diagnosis_ids
    gate_messages = [c.data["message"] for c in finished_run.set_version.cases.filter(case_id__in=gate_ids)]
    for proposal in diagnosis.proposals.filter(generator="rules:skill-trigger"):
        added = " ".join(line for line in proposal.diff.splitlines() if line.startswith("+"))
        diagnosis_messages = " ".join(c.data["message"].lower() for c in
                                      finished_run.set_version.cases.filter(case_id__in=diagnosis_ids))
        mined = re.findall(r'\\?"([^"\\]+)\\?"', added.split("asks about", 1)[1])
        assert mined
        for phrase in mined:  # each mined trigger phrase comes from diagnosis messages
            assert phrase in diagnosis_messages, (phrase, gate_messages)

    proposal = diagnosis.proposals.filter(valid=True).first()
    decisions.proposal_accept(actor=person, proposal=proposal)
    evolution_round = rounds.round_create(actor=person, diagnosis=diagnosis)
    rounds.round_evaluate(actor=person, evolution_round=evolution_round)
    assert rounds.round_finish(round_id=evolution_round.pk) == "gated"
    evolution_round.refresh_from_db()
    comparison = evolution_round.comparison
    assert set(comparison.gate["case_ids"]) == gate_ids and "gate split" in comparison.gate["split"]
    for name, metric in comparison.metrics.items():
        if name != "_abstained":
            assert metric["n"] <= len(gate_ids)
            assert set(metric["regressed"]) | set(metric["improved"]) | set(metric["unpaired"]) <= gate_ids
    figures = evolution_round.figures
    assert figures["held_out"] and figures["gate"]["accuracy"]["n"] <= len(gate_ids)
    assert figures["diagnosis"]["accuracy"]["n"] <= len(diagnosis_ids)

    # Whatever the candidate did on the diagnosis cases, the gate figures do not move.
    before = {k: v for k, v in comparison.metrics.items() if k != "_abstained"}
    EvalResult.objects.filter(run=evolution_round.run, case__case_id__in=diagnosis_ids).update(
        accuracy=1.0, effectiveness=1.0, scores={"accuracy": 1.0, "effectiveness": 1.0})
    again = eval_services.comparison_create(actor=Actor.system("t"), baseline=comparison.baseline,
                                            candidate=comparison.candidate, case_ids=gate_ids, split="gate split")
    assert {k: v for k, v in again.metrics.items() if k != "_abstained"} == before

    # The round page shows both splits.
    from django.test import Client

    client = Client()
    client.force_login(members["viewer"])
    page = client.get(f"/w/acme/evolution/diagnoses/{diagnosis.pk}/").content.decode()
    assert 'data-split="gate"' in page and 'data-split="diagnosis"' in page and 'id="split"' in page
    assert diagnosis.summary["trials"] and 'id="trials"' in page and "tried on samples of the diagnosis cases" in page


@pytest.mark.django_db
def test_the_operator_may_gate_on_another_eval_set(workspace, harness, members, finished_run):
    person = Actor.for_user(members["operator"])
    gate_set = eval_services.eval_set_generate(actor=Actor.system("t"), workspace=workspace, name="gate",
                                               suite="live_stream_qa", seed=11, n=6)
    with pytest.raises(EvolutionError, match="must differ"):
        diagnosing.diagnosis_request(actor=person, run=finished_run, gate_set=finished_run.set_version)
    with pytest.raises(EvolutionError, match="gate share"):
        diagnosing.diagnosis_request(actor=person, run=finished_run, gate_share=0.99)
    assert not Diagnosis.objects.exists()
    diagnosis = diagnosing.diagnosis_request(actor=person, run=finished_run, gate_set=gate_set)
    assert diagnosis.split["kind"] == "sets" and diagnosis.split["gate_set"] == str(gate_set)
    diagnosing.diagnosis_execute(diagnosis_id=diagnosis.pk)
    decisions.proposal_accept(actor=person, proposal=diagnosis.proposals.filter(valid=True).first())
    evolution_round = rounds.round_create(actor=person, diagnosis=diagnosis)
    run = rounds.round_evaluate(actor=person, evolution_round=evolution_round)
    assert run.set_version_id == gate_set.pk
    assert rounds.round_finish(round_id=evolution_round.pk) == "gated"
    evolution_round.refresh_from_db()
    gate_cases = set(gate_set.cases.values_list("case_id", flat=True))
    assert evolution_round.comparison.baseline.set_version_id == gate_set.pk
    assert evolution_round.figures["gate"]["accuracy"]["n"] <= len(gate_cases)
    assert evolution_round.diagnosis_run.set_version_id == finished_run.set_version_id
    assert evolution_round.figures["diagnosis"]["accuracy"]["n"] <= finished_run.set_version.case_count


# Candidates off the head, promotion, the best round ------------------------------------------------

@pytest.mark.django_db
def test_a_candidate_stays_off_the_head_until_it_passes_and_a_person_promotes_it(
        workspace, harness, members, finished_run, monkeypatch):
    person, approver = Actor.for_user(members["operator"]), Actor.for_user(members["approver"])
    diagnosis = diagnosing.diagnosis_request(actor=person, run=finished_run)
    diagnosing.diagnosis_execute(diagnosis_id=diagnosis.pk)
    decisions.proposal_accept(actor=person, proposal=diagnosis.proposals.filter(valid=True).first())
    evolution_round = rounds.round_create(actor=person, diagnosis=diagnosis)
    candidate = evolution_round.candidate
    harness.refresh_from_db()
    assert harness.head.number == 1 and candidate.number == 2 and candidate.parent.number == 1
    assert not Label.objects.filter(version=candidate).exists()
    commit = AuditEvent.objects.get(action="version.commit", target_id=str(candidate.pk))
    assert commit.actor_label.startswith("ai:evolution") and commit.after["head_moved"] is False

    with pytest.raises(EvolutionError, match="Evaluate and gate"):
        rounds.round_promote(actor=person, evolution_round=evolution_round)
    rounds.round_evaluate(actor=person, evolution_round=evolution_round)
    rounds.round_finish(round_id=evolution_round.pk)
    evolution_round.refresh_from_db()
    # Twelve gate cases are too few for the default gate (30 cases): it does not pass, and nothing is promoted.
    assert not evolution_round.comparison.passed and evolution_round.comparison.verdict in (
        "fail", "not enough evidence")
    with pytest.raises(EvolutionError, match="gate did not pass"):
        rounds.round_promote(actor=person, evolution_round=evolution_round)
    assert Harness.objects.get(pk=harness.pk).head.number == 1

    # A gate these cases can pass (the scripted model mostly falls back): a person promotes, the head moves (audited).
    monkeypatch.setitem(eval_services.DEFAULT_GATE, "min_cases", 2)
    monkeypatch.setitem(eval_services.DEFAULT_GATE, "max_drop", 1.0)
    monkeypatch.setitem(eval_services.DEFAULT_GATE, "max_safety_net_share", 1.0)
    Round.objects.filter(pk=evolution_round.pk).update(run=None, status="drafted", comparison=None)
    evolution_round.refresh_from_db()
    rounds.round_evaluate(actor=person, evolution_round=evolution_round)
    rounds.round_finish(round_id=evolution_round.pk)
    evolution_round.refresh_from_db()
    assert evolution_round.comparison.passed, evolution_round.comparison.reasons
    ai = Actor.ai("ai:evolution (rules)", workspace)
    with pytest.raises(PermissionDenied):
        rounds.round_promote(actor=ai, evolution_round=evolution_round)
    rounds.round_promote(actor=person, evolution_round=evolution_round)
    assert Harness.objects.get(pk=harness.pk).head_id == candidate.pk
    promote = AuditEvent.objects.get(action="version.promote", target_id=str(candidate.pk))
    assert promote.actor_label == "operator" and promote.before == {"head": 1}
    with pytest.raises(EvolutionError, match="already promoted"):
        rounds.round_promote(actor=person, evolution_round=evolution_round)

    # Best round so far, on the gate split with its interval; keeping it is an audited label move.
    best = selectors.best_round(harness)
    assert best["version"] in (1, 2) and best["split"].startswith("gate split")
    low, high = best["ci"]
    assert low <= best["accuracy"] <= high
    with pytest.raises(PermissionDenied):  # production is protected: the approver's move
        rounds.keep_version(actor=person, harness=harness, version=candidate, label="production", round_pk=1)
    rounds.keep_version(actor=approver, harness=harness, version=candidate, label="production",
                        round_pk=evolution_round.pk)
    assert Label.objects.get(harness=harness, name="production").version_id == candidate.pk
    move = AuditEvent.objects.filter(action="label.move").latest("id")
    assert move.actor_label == "approver" and "best on the gate split" in move.after["reason"]


@pytest.mark.django_db
def test_stop_advice_names_the_round_to_keep(workspace, harness, members, finished_run):
    person = Actor.for_user(members["operator"])
    diagnosis = diagnosing.diagnosis_request(actor=person, run=finished_run)
    diagnosing.diagnosis_execute(diagnosis_id=diagnosis.pk)
    decisions.proposal_accept(actor=person, proposal=diagnosis.proposals.filter(valid=True).first())
    evolution_round = rounds.round_create(actor=person, diagnosis=diagnosis)
    rounds.round_evaluate(actor=person, evolution_round=evolution_round)
    rounds.round_finish(round_id=evolution_round.pk)
    best = selectors.best_round(harness)
    advice = diagnosing.keep_advice(harness, stop=True)
    assert advice["keep"]["version"] == best["version"] and advice["keep"]["ci"] == best["ci"]
    assert diagnosing.keep_advice(harness, stop=False) == {}


# The AI actor's least privilege ----------------------------------------------------------------------

@pytest.mark.django_db
def test_the_ai_actor_proposes_and_commits_candidates_but_moves_no_label(workspace, harness, members):
    ai = Actor.ai("ai:evolution (rules:skill-trigger)", workspace)
    files = dict(harness.head.files)
    path = next(p for p in files if p.startswith("prompt/"))
    files[path] = files[path] + "\nBe brief.\n"
    candidate = harness_services.version_commit_candidate(actor=ai, harness=harness, files=files,
                                                          base_version=harness.head, message="try")
    assert candidate.author_label.startswith("ai:") and Harness.objects.get(pk=harness.pk).head.number == 1
    with pytest.raises(PermissionDenied):
        harness_services.label_move(actor=ai, harness=harness, name="canary", version=candidate, reason="mine")
    with pytest.raises(PermissionDenied):
        harness_services.label_move(actor=ai, harness=harness, name="production", version=candidate, reason="mine")
    with pytest.raises(PermissionDenied):
        harness_services.version_commit(actor=ai, harness=harness, files=files, base_version=harness.head,
                                        message="move the head")
    with pytest.raises(PermissionDenied):
        harness_services.head_promote(actor=ai, harness=harness, version=candidate, reason="mine")
    with pytest.raises(PermissionDenied):
        api_key_create(actor=ai, workspace=workspace, name="ai-key", scopes=["read"])
    with pytest.raises(PermissionDenied):
        membership_set(actor=ai, workspace=workspace, username="viewer", role="admin")
    assert not Label.objects.exists()
    other = Actor.ai("ai:evolution", workspace)
    from workspaces.models import Workspace

    elsewhere = Workspace.objects.create(slug="else", name="Else")
    with pytest.raises(PermissionDenied):  # its scopes hold in its own workspace only
        from workspaces.access import PROPOSE, require

        require(other, elsewhere, PROPOSE)
    assert not RunComparison.objects.exists()


# Leave-one-out attribution for every edit kind --------------------------------------------------------

def _edits(files):
    """Four accepted edits of different kinds, each with a marker its text adds."""
    import dataclasses

    from evaluation.evolution.patches import make_diff
    from harness.spec import parse_files, to_files

    spec = parse_files(files)

    def replaced(attribute, name, **changes):
        modules = tuple(dataclasses.replace(m, **changes) if m.name == name else m for m in getattr(spec, attribute))
        return make_diff(to_files(spec), to_files(dataclasses.replace(spec, **{attribute: modules})))

    block = next(b for b in spec.prompt if "constraint" in b.name)
    tool, hook, skill = spec.tool("search_products"), next(h for h in spec.hooks if h.message), spec.skill("casual-chat")
    return {
        "prompt": ("MARK-PROMPT", f"prompt/{block.order:02d}-{block.name}.md",
                   replaced("prompt", block.name, template=block.template + "\n- MARK-PROMPT keep it short.")),
        "tool": ("MARK-TOOL", "tools/search_products.json",
                 replaced("tools", "search_products", description=tool.description + " MARK-TOOL short queries.")),
        "hook": ("MARK-HOOK", f"hooks/{hook.name}.yaml", replaced("hooks", hook.name, message=hook.message + " MARK-HOOK")),
        "skill": ("MARK-SKILL", "skills/casual-chat/SKILL.md",
                  replaced("skills", "casual-chat", description=skill.description + " MARK-SKILL greetings.")),
    }


@pytest.mark.django_db
def test_leave_one_out_blames_prompt_tool_hook_and_skill_edits(workspace, harness, members, finished_run):
    from evaluation.evolution.attribution import attribute
    from evaluation.evolution.models import Proposal
    from evaluation.evolution.patches import apply_onto
    from evaluation.models import EvalRun

    base = dict(harness.head.files)
    edits = _edits(base)
    diagnosis = Diagnosis.objects.create(workspace=workspace, harness=harness, version=harness.head,
                                         run=finished_run, created_by="t")
    candidate_files, proposals = dict(base), {}
    for kind, (_marker, target, diff) in edits.items():
        assert diff, kind
        candidate_files = apply_onto(base, candidate_files, diff)
        proposals[kind] = Proposal.objects.create(
            diagnosis=diagnosis, generator=f"rules:{kind}", hypothesis=kind, diff=diff, target=target,
            base_hash="x", fingerprint=kind, valid=True, status="accepted")
    cases = list(finished_run.set_version.cases.order_by("id"))
    broken_by = {kind: cases[i].case_id for i, kind in enumerate(edits)}  # case i fails because of edit i

    def run_with(failing):
        run = EvalRun.objects.create(workspace=workspace, set_version=finished_run.set_version, harness=harness,
                                     harness_version=harness.head, backend="scripted", total=len(cases),
                                     created_by="t", status="done")
        for case in cases:
            score = 0.0 if case.case_id in failing else 1.0
            EvalResult.objects.create(run=run, case=case, category=case.category, accuracy=score, effectiveness=score,
                                      judge_version="t", outcome="replied", latency_ms=1, trace={})
        return run

    baseline, candidate = run_with(set()), run_with(set(broken_by.values()))
    calls = []

    def rejudge(files, case_ids):
        text = "\n".join(files.values())
        present = {kind for kind, (marker, _, _) in edits.items() if marker in text}
        calls.append(present)
        return {cid: next(kind for kind, c in broken_by.items() if c == cid) not in present for cid in case_ids}

    ledger = attribute(diagnosis, baseline, candidate, candidate_files=candidate_files, rejudge=rejudge,
                       splits={"gate": list(broken_by.values())})
    assert ledger["method"] == "leave-one-out" and ledger["unattributed"] == []
    assert sorted(ledger["regressed"]) == sorted(broken_by.values())
    for kind, proposal in proposals.items():
        row = ledger["proposals"][str(proposal.pk)]
        assert row["kind"] == kind and row["regressed"] == [broken_by[kind]], (kind, row)
        assert row["loo"]["evaluated"] == 4
    # Each re-evaluation reverted exactly one edit and kept the other three.
    assert sorted(len(present) for present in calls) == [3, 3, 3, 3]
    assert {cid: ledger["split_of"][cid] for cid in broken_by.values()} == {c: "gate" for c in broken_by.values()}
    assert set(ledger["results"]) >= set(broken_by.values())  # each case links to its result page

    # Without a re-evaluation nothing is blamed: the regressions stay unattributed, not guessed.
    blind = attribute(diagnosis, baseline, candidate, candidate_files=candidate_files)
    assert sorted(blind["unattributed"]) == sorted(broken_by.values())


# Judge-suspect triage for every judge --------------------------------------------------------------

@pytest.mark.parametrize("change, words", [
    ({"judge_votes": (("harness:qwen", 0), ("harness:llama", 1), ("harness:phi", 0))}, "the judges disagree"),
    ({"judge_votes": (("harness:qwen", 0), ("harness:llama", None))}, "a judge abstained"),
    ({"human_accuracy": 1.0}, "a person's label contradicts the verdict"),
])
def test_llm_judges_disagreeing_abstaining_or_contradicted_make_a_cluster_suspect(change, words):
    import dataclasses

    from evaluation.evolution.diagnosis import diagnose
    from harness.spec import parse_files, read_dir
    from tests.conftest import DEMO_HARNESS
    from tests.evaluation.evolution_builders import passing, skill_missing

    spec = parse_files(read_dir(DEMO_HARNESS))
    # A panel of LLM judges: their reasons carry the judge's name; the trace contradicts none of them.
    plain = [dataclasses.replace(skill_missing(i), reasons=tuple(f"[harness:qwen] {r}" for r in skill_missing(i).reasons))
             for i in range(4)]
    clean = diagnose([*plain, passing(1)], spec)
    assert clean.clustering.clusters and not any(c.judge_suspect for c in clean.clustering.clusters)
    assert clean.proposals  # an actionable cluster gets edits

    doubted = [dataclasses.replace(r, **change) for r in plain]
    result = diagnose([*doubted, passing(1)], spec)
    cluster = result.clustering.clusters[0]
    assert cluster.judge_suspect and any(words in reason for reason in cluster.suspect_reasons)
    assert not [p for p in result.proposals if p.cluster_id == cluster.cluster_id]  # no harness edit for it


def test_a_vote_keeps_each_judges_say():
    from evaluation.judges.verdict import Verdict, vote

    combined = vote([Verdict(accuracy=1, effectiveness=1.0, judge="a"), Verdict(accuracy=0, effectiveness=0.0, judge="b"),
                     Verdict.abstain(judge="c")])
    assert combined.votes == (("a", 1), ("b", 0), ("c", None))
    assert Verdict.from_dict(combined.to_dict()).votes == combined.votes


# Propose, try, keep ---------------------------------------------------------------------------------

def test_each_variant_is_tried_on_diagnosis_cases_and_the_best_is_kept():
    from evaluation.evolution.clusters import cluster_failures
    from evaluation.evolution.diagnosis import case_texts
    from evaluation.evolution.proposals import propose_by_rules
    from evaluation.evolution.trials import try_and_keep
    from evaluation.evolution.validation import validate_proposal
    from harness.spec import parse_files, read_dir, to_files
    from tests.conftest import DEMO_HARNESS
    from tests.evaluation.evolution_builders import passing, skill_missing

    spec = parse_files(read_dir(DEMO_HARNESS))
    messages = ["knit price tag today", "knit price tag now", "wool blend price tag", "wool blend knit cost"]
    records = [skill_missing(i, message=m) for i, m in enumerate(messages)] + [passing(1), passing(2)]
    clustering = cluster_failures(records, spec)
    made = [validate_proposal(p, spec, case_texts=case_texts(records))
            for p in propose_by_rules(clustering.clusters, {r.case_id: r for r in records}, spec)
            if p.generator == "rules:skill-trigger"]
    assert len(made) == 2 and all(p.valid for p in made)  # two variants: four trigger phrases, and two
    wide, narrow = sorted(made, key=lambda p: -len(p.diff))
    tried_on = []

    def evaluate(files, case_ids):
        # The wider trigger list makes the model load the skill for every failing case; the narrow one for one.
        tried_on.append(sorted(case_ids))
        text = files["skills/product-qa/SKILL.md"]
        wide_line = next(line[1:] for line in wide.diff.splitlines() if line.startswith("+") and "asks about" in line)
        fixed = len(clustering.clusters[0].case_ids) if wide_line.strip() in text else 1
        failing = sorted(clustering.clusters[0].case_ids)
        return {cid: (cid not in failing or failing.index(cid) < fixed) for cid in case_ids}

    kept, trials = try_and_keep(made, clustering.clusters, to_files(spec), evaluate)
    by_fp = {p.fingerprint: p for p in kept}
    assert by_fp[wide.fingerprint].valid and "the best of 2 variants" in by_fp[wide.fingerprint].rationale
    loser = by_fp[narrow.fingerprint]
    assert not loser.valid and loser.errors[-1].startswith("tried:") and "another variant did better" in loser.errors[-1]
    assert {(t["fingerprint"], t["kept"]) for t in trials} == {(wide.fingerprint, True), (narrow.fingerprint, False)}
    # Only the cluster's diagnosis cases and passing contrast cases were run: nothing else.
    allowed = set(clustering.clusters[0].case_ids) | set(clustering.clusters[0].passing_cases)
    assert tried_on and all(set(ids) <= allowed for ids in tried_on)


def test_rejections_for_the_same_signature_steer_the_proposer():
    from evaluation.evolution.clusters import cluster_failures
    from evaluation.evolution.proposer import HarnessProposer
    from harness.spec import parse_files, read_dir
    from tests.conftest import DEMO_HARNESS
    from tests.evaluation.evolution_builders import skill_missing

    spec = parse_files(read_dir(DEMO_HARNESS))
    cluster = cluster_failures([skill_missing(i) for i in range(3)], spec).clusters[0]
    steered = HarnessProposer(lambda: None, rejections_by_core={cluster.core: ["names too many phrases"],
                                                                "other|core": ["unrelated reason"]})
    message = steered.message(cluster, spec)
    assert "this same signature" in message and "names too many phrases" in message
    assert "unrelated reason" not in message
    assert "unrelated reason" not in HarnessProposer(lambda: None, rejections_by_core={"x": ["unrelated reason"]}
                                                     ).message(cluster, spec)


def test_a_trial_whose_cases_errored_ranks_nothing_and_says_so():
    from evaluation.evolution.clusters import cluster_failures
    from evaluation.evolution.proposals import propose_by_rules
    from evaluation.evolution.trials import try_and_keep
    from harness.spec import parse_files, read_dir, to_files
    from tests.conftest import DEMO_HARNESS
    from tests.evaluation.evolution_builders import passing, skill_missing

    spec = parse_files(read_dir(DEMO_HARNESS))
    messages = ["knit price tag today", "knit price tag now", "wool blend price tag", "wool blend knit cost"]
    records = [skill_missing(i, message=m) for i, m in enumerate(messages)] + [passing(1)]
    clustering = cluster_failures(records, spec)
    made = [p for p in propose_by_rules(clustering.clusters, {r.case_id: r for r in records}, spec)
            if p.generator == "rules:skill-trigger"]
    kept, trials = try_and_keep(made, clustering.clusters, to_files(spec), lambda files, ids: dict.fromkeys(ids))
    assert [p.errors for p in kept] == [(), ()] and [p.rationale for p in kept] == [p.rationale for p in made]
    assert all(t["kept"] is None and t["unknown"] == t["of"] for t in trials) and len(trials) == 2


@pytest.mark.django_db
def test_the_live_judge_keeps_each_judges_say_for_a_live_diagnosis(workspace, harness, monkeypatch):
    import time
    import uuid
    from datetime import UTC, datetime, timedelta

    from evaluation import live_judging
    from evaluation.evolution.records import live_records
    from evaluation.judges.verdict import Verdict, vote
    from serving.models import Trace
    from serving.traces import trace_row, traces_store
    from tests.evaluation.builders import make_trace

    async def panel(case, trace):  # two judge models that disagree, as a harness-judge vote would
        return vote([Verdict(accuracy=0, effectiveness=0.0, judge="harness:qwen"),
                     Verdict(accuracy=1, effectiveness=1.0, judge="harness:llama"),
                     Verdict(accuracy=0, effectiveness=0.0, judge="harness:phi")])

    monkeypatch.setattr(live_judging, "resolve_judge", lambda name, backend: panel)
    data = {**make_trace("It is $40."), "trace_id": uuid.uuid4().hex, "started_at": time.time() - 60}
    traces_store([trace_row(workspace_id=workspace.pk, data=data, source=Trace.Source.API, harness_id=harness.pk,
                            version_id=harness.head_id)])
    live_judging.judge_live_trace(data["trace_id"])
    trace = Trace.objects.get(trace_id=data["trace_id"])
    assert trace.judge_accuracy == 0 and trace.data["judge_votes"][1] == {"judge": "harness:llama", "accuracy": 1}
    diagnosis = Diagnosis(workspace=workspace, harness=harness, version=harness.head, source="live",
                          window_start=datetime.now(UTC) - timedelta(hours=1),
                          window_end=datetime.now(UTC) + timedelta(minutes=1))
    [record], _ = live_records(diagnosis)
    assert record.judge_votes == (("harness:qwen", 0), ("harness:llama", 1), ("harness:phi", 0))
