"""Harness-State Augmentation (HSA): task-preserving variants of a HarnessSpec for harness-aware training.

Pure Python (no Django): depends only on `harness.spec`; eval `Case`s are rewritten
structurally, so `harness.simulator` is imported for typing only. See `augment.py`
for what each dimension does and `config.py` for every knob.
"""

from harness.augmentation.augment import Augmentation, AugmentationError, augment
from harness.augmentation.config import DIMENSIONS, HsaConfig
from harness.augmentation.mapping import HsaMapping, HsaOperation
from harness.augmentation.preview import augmentation_diff

__all__ = ["DIMENSIONS", "Augmentation", "AugmentationError", "HsaConfig", "HsaMapping", "HsaOperation",
           "augment", "augmentation_diff"]
