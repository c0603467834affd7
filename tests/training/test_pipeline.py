"""The pipeline on CPU with a tiny random SmolLM2: chained stages with real optimizer steps, cancel and resume
from the last checkpoint, the lineage guard, and HSA-RL's zero-spread groups and segment advantages."""

import json
import math

import pytest
import torch

from tests.training.conftest import MINI_HARNESS, RecordingReporter
from training import rl as rl_module
from training.case_hashing import case_content_hash
from training.lineage import LineageError
from training.pipeline import PipelineConfig, TrainingCancelled, run_pipeline
from training.rewards import register_reward
from training.rl import alive_mean_scale, gdpo_advantages, zero_spread_groups
from training.trajectories import simulator_cases

SFT = {"kind": "sft", "config": {"max_steps": 2, "save_steps": 1, "learning_rate": 5e-3, "max_length": 1024,
                                 "per_device_train_batch_size": 1}}
OPD = {"kind": "opd", "config": {"max_steps": 2, "learning_rate": 5e-3, "max_completion_length": 8,
                                 "max_prompts": 4}}
RL = {"kind": "rl", "config": {"max_steps": 2, "learning_rate": 5e-3, "num_generations": 2,
                               "per_device_train_batch_size": 4, "cases": 2, "max_new_tokens": 8,
                               "max_completion_length": 48, "fault_rate": 0.0, "augmented_share": 0.5,
                               "rewards": ["skill_selection", "test_reply_length"]}}


@register_reward("test_reply_length", "reply")
def reply_length_for_tests(prompts, completions, completion_ids=None, *, case, **_):
    """A test reward with spread for every episode but the first case, whose group it keeps constant."""
    first = simulator_cases("5/rl", 2)[0].case_id
    return [0.0 if json.loads(c)["case_id"] == first else -len(done[0]["content"]) / 100
            for c, done in zip(case, completions, strict=True)]


def config(*stages, **data):
    return PipelineConfig.from_dict({
        "model": {"base": "tiny-random-smollm2", "device": "cpu"},
        "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}],
        "data": {"simulator_seed": 5, "simulator_cases": 3, **data},
        "trajectories": {"augmented_variants": 1}, "stages": list(stages)})


def test_chained_stages_train_and_report(tmp_path, monkeypatch):
    captured = []
    original = rl_module.HarnessGRPOTrainer._generate_and_score_completions

    def capture(self, inputs):
        output = original(self, inputs)
        captured.append((self._last_rewards.clone(), output))
        return output

    monkeypatch.setattr(rl_module.HarnessGRPOTrainer, "_generate_and_score_completions", capture)
    reporter = RecordingReporter()
    results = run_pipeline(config(SFT, OPD, RL), artifacts_dir=tmp_path, reporter=reporter,
                           should_stop=lambda: False)

    assert [r.stage for r in results] == ["sft", "opd", "rl"] == [c.stage for c in reporter.checkpoints]
    assert results[0].parent_path == "tiny-random-smollm2"
    assert results[1].parent_path == results[0].path and results[2].parent_path == results[1].path
    for result in results:
        assert (tmp_path / result.path).exists() and (tmp_path / result.path / "config.json").is_file()
        assert result.data_lineage["checked_disjoint"] and result.resolved_config["stage"]["kind"] == result.stage
        # no validation split: the last checkpoint stays the stage's model, and the record says so
        assert result.resolved_config["selection"]["checkpoint"] == {"rule": "no validation: last checkpoint",
                                                                     "step": 2}
    # SmolLM2's template marks no reasoning: the RL stage's chain-of-thought penalty is off, and says so
    assert results[2].resolved_config["reasoning_penalty"] == "off: the model emits no reasoning"
    assert any("reasoning-length penalty off: the model emits no reasoning" in line for line in reporter.lines)
    # the original harness and the HSA variants (one per case) the kept trajectories ran under
    assert results[0].harness_hashes[0] != results[0].harness_hashes[1]
    assert PipelineConfig.from_dict(config(SFT).to_dict()).harnesses[0].spec().content_hash in results[0].harness_hashes
    for stage in ("sft", "opd"):
        losses = reporter.values(stage, "loss")
        assert len(losses) == 2 and all(math.isfinite(v) for v in losses) and losses[0] != losses[1]
    assert all(v > 0 for v in reporter.values("opd", "loss"))  # the SFT'd student differs from its base teacher
    assert all(v > 0 for v in reporter.values("sft", "grad_norm"))
    rewards = reporter.values("rl", "rewards/test_reply_length/mean")
    # two optimiser steps over one generation (rl.num_iterations 2: GSPO's second pass), so one reward logged
    assert len(rewards) == 1 and all(math.isfinite(v) for v in rewards)
    assert reporter.values("rl", "grad_norm")[0] > 0  # the live group moved the weights
    assert reporter.values("rl", "frac_dropped_zero_spread")[0] == pytest.approx(0.5)
    # what the trainer trained on: the dead group's loss mask is empty, advantages are per token (segments)
    for rewards_seen, output in captured:
        dead = zero_spread_groups(rewards_seen, 2)
        assert dead.any() and not dead.all()
        assert output["tool_mask"][dead].sum() == 0 and output["tool_mask"][~dead].sum() > 0
        assert output["advantages"].shape == output["completion_ids"].shape
        live = output["advantages"][~dead]
        assert live.abs().sum() > 0


def test_cancel_keeps_the_checkpoint_and_a_rerun_resumes(tmp_path):
    stage = {"kind": "sft", "config": {**SFT["config"], "max_steps": 3}}
    steps = []
    reporter = RecordingReporter()
    with pytest.raises(TrainingCancelled) as cancelled:
        run_pipeline(config(stage), artifacts_dir=tmp_path, reporter=reporter,
                     should_stop=lambda: steps.append(1) or len(steps) >= 1)
    assert cancelled.value.step == 1 and cancelled.value.checkpoint.endswith("checkpoint-1")
    assert [s for _, s, _, _ in reporter.logs] == [1] and not reporter.checkpoints

    resumed = RecordingReporter()
    results = run_pipeline(config(stage), artifacts_dir=tmp_path, reporter=resumed, should_stop=lambda: False)
    assert any("resumed at step 1 of 3" in line for line in resumed.lines)
    assert [s for _, s, _, _ in resumed.logs] == [2, 3]  # continued, not restarted
    assert any("reusing prepared data" in line for line in resumed.lines)
    assert results[0].metrics["loss"] == resumed.values("sft", "loss")[-1]

    again = RecordingReporter()
    assert run_pipeline(config(stage), artifacts_dir=tmp_path, reporter=again, should_stop=lambda: False) == results
    assert not again.logs and again.checkpoints == results  # finished stages are skipped, reported again

    other = config({"kind": "sft", "config": {**SFT["config"], "max_steps": 4}})
    with pytest.raises(Exception, match="another job"):
        run_pipeline(other, artifacts_dir=tmp_path, reporter=again, should_stop=lambda: False)


def test_lineage_guard_refuses_eval_cases_before_training(tmp_path):
    eval_case = simulator_cases(5, 3)[1]
    job = config(SFT, exclude={"lsqa@v4": [case_content_hash(eval_case.to_dict())]})
    with pytest.raises(LineageError, match=f"lsqa@v4: {eval_case.case_id}"):
        run_pipeline(job, artifacts_dir=tmp_path, reporter=RecordingReporter(), should_stop=lambda: False)
    assert not (tmp_path / "stages").exists() and not (tmp_path / "data" / "sft.jsonl").exists()


def test_zero_spread_groups_gdpo_and_the_alive_mean_on_hand_made_rewards():
    nan = float("nan")
    rewards = torch.tensor([[1.0, 0.5], [1.0, 0.5],     # group 0: nothing varies → dead
                            [1.0, 1.0], [0.0, 0.0],     # group 1: both vary
                            [nan, 0.2], [nan, 0.2],     # group 2: one reward absent, the other constant → dead
                            [0.0, nan], [1.0, nan]])    # group 3: varies where present
    dead = zero_spread_groups(rewards, 2)
    assert dead.tolist() == [True, True, False, False, True, True, False, False]
    advantages = gdpo_advantages(rewards, torch.ones(2), 2)
    assert advantages[2] > 0 > advantages[3] and advantages[7] > 0 > advantages[6]
    assert advantages[dead].abs().max() < 1e-6 and torch.isfinite(advantages).all()
    # dead rows keep their place in the batch but leave the mean over sequences
    completion_mask = torch.ones(8, 5)
    loss_mask = torch.ones(8, 5)
    loss_mask[dead] = 0
    assert alive_mean_scale(completion_mask, loss_mask) == 2.0
    assert alive_mean_scale(completion_mask, torch.zeros(8, 5)) == 0.0


def test_lora_trains_adapters_and_writes_a_merged_model(tmp_path):
    from safetensors import safe_open

    job = PipelineConfig.from_dict({**config(SFT).to_dict(), "model": {"base": "tiny-random-smollm2", "device": "cpu",
                                                                      "finetune": "lora", "lora_r": 4}})
    reporter = RecordingReporter()
    [result] = run_pipeline(job, artifacts_dir=tmp_path, reporter=reporter, should_stop=lambda: False)
    losses = reporter.values("sft", "loss")
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses) and losses[0] != losses[1]
    adapter = tmp_path / "stages" / "00-sft" / "adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 4
    with safe_open(str(tmp_path / result.path / "model.safetensors"), "pt") as weights:
        names = list(weights.keys())
    assert names and not any("lora" in name for name in names)  # merged: a plain model any stage can load
