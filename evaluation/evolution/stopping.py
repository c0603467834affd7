"""Whether another round of evolution is worth it, and the rule that decided. Pure: no Django.

The seed report's later rounds regressed: stop when the remaining errors are a sparse long tail, when
noise is most of what is left, or when accepted rounds stop paying.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evaluation.evolution.clusters import Clustering


@dataclass(frozen=True)
class StopConfig:
    min_largest_cluster: int = 3  # a largest actionable cluster smaller than this is a sparse long tail
    noise_majority: float = 0.5  # noise share of failures at or above this: the rest is long tail
    min_gain: float = 0.01  # accuracy gain per accepted round below this is not worth another round
    patience: int = 2  # that many rounds in a row


@dataclass(frozen=True)
class StopAdvice:
    stop: bool
    rule: str
    detail: str

    def to_dict(self) -> dict:
        return {"stop": self.stop, "rule": self.rule, "detail": self.detail}


def stop_advice(clustering: Clustering, *, gains: Sequence[float] = (), config: StopConfig = StopConfig()) -> StopAdvice:
    """Continue or stop. `gains` are the accuracy gains of the previous accepted rounds, oldest first."""
    if clustering.failures == 0:
        return StopAdvice(True, "no-failures", "every case passed")
    actionable = [c for c in clustering.clusters if not c.judge_suspect]
    largest = max((c.size for c in actionable), default=0)
    noise_share = len(clustering.noise) / clustering.failures
    recent = list(gains)[-config.patience:]
    if gains and gains[-1] < 0:
        return StopAdvice(True, "last-round-regressed",
                          f"the last accepted round lost {-gains[-1]:.1%} accuracy on the gate cases: keep the best round "
                          "so far rather than go on")
    if len(recent) == config.patience and all(g < config.min_gain for g in recent):
        return StopAdvice(True, "diminishing-returns",
                          f"the last {config.patience} rounds gained {', '.join(f'{g:+.1%}' for g in recent)} "
                          f"(< {config.min_gain:.0%} each)")
    if noise_share >= config.noise_majority:
        return StopAdvice(True, "noise-majority",
                          f"{len(clustering.noise)} of {clustering.failures} failures ({noise_share:.0%}) are noise")
    if largest < config.min_largest_cluster:
        return StopAdvice(True, "sparse-long-tail",
                          f"the largest actionable cluster has {largest} case(s) (< {config.min_largest_cluster})")
    return StopAdvice(False, "clusters-remain",
                      f"the largest actionable cluster has {largest} cases; {noise_share:.0%} of failures are noise")
