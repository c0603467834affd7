"""Propose, try, keep: each proposed edit is tried on a small sample of diagnosis cases before anyone sees it,
and of the variants a generator wrote for one cluster only the best is kept (as reflective prompt optimisers
such as GEPA keep the better of their candidates). Pure: the evaluation is a callable, no Django.

The sample is the cluster's own cases (does the edit fix them?) plus passing cases of the same skill (does
it break them?), all from the diagnosis split: the gate split never sees a trial. A variant that lost is kept
with an error saying so (never a candidate), so the review page shows what was tried.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from evaluation.evolution.clusters import FailureCluster
from evaluation.evolution.patches import PatchError, apply_diff
from evaluation.evolution.proposals import Proposal

# files after the edit, case ids → case id → the case passes (None: not known, e.g. the case errored or the judge
# abstained; a trial with unknown cases is reported, and ranks no variant)
Evaluate = Callable[[dict, list[str]], Mapping[str, bool | None]]


@dataclass(frozen=True)
class TrialConfig:
    failing: int = 4  # cluster cases per trial
    passing: int = 2  # passing cases of the same skill, to see breakage
    seed: int = 0


def sample(cluster: FailureCluster, config: TrialConfig = TrialConfig()) -> tuple[list[str], list[str]]:
    failing = sorted(cluster.case_ids)
    random.Random(f"{config.seed}:{cluster.cluster_id}").shuffle(failing)
    return sorted(failing[:config.failing]), list(cluster.passing_cases[:config.passing])


def try_and_keep(proposals: Sequence[Proposal], clusters: Sequence[FailureCluster], files: dict, evaluate: Evaluate,
                 config: TrialConfig = TrialConfig()) -> tuple[list[Proposal], list[dict]]:
    """Try every valid proposal on its cluster's sample; per (cluster, generator) keep the best variant (most
    fixed minus broken; ties to the smaller diff). Returns the proposals (losers marked invalid with why)
    and one trial record per tried proposal."""
    by_cluster = {c.cluster_id: c for c in clusters}
    scores: dict[int, tuple[int, int, int]] = {}
    trials: list[dict] = []
    for index, proposal in enumerate(proposals):
        cluster = by_cluster.get(proposal.cluster_id)
        if not proposal.valid or cluster is None:
            continue
        failing, passing = sample(cluster, config)
        try:
            edited = apply_diff(files, proposal.diff)
        except PatchError:  # validation already refused it; nothing to try
            continue
        outcome = evaluate(edited, [*failing, *passing])
        unknown = [c for c in (*failing, *passing) if outcome.get(c) is None]
        if unknown:  # an error is not a verdict on the edit: say so, and keep the proposal as it was
            trials.append({"cluster": proposal.cluster_id, "generator": proposal.generator,
                           "fingerprint": proposal.fingerprint, "unknown": len(unknown),
                           "of": len(failing) + len(passing), "kept": None})
            continue
        fixed = sum(1 for c in failing if outcome.get(c))
        broke = sum(1 for c in passing if not outcome.get(c))
        scores[index] = (fixed - broke, -len(proposal.diff), -index)
        trials.append({"cluster": proposal.cluster_id, "generator": proposal.generator,
                       "fingerprint": proposal.fingerprint, "fixed": fixed, "of": len(failing), "broke": broke,
                       "of_passing": len(passing), "kept": False})
    best: dict[tuple[str, str], int] = {}
    for index, score in scores.items():
        key = (proposals[index].cluster_id, proposals[index].generator)
        if key not in best or score > scores[best[key]]:
            best[key] = index
    kept = set(best.values())
    out = list(proposals)
    trial_of = {t["fingerprint"]: t for t in trials if "unknown" not in t}
    for index in scores:
        proposal, trial = proposals[index], trial_of[proposals[index].fingerprint]
        note = (f"Tried on {trial['of']} of the cluster's diagnosis cases: fixed {trial['fixed']}; "
                f"broke {trial['broke']} of {trial['of_passing']} passing ones")
        variants = sum(1 for i in scores if (proposals[i].cluster_id, proposals[i].generator)
                       == (proposal.cluster_id, proposal.generator))
        if index in kept:
            trial["kept"] = True
            suffix = f" (the best of {variants} variants)." if variants > 1 else "."
            out[index] = dataclasses.replace(proposal, rationale=f"{proposal.rationale} {note}{suffix}".strip())
        else:
            winner = trial_of[proposals[best[(proposal.cluster_id, proposal.generator)]].fingerprint]
            out[index] = dataclasses.replace(proposal, errors=(
                *proposal.errors, f"tried: {note.lower()}; another variant did better (fixed {winner['fixed']}, "
                                  f"broke {winner['broke']})"))
    return out, trials
