"""Harness evolution end to end: break the demo harness on purpose, then diagnose → offline rule proposals →
accept every valid one → eval → regression gate, for up to three rounds, on simulator cases with the
reference judge. Prints accuracy/effectiveness per round, cluster count, proposals made / valid / accepted,
wall time, and the share of the broken cases the loop recovered.

    .venv/bin/python benchmarks/evolution.py [--n 120] [--seed 7] [--rounds 3]

The model is `HarnessReader`, a deterministic stand-in that does exactly what the harness text tells it
(no weights: the offline SmolLM2-135M is too weak to respond to edits, and no GPU model is reachable
here). It picks a reply skill by the quoted trigger phrases in the skills' descriptions, passes tool
arguments the way the tool's description says, and writes replies to the length the prompt states. So a
breakage in the harness text shows up in its behaviour, and an edit to the text can repair it, which is
what the loop needs to be measured; it says nothing about how well a real model follows a given edit.

The loop runs the same pure core the console's services call (evaluation.evolution.diagnosis, patches,
evaluation.execution.evaluate_case, evaluation.metrics.compare.RegressionGate), without a database.
"""

import argparse
import asyncio
import dataclasses
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluation.evolution.diagnosis import diagnose  # noqa: E402
from evaluation.evolution.patches import apply_onto  # noqa: E402
from evaluation.evolution.signatures import CaseRecord  # noqa: E402
from evaluation.execution import evaluate_case  # noqa: E402
from evaluation.judges.reference import judge_reference  # noqa: E402
from evaluation.metrics.compare import RegressionGate  # noqa: E402
from harness.model_protocol import ModelResponse, ToolCall  # noqa: E402
from harness.simulator import generate_cases, generate_room  # noqa: E402
from harness.spec import HarnessSpec, parse_files, read_dir  # noqa: E402
from serving.backends.scripted import ScriptedBackend  # noqa: E402

DEMO = ROOT / "harness" / "demo" / "avatar"


# The breakages: what an operator might plausibly do to a working harness. Kept here, never in the proposer.

def drop_product_triggers(spec: HarnessSpec) -> HarnessSpec:
    """product-qa's description loses its 'Use when …' trigger sentence."""
    skill = spec.skill("product-qa")
    description = re.sub(r"\s*Use when .*$", "", skill.description)
    return _replace(spec, "skills", "product-qa", description=description)


def misleading_tool_description(spec: HarnessSpec) -> HarnessSpec:
    """The product tool's description tells the model to pass the product's name as link_id."""
    tool = spec.tool("get_product_info_by_link_id")
    return _replace(spec, "tools", tool.name, description=tool.description + " Pass the product's name as link_id.")


def contradicting_length(spec: HarnessSpec) -> HarnessSpec:
    """The constraints block states 400 characters while the reply-length hook cuts at reply_max_chars."""
    block = next(b for b in spec.prompt if b.name == "constraints")
    template = block.template.replace("at most {{ reply_max_chars }} characters", "at most 400 characters")
    return _replace(spec, "prompt", block.name, template=template,
                    variables=tuple(v for v in block.variables if v != "reply_max_chars"))


BREAKAGES = (drop_product_triggers, misleading_tool_description, contradicting_length)


def _replace(spec, attribute, name, **changes):
    modules = tuple(dataclasses.replace(m, **changes) if m.name == name else m for m in getattr(spec, attribute))
    return dataclasses.replace(spec, **{attribute: modules})


# The model: follows the harness text literally ---------------------------------------------------------

_SKILL = re.compile(r"<name>(.*?)</name>\s*<description>(.*?)</description>\s*<kind>(.*?)</kind>", re.S)
_LIMIT = re.compile(r"at most (\d+) characters")
_LINK = re.compile(r"\bL\d{3}\b")
FIELD_WORDS = {
    "price": ("price", "cost", "much", "$", "deal", "cheaper", "expensive", "pay"),
    "stock": ("stock", "left", "available", "sold out", "size", "have"),
    "colours": ("colour", "color", "come in", "black", "white", "blue", "red", "green", "pink", "grey"),
    "specs": ("made", "material", "fabric", "weight", "wash", "dishwasher", "warranty", "battery", "capacity",
              "waterproof", "fit", "ingredients", "volume", "size of", "how big", "dimensions"),
}


class HarnessReader:
    """`(messages, tools) -> ModelResponse`: one deterministic turn that reads only what the harness shows."""

    def __call__(self, messages, tools):
        system, user = messages[0]["content"], messages[1]["content"]
        viewer = user.rsplit("] ", 1)[-1].lower()
        called = [c["function"]["name"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
        results = [m for m in messages if m["role"] == "tool"]
        if "load_skill" not in called:
            return self._call("load_skill", {"name": self._choose_skill(system, viewer)})
        skill = json.loads(next(c["function"]["arguments"] for m in messages if m["role"] == "assistant"
                                for c in m.get("tool_calls") or () if c["function"]["name"] == "load_skill"))["name"]
        tool = next((t for t in tools if t["function"]["name"] == "get_product_info_by_link_id"), None)
        if skill == "product-qa" and tool and "get_product_info_by_link_id" not in called:
            link_id = self._link_id(user)
            return self._call(tool["function"]["name"], {"link_id": self._argument(tool, link_id, system)})
        product = None
        for m in results:
            try:
                data = json.loads(m["content"])
            except ValueError:
                continue  # a skill's body, not a tool result
            if isinstance(data, dict) and "link_id" in data:
                product = data
        if product is None:
            return ModelResponse(content="Thanks for watching, so glad you're here!")
        return ModelResponse(content=self._reply(product, viewer, system))

    @staticmethod
    def _call(name, arguments):
        return ModelResponse(tool_calls=(ToolCall(f"call_{name}", name, json.dumps(arguments)),))

    @staticmethod
    def _choose_skill(system, viewer):
        """Quoted trigger phrases weigh most; words the message shares with the description break ties."""
        words = {w for w in re.findall(r"[a-z]+", viewer) if len(w) > 3}
        best, score = "casual-chat", 0
        for name, description, kind in _SKILL.findall(system):
            if kind != "reply":
                continue
            triggers = re.findall(r'"([^"]+)"', description)
            phrases = [t.lower().strip("?!. ") for t in triggers]
            hits = 3 * sum(len(t) for t in phrases if t and t in viewer)
            hits += sum(1 for w in words if re.search(rf"\b{w}", description.lower()))
            if hits > score:
                best, score = name, hits
        return best

    @staticmethod
    def _link_id(user):
        message = user.rsplit("] ", 1)[-1]
        mentioned = _LINK.findall(message.upper())
        if mentioned:
            return mentioned[0]
        number = re.search(r"(?:#|number |no\.? ?)(\d{1,3})\b", message.lower())
        if number:
            return f"L{int(number.group(1)):03d}"
        on_screen = re.search(r"Product on screen: (L\d{3}) · ([^\n]*)", user)
        return on_screen.group(1) if on_screen else ""

    @staticmethod
    def _argument(tool, link_id, system):
        if re.search(r"name as link_id", tool["function"]["description"]):
            match = re.search(rf"- {link_id} · ([^·\n]+) ·", system)
            return match.group(1).strip() if match else link_id
        return link_id

    @staticmethod
    def _reply(product, viewer, system):
        limit = int(m.group(1)) if (m := _LIMIT.search(system)) else 150
        parts = {"price": f"${product.get('promo_price') or product.get('price')} now"
                          + (f" (was ${product['price']})" if product.get("promo_price") else ""),
                 "stock": ", ".join(f"{k}: {v} left" for k, v in (product.get("stock") or {}).items())
                 if isinstance(product.get("stock"), dict) else "",
                 "colours": "comes in " + ", ".join(product.get("colours") or ()) if product.get("colours") else "",
                 "specs": "; ".join(f"{k} {v}" for k, v in (product.get("specs") or {}).items())}
        wanted = [f for f, words in FIELD_WORDS.items() if any(w in viewer for w in words)] or ["price"]
        facts = [parts[f] for f in wanted if parts[f]]
        # Given room, it opens with a friendly line and the product's description, as chatty models do.
        opening = f"Great pick! The {product.get('name')}: {product.get('description', '')} " if limit > 200 else ""
        return (opening + ". ".join(facts) + ".")[:limit]


# The loop ----------------------------------------------------------------------------------------------

async def evaluate(spec, cases):
    backend = ScriptedBackend([HarnessReader()], cycle=True)
    outcomes = {}
    for case in cases:
        outcomes[case.case_id] = await evaluate_case(suite="live_stream_qa", data=case.to_dict(), spec=spec,
                                                     backend=backend, judge=judge_reference)
    return outcomes


def records(cases, outcomes):
    return [CaseRecord(case_id=c.case_id, category=c.category, accuracy=o.accuracy, effectiveness=o.effectiveness,
                       reasons=o.reasons, reply=o.reply, message=c.message, expected_skills=tuple(c.expected.skills),
                       trace=o.trace, texts=tuple(text for _, text in c.dialogue)) for c, o in
            ((c, outcomes[c.case_id]) for c in cases)]


def scores(outcomes):
    return {cid: {"accuracy": o.accuracy, "effectiveness": o.effectiveness} for cid, o in outcomes.items()}


def mean(outcomes, key):
    return sum(getattr(o, key) for o in outcomes.values()) / len(outcomes)


def passed(outcomes):
    return {cid for cid, o in outcomes.items() if o.accuracy >= 1 and o.effectiveness >= 1}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=120, help="simulated cases (product Q&A and casual chat kept)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--breakages", default=",".join(b.__name__ for b in BREAKAGES),
                        help="comma-separated names of the breakages to apply")
    args = parser.parse_args()
    started = time.perf_counter()
    clean = parse_files(read_dir(DEMO))
    broken = clean
    chosen = [b for b in BREAKAGES if b.__name__ in args.breakages.split(",")]
    for breakage in chosen:
        broken = breakage(broken)
    parse_files(__import__("harness.spec", fromlist=["to_files"]).to_files(broken))  # still a valid harness
    cases = [c for c in generate_cases(args.seed, args.n, room=generate_room(args.seed))
             if c.category in ("product_qa", "casual_chat")]
    reference = asyncio.run(evaluate(clean, cases))
    current = asyncio.run(evaluate(broken, cases))
    broken_cases = passed(reference) - passed(current)
    print(f"{len(cases)} cases ({args.n} simulated, seed {args.seed}; product Q&A and casual chat), "
          f"breakages: {', '.join(b.__name__ for b in chosen)}")
    print(f"clean harness: acc {mean(reference, 'accuracy'):.3f} eff {mean(reference, 'effectiveness'):.3f}")
    print("| round | version | acc | eff | clusters | noise | proposals made / valid / accepted | gate | advice | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    spec, rejected, gains = broken, set(), []
    print(f"| 0 | broken | {mean(current, 'accuracy'):.3f} | {mean(current, 'effectiveness'):.3f} | | | | | | "
          f"{time.perf_counter() - started:.1f} s |")
    for round_number in range(1, args.rounds + 1):
        round_started = time.perf_counter()
        result = diagnose(records(cases, current), spec, gains=gains, rejected=rejected)
        valid = [p for p in result.proposals if p.valid]
        base = __import__("harness.spec", fromlist=["to_files"]).to_files(spec)
        files, accepted = dict(base), []
        for proposal in valid:
            try:  # combined as round_create does: merged three-way with the edits accepted before it
                files = apply_onto(base, files, proposal.diff)
                accepted.append(proposal)
            except ValueError:
                continue  # changes the same lines as an edit accepted before it in this round
        if not accepted:
            print(f"| {round_number} | (no valid proposal) | | | {len(result.clustering.clusters)} | "
                  f"{len(result.clustering.noise)} | {len(result.proposals)} / 0 / 0 | | "
                  f"{result.advice.rule} | {time.perf_counter() - round_started:.1f} s |")
            break
        candidate = parse_files(files)
        outcomes = asyncio.run(evaluate(candidate, cases))
        gate = RegressionGate(metrics=("accuracy", "effectiveness"), max_drop=0.02, confidence=0.95,
                              method="bootstrap").check(scores(current), scores(outcomes))
        gains.append(mean(outcomes, "accuracy") - mean(current, "accuracy"))
        print(f"| {round_number} | {candidate.content_hash[:8]} | {mean(outcomes, 'accuracy'):.3f} | "
              f"{mean(outcomes, 'effectiveness'):.3f} | {len(result.clustering.clusters)} | "
              f"{len(result.clustering.noise)} | {len(result.proposals)} / {len(valid)} / {len(accepted)} | "
              f"{'pass' if gate.passed else 'FAIL'} | {result.advice.rule} | "
              f"{time.perf_counter() - round_started:.1f} s |")
        for cluster in result.clustering.clusters:
            print(f"    cluster {cluster.cluster_id} ({cluster.size}): {cluster.signature.key}", file=sys.stderr)
        for proposal in result.proposals:
            if not proposal.valid:
                print(f"    invalid {proposal.generator}: {'; '.join(proposal.errors)[:200]}", file=sys.stderr)
        for proposal in accepted:
            print(f"    accepted {proposal.generator} → {proposal.target}: {proposal.hypothesis}", file=sys.stderr)
        if not gate.passed:
            print("    the gate failed: the round is rolled back", file=sys.stderr)
            rejected |= {p.fingerprint for p in accepted}
            continue
        spec, current = candidate, outcomes
    recovered = broken_cases & passed(current)
    for case_id in sorted(broken_cases - recovered):
        print(f"    not recovered {case_id}: {'; '.join(current[case_id].reasons)[:200]}", file=sys.stderr)
    print(f"\nbroken cases (passing on the clean harness, failing once broken): {len(broken_cases)}; "
          f"recovered by the loop: {len(recovered)} ({len(recovered) / max(len(broken_cases), 1):.0%}); "
          f"final acc {mean(current, 'accuracy'):.3f} eff {mean(current, 'effectiveness'):.3f}; "
          f"wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
