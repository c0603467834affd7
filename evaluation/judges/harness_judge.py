"""The harness-based Agent-as-a-Judge: the judge is itself a HarnessSpec, run by the same runtime.

`evaluation/judge_harness/` holds it: rubric skills (accuracy, effectiveness), verification tools
bound to the case's room (the same `demo.*` builtins the avatar uses, so the judge checks facts
against the world rather than trusting the reply), and reply hooks that only let a well-formed JSON
verdict through (otherwise the model is asked again, then the judge abstains). Several judge models
vote (`vote`: majority accuracy, lower-median effectiveness). The verdict's `judge` names the judge
spec's hash and the models, so scores record exactly which judge produced them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from evaluation.judges.verdict import Verdict, vote
from harness.runtime import RoomContext, TurnInput, run_turn
from harness.spec import HarnessSpec, parse_files, read_dir
from serving.backends import ModelBackend

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


class HarnessJudge:
    """`await judge(case, trace) -> Verdict`, voting over one run of the judge harness per backend."""

    def __init__(self, backends: Sequence[Callable[[], ModelBackend]], spec: HarnessSpec | None = None):
        if not backends:
            raise ValueError("a harness judge needs at least one judge model")
        self.backends = list(backends)
        self.spec = spec or judge_spec()

    async def __call__(self, case: Any, trace: Mapping[str, Any]) -> Verdict:
        room = RoomContext.from_dict(dict(case.room))
        turn = TurnInput(message=judge_message(case, trace), viewer_id=case.viewer_id, room=room)
        verdicts, names = [], []
        for make_backend in self.backends:
            backend = make_backend()
            names.append(getattr(backend, "name", "?"))
            try:
                result = await run_turn(self.spec, turn, backend, arm="judge")
            finally:
                close = getattr(backend, "aclose", None)
                if close is not None:
                    await close()
            verdict = parse_verdict(result.reply, f"harness-judge/{self.spec.content_hash[:8]}/{names[-1]}")
            if verdict is not None:
                verdicts.append(verdict)
        label = f"harness-judge/{self.spec.content_hash[:8]}/{'+'.join(names)}"
        if not verdicts:
            return Verdict(accuracy=0, effectiveness=0.0, reasons=("every judge model failed to give a verdict",),
                           checks={"verdict": False}, judge=label)
        combined = vote(verdicts)
        return Verdict(accuracy=combined.accuracy, effectiveness=combined.effectiveness, reasons=combined.reasons,
                       checks=combined.checks, judge=label)
