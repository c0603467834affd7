"""Which accepted edit fixed which cases, and which broke some: read after a round's gate, so a person can
keep the edits that helped and revert the ones that regressed (a round is judged as a whole by the gate).
"""

from evaluation.evolution.models import Diagnosis, Proposal
from evaluation.models import EvalRun


def attribute(diagnosis: Diagnosis, baseline: EvalRun, candidate: EvalRun) -> dict:
    """Which accepted edit fixed which of its cluster's cases, and the cases that regressed.

    A fixed case counts for the edit whose cluster held it; a regressed case (passing before, failing now)
    counts for the edits whose target file is the skill the case expects, else it stays unattributed.
    A live diagnosis's clusters hold live traces, which the dev-set eval does not re-run: its edits get
    no fix rate (None), only the regressed cases.
    """
    def outcomes(run):  # abstentions say neither "fixed" nor "broke"
        return {cid: (acc, eff) for cid, acc, eff in run.results.filter(accuracy__isnull=False, effectiveness__isnull=False)
                .values_list("case__case_id", "accuracy", "effectiveness")}

    before, after = outcomes(baseline), outcomes(candidate)
    passed = {cid for cid, (acc, eff) in after.items() if acc >= 1 and eff >= 1}
    regressed = sorted(cid for cid, (acc, eff) in before.items() if acc >= 1 and eff >= 1 and cid not in passed
                       and cid in after)
    skills = {r.case.case_id: set((r.case.data.get("expected") or {}).get("skills") or ())
              for r in baseline.results.select_related("case").filter(case__case_id__in=regressed)}
    ledger, claimed = {}, set()
    for proposal in diagnosis.proposals.filter(status=Proposal.Status.ACCEPTED).select_related("cluster"):
        cases = list(proposal.cluster.data.get("case_ids", [])) if proposal.cluster and not diagnosis.is_live else []
        fixed = sorted(c for c in cases if c in passed)
        skill = proposal.target.split("/")[1] if proposal.target.startswith("skills/") else None
        broke = sorted(c for c in regressed if skill and skill in skills.get(c, set()))
        claimed.update(broke)
        ledger[str(proposal.pk)] = {"fixed": fixed, "still_failing": sorted(set(cases) - set(fixed)),
                                    "regressed": broke, "fix_rate": round(len(fixed) / len(cases), 4) if cases else None}
    return {"proposals": ledger, "regressed": regressed, "unattributed": sorted(set(regressed) - claimed)}
