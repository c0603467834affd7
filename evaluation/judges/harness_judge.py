"""The harness-based Agent-as-a-Judge: the judge is itself a HarnessSpec, run by the same runtime.

`evaluation/judge_harness/` holds it: rubric skills (accuracy, effectiveness), verification tools
bound to the case's room (the same `demo.*` builtins the avatar uses, so the judge checks facts
against the world rather than trusting the reply), and reply hooks that only let a well-formed JSON
verdict through (otherwise the model is asked again, then the judge abstains). Several judge models
vote (`vote`: majority accuracy, lower-median effectiveness). The verdict's `judge` names the judge
spec's hash and the judge names; `model_ids` holds each voter's model id (the served model's name, or the
offline model's file) and `judge_hash` the judge spec's full content hash, so scores record exactly which
judge produced them.

Failure is never success, and "don't know" is not "no":
- a turn that ended in a harness safety net (`fallback`, `deadline`, `error`) is scored 0/0 without
  asking any model: it is not an answer, whatever its text says;
- a judge model that gives no well-formed verdict (unreachable, malformed output after the hook's
  retries) abstains; when every judge model abstains the verdict is an abstention, not a 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from evaluation.judges.verdict import Verdict, vote
from harness.model_protocol import ModelBackend
from harness.runtime import RoomContext, TurnInput, run_turn
from harness.spec import HarnessSpec, parse_files, read_dir

JUDGE_HARNESS = Path(__file__).resolve().parents[1] / "judge_harness"
_JSON = re.compile(r"\{[\s\S]*\}")


@lru_cache(maxsize=1)
def judge_spec() -> HarnessSpec:
    return parse_files(read_dir(JUDGE_HARNESS))


def judge_message(case: Any, trace: Mapping[str, Any]) -> str:
    """What the judge reads: the exchange, the assistant's reply, and what its tools returned."""
    lines = [f"{who}: {text}" for who, text in case.dialogue]
    lines.append(f"viewer ({case.viewer_id}): {case.message}")
    reply = "(silent)" if trace.get("silent") else trace.get("reply", "")
    tools = [f"- {s['name']}({s.get('arguments', '')}) → {json.dumps(s.get('result'), ensure_ascii=False)[:400]}"
             f"{' ERROR ' + s['error'] if s.get('error') else ''}"
             for s in trace.get("steps", ()) if s.get("kind") == "tool"]
    return ("Dialogue:\n" + "\n".join(lines) + f"\n\nAssistant reply: {reply}\n\nAssistant's tool calls:\n"
            + ("\n".join(tools) or "(none)") + "\n\nVerify the reply and give your verdict.")


SAFETY_NETS = ("fallback", "deadline", "error")


def parse_verdict(text: str, judge: str) -> Verdict | None:
    match = _JSON.search(text or "")
    if match is None:
        return None
    try:
        data = json.loads(match.group(0))
        return Verdict(accuracy=int(data["accuracy"]), effectiveness=float(data["effectiveness"]),
                       reasons=tuple(str(r) for r in data.get("reasons", ())), checks={}, judge=judge)
    except (ValueError, KeyError, TypeError):
        return None


def model_id(backend: ModelBackend) -> str:
    """What model a backend runs: the served model's name (openai), the model file (local), else its kind."""
    if getattr(backend, "model", None):
        return str(backend.model)
    if getattr(backend, "name", "") == "local":
        from serving.backends.local import MODEL_FILE

        path = getattr(backend, "model_path", None)
        return Path(path).name if path else MODEL_FILE
    return str(getattr(backend, "name", "?"))


def safety_net_verdict(trace: Mapping[str, Any], judge: str, **provenance: Any) -> Verdict | None:
    """A failed verdict for a turn that ended in a safety net, or None when the turn may be judged."""
    outcome = str(trace.get("outcome") or "")
    if outcome not in SAFETY_NETS:
        return None
    return Verdict(accuracy=0, effectiveness=0.0, checks={"answered": False}, judge=judge,
                   reasons=(f"outcome “{outcome}” is a harness safety net, not an answer",), **provenance)


class HarnessJudge:
    """`await judge(case, trace) -> Verdict`, voting over one run of the judge harness per judge model.

    `backends`: factories of the judge models' backends, or (name, factory) pairs; the names label the
    verdict (default: each backend's kind).
    """

    def __init__(self, backends: Sequence[Callable[[], ModelBackend] | tuple[str, Callable[[], ModelBackend]]],
                 spec: HarnessSpec | None = None):
        if not backends:
            raise ValueError("a harness judge needs at least one judge model")
        self.models = [item if isinstance(item, tuple) else (None, item) for item in backends]
        self.spec = spec or judge_spec()

    async def __call__(self, case: Any, trace: Mapping[str, Any]) -> Verdict:
        judge_hash = self.spec.content_hash
        short = f"harness-judge/{judge_hash[:8]}"
        net = safety_net_verdict(trace, f"{short}/rule", judge_hash=judge_hash)
        if net is not None:
            return net
        room = RoomContext.from_dict(dict(case.room))
        turn = TurnInput(message=judge_message(case, trace), viewer_id=case.viewer_id, room=room)
        verdicts, names, model_ids = [], [], []
        for name, make_backend in self.models:
            backend = make_backend()
            names.append(name or getattr(backend, "name", "?"))
            model_ids.append(model_id(backend))
            try:
                result = await run_turn(self.spec, turn, backend, arm="judge")
            finally:
                close = getattr(backend, "aclose", None)
                if close is not None:
                    await close()
            label = f"{short}/{names[-1]}"
            verdict = parse_verdict(result.reply, label) if result.outcome == "replied" else None
            if verdict is None:
                verdicts.append(Verdict.abstain(judge=label, reasons=(
                    f"judge model {names[-1]} ({model_ids[-1]}) gave no verdict "
                    f"(outcome {result.outcome}: {result.trace.get('reason') or 'malformed output'})",)))
            else:
                verdicts.append(verdict)
        combined = vote(verdicts)
        label = f"{short}/{'+'.join(names)}"
        if combined.abstained:
            return Verdict.abstain(judge=label, model_ids=model_ids, judge_hash=judge_hash,
                                   reasons=("every judge model failed to give a verdict", *combined.reasons))
        return Verdict(accuracy=combined.accuracy, effectiveness=combined.effectiveness, reasons=combined.reasons,
                       checks=combined.checks, judge=label, model_ids=tuple(model_ids), judge_hash=judge_hash)
