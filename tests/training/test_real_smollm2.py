"""Two HSA-SFT steps on the real SmolLM2-135M-Instruct weights (the offline GGUF, loaded through transformers)."""

import json
import math

import pytest

from tests.training.conftest import MINI_HARNESS, RecordingReporter
from training.pipeline import PipelineConfig, run_pipeline


# The first run on a machine dequantises the GGUF into the model cache (minutes on a busy 2-core box).
@pytest.mark.timeout(900)
def test_two_sft_steps_on_the_real_weights(tmp_path):
    config = PipelineConfig.from_dict({
        "model": {"base": "smollm2-135m-instruct", "device": "cpu"},
        "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}],
        "data": {"simulator_seed": 5, "simulator_cases": 2},
        "trajectories": {"augmented_variants": 0},
        "stages": [{"kind": "sft", "config": {"max_steps": 2, "save_steps": 2, "learning_rate": 1e-4,
                                              "per_device_train_batch_size": 1, "max_length": 1024}}]})
    reporter = RecordingReporter()
    [result] = run_pipeline(config, artifacts_dir=tmp_path, reporter=reporter, should_stop=lambda: False)
    losses = reporter.values("sft", "loss")
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses) and losses[0] != losses[1]
    # a pretrained model reads its own chat format far better than chance (ln 49152 ≈ 10.8)
    assert losses[0] < 6
    saved = json.loads((tmp_path / result.path / "config.json").read_text())
    assert saved["num_hidden_layers"] == 30 and saved["hidden_size"] == 576
    assert result.base_model == "smollm2-135m-instruct" and result.metrics["trajectories"] >= 1
