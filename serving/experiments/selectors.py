"""The dashboard's snapshot of an experiment, computed from rollups (never from raw events)."""

from collections import defaultdict

from django.utils import timezone

from harness.runtime.latency import latency_band_labels
from serving.experiments import statistics as stats
from serving.experiments.guardrails import MIN_USERS_PER_ARM, arm_guardrails, guardrail_violation
from serving.models import Experiment, Rollup
from serving.selection import DEFAULT_LABEL


def _cumulative(rollups):
    """Per arm: running (users, Σy, Σy²) by bucket, for totals and the uplift-over-time series."""
    totals = defaultdict(lambda: [0, 0.0, 0.0])
    series = []
    for bucket, rows in _by_bucket(rollups):
        for row in rows:
            t = totals[row.arm_id]
            t[0] += row.users
            t[1] += row.sum_y
            t[2] += row.sum_y2
        series.append((bucket, {arm: tuple(v) for arm, v in totals.items()}))
    return {arm: tuple(v) for arm, v in totals.items()}, series


def _by_bucket(rollups):
    grouped = defaultdict(list)
    for row in rollups:
        grouped[row.bucket].append(row)
    return sorted(grouped.items())


def _arm_stats(triple) -> stats.ArmStats:
    users, s, q = triple if triple else (0, 0.0, 0.0)
    return stats.ArmStats(n=users, sum=s, sum_squares=q)


def experiment_snapshot(experiment: Experiment) -> dict:
    arms = list(experiment.arms.all())
    if not arms:
        return {"experiment": {"id": experiment.pk, "key": experiment.key, "status": experiment.status,
                               "control_only": experiment.control_only, "stop_reason": experiment.stop_reason},
                "arms": [], "metrics": [], "srm": None, "guardrails": [], "timeline": [],
                "latency_bands": latency_band_labels(),
                "decision": {"status": "no decision", "rule": "The experiment has no arms."},
                "updated_at": timezone.now().isoformat(timespec="seconds")}
    control = arms[0]
    totals, series = _cumulative(Rollup.objects.filter(experiment=experiment))
    control_stats = _arm_stats(totals.get(control.pk))
    # What the page shows is what the decision uses: the peeking-safe interval (asymptotic confidence
    # sequence), at α/m for m treatment arms (Bonferroni, so the shown intervals hold simultaneously), and the
    # always-valid p-values Holm-adjusted across arms. The fixed-horizon test stays in the payload (fixed_*)
    # for reference only: it is valid for one pre-planned look, not a live dashboard.
    treatments = max(1, len(arms) - 1)
    shown_alpha = stats.DEFAULT_ALPHA / treatments
    metrics, p_values, sequentials = [], [], []
    for arm in arms:
        arm_stats = _arm_stats(totals.get(arm.pk))
        row = {"arm": arm.name, "control": arm.pk == control.pk, "users": arm_stats.n, "views": arm_stats.sum,
               "value": arm_stats.mean if arm_stats.n else None}
        if arm.pk != control.pk:
            fixed = stats.relative_uplift(control_stats, arm_stats)
            shown = stats.sequential_uplift(control_stats, arm_stats, alpha=shown_alpha)
            always_valid = stats.sequential_uplift(control_stats, arm_stats)
            sequentials.append((arm.name, shown))
            if shown.error:  # too little data for a test: say so rather than show a +0.0% change
                row.update(change=None, ci_low=None, ci_high=None, p_value=None, seq_low=None, seq_high=None,
                           fixed_low=None, fixed_high=None, fixed_p_value=None, note=shown.error_text)
            else:
                row.update(change=shown.delta, ci_low=shown.ci_low, ci_high=shown.ci_high,
                           p_value=always_valid.p_value, seq_low=shown.ci_low, seq_high=shown.ci_high,
                           fixed_low=fixed.ci_low, fixed_high=fixed.ci_high, fixed_p_value=fixed.p_value)
            row.update(ci_level=1 - shown_alpha, interval=f"{1 - shown_alpha:.1%} {shown.method}"
                       + (f", Bonferroni across {treatments} arms" if treatments > 1 else ""))
            p_values.append(always_valid.p_value if not shown.error else 1.0)
        metrics.append(row)
    adjusted = iter(stats.holm(p_values) if p_values else [])
    for row in metrics:
        if not row["control"]:
            row["p_adjusted"] = next(adjusted)
    users = [_arm_stats(totals.get(a.pk)).n for a in arms]
    srm_p = stats.srm_p_value(users, [a.weight for a in arms]) if sum(users) else None
    guardrails = arm_guardrails(experiment, arms)
    guardrail_failed = guardrail_violation(experiment, guardrails)
    decision = _decision_for_state(experiment, _decision(sequentials, guardrail_failed))
    timeline = []
    for bucket, cumulative in series:
        c = _arm_stats(cumulative.get(control.pk))
        point = {"bucket": bucket.isoformat(), "uplift": {}}
        for arm in arms[1:]:
            t = _arm_stats(cumulative.get(arm.pk))
            if c.n > 1 and t.n > 1 and c.mean:
                point["uplift"][arm.name] = (t.mean - c.mean) / abs(c.mean)
        timeline.append(point)
    return {
        "experiment": {"id": experiment.pk, "key": experiment.key, "status": experiment.status,
                       "control_only": experiment.control_only, "stop_reason": experiment.stop_reason},
        "arms": [{"name": a.name, "kind": a.kind, "weight": a.weight, "users": u} for a, u in zip(arms, users, strict=True)],
        "metrics": _finite(metrics),
        "srm": {"p_value": srm_p, "observed": users,
                "expected": [sum(users) * a.weight for a in arms]},
        "guardrails": guardrails,
        "decision": decision,
        "timeline": timeline,
        "latency_bands": latency_band_labels(),
        "updated_at": timezone.now().isoformat(timespec="seconds"),
    }


def _decision(sequentials, guardrail_failed: str) -> stats.Decision:
    """One decision over the treatment arms: roll back beats ship beats keep running; the rules are shown."""
    decisions = [(name, stats.decide(seq, min_users=MIN_USERS_PER_ARM, guardrail_failed=bool(guardrail_failed)))
                 for name, seq in sequentials]
    for status in ("roll back", "ship", "keep running"):
        chosen = [(name, d) for name, d in decisions if d.status == status]
        if chosen:
            rule = " · ".join(f"{name}: {d.rule}" for name, d in chosen)
            if guardrail_failed:
                rule = f"guardrail: {guardrail_failed} · {rule}"
            return stats.Decision(status=status, rule=rule)
    return stats.Decision(status="keep running", rule="no treatment arm yet")


# What the data said, in words for an experiment that is no longer running.
_AT_STOP = {"ship": "the treatment was ahead", "roll back": "the treatment was behind or a guardrail failed",
            "keep running": "no clear difference"}


def _decision_for_state(experiment: Experiment, data: stats.Decision) -> dict:
    """The decision card agrees with the experiment's state: a draft has none yet, a stopped experiment says
    it stopped and why, and only a running one is told to keep running, ship or roll back."""
    if experiment.status == Experiment.Status.DRAFT:
        return {"status": "not started", "rule": "Start the experiment to assign viewers; nothing is measured yet."}
    if experiment.status == Experiment.Status.STOPPED:
        when = f" at {experiment.stopped_at:%Y-%m-%d %H:%M} UTC" if experiment.stopped_at else ""
        after = ("everyone now gets the control arm" if experiment.control_only
                 else "viewers get the harness's default label again")
        return {"status": "rolled back" if experiment.control_only else "stopped",
                "rule": f"Stopped{when}: {experiment.stop_reason or 'no reason given'}; {after}. "
                        f"At the stop the data showed {_AT_STOP[data.status]} — {data.rule}"}
    return {"status": data.status, "rule": data.rule}


def experiment_arms(experiment: Experiment) -> list[dict]:
    """What each arm runs: its harness version (a label is resolved to where it points now) and model."""
    from django.conf import settings

    labels = {label.name: label.version for label in experiment.harness.labels.select_related("version")}
    react_version = labels.get(DEFAULT_LABEL) or experiment.harness.head  # as arm_selection picks it
    rows = []
    for arm in experiment.arms.select_related("version"):
        version = {"version": arm.version, "label": labels.get(arm.label), "react": react_version}.get(arm.kind)
        rows.append({
            "name": arm.name, "weight": arm.weight, "kind": arm.get_kind_display(), "label": arm.label,
            "version": version, "react": arm.kind == "react",
            "missing_label": arm.kind == "label" and version is None,
            "model": arm.backend or settings.MODEL_BACKEND, "default_model": not arm.backend,
        })
    return rows


def _finite(rows):
    import math

    return [{k: (None if isinstance(v, float) and (math.isnan(v) or math.isinf(v)) else v) for k, v in row.items()}
            for row in rows]
