"""A console preview of an augmentation: the module-level diff from the original spec."""

from __future__ import annotations

from harness.augmentation.augment import Augmentation
from harness.spec import HarnessSpec, SpecDiff, diff_specs


def augmentation_diff(original: HarnessSpec, augmented: HarnessSpec | Augmentation) -> SpecDiff:
    """What the augmentation changed, module by module (renamed modules show as removed + added)."""
    if isinstance(augmented, Augmentation):
        augmented = augmented.spec
    return diff_specs(original, augmented)
