"""SFT packing and the compact LM head (training/sft.py) change how rows reach the model, not what it learns:
packed rows keep exactly their own assistant labels, do not attend to one another (position ids restart per
row and transformers builds a block-diagonal mask from them, on CPU SDPA and eager alike), so the summed loss
is the unpacked one; the compact head gives TRL's loss, gradients and metrics."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from tests.training.conftest import MINI_HARNESS, RecordingReporter
from training.base_models import TINY, load_model, load_tokenizer, materialize_base, model_cache
from training.datasets import tokenize_rows
from training.pipeline import PipelineConfig, run_pipeline
from training.sft import sft_trainer
from training.sft_config import SftConfig
from training.trajectories import TrajectoryConfig, generate_trajectories

MAX_LENGTH = 2048


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY)


@pytest.fixture(scope="module")
def rows(mini_spec, mini_cases, tokenizer):
    kept, _ = generate_trajectories(mini_cases, [mini_spec], TrajectoryConfig(
        teacher_config={"mistake_rate": 1.0}, keep_full_retry_share=1.0, augmented_variants=1))
    tokenized, _ = tokenize_rows([t.to_row() for t in kept], tokenizer, max_length=MAX_LENGTH)
    return tokenized


def trainer_for(rows, tokenizer, tmp_path, *, packing, compact=True, attention="sdpa"):
    model = load_model(materialize_base(TINY, model_cache(), seed=0), use_cpu=True)
    model.set_attn_implementation(attention)
    arguments = SftConfig(max_steps=1, per_device_train_batch_size=1).trainer_arguments(
        output_dir=str(tmp_path / f"trainer-{packing}-{compact}-{attention}"), use_cpu=True, seed=0)
    config = SftConfig(max_length=MAX_LENGTH, packing=packing, compact_lm_head=compact)
    return sft_trainer(config, model=model, tokenizer=tokenizer, rows=rows, trainer_arguments=arguments)


def batches(trainer):
    """Every training example as the collator hands it to the model, one example per batch."""
    return [trainer.data_collator([example]) for example in trainer.train_dataset]


def segments(batch):
    """(input_ids, labels) of each row inside a packed batch, split where the position ids restart."""
    starts = (batch["position_ids"][0] == 0).nonzero().flatten().tolist() + [batch["input_ids"].shape[1]]
    return [(batch["input_ids"][0, a:b], batch["labels"][0, a:b]) for a, b in pairwise(starts)]


def trained(labels):
    """{position: token} of the labels the causal loss reads (it predicts position t from t-1, so never t=0)."""
    return {t: int(token) for t, token in enumerate(labels.tolist()) if t > 0 and token != -100}


def test_packing_keeps_every_row_and_exactly_its_labels(rows, tokenizer, tmp_path):
    unpacked = {tuple(b["input_ids"][0].tolist()): b["labels"][0]
                for b in batches(trainer_for(rows, tokenizer, tmp_path, packing=False))}
    packed_trainer = trainer_for(rows, tokenizer, tmp_path, packing=True)
    packed = [segment for batch in batches(packed_trainer) for segment in segments(batch)]

    assert len(packed_trainer.train_dataset) < len(rows)  # rows were really packed together
    assert sorted(tuple(ids.tolist()) for ids, _ in packed) == sorted(unpacked)
    for ids, labels in packed:
        assert trained(labels) == trained(unpacked[tuple(ids.tolist())])
    label_tokens = sum(len(trained(labels)) for _, labels in packed)
    assert label_tokens == sum(sum(row["assistant_masks"]) for row in rows)
    assert label_tokens == sum(len(trained(labels)) for labels in unpacked.values())


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_rows_do_not_attend_to_each_other_and_lose_what_they_lose_unpacked(rows, tokenizer, tmp_path,
                                                                                     attention):
    unpacked_trainer = trainer_for(rows, tokenizer, tmp_path, packing=False, attention=attention)
    packed_trainer = trainer_for(rows, tokenizer, tmp_path, packing=True, attention=attention)
    model = packed_trainer.model
    model.eval()
    batch = max(batches(packed_trainer), key=lambda b: len(segments(b)))
    assert len(segments(batch)) >= 2
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits[0]
        start = 0
        for ids, _ in segments(batch):
            alone = model(input_ids=ids[None]).logits[0]
            assert torch.allclose(logits[start:start + len(ids)], alone, atol=1e-5)
            start += len(ids)
        # the check has teeth: numbered as one document, the second row reads the first
        one_document = model(input_ids=batch["input_ids"],
                             position_ids=torch.arange(batch["input_ids"].shape[1])[None]).logits[0]
        first = len(segments(batch)[0][0])
        assert not torch.allclose(one_document[first:], logits[first:], atol=1e-3)

        # summed over every label (num_items_in_batch=1), packed and unpacked lose the same
        def summed(trainer):
            return sum(float(trainer.compute_loss(trainer.model, dict(b), num_items_in_batch=1))
                       for b in batches(trainer))

        unpacked_trainer.model.eval()
        assert summed(packed_trainer) == pytest.approx(summed(unpacked_trainer), rel=1e-5)


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("packing", [True, False], ids=["packed", "padded-pair"])
def test_compact_lm_head_gives_trls_loss_gradients_and_metrics(rows, tokenizer, tmp_path, bf16, packing):
    results = []
    for compact in (False, True):
        trainer = trainer_for(rows, tokenizer, tmp_path, packing=packing, compact=compact)
        model = trainer.model
        model.train()
        projected = []  # rows the model's own LM head sees (TRL's fused head reads its weight directly)
        model.lm_head.register_forward_hook(lambda module, inputs, output, seen=projected: seen.append(len(inputs[0])))
        # packed: one packed sequence; unpacked: two rows of unequal length, right-padded by the collator
        batch = (batches(trainer)[0] if packing
                 else trainer.data_collator([trainer.train_dataset[0], trainer.train_dataset[1]]))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            outputs = model(**batch, fused_lm_head=True, use_cache=False)
            loss = trainer.compute_loss(model, dict(batch))
        loss.backward()
        gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        results.append((float(loss.detach()), outputs, gradients, dict(trainer._metrics["train"]), projected))
    (trl_loss, trl, trl_grads, trl_metrics, trl_projected), (loss, ours, grads, metrics, projected) = results
    assert trl_projected == [] and projected == [int(ours.label_mask.sum())] * 2
    if not packing:
        assert batch["input_ids"].shape[0] == 2 and (batch["attention_mask"] == 0).any()
    tolerance = 2e-2 if bf16 else 1e-5
    assert loss == pytest.approx(trl_loss, rel=tolerance)
    assert torch.equal(ours.label_mask, trl.label_mask)
    assert torch.allclose(ours.log_probs, trl.log_probs, rtol=tolerance, atol=tolerance)
    assert torch.allclose(ours.entropy, trl.entropy, rtol=tolerance, atol=tolerance)
    if not bf16:  # a bf16 near-tie may pick another top-1
        assert torch.equal(ours.is_top1, trl.is_top1)
        assert metrics["mean_token_accuracy"] == trl_metrics["mean_token_accuracy"]
    assert metrics["entropy"] == pytest.approx(trl_metrics["entropy"], rel=tolerance)
    assert metrics["num_tokens"] == trl_metrics["num_tokens"]
    assert grads.keys() == trl_grads.keys() and grads
    for name, gradient in grads.items():
        assert torch.allclose(gradient, trl_grads[name], rtol=10 * tolerance, atol=1e-6 if not bf16 else 1e-3), name


def test_the_sft_stage_trains_packed(tmp_path):
    reporter = RecordingReporter()
    config = PipelineConfig.from_dict({
        "model": {"base": TINY, "device": "cpu"},
        "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}],
        "data": {"simulator_seed": 5, "simulator_cases": 4},
        "trajectories": {"augmented_variants": 1},
        "stages": [{"kind": "sft", "config": {"max_steps": 2, "save_steps": 2, "learning_rate": 5e-3,
                                              "max_length": 2048, "packing": True,
                                              "per_device_train_batch_size": 1}}]})
    (result,) = run_pipeline(config, artifacts_dir=tmp_path, reporter=reporter, should_stop=lambda: False)
    assert any("packed into" in line for line in reporter.lines)
    losses = reporter.values("sft", "loss")
    assert len(losses) == 2 and all(0 < loss < 20 for loss in losses)
    assert result.resolved_config["stage"]["config"]["packing"] is True
