"""Which accepted edit fixed which cases, and which broke some: read after a round's gate, so a person can
keep the edits that helped and revert the ones that regressed (a round is judged as a whole by the gate).

A regressed case is blamed by leave-one-out: it is evaluated again with one edit alone reverted from the
candidate; the edits whose removal makes it pass again broke it. So prompt, tool, hook and skill edits are
blamed alike, whatever file they touch. The re-evaluation is a callable (`rejudge`), so this module never
runs a model itself.
"""

from collections.abc import Callable, Iterable, Mapping

from evaluation.evolution.models import Diagnosis, Proposal
from evaluation.evolution.patches import PatchError, apply_diff, apply_onto, reverse_diff
from evaluation.models import EvalRun

MAX_LOO_CASES = 40  # regressed cases re-evaluated per edit; more are said to be left out

# files with one edit reverted, the regressed case ids → case id → passes now
Rejudge = Callable[[dict, list[str]], Mapping[str, bool]]


def _passed(acc, eff) -> bool:
    return acc is not None and eff is not None and acc >= 1 and eff >= 1


def outcomes(run: EvalRun) -> dict[str, tuple[float, float]]:
    """case id → (accuracy, effectiveness); abstentions say neither "fixed" nor "broke", so they are left out."""
    return {cid: (acc, eff) for cid, acc, eff in run.results.filter(
        accuracy__isnull=False, effectiveness__isnull=False).values_list("case__case_id", "accuracy", "effectiveness")}


def attribute(diagnosis: Diagnosis, baseline: EvalRun, candidate: EvalRun, *, candidate_files: dict,
              rejudge: Rejudge | None = None, splits: Mapping[str, Iterable[str]] | None = None) -> dict:
    """Per accepted edit: the cases of its cluster it fixed, and (leave-one-out) the regressed cases it broke.

    `splits` names which split each case is in (shown beside it); `rejudge` re-evaluates cases on edited files
    (None: no leave-one-out, every regressed case stays unattributed). A live diagnosis's clusters hold live
    traces, which the eval does not re-run: its edits get no fix rate (None)."""
    before, after = outcomes(baseline), outcomes(candidate)
    passed = {cid for cid, scores in after.items() if _passed(*scores)}
    regressed = sorted(cid for cid, scores in before.items() if _passed(*scores) and cid in after
                       and cid not in passed)
    checked = regressed[:MAX_LOO_CASES]
    accepted = list(diagnosis.proposals.filter(status=Proposal.Status.ACCEPTED).select_related("cluster")
                    .order_by("id"))
    ledger, claimed = {}, set()
    for proposal in accepted:
        cases = list(proposal.cluster.data.get("case_ids", [])) if proposal.cluster and not diagnosis.is_live else []
        fixed = sorted(c for c in cases if c in passed)
        broke, loo = [], {"evaluated": 0, "left_out": len(regressed) - len(checked), "error": ""}
        if checked and rejudge is not None:
            try:
                # Undone three-way, like the edits were combined: the other edits' lines stay as they are.
                without = apply_onto(apply_diff(diagnosis.version.files, proposal.diff), candidate_files,
                                     reverse_diff(proposal.diff))
            except PatchError as exc:
                loo["error"] = f"this edit could not be reverted alone: {exc}"[:300]
            else:
                recovered = rejudge(without, checked)
                broke = sorted(c for c in checked if recovered.get(c))
                loo["evaluated"] = len(checked)
        claimed.update(broke)
        ledger[str(proposal.pk)] = {"kind": _kind(proposal.target), "fixed": fixed,
                                    "still_failing": sorted(set(cases) - set(fixed)), "regressed": broke,
                                    "fix_rate": round(len(fixed) / len(cases), 4) if cases else None, "loo": loo}
    where = {cid: name for name, ids in (splits or {}).items() for cid in ids}
    results = dict(candidate.results.filter(case__case_id__in={*regressed, *passed})
                   .values_list("case__case_id", "pk"))
    return {"proposals": ledger, "regressed": regressed, "unattributed": sorted(set(regressed) - claimed),
            "method": "leave-one-out" if rejudge is not None else "none", "split_of": where,
            "results": results, "run": candidate.pk}


def _kind(target: str) -> str:
    """prompt | tool | hook | skill | settings: what the edit's main file is."""
    head = target.split("/", 1)[0]
    return {"prompt": "prompt", "tools": "tool", "hooks": "hook", "skills": "skill"}.get(head, "settings")
