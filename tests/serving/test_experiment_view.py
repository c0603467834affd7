"""What the live experiment view shows: the peeking-safe, multiplicity-corrected interval the decision uses, and
the live judge's abstentions counted apart in the guardrails."""

import uuid
from datetime import UTC, datetime

import pytest

from harness import services as harness_services
from serving.experiments import statistics as stats
from serving.experiments.lifecycle import experiment_arm_label, experiment_create, experiment_start
from serving.experiments.selectors import experiment_snapshot
from serving.models import Rollup, Trace
from workspaces.access import Actor

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")
BUCKET = datetime(2026, 1, 1, tzinfo=UTC)


def arm_stats(n, mean, sd):
    """(users, Σy, Σy²) of an arm with this mean and sample standard deviation."""
    s = n * mean
    return n, s, sd * sd * (n - 1) + s * s / n


@pytest.fixture
def experiment(workspace, harness):
    harness_services.label_move(actor=SYSTEM, harness=harness, name="production", version=harness.head, reason="go")
    experiment = experiment_create(actor=SYSTEM, workspace=workspace, key="three-arms", harness=harness, arms=[
        {"name": "control", "weight": 1, "kind": "react"},
        {"name": "small-win", "weight": 1, "kind": "label", "label": "production"},
        {"name": "big-win", "weight": 1, "kind": "label", "label": "production"}])
    experiment_start(actor=SYSTEM, experiment=experiment)
    control, small, big = experiment.arms.all()
    for arm, (n, mean, sd) in ((control, (2000, 1.0, 1.0)), (small, (2000, 1.08, 1.0)), (big, (2000, 1.5, 1.0))):
        users, s, q = arm_stats(n, mean, sd)
        Rollup.objects.create(experiment=experiment, arm=arm, bucket=BUCKET, users=users, sum_y=s, sum_y2=q)
    return experiment


def test_the_shown_interval_is_the_sequential_one_corrected_across_arms(experiment):
    snapshot = experiment_snapshot(experiment)
    control_row, small, big = snapshot["metrics"]
    c = stats.ArmStats(*arm_stats(2000, 1.0, 1.0))
    s = stats.ArmStats(*arm_stats(2000, 1.08, 1.0))
    b = stats.ArmStats(*arm_stats(2000, 1.5, 1.0))
    # small-win: the fixed-horizon interval excludes 0 (the page used to colour it significant) …
    fixed = stats.relative_uplift(c, s)
    assert fixed.ci_low > 0 and (small["fixed_low"], small["fixed_high"]) == (fixed.ci_low, fixed.ci_high)
    # … but what is shown now is the confidence sequence at α/2 (two treatment arms), which includes 0
    shown = stats.sequential_uplift(c, s, alpha=0.025)
    assert (small["ci_low"], small["ci_high"]) == (shown.ci_low, shown.ci_high) == (small["seq_low"],
                                                                                    small["seq_high"])
    assert small["ci_low"] < 0 < small["ci_high"] and small["ci_level"] == pytest.approx(0.975)
    assert "Bonferroni across 2 arms" in small["interval"]
    # p-values: the always-valid ones, Holm-adjusted across the arms
    raw = [stats.sequential_uplift(c, s).p_value, stats.sequential_uplift(c, b).p_value]
    assert [small["p_adjusted"], big["p_adjusted"]] == stats.holm(raw)
    assert big["ci_low"] > 0
    # the decision reads the very interval that is shown
    rule = snapshot["decision"]["rule"]
    assert snapshot["decision"]["status"] == "ship"
    assert f"[{big['ci_low']:+.1%}, {big['ci_high']:+.1%}]" in rule and "97.5% asymptotic" in rule
    assert "control" not in {k for k in control_row if k.startswith("ci_")}


def test_live_judge_abstentions_are_counted_apart_from_the_means(experiment, workspace):
    now = datetime.now(UTC)
    label = experiment_arm_label(experiment.key, "control")
    for accuracy, version in ((1.0, "j"), (0.0, "j"), (None, "j"), (None, "j"), (None, "")):
        Trace.objects.create(workspace=workspace, trace_id=uuid.uuid4().hex, room_id="r", viewer_id="v", arm=label,
                             backend="scripted", outcome="replied", message="hi", latency_ms=10.0, data={},
                             created_at=now, judge_accuracy=accuracy,
                             judge_effectiveness=None if accuracy is None else accuracy, judge_version=version)
    control = experiment_snapshot(experiment)["guardrails"][0]
    # 2 verdicts, 2 abstentions (judged, no verdict), 1 reply never sampled for judging
    assert (control["replies"], control["judged"], control["abstained"]) == (5, 2, 2)
    assert control["accuracy"] == 0.5 and control["effectiveness"] == 0.5
