"""HSA-RL's segment credit reaches the gradient, and GSPO's clipping acts.

A tool-call segment with advantage +1 and a reply segment with −1 must push the tool tokens' log-probabilities
up and the reply tokens' down. Under TRL's sequence-level GSPO loss every token gets the length-weighted
average of the two instead (here −1/3 for all: the tool segment is pushed down too)."""

import math

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig

from tests.training.conftest import RecordingReporter
from tests.training.test_pipeline import RL, config
from training.base_models import TINY, load_model, load_tokenizer, materialize_base, model_cache
from training.pipeline import run_pipeline
from training.rl import SEGMENT_CODES, HarnessGRPOTrainer, segment_gspo_loss, segment_log_ratio

TOOL, REPLY = SEGMENT_CODES["tool"], SEGMENT_CODES["reply"]
# one row: 2 tool-call tokens, 1 env token (masked out), 4 reply tokens
SEGMENTS = torch.tensor([[TOOL, TOOL, 0, REPLY, REPLY, REPLY, REPLY]])
MASK = (SEGMENTS != 0).float()
ADVANTAGES = torch.where(SEGMENTS == TOOL, 1.0, torch.where(SEGMENTS == REPLY, -1.0, 0.0))


def test_each_segment_has_its_own_ratio():
    log_ratio = torch.tensor([[0.2, 0.4, 9.0, -0.1, -0.1, -0.3, -0.3]])
    out = segment_log_ratio(log_ratio, SEGMENTS, MASK)
    assert out[0, :2].tolist() == pytest.approx([0.3, 0.3])
    assert out[0, 2] == 0  # an env token takes no part
    assert out[0, 3:].tolist() == pytest.approx([-0.2] * 4)


def test_segment_advantages_reach_each_segments_tokens():
    logps = torch.randn(1, 7, requires_grad=True)
    loss, ratio = segment_gspo_loss(logps, logps.detach(), ADVANTAGES, SEGMENTS, MASK, epsilon_low=0.2,
                                    epsilon_high=0.2)
    ((loss * MASK).sum(-1) / MASK.sum(-1)).mean().backward()
    grad = logps.grad[0]
    assert (grad[:2] < 0).all()  # descending the loss raises the tool tokens' log-probabilities
    assert (grad[3:] > 0).all()  # and lowers the reply tokens'
    assert grad[2] == 0 and torch.allclose(ratio[MASK > 0], torch.ones(6))


def test_a_clipped_segment_carries_no_gradient_the_other_still_does():
    logps = torch.zeros(1, 7, requires_grad=True)
    old = torch.tensor([[-1.0, -1.0, 0, 0, 0, 0, 0]])  # the tool segment's ratio is e ≫ 1 + ε
    loss, ratio = segment_gspo_loss(logps, old, ADVANTAGES, SEGMENTS, MASK, epsilon_low=0.2, epsilon_high=0.2)
    loss.sum().backward()
    assert ratio[0, 0].item() == pytest.approx(math.e)
    assert (logps.grad[0, :2] == 0).all() and (logps.grad[0, 3:] > 0).all()


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    directory = materialize_base(TINY, model_cache(), seed=0)
    tokenizer = load_tokenizer(directory)
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("grpo")), use_cpu=True, bf16=False, report_to="none",
                      per_device_train_batch_size=2, num_generations=2, max_completion_length=8, loss_type="grpo",
                      importance_sampling_level="sequence", epsilon=3e-4, beta=0.0)
    return HarnessGRPOTrainer(model=load_model(directory, use_cpu=True), reward_funcs=[lambda **_: [0.0, 0.0]],
                              args=args, train_dataset=Dataset.from_list([{"prompt": "hi"}] * 2),
                              processing_class=tokenizer, reward_segments=["tool"], segment_advantages=True,
                              drop_zero_spread=False)


def test_the_trainers_loss_credits_tool_and_reply_tokens_apart(trainer, monkeypatch):
    """The trainer's own loss, on a tiny model: d loss / d log p has the sign of −(the token's segment advantage)."""
    captured = []
    original = HarnessGRPOTrainer._get_per_token_logps_and_entropies

    def keep_grad(self, *args, **kwargs):
        logps, *rest = original(self, *args, **kwargs)
        logps.retain_grad()
        captured.append(logps)
        return (logps, *rest)

    monkeypatch.setattr(HarnessGRPOTrainer, "_get_per_token_logps_and_entropies", keep_grad)
    torch.manual_seed(0)
    inputs = {"prompt_ids": torch.randint(10, 400, (1, 5)), "prompt_mask": torch.ones(1, 5, dtype=torch.long),
              "completion_ids": torch.randint(10, 400, (1, 7)), "completion_mask": torch.ones(1, 7, dtype=torch.long),
              "tool_mask": MASK.long(), "advantages": ADVANTAGES, "segment_ids": SEGMENTS}
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.training_step in a real step
    trainer._compute_loss(trainer.model, inputs).backward()
    grad = captured[-1].grad[0]
    assert (grad[:2] < 0).all() and (grad[3:] > 0).all() and grad[2] == 0
    assert trainer._metrics["train"]["clip_ratio/region_mean"][-1] == 0.0  # first pass: the ratio is 1


def test_gspo_clips_on_the_second_pass_over_a_generation(tmp_path):
    """Two optimisation passes over each generation (the default) with a large learning rate: the second
    pass's segment ratios leave [1 − ε, 1 + ε] and the stage logs a clipped fraction."""
    stage = {"kind": "rl", "config": {**RL["config"], "learning_rate": 0.5, "max_steps": 2, "num_iterations": 2,
                                      "epsilon": 1e-3}}
    reporter = RecordingReporter()
    run_pipeline(config(stage), artifacts_dir=tmp_path, reporter=reporter, should_stop=lambda: False)
    clipped = reporter.values("rl", "clip_ratio/region_mean")
    assert clipped and max(clipped) > 0
