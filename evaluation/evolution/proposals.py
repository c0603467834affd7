"""Proposed harness edits, and the offline rule catalogue that writes them. Pure: no Django.

A proposal is a root-cause hypothesis plus a minimal unified diff against the canonical files of the
version the diagnosis read (`base_hash`), with its rationale and evidence case ids, and the name of the
generator that made it (`rules:<rule>` here, `proposer:<spec hash>/<model>` for the model-run proposer).

The rule catalogue maps common signatures to real edits, made on the spec value and diffed in canonical
form (so the diff is what an operator would have written in the file editor):

- `skill-trigger` — an expected reply skill was never loaded: add a trigger line (the short phrases the
  failing viewers used) to that skill's description, where the model chooses skills.
- `reply-length` — facts went missing while a reply-length hook cut or rewrote the reply: a number in a
  prompt block that contradicts the `reply_max_chars` setting becomes `{{ reply_max_chars }}`; without
  one, the constraint is stated in the constraints block.
- `tool-argument-precondition` — a tool call was denied or failed for its arguments: the tool's
  description states the precondition its own JSON schema declares, replacing a sentence that
  misdescribes the argument.
- `tool-not-called` — a skill was loaded but the expected tool never called: the skill gets a rule line
  to call it (and lists it in `allowed-tools`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from evaluation.evolution.clusters import FailureCluster
from evaluation.evolution.patches import changed_lines, make_diff
from evaluation.evolution.signatures import CaseRecord
from harness.spec import HarnessSpec, to_files

RULES_GENERATOR = "rules"
_STOPWORDS = set("""a an the and or but is are was were be been am i you me my your it its this that these those
to of in on at for with from by as do does did can could would should will just so if then than too very
please pls u ur hi hey hello what whats how who when where which why there here any some much many
have has had not no yes ok okay get got one""".split())


@dataclass(frozen=True)
class Proposal:
    cluster_id: str
    generator: str
    hypothesis: str
    rationale: str
    diff: str
    base_hash: str
    evidence: tuple[str, ...] = ()
    target: str = ""  # the file the edit is mainly about
    finish_reason: str = "stop"  # the model's; "length" means its output was cut off
    errors: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def fingerprint(self) -> str:
        """Identifies the edit itself (its changed lines), so a rejected edit is recognised when proposed again."""
        added, removed = changed_lines(self.diff)
        canon = "\n".join(["-" + " ".join(x.split()) for x in removed] + ["+" + " ".join(x.split()) for x in added])
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return {"cluster_id": self.cluster_id, "generator": self.generator, "hypothesis": self.hypothesis,
                "rationale": self.rationale, "diff": self.diff, "base_hash": self.base_hash,
                "evidence": list(self.evidence), "target": self.target, "finish_reason": self.finish_reason,
                "errors": list(self.errors), "fingerprint": self.fingerprint}


@dataclass(frozen=True)
class Rule:
    name: str
    claims: str  # the signature it handles, in words (docs and the review page show it)
    propose: Callable[[FailureCluster, Mapping[str, CaseRecord], HarnessSpec], Proposal | None]


RULES: dict[str, Rule] = {}


def rule(name: str, claims: str):
    """Register a rule of the catalogue under `name` (registries by name)."""
    def decorator(fn):
        RULES[name] = Rule(name, claims, fn)
        return fn
    return decorator


def propose_by_rules(clusters: Sequence[FailureCluster], records: Mapping[str, CaseRecord],
                     spec: HarnessSpec, *, rejected_rules: Mapping[str, Mapping[str, str]] | None = None
                     ) -> list[Proposal]:
    """Every catalogue rule's edits (a rule may write a few variants) for every actionable cluster
    (judge-suspect clusters get none). `rejected_rules` maps a signature core to the rules an operator rejected
    for it, with the reason: such a rule is not run for a cluster of that core again (the reason steers the
    rules as it steers the model proposer)."""
    out = []
    for cluster in clusters:
        if cluster.judge_suspect:
            continue
        refused = (rejected_rules or {}).get(cluster.core, {})
        for entry in RULES.values():
            if f"{RULES_GENERATOR}:{entry.name}" in refused:
                continue
            made = entry.propose(cluster, records, spec)
            for proposal in made if isinstance(made, list) else [made]:
                if proposal is not None and proposal.diff:
                    out.append(proposal)
    return out


def _proposal(cluster: FailureCluster, name: str, spec: HarnessSpec, edited: HarnessSpec, *, hypothesis: str,
              rationale: str, target: str) -> Proposal | None:
    diff = make_diff(to_files(spec), to_files(edited))
    if not diff:
        return None
    evidence = tuple(dict.fromkeys((cluster.centre_case, cluster.boundary_case, *cluster.case_ids)))[:5]
    return Proposal(cluster_id=cluster.cluster_id, generator=f"{RULES_GENERATOR}:{name}", hypothesis=hypothesis,
                    rationale=rationale, diff=diff, base_hash=spec.content_hash, evidence=evidence, target=target)


def _replace_module(spec: HarnessSpec, attribute: str, name: str, **changes) -> HarnessSpec:
    modules = tuple(dataclasses.replace(m, **changes) if m.name == name else m for m in getattr(spec, attribute))
    return dataclasses.replace(spec, **{attribute: modules})


# The catalogue ----------------------------------------------------------------------------------------

def trigger_phrases(messages: Sequence[str], description: str, *, limit: int = 4) -> list[str]:
    """Short phrases (2-3 words, or content words; no stop-word edges) from the failing messages, absent from
    the description, most shared first (only shared ones when any repeat). Never five words: nothing is
    copied whole."""
    counts: Counter[str] = Counter()
    for message in messages:
        words = re.findall(r"[a-z][a-z']*", message.lower())
        seen = set()
        for n in (3, 2):
            for i in range(len(words) - n + 1):
                gram = words[i:i + n]
                if gram[0] in _STOPWORDS or gram[-1] in _STOPWORDS:
                    continue
                seen.add(" ".join(gram))
        seen |= {w for w in words if w not in _STOPWORDS and len(w) > 3}
        counts.update(seen)
    known = description.lower()
    ranked = sorted((p for p in counts if p not in known), key=lambda p: (-counts[p], -len(p.split()), p))
    shared = 2 if ranked and counts[ranked[0]] >= 2 else 1  # phrases several viewers used, when there are any
    chosen: list[str] = []
    for phrase in ranked:
        if counts[phrase] < shared:
            break
        if any(phrase in c or c in phrase for c in chosen):
            continue
        chosen.append(phrase)
        if len(chosen) == limit:
            break
    return chosen


@rule("skill-trigger", "an expected reply skill was not loaded (judge check `skills`, signature missing_skill)")
def _skill_trigger(cluster, records, spec):
    sig = cluster.signature
    if "skills" not in sig.checks or not sig.skills_missing:
        return None
    name = next((s for s in sig.skills_missing if s in {k.name for k in spec.skills}), None)
    if name is None:
        return None
    skill = spec.skill(name)
    messages = [records[i].message for i in cluster.case_ids if i in records]
    variants, seen = [], set()
    for limit in SKILL_TRIGGER_VARIANTS:  # a few variants; trying them on diagnosis cases keeps the best
        phrases = tuple(trigger_phrases(messages, skill.description, limit=limit))
        if not phrases or phrases in seen:
            continue
        seen.add(phrases)
        line = " Also use it when a viewer asks about " + ", ".join(f'"{p}"' for p in phrases) + "."
        named, loaded = ", ".join(f"“{p}”" for p in phrases), ", ".join(sig.skills_loaded) or "none"
        edited = _replace_module(spec, "skills", name, description=skill.description.rstrip() + line)
        variants.append(_proposal(cluster, "skill-trigger", spec, edited, target=f"skills/{name}/SKILL.md",
                                  hypothesis=f"The model never loads {name}: its description lacks the triggers "
                                             "these viewers use.",
                                  rationale=f"{cluster.size} failures expected {name} and loaded {loaded}; the skill "
                                            f"is chosen from its description, so it names the phrases {named}."))
    return variants


SKILL_TRIGGER_VARIANTS = (4, 2)  # phrases named: more triggers, or fewer (less to mislead other skills)

_CHAR_LIMIT = re.compile(r"(\b(?:at most|max(?:imum)?|up to|under|within|no more than)\s+)(\d+)(\s+characters)", re.I)


def _length_hooks(spec: HarnessSpec) -> set[str]:
    return {h.name for h in spec.hooks if h.event == "reply" and h.condition.kind == "length"
            and h.action in ("rewrite", "block", "retry_with_feedback", "fallback")}


@rule("reply-length", "facts missing while a reply-length hook cut or rewrote the reply")
def _reply_length(cluster, records, spec):
    sig = cluster.signature
    if "facts" not in sig.checks or not set(sig.hooks_fired) & _length_hooks(spec):
        return None
    limit = spec.settings.reply_max_chars
    for block in spec.prompt:
        match = _CHAR_LIMIT.search(block.template)
        if match and int(match.group(2)) != limit:
            template = _CHAR_LIMIT.sub(lambda m: m.group(1) + "{{ reply_max_chars }}" + m.group(3), block.template, 1)
            edited = _replace_module(spec, "prompt", block.name, template=template,
                                     variables=tuple(sorted({*block.variables, "reply_max_chars"})))
            return _proposal(cluster, "reply-length", spec, edited, target=f"prompt/{block.order:02d}-{block.name}.md",
                             hypothesis=f"The prompt allows {match.group(2)} characters but the length hook cuts at "
                                        f"{limit}, so the facts at the end of replies are cut off.",
                             rationale="The limit stated to the model comes from the setting the hook enforces, "
                                       "so the two can no longer disagree.")
    block = next((b for b in spec.prompt if "constraint" in b.name), None)
    line = ("- Keep the whole reply within {{ reply_max_chars }} characters and state the fact asked for first: "
            "longer replies are cut at that length.")
    if block is None or line in block.template:
        return None
    template = block.template + "\n" + line
    edited = _replace_module(spec, "prompt", block.name, template=template,
                             variables=tuple(sorted({*block.variables, "reply_max_chars"})))
    return _proposal(cluster, "reply-length", spec, edited, target=f"prompt/{block.order:02d}-{block.name}.md",
                     hypothesis="Replies run past the length limit and the hook cuts off the facts.",
                     rationale="States the limit and asks for the fact first, so a cut reply still answers.")


@rule("tool-argument-precondition", "a tool call was denied by an argument hook or failed for its arguments")
def _tool_precondition(cluster, records, spec):
    sig = cluster.signature
    if not sig.failing_tool or not (sig.error_class.startswith("denied:") or sig.error_class == "invalid_arguments"):
        return None
    try:
        tool = spec.tool(sig.failing_tool)
    except KeyError:
        return None
    properties = tool.parameters.get("properties") or {}
    required = [p for p in tool.parameters.get("required") or properties if p in properties]
    conditions = []
    for name in required:
        schema = properties[name]
        what = schema.get("description", "").rstrip(".")
        form = f"matching {schema['pattern']}" if schema.get("pattern") else f"of type {schema.get('type', 'any')}"
        what = (what[:1].lower() + what[1:]) if what else "the documented value"
        conditions.append(f"{name} must be {what} ({form}), never a name or free text")
    if not conditions:
        return None
    precondition = "Precondition: " + "; ".join(conditions) + "."
    if precondition in tool.description:
        return None
    sentences = re.split(r"(?<=[.!?])\s+", tool.description.strip())
    kept = [s for s in sentences if not any(re.search(rf"\b{re.escape(n)}\b", s) for n in required)]
    description = " ".join([*kept, precondition])
    edited = _replace_module(spec, "tools", tool.name, description=description)
    dropped = [s for s in sentences if s not in kept]
    return _proposal(cluster, "tool-argument-precondition", spec, edited, target=f"tools/{tool.name}.json",
                     hypothesis=f"The model calls {tool.name} with arguments its schema refuses "
                                f"({sig.error_class}); the description does not state the precondition.",
                     rationale="The tool's description now states what its own JSON schema requires"
                               + (f", replacing {len(dropped)} sentence(s) that describe the argument otherwise" if dropped else "")
                               + ".")


_NOT_CALLED = re.compile(r"expected tool call not made: ([\w.-]+)\(")


@rule("tool-not-called", "a reply skill was loaded but an expected tool was never called")
def _tool_not_called(cluster, records, spec):
    sig = cluster.signature
    if "tools" not in sig.checks or "skills" in sig.checks or sig.failing_tool or not sig.skills_loaded:
        return None  # with the wrong skill loaded, the skill choice is the cause (skill-trigger's business)
    missing = Counter(m.group(1) for i in cluster.case_ids if i in records
                      for reason in records[i].reasons if (m := _NOT_CALLED.search(reason)))
    if not missing:
        return None
    tool_name = missing.most_common(1)[0][0]
    if tool_name not in {t.name for t in spec.tools}:
        return None
    skills = [s for s in sig.skills_loaded if s in {k.name for k in spec.skills} and spec.skill(s).kind == "reply"]
    if not skills:
        return None
    skill = spec.skill(skills[0])
    numbered = re.findall(r"^(\d+)\.", skill.body, re.M)
    line = (f"{int(numbered[-1]) + 1 if numbered else 1}. Call {tool_name} before answering; state only what it "
            f"returns.")
    if f"Call {tool_name} before answering" in skill.body:
        return None
    allowed = skill.allowed_tools if tool_name in skill.allowed_tools or not skill.allowed_tools else (
        *skill.allowed_tools, tool_name)
    edited = _replace_module(spec, "skills", skill.name, body=skill.body + "\n" + line, allowed_tools=allowed)
    return _proposal(cluster, "tool-not-called", spec, edited, target=f"skills/{skill.name}/SKILL.md",
                     hypothesis=f"{skill.name} is loaded but its rules never make the model call {tool_name}.",
                     rationale=f"{missing[tool_name]} failures expected a {tool_name} call after loading {skill.name}.")
