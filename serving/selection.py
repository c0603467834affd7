"""Which harness version answers a request: a pinned version, an experiment's arm, or a label.

Experiments (the A/B feature) plug in with `register_experiment_selector`: a
selector sees the harness, viewer and room, and returns a `Selection` for
viewers it assigns, or None to leave them to the label.
"""

from collections.abc import Callable
from dataclasses import dataclass

from harness import selectors
from harness.models import Harness, HarnessVersion
from harness.routing import remembered

DEFAULT_LABEL = "production"


@dataclass(frozen=True)
class Selection:
    version: HarnessVersion
    arm: str  # "label:production", "pinned:v3", or an experiment's arm name
    baseline: bool = False  # True when the arm is the ReAct control
    backend: str = ""  # the model an experiment's arm answers with; empty: the request's or the default
    experiment: object = None  # the experiment whose arm this is (serving.models.Experiment), if any


ExperimentSelector = Callable[[Harness, str, str], Selection | None]
_EXPERIMENT_SELECTORS: list[ExperimentSelector] = []


def register_experiment_selector(selector: ExperimentSelector) -> ExperimentSelector:
    _EXPERIMENT_SELECTORS.append(selector)
    return selector


def select_version(*, harness: Harness, viewer_id: str, room_id: str, label: str | None = None,
                   version: int | None = None) -> Selection:
    """Pinned version first, then a running experiment's assignment, then the label (default production)."""
    if version is not None:
        return Selection(selectors.version_get(harness, version), arm=f"pinned:v{version}")
    if label is None:
        for selector in _EXPERIMENT_SELECTORS:
            chosen = selector(harness, viewer_id, room_id)
            if chosen is not None:
                return chosen
    label = label or DEFAULT_LABEL
    return Selection(label_version(harness, label), arm=f"label:{label}")


def label_version(harness: Harness, label: str) -> HarnessVersion:
    """The version `label` points at, remembered per process until a label of this harness moves."""
    return remembered(harness.pk, ("label", label), lambda: selectors.version_by_label(harness, label))
