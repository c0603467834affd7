"""Harness evolution measured with a real frozen model (issue 43, item 7).

Starts from the compact demo harness broken on purpose in four ways that the rule catalogue and the proposer
were not written for (`BREAKAGES`), then runs the loop the console runs, round after round:

    diagnose the current version on the diagnosis split → rules (and, with --proposer, the proposer harness)
    propose → each proposal tried on a sample of diagnosis cases, the best variant kept (propose, try, keep) →
    accept the kept edits whose trial fixed more than it broke → candidate (merged three-way, as round_create
    does) → evaluate it → regression gate on the gate split only → a candidate that passes becomes the
    current version (a person promoting it); one that fails is rejected, which steers the next proposals →
    stop advice on the next diagnosis → next round, until the advice says stop or --max-rounds.

The model answers every turn: by default the shipped offline default (the committed adapter merged into
SmolLM2-135M, built by `manage.py build_default_model` into var/models/, served by the `local` llama.cpp
backend exactly as `make run` serves it, constrained decoding on); `--openai-base-url URL --model NAME` runs any
OpenAI-compatible server instead. Nothing here reads the harness text to decide what the model does. Every case
is judged by the product's reference judge. The split is the product's seeded stratified split; no diagnosis
case reaches a gate figure, and the gate split's messages are passed to validation only to refuse copies.

    .venv/bin/python manage.py build_default_model   # once: var/models/harnessops-default-*.gguf
    .venv/bin/python benchmarks/evolution.py [--cases 48] [--max-rounds 4] [--write docs/evolution.json]

Writes the JSON (and the Markdown next to it) only with --write. Pure core (`run_loop`) without Django, so a
test can drive it with the scripted backend.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluation.evolution.diagnosis import DiagnosisConfig, case_texts, diagnose  # noqa: E402
from evaluation.evolution.patches import PatchError, apply_onto  # noqa: E402
from evaluation.evolution.signatures import CaseRecord  # noqa: E402
from evaluation.evolution.splits import fitted, stratified_split  # noqa: E402
from evaluation.evolution.trials import TrialConfig, try_and_keep  # noqa: E402
from evaluation.evolution.validation import validate_proposal  # noqa: E402
from evaluation.execution import evaluate_case  # noqa: E402
from evaluation.judges.reference import judge_reference  # noqa: E402
from evaluation.metrics.compare import RegressionGate, bootstrap_ci, compare_runs  # noqa: E402
from harness.simulator import generate_cases  # noqa: E402
from harness.spec import HarnessSpec, parse_files, read_dir, to_files  # noqa: E402

COMPACT = ROOT / "harness" / "demo" / "compact"
# The product's default gate (evaluation.services.DEFAULT_GATE) but for min_cases, which a small gate split
# cannot reach (30); the console's HARNESSOPS_EVOLUTION_GATE overrides it the same way.
GATE = {"metrics": ("accuracy", "effectiveness"), "max_drop": 0.02, "confidence": 0.95, "method": "bootstrap",
        "rule": "non_inferiority", "max_safety_net_share": 0.5}
SAFETY_NETS = ("fallback", "deadline", "error")
PRODUCT_DIAGNOSIS = DiagnosisConfig()  # the clustering, stop advice and validation a console diagnosis uses
TRIALS = TrialConfig()
# evaluation.evolution.diagnosing's MODEL_PROPOSALS_PER_DIAGNOSIS and PROPOSER_VARIANTS (that module needs Django)
PROPOSER_CLUSTERS, PROPOSER_VARIANTS_ = 3, 2


# The breakages: file edits an operator might plausibly make; kept here, never in the rules or the proposer.
# Each is (name, kind, file, old text, new text); the old text must be there, so a changed demo fails loudly.
BREAKAGES = (
    ("product-tool-field", "a wrong field name in a tool description", "tools/get_product_info_by_link_id.json",
     '"description": "Look up one product by link id: price, promo price, stock, sizes, specs."',
     '"description": "Look up one product by its product_id (the product\'s name): price, promo price, stock, '
     'sizes, specs."'),
    ("clarify-trigger-missing", "a missing trigger (the skill no longer says when to use it)",
     "skills/clarify-follow-up/SKILL.md",
     "description: Asks one short question when the message is ambiguous, or answers a follow-up.",
     "description: Asks the viewer one short question."),
    ("max-turns-2", "a too-tight limit (two model calls: a skill and a tool call leave no turn to reply)",
     "harness.yaml", "  max_turns: 4", "  max_turns: 2"),
    ("casual-chat-misleading", "a misleading skill description (small talk claims product questions)",
     "skills/casual-chat/SKILL.md",
     "description: Replies to greetings, thanks and small talk that ask for no product fact.",
     "description: Replies to greetings, thanks, small talk and quick questions about a product."),
)


def broken_harness(names: Sequence[str] | None = None, *, deadline_s: float | None = None) -> tuple[HarnessSpec, list]:
    """The compact demo with the named breakages (all by default). `deadline_s` replaces the 15 s turn deadline
    (not a breakage: a shared CPU is slower than the one the harness was written for)."""
    files = read_dir(COMPACT)
    applied = []
    for name, kind, path, old, new in BREAKAGES:
        if names is not None and name not in names:
            continue
        if old not in files[path]:
            raise SystemExit(f"breakage {name}: {path} no longer holds {old!r}")
        files[path] = files[path].replace(old, new)
        applied.append({"name": name, "kind": kind, "file": path})
    if deadline_s is not None:
        files["harness.yaml"] = files["harness.yaml"].replace("  deadline_s: 15.0", f"  deadline_s: {deadline_s}")
    return parse_files(files), applied


def eval_cases(seed: int, n: int) -> list:
    """`n` simulated cases the compact harness can answer (its skills and tools; no silent refusals), as the
    HAT evaluation draws them. The default seed is none of the default model's training or eval seeds."""
    from training.hat.experiment import answerable

    clean = parse_files(read_dir(COMPACT))
    drawn = 4 * n + 16
    out = [c for c in generate_cases(seed, drawn) if answerable(c, clean)][:n]
    if len(out) < n:
        raise SystemExit(f"seed {seed} gave only {len(out)} answerable cases of {drawn} drawn")
    return out


# Evaluation -------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Scored:
    accuracy: float | None  # None: the judge abstained
    effectiveness: float | None
    outcome: str
    reasons: tuple[str, ...]
    reply: str
    trace: dict

    @property
    def passed(self) -> bool:
        return self.accuracy is not None and self.effectiveness is not None and self.accuracy >= 1 \
            and self.effectiveness >= 1


class Evaluator:
    """Runs cases on harness files through the product's eval path (evaluate_case + reference judge); greedy
    decoding is deterministic, so outcomes are cached by (harness hash, case id)."""

    def __init__(self, cases: Sequence, make_backend: Callable[[], Any], say: Callable[[str], None] = print,
                 store: Path | None = None, model_key: str = ""):
        self.cases = {c.case_id: c for c in cases}
        self.make_backend, self.say = make_backend, say
        self.cache: dict[tuple[str, str], Scored] = {}
        self.turns = 0
        self.seconds = 0.0
        # Outcomes kept on disk between runs of the same model and token cap (--cache): greedy decoding
        # gives the same turn again, so a rerun pays only for harness versions it has not seen.
        self.store, self.model_key = store, model_key
        if store is not None and store.is_file():
            for key, value in json.loads(store.read_text()).get(model_key, {}).items():
                spec_hash, case_id, digest = key.split("|")
                if case_id in self.cases and digest == self._digest(case_id):  # the same case, not just its id
                    self.cache[(spec_hash, case_id)] = Scored(**{**value, "reasons": tuple(value["reasons"])})
        self.reused = 0

    def run(self, spec: HarnessSpec, case_ids: Sequence[str], label: str = "") -> dict[str, Scored]:
        todo = [c for c in case_ids if (spec.content_hash, c) not in self.cache]
        self.reused += len(case_ids) - len(todo)
        if todo:
            started = time.perf_counter()
            asyncio.run(self._run(spec, todo))
            spent = time.perf_counter() - started
            self.turns += len(todo)
            self.seconds += spent
            if label:
                self.say(f"  {label}: {len(todo)} cases in {spent:.0f} s ({spent / len(todo):.1f} s/case)")
            self.save()
        return {c: self.cache[(spec.content_hash, c)] for c in case_ids}

    async def _run(self, spec: HarnessSpec, case_ids: Sequence[str]) -> None:
        backend = self.make_backend()
        try:
            for case_id in case_ids:
                case = self.cases[case_id]
                o = await evaluate_case(suite="live_stream_qa", data=case.to_dict(), spec=spec, backend=backend,
                                        judge=judge_reference)
                self.cache[(spec.content_hash, case_id)] = Scored(o.accuracy, o.effectiveness, o.outcome,
                                                                  tuple(o.reasons), o.reply, dict(o.trace))
        finally:
            close = getattr(backend, "aclose", None)
            if close is not None:
                await close()

    def save(self) -> None:
        if self.store is None:
            return
        stored = json.loads(self.store.read_text()) if self.store.is_file() else {}
        kept = dict(stored.get(self.model_key, {}))  # other draws' outcomes stay (their keys differ in content)
        kept.update({f"{h}|{c}|{self._digest(c)}": dataclasses.asdict(s) for (h, c), s in self.cache.items()})
        stored[self.model_key] = kept
        self.store.parent.mkdir(parents=True, exist_ok=True)
        self.store.write_text(json.dumps(stored))

    def _digest(self, case_id: str) -> str:
        """Case ids repeat across simulator draws of other sizes: a stored outcome is matched on the content."""
        case = json.dumps(self.cases[case_id].to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(case.encode()).hexdigest()[:12]

    def passes(self, files: dict, case_ids: list[str]) -> dict[str, bool]:
        """What try_and_keep asks: does each case pass on these files."""
        return {c: s.passed for c, s in self.run(parse_files(files), case_ids).items()}


def records(cases: Mapping[str, Any], outcomes: Mapping[str, Scored]) -> list[CaseRecord]:
    """The diagnosis's view of evaluated cases (as evolution.records.case_records builds it); abstentions out."""
    out = []
    for case_id, o in outcomes.items():
        if o.accuracy is None or o.effectiveness is None:
            continue
        case = cases[case_id]
        out.append(CaseRecord(case_id=case_id, category=case.category, accuracy=o.accuracy,
                              effectiveness=o.effectiveness, reasons=o.reasons, reply=o.reply, message=case.message,
                              expected_skills=tuple(case.expected.skills), trace=o.trace,
                              texts=tuple(text for _, text in case.dialogue)))
    return out


def per_case(outcomes: Mapping[str, Scored]) -> dict[str, dict[str, float]]:
    """Scores as comparison_create pairs them (an abstention is unpaired, never a 0)."""
    return {c: {"accuracy": o.accuracy, "effectiveness": o.effectiveness,
                "safety_net": float(o.outcome in SAFETY_NETS)}
            for c, o in outcomes.items() if o.accuracy is not None and o.effectiveness is not None}


def accuracy(outcomes: Mapping[str, Scored]) -> tuple[float | None, list[float]]:
    values = [o.accuracy for o in outcomes.values() if o.accuracy is not None]
    if not values:
        return None, [None, None]
    return round(sum(values) / len(values), 4), [round(v, 4) for v in bootstrap_ci(values)]


def _delta(baseline: Mapping[str, Scored], candidate: Mapping[str, Scored]) -> dict:
    m = compare_runs(per_case(baseline), per_case(candidate), ["accuracy"]).metrics["accuracy"]
    return {"accuracy": {"delta": m.delta, "ci_low": m.ci_low, "ci_high": m.ci_high}}


# The loop ---------------------------------------------------------------------------------------------------

def run_loop(spec: HarnessSpec, cases: Sequence, evaluator: Evaluator, *, max_rounds: int = 4, split_seed: int = 0,
             gate_min_cases: int = 20, trial: TrialConfig = TRIALS, proposer: Callable | None = None,
             config: DiagnosisConfig = PRODUCT_DIAGNOSIS, ignore_stop: bool = False,
             say: Callable[[str], None] = print) -> dict:
    """Rounds until stop advice says stop (unless `ignore_stop`: then it is only recorded), no edit survives
    its trial, or `max_rounds`. Returns the report (without model/host/command)."""
    by_id = {c.case_id: c for c in cases}
    split = stratified_split(((c.case_id, c.category) for c in cases), seed=split_seed)
    diag_ids, gate_ids = list(split.diagnosis), list(split.gate)
    assert not set(diag_ids) & set(gate_ids)
    if len(gate_ids) < gate_min_cases:  # a gate that cannot reach its own bar would only ever say "no evidence"
        raise SystemExit(f"--gate-min-cases {gate_min_cases}: the gate split has only {len(gate_ids)} cases; "
                         "pass more --cases or a lower --gate-min-cases")
    guard = [by_id[c].message for c in gate_ids]  # only to refuse an edit that copies the gate cases' words
    gate = RegressionGate(min_cases=gate_min_cases, **GATE)

    current, outcomes = spec, evaluator.run(spec, [*diag_ids, *gate_ids], "round 0 (broken harness), all cases")
    seen = {spec.content_hash[:12]: _cases_out(outcomes)}  # every evaluated version's per-case outcomes
    d_acc, _ = accuracy({c: outcomes[c] for c in diag_ids})
    g_acc, g_ci = accuracy({c: outcomes[c] for c in gate_ids})
    rounds = [{"round": 0, "version": spec.content_hash[:12], "diagnosis_accuracy": d_acc, "gate_accuracy": g_acc,
               "gate_ci": g_ci, "accepted_edits": [], "fixed": [], "broken": [], "verdict": "baseline (broken harness)"}]
    say(f"round 0: diagnosis {d_acc} gate {g_acc} {g_ci}")
    best = {"round": 0, "version": spec.content_hash[:12], "gate_accuracy": g_acc, "gate_ci": g_ci}
    gains: list[float] = []
    rejected: set[str] = set()
    rejected_rules: dict[str, dict[str, str]] = {}
    previous: list[dict] = []
    stopped = None
    for number in range(1, max_rounds + 2):
        started = time.perf_counter()
        diag_out = {c: outcomes[c] for c in diag_ids}
        recs = records(by_id, diag_out)
        result = diagnose(recs, current, previous=previous, gains=gains, rejected=rejected, guard_texts=guard,
                          rejected_rules=rejected_rules, config=config)
        advice = result.advice
        clusters = result.clustering.clusters
        previous = [{"cluster_id": c.cluster_id, "core": c.core, "terms": list(c.terms)} for c in clusters] + previous
        if advice.stop and not ignore_stop:
            stopped = {"before_round": number, "by": "stop advice", "rule": advice.rule, "detail": advice.detail}
            break
        if number > max_rounds:
            stopped = {"before_round": number, "by": f"--max-rounds {max_rounds}", "rule": advice.rule,
                       "detail": f"stop advice said {'stop' if advice.stop else 'go on'}: {advice.detail}"}
            break
        proposals = list(result.proposals)
        proposer_runs = []
        if proposer is not None:
            made, proposer_runs = proposer(clusters, {r.case_id: r for r in recs}, current)
            texts = [*case_texts(recs), *guard]
            proposals += [validate_proposal(p, current, case_texts=texts, rejected=rejected,
                                            config=config.validation) for p in made]
        files = to_files(current)
        kept, trials = try_and_keep(proposals, clusters, files, evaluator.passes, trial) \
            if any(p.valid for p in proposals) else (proposals, [])
        trial_of = {t["fingerprint"]: t for t in trials}
        merged, accepted = dict(files), []
        for p in kept:
            t = trial_of.get(p.fingerprint)
            if not p.valid or t is None or not t["kept"] or t["fixed"] <= t["broke"]:
                continue  # a reviewer accepts only an edit its own trial showed fixing more than it broke
            try:
                merged = apply_onto(files, merged, p.diff)
            except (PatchError, ValueError):
                continue  # changes the lines an edit accepted before it changed
            accepted.append(p)
        row = {"round": number, "clusters": [{"id": c.cluster_id, "size": c.size, "signature": c.signature.key,
                                              "judge_suspect": c.judge_suspect} for c in clusters],
               "advice": advice.to_dict(), "proposals": len(proposals), "valid": sum(p.valid for p in proposals),
               "tried": len(trials), "proposer_runs": proposer_runs,
               "proposed": [{"generator": p.generator, "target": p.target, "cluster": p.cluster_id,
                             "hypothesis": p.hypothesis[:300], "valid": p.valid, "errors": list(p.errors)[:2],
                             "trial": trial_of.get(p.fingerprint)} for p in kept][:20],
               }
        if not accepted:
            stopped = {"before_round": number, "by": "no edit survived its trial",
                       "rule": advice.rule, "detail": f"{len(proposals)} proposed, {row['valid']} valid, "
                                                      f"{len(trials)} tried, none fixed more than it broke"}
            rounds.append({**row, "diagnosis_accuracy": None, "gate_accuracy": None, "gate_ci": [None, None],
                           "accepted_edits": [], "fixed": [], "broken": [], "verdict": "no candidate",
                           "wall_s": round(time.perf_counter() - started, 1)})
            break
        candidate = parse_files(merged)
        cand = evaluator.run(candidate, [*diag_ids, *gate_ids], f"round {number} candidate, all cases")
        seen[candidate.content_hash[:12]] = _cases_out(cand)
        base_gate, cand_gate = {c: outcomes[c] for c in gate_ids}, {c: cand[c] for c in gate_ids}
        base_diag, cand_diag = diag_out, {c: cand[c] for c in diag_ids}
        verdict = gate.check(per_case(base_gate), per_case(cand_gate))
        d_acc, _ = accuracy(cand_diag)
        g_acc, g_ci = accuracy(cand_gate)
        g_delta, d_delta = _delta(base_gate, cand_gate), _delta(base_diag, cand_diag)
        rounds.append({
            **row, "version": candidate.content_hash[:12], "diagnosis_accuracy": d_acc, "gate_accuracy": g_acc,
            "gate_ci": g_ci, "gate_delta": g_delta["accuracy"], "diagnosis_delta": d_delta["accuracy"],
            "accepted_edits": [{"generator": p.generator, "target": p.target, "cluster": p.cluster_id,
                                "hypothesis": p.hypothesis, "trial": trial_of[p.fingerprint], "diff": p.diff}
                               for p in accepted],
            "fixed": sorted(c for c in gate_ids if cand[c].passed and not outcomes[c].passed),
            "broken": sorted(c for c in gate_ids if outcomes[c].passed and not cand[c].passed),
            "diagnosis_fixed": sorted(c for c in diag_ids if cand[c].passed and not outcomes[c].passed),
            "diagnosis_broken": sorted(c for c in diag_ids if outcomes[c].passed and not cand[c].passed),
            "verdict": verdict.verdict, "gate_reasons": list(verdict.reasons),
            "fitted": fitted(d_delta, g_delta), "promoted": verdict.passed,
            "wall_s": round(time.perf_counter() - started, 1)})
        say(f"round {number}: {len(accepted)} edit(s) → diagnosis {d_acc} gate {g_acc} {g_ci}: {verdict.verdict}")
        if verdict.passed:  # a person promotes the candidate that passed; it is the next round's base
            current, outcomes = candidate, cand
            gains.append(g_delta["accuracy"]["delta"] or 0.0)
            if g_acc is not None and (best["gate_accuracy"] is None or g_acc > best["gate_accuracy"]):
                best = {"round": number, "version": candidate.content_hash[:12], "gate_accuracy": g_acc,
                        "gate_ci": g_ci}
        else:  # rejected: its edits are not proposed again, and their rules not for the same failure signature
            rejected |= {p.fingerprint for p in accepted}
            cores = {c.cluster_id: c.core for c in clusters}
            for p in accepted:
                rejected_rules.setdefault(cores.get(p.cluster_id, ""), {})[p.generator] = \
                    f"the round's candidate failed the gate: {'; '.join(verdict.reasons)}"[:300]
    return {"split": {"seed": split_seed, "stratified_by": "category"}, "diagnosis_case_ids": diag_ids,
            "gate_case_ids": gate_ids, "rounds": rounds, "stopped": stopped, "best": best,
            "final_version": current.content_hash[:12],
            "gate": {**GATE, "metrics": list(GATE["metrics"]), "min_cases": gate_min_cases}, "outcomes": seen}


def _cases_out(outcomes: Mapping[str, Scored]) -> dict:
    return {c: {"accuracy": o.accuracy, "effectiveness": o.effectiveness, "outcome": o.outcome,
                "reasons": list(o.reasons)[:3], "reply": o.reply[:200],
                "skills": list(o.trace.get("skills_loaded") or ()), "tools": list(o.trace.get("tools_called") or ())}
            for c, o in sorted(outcomes.items())}


# Models -----------------------------------------------------------------------------------------------------

class Capped:
    """Bounds every call's new tokens (the CPU-time bound), passing the harness's decoding constraint on."""

    def __init__(self, inner: Any, max_new_tokens: int):
        self.inner, self.max_new_tokens = inner, max_new_tokens
        self.name = getattr(inner, "name", "?")
        self.constrains_tool_calls = getattr(inner, "constrains_tool_calls", False)

    async def complete(self, messages, tools, *, max_tokens: int = 512, **kwargs):
        return await self.inner.complete(messages, tools, max_tokens=min(max_tokens, self.max_new_tokens), **kwargs)

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


def local_model(path: str | None) -> Path:
    """What `make run` serves: the built default (var/models), else refuse (a base model is not the default)."""
    if path:
        return Path(path)
    from training.default_model import built_path, manifest

    var = Path(os.environ.get("HARNESSOPS_VAR_DIR", str(ROOT / "var")))
    built = built_path(var)
    if built is None:
        if manifest() is None:
            from serving.backends.local import default_model_path

            return default_model_path()  # the project ships no trained default: the base is what it serves
        raise SystemExit("the offline default is not built: run `.venv/bin/python manage.py build_default_model`")
    return built


def model_proposer(make_backend: Callable[[], Any]) -> Callable:
    """The proposer harness on the same model, for the top actionable clusters, two variants each (as a
    diagnosis with a proposer configured runs it)."""
    from evaluation.evolution.proposer import HarnessProposer

    def propose(clusters, by_id, spec):
        proposer = HarnessProposer(make_backend)
        targets = [c for c in clusters if not c.judge_suspect][:PROPOSER_CLUSTERS]

        async def run_all():
            return [await proposer(c, by_id, spec, variant=v) for c in targets for v in range(PROPOSER_VARIANTS_)]

        made, seen = [], set()
        for p in asyncio.run(run_all()):
            if p is not None and (p.cluster_id, p.fingerprint) not in seen:
                seen.add((p.cluster_id, p.fingerprint))
                made.append(p)
        return made, proposer.runs

    return propose


def host() -> dict:
    cpu = platform.processor() or ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "cores": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in load or ()],
            "python": platform.python_version()}


# Report -----------------------------------------------------------------------------------------------------

def _pct(value) -> str:
    return "—" if value is None else f"{value:.3f}"


def render_md(report: dict) -> str:
    m, h = report["model"], report["host"]
    lines = [
        "# Harness evolution with a real frozen model (issue 43, item 7)", "",
        f"Model: `{m['name']}` on the `{m['backend']}` backend (frozen; greedy; at most {report['max_new_tokens']} "
        f"new tokens per model call). Judge: the reference judge. Host: {h['cpu']}, {h['cores']} cores "
        f"(load average {h['load_average_at_start']} at the start, shared with other work). "
        f"Wall time {report['wall_s']:.0f} s ({report['model_turns']} case evaluations"
        + (f"; {report['reused_from_cache']} more reused from --cache" if report.get("reused_from_cache") else "")
        + ").", "",
        f"Command: `{report['command']}`", "",
        f"Cases: {report['cases']} simulated (seed {report['case_seed']}), split by the product's seeded stratified "
        f"split (seed {report['split']['seed']}) into {len(report['diagnosis_case_ids'])} diagnosis and "
        f"{len(report['gate_case_ids'])} gate cases. Diagnoses, proposals and trials read only the diagnosis cases; "
        "the gate and the gate figures read only the gate cases.", "",
        "Starting harness: `harness/demo/compact` broken four ways (none of which a rule or the proposer was "
        "written for):", ""]
    lines += [f"- `{b['name']}` ({b['file']}): {b['kind']}" for b in report["breakages"]]
    if report.get("deadline_s"):
        lines += ["", f"(The turn deadline was raised from 15 s to {report['deadline_s']:g} s on the starting "
                      "harness: a shared 2-core CPU, not a breakage.)"]
    if report.get("reference"):
        r = report["reference"]
        lines += ["", f"For scale, the unbroken compact harness on the same cases: diagnosis "
                      f"{_pct(r['diagnosis_accuracy'])}, gate {_pct(r['gate_accuracy'])} {r['gate_ci']}."]
    lines += ["", "| round | diagnosis acc | gate acc [95% CI] | edits accepted | gate fixed / broken | verdict |",
              "|---:|---:|---|---|---:|---|"]
    for r in report["rounds"]:
        edits = ", ".join(f"{e['generator']} → {e['target']}" for e in r["accepted_edits"]) or "—"
        ci = "" if r["gate_ci"][0] is None else f" [{r['gate_ci'][0]:.3f}, {r['gate_ci'][1]:.3f}]"
        lines.append(f"| {r['round']} | {_pct(r['diagnosis_accuracy'])} | {_pct(r['gate_accuracy'])}{ci} | {edits} | "
                     f"{len(r['fixed'])} / {len(r['broken'])} | {r['verdict']} |")
    s, b = report["stopped"], report["best"]
    lines += ["", f"Stopped before round {s['before_round']}: {s['by']} ({s['rule']}: {s['detail']}).",
              f"Best on the gate split: round {b['round']} (version {b['version']}), gate accuracy "
              f"{_pct(b['gate_accuracy'])} {b['gate_ci']}.", ""]
    for r in report["rounds"][1:]:
        lines.append(f"- Round {r['round']}: stop advice before it: {'stop' if r['advice']['stop'] else 'go on'} "
                     f"({r['advice']['rule']}); {r['proposals']} proposals, {r['valid']} valid, {r['tried']} tried on "
                     f"diagnosis cases; clusters: "
                     + (", ".join(f"{c['signature']} ({c['size']})" for c in r["clusters"]) or "none") + ".")
        if r.get("proposer_runs"):
            runs = r["proposer_runs"]
            lines.append(f"  - proposer harness on the same model: {len(runs)} runs, "
                         f"{sum(1 for x in runs if x['outcome'] == 'replied')} answered in the diff form; "
                         + "; ".join(sorted({x['reason'] for x in runs if x['reason']}))[:200])
        for e in r.get("proposed", ()):
            t = e["trial"]
            tried = f"trial fixed {t['fixed']}/{t['of']}, broke {t['broke']}/{t['of_passing']}" if t else "not tried"
            why = "" if e["valid"] else f" (refused: {'; '.join(e['errors'])[:160]})"
            lines.append(f"  - proposed {e['generator']} → `{e['target']}`: {tried}{why}. {e['hypothesis'][:160]}")
        for e in r["accepted_edits"]:
            t = e["trial"]
            lines.append(f"  - accepted {e['generator']} → `{e['target']}`: trial fixed {t['fixed']}/{t['of']}, "
                         f"broke {t['broke']}/{t['of_passing']}. {e['hypothesis']}")
        if r.get("gate_reasons"):
            lines.append(f"  - gate: {'; '.join(r['gate_reasons'])}")
        if r.get("fitted"):
            lines.append(f"  - {r['fitted']}")
    lines += ["", "## Reading", "", report.get("reading", "(not written)"), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=48, help="simulated cases (all categories)")
    parser.add_argument("--seed", type=int, default=4307, help="case seed")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--max-rounds", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: all cores)")
    parser.add_argument("--deadline", type=float, default=60.0, help="turn deadline of the starting harness (s)")
    parser.add_argument("--gate-min-cases", type=int, default=20)
    parser.add_argument("--trial-failing", type=int, default=3, help="cluster cases each proposal is tried on")
    parser.add_argument("--trial-passing", type=int, default=2, help="passing cases each proposal is tried on")
    parser.add_argument("--breakages", default=",".join(b[0] for b in BREAKAGES))
    parser.add_argument("--proposer", action="store_true", help="also run the proposer harness on the same model")
    parser.add_argument("--proposer-max-new-tokens", type=int, default=384, help="the proposer's cap (a diff is long)")
    parser.add_argument("--reference", action="store_true", help="also evaluate the unbroken harness, for scale")
    parser.add_argument("--model-path", help="a GGUF for the local backend (default: the built offline default)")
    parser.add_argument("--openai-base-url", help="an OpenAI-compatible server instead of llama.cpp")
    parser.add_argument("--model", help="the model name on that server")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    parser.add_argument("--write", help="write the JSON here and the Markdown beside it (.md)")
    parser.add_argument("--reading", default="", help="text for the Markdown's Reading section")
    parser.add_argument("--ignore-stop-advice", action="store_true",
                        help="record the stop advice but run rounds until --max-rounds or no candidate")
    parser.add_argument("--cache", help="keep case outcomes in this JSON file and reuse them (same model, cap)")
    parser.add_argument("--render", help="only re-render this JSON's Markdown (with --reading), running nothing")
    args = parser.parse_args()
    if args.render:
        source = Path(args.render)
        report = json.loads(source.read_text())
        report["reading"] = args.reading or report.get("reading", "")
        source.write_text(json.dumps(report, indent=1) + "\n")
        source.with_suffix(".md").write_text(render_md(report))
        return
    started = time.perf_counter()
    report_host = host()
    if args.openai_base_url:
        if not args.model:
            parser.error("--model is required with --openai-base-url")
        from serving.backends import create_backend

        model = {"backend": "openai", "name": args.model, "base_url": args.openai_base_url}

        def make_backend():
            return Capped(create_backend("openai", base_url=args.openai_base_url, model=args.model,
                                         api_key=os.environ.get(args.api_key_env, ""), timeout_s=120.0),
                          args.max_new_tokens)
    else:
        from serving.backends.local import LocalBackend

        path = local_model(args.model_path)
        model = {"backend": "local (llama.cpp)", "name": path.name}

        def make_backend():
            return Capped(LocalBackend(path, n_threads=args.threads), args.max_new_tokens)

    names = [n for n in args.breakages.split(",") if n]
    unknown = set(names) - {b[0] for b in BREAKAGES}
    if unknown:
        parser.error(f"--breakages: unknown {', '.join(sorted(unknown))}")
    spec, applied = broken_harness(names, deadline_s=args.deadline)
    cases = eval_cases(args.seed, args.cases)
    evaluator = Evaluator(cases, make_backend, store=Path(args.cache) if args.cache else None,
                          model_key=f"{model['backend']}|{model['name']}|{args.max_new_tokens}")
    print(f"{model['backend']} {model['name']}; {len(cases)} cases; breakages {', '.join(names)}", flush=True)
    reference = None
    report = run_loop(spec, cases, evaluator, max_rounds=args.max_rounds, split_seed=args.split_seed,
                      gate_min_cases=args.gate_min_cases,
                      trial=TrialConfig(failing=args.trial_failing, passing=args.trial_passing),
                      proposer=model_proposer(lambda: Capped(make_backend().inner, args.proposer_max_new_tokens))
                      if args.proposer else None,
                      ignore_stop=args.ignore_stop_advice,
                      say=lambda line: print(line, flush=True))
    if args.reference:
        clean, _ = broken_harness([], deadline_s=args.deadline)
        out = evaluator.run(clean, [*report["diagnosis_case_ids"], *report["gate_case_ids"]], "unbroken harness")
        d, _ = accuracy({c: out[c] for c in report["diagnosis_case_ids"]})
        g, ci = accuracy({c: out[c] for c in report["gate_case_ids"]})
        reference = {"diagnosis_accuracy": d, "gate_accuracy": g, "gate_ci": ci}
    report = {"model": model, "command": "python benchmarks/evolution.py " + " ".join(sys.argv[1:]),
              "host": report_host, "cases": len(cases), "case_seed": args.seed, "breakages": applied,
              "deadline_s": args.deadline, "max_new_tokens": args.max_new_tokens, **report,
              "reference": reference, "model_turns": evaluator.turns, "reused_from_cache": evaluator.reused,
              "eval_seconds": round(evaluator.seconds, 1), "wall_s": round(time.perf_counter() - started, 1),
              "finished_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "reading": args.reading}
    print(render_md(report))
    if args.write:
        target = Path(args.write)
        target.write_text(json.dumps(report, indent=1) + "\n")
        target.with_suffix(".md").write_text(render_md(report))


if __name__ == "__main__":
    main()
