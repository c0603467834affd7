"""The issue-9 scenario, measured: two eval runs whose model was down, so every turn answered with the harness's
fallback line. Prints the reference judge's means over them and the regression gate's verdict on comparing them,
plus an exact McNemar p on a worked example. Pure core only (no database): run it against any checkout.

    PYTHONPATH=. .venv/bin/python benchmarks/gate_on_fallback_runs.py [--n 40] [--seed 1]

With an older checkout on PYTHONPATH it measures the behaviour before the fix (the script only uses APIs both
versions have; `verdict` and `mcnemar_exact` are reported when present).
"""

import argparse
import asyncio
from collections import Counter
from pathlib import Path

from evaluation.judges import judge_reference
from evaluation.metrics import compare
from harness.runtime import RoomContext, TurnInput, run_turn
from harness.simulator import SandboxTools, generate_cases, generate_room
from harness.spec import parse_files, read_dir
from serving.backends.scripted import ScriptedBackend, steps_from_json

DEMO = Path(__file__).resolve().parents[1] / "harness" / "demo" / "avatar"
SAFETY_NETS = ("fallback", "deadline", "error")


async def fallback_run(spec, cases) -> dict:
    """Per-case scores of a run whose model is unreachable: every turn ends in the harness's safety net."""
    rows = {}
    for case in cases:
        backend = ScriptedBackend(steps_from_json([{"error": "model server unreachable"}]))
        turn = TurnInput(message=case.message, viewer_id=case.viewer_id, room=RoomContext.from_dict(dict(case.room)),
                         recent_dialogue=case.dialogue)
        result = await run_turn(spec, turn, backend, SandboxTools(dict(case.room)).registry())
        verdict = judge_reference(case, result.trace)
        rows[case.case_id] = {"accuracy": float(verdict.accuracy), "effectiveness": float(verdict.effectiveness),
                              "safety_net": float(result.outcome in SAFETY_NETS), "outcome": result.outcome}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    spec = parse_files(read_dir(DEMO))
    cases = generate_cases(args.seed, args.n, room=generate_room(args.seed))
    baseline = asyncio.run(fallback_run(spec, cases))
    candidate = asyncio.run(fallback_run(spec, cases))
    outcomes = Counter(row["outcome"] for row in candidate.values())
    print(f"{args.n} simulated cases (seed {args.seed}), model unreachable; outcomes: {dict(outcomes)}")
    for metric in ("accuracy", "effectiveness"):
        mean = sum(row[metric] for row in candidate.values()) / len(candidate)
        nets = [row[metric] for row in candidate.values() if row["outcome"] in SAFETY_NETS]
        print(f"  {metric}: mean {mean:.3f}; on safety-net turns {sum(nets) / max(1, len(nets)):.3f} "
              f"({len(nets)} turns)")
    rows = {k: {m: v for m, v in row.items() if m != "outcome"} for k, row in baseline.items()}
    cand = {k: {m: v for m, v in row.items() if m != "outcome"} for k, row in candidate.items()}
    gate = compare.RegressionGate(metrics=("accuracy", "effectiveness"), max_drop=0.02, confidence=0.95)
    result = gate.check(rows, cand)
    verdict = getattr(result, "verdict", "pass" if result.passed else "fail")
    print(f"gate (default rule of this checkout, max_drop 0.02) on the two fallback runs: {verdict.upper()}")
    for reason in result.reasons:
        print(f"  - {reason}")
    if hasattr(compare, "mcnemar_exact"):
        print(f"exact McNemar, 2 cases right→wrong vs 9 wrong→right: p = {compare.mcnemar_exact(2, 9):.4f}")


if __name__ == "__main__":
    main()
