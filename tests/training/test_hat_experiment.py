"""The HAT reproduction end to end at toy scale (tiny random SmolLM2, a handful of cases), and the
held-out harness edits: one per case, built from names and settings HSA never produces."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from harness.augmentation import HsaConfig, augment, vocabulary
from training.case_hashing import case_content_hash
from training.default_model import ship_decision
from training.hat import heldout
from training.hat.experiment import (
    ARMS,
    ExperimentConfig,
    answerable,
    build_data,
    compact_spec,
    judge_arm,
    paired_comparisons,
    pipeline_configs,
    run_default_candidate,
    run_experiment,
)
from training.hat.report import render_default_markdown, render_markdown


class Quiet:
    def __init__(self):
        self.lines = []

    def log(self, *args):
        pass

    def line(self, text):
        self.lines.append(text)

    def checkpoint(self, result):
        pass


def test_heldout_banks_are_outside_hsa(monkeypatch):
    assert heldout.heldout_tokens() and not heldout.heldout_tokens() & heldout.hsa_tokens()
    heldout.check_banks_disjoint(compact_spec())
    # HSA's general vocabulary and codes count as HSA words, and the held-out banks sit in its reserve.
    assert set(vocabulary.pseudo_words()) | set(vocabulary.GENERAL_WORDS) <= heldout.hsa_tokens()
    assert heldout.heldout_tokens() <= vocabulary.RESERVED
    monkeypatch.setattr(vocabulary, "RESERVED", vocabulary.RESERVED - {"amber"})
    with pytest.raises(ValueError, match="amber"):
        heldout.check_banks_disjoint()


def test_heldout_names_never_come_out_of_hsa():
    """Whatever HSA draws (many seeds, every dimension on), no name of a held-out variant appears."""
    spec = compact_spec()
    data = build_data(ExperimentConfig(model="tiny", cases=6, train_examples=4, rl_cases=2))
    heldout_names = {m.name for v in data.heldout for m in (*v.spec.skills, *v.spec.tools)}
    hsa_names = set()
    hsa_hashes = set()
    hsa_descriptions = set()
    for seed in range(200):
        variant = augment(spec, HsaConfig(skill_identifiers=1.0, tool_definitions=1.0, system_prompt=1.0), seed=seed)
        hsa_names |= {m.name for m in (*variant.spec.skills, *variant.spec.tools)}
        hsa_descriptions |= {m.description for m in (*variant.spec.skills, *variant.spec.tools)}
        hsa_hashes.add(variant.spec.content_hash)
    assert not (heldout_names - {"load_skill"}) & hsa_names
    assert not {word for name in hsa_names for word in re.findall(r"[a-z]+", name)} & heldout.heldout_tokens()
    # The held-out wordings and late skills' descriptions are never an HSA description either.
    assert not hsa_descriptions & {*heldout.TOOL_WORDINGS.values(), *(d for d, _ in heldout.LATE_SKILLS)}
    assert not {v.spec.content_hash for v in data.heldout} & hsa_hashes


def test_every_heldout_case_gets_its_own_edit():
    data = build_data(ExperimentConfig(model="tiny", cases=6, train_examples=4, rl_cases=2))
    spec = data.spec
    assert len({v.spec.content_hash for v in data.heldout}) == len(data.eval_cases) == 6
    for variant, case in zip(data.heldout, data.eval_cases, strict=True):
        assert answerable(case, spec)
        names = {s.name for s in variant.spec.skills}
        assert not names & {s.name for s in spec.skills}                      # every skill renamed
        assert variant.late_skill in names                                     # a skill added after training
        assert variant.spec.settings.reply_max_chars >= 1.6 * spec.settings.reply_max_chars - 5
        assert variant.spec.settings.max_turns >= spec.settings.max_turns + 4
        reworded = {t.description for t in variant.spec.tools}
        assert reworded == set(heldout.TOOL_WORDINGS.values())
        assert set(variant.case.expected.skills) <= names                     # ground truth follows the names
        assert {c.name for c in variant.case.expected.tools} <= {t.name for t in variant.spec.tools}
    # The eval set is apart from the training pool and the RL episodes (content and message).
    trained = {case_content_hash(c.to_dict()) for c in (*data.train_pool, *data.rl_cases)}
    assert not trained & set(data.exclude["hat-lsqa"])


def test_the_same_seed_gives_the_same_variants():
    first = build_data(ExperimentConfig(model="tiny", cases=3, train_examples=2, rl_cases=1))
    again = build_data(ExperimentConfig(model="tiny", cases=3, train_examples=2, rl_cases=1))
    assert [v.spec.content_hash for v in first.heldout] == [v.spec.content_hash for v in again.heldout]
    other = build_data(ExperimentConfig(model="tiny", cases=3, train_examples=2, rl_cases=1, heldout_seed=7))
    assert [v.spec.content_hash for v in first.heldout] != [v.spec.content_hash for v in other.heldout]


@pytest.mark.timeout(1800)
def test_experiment_end_to_end_at_toy_scale(tmp_path):
    config = ExperimentConfig(model="tiny", cases=2, train_examples=2, sft_epochs=1, opd_steps=1, rl_steps=1,
                              rl_cases=1, ifeval=2, max_new_tokens=8, ifeval_new_tokens=8, learning_rate=5e-3,
                              grad_accumulation=1, workdir=str(tmp_path / "work"))
    result = run_experiment(config, Quiet())
    json.dumps(result)  # JSON-ready
    assert result["model"] == "tiny-random-smollm2"
    assert result["n"] == {"fixed": 2, "heldout": 2, "ifeval": 2}
    assert set(result["arms"]) == set(ARMS)
    for arm in ARMS:
        scores = result["arms"][arm]
        for key in ("fixed", "heldout", "ifeval"):
            assert 0.0 <= scores[key] <= 1.0
        for key in ("fixed_ci", "heldout_ci"):
            low, high = scores[key]
            assert 0.0 <= low <= high <= 1.0
    # A random model answers nobody: the judge says so (failure is never success).
    assert result["arms"]["base"]["fixed"] == 0.0
    # Distinct models per arm, each from its own stage.
    assert len({result["arms"][arm]["model_dir"] for arm in ARMS}) == len(ARMS)
    tokens = result["train_tokens"]
    assert tokens["fixed_sft"] >= tokens["hsa_sft"] > 0
    assert tokens["fixed_sft_rows"] >= 1 and tokens["hsa_sft_rows"] == 2  # one case: original + one HSA variant
    disjoint = result["lineage"]["disjoint"]
    assert disjoint["heldout_variants"] == 2 and disjoint["training_harness_hashes"] >= 2
    assert disjoint["heldout_hashes_in_training"] == [] and disjoint["heldout_names_in_training"] == []
    assert all(stage["checked_disjoint"] for stage in result["lineage"]["stages"].values())
    assert len(result["heldout_edits"]) == 2 and result["harness"]["system_prompt_tokens"] > 100
    assert result["wall_s"] > 0
    # Paired, case by case: every arm answered the same cases, so each comparison pairs all of them.
    paired = result["paired"]
    assert set(paired["drop"]) == set(ARMS)
    assert set(paired["heldout_vs_fixed_sft"]) == {"hsa_sft", "hsa_sft_opd", "hat"}
    for pair in (*paired["drop"].values(), *paired["heldout_vs_fixed_sft"].values()):
        assert pair["n"] == 2 and pair["ci"][0] <= pair["delta"] <= pair["ci"][1]
    markdown = render_markdown(result)
    assert "| HSA-SFT |" in markdown and "held-out" in markdown and "held-out vs Fixed-SFT" in markdown


@pytest.mark.timeout(1800)
def test_default_candidate_trains_hsa_sft_alone_at_toy_scale(tmp_path):
    """The embedded default's candidate: HSA-SFT alone, judged with the base, and a base taken from an earlier
    judging is marked as such."""
    config = ExperimentConfig(model="tiny", cases=2, train_examples=2, ifeval=2, max_new_tokens=8,
                              ifeval_new_tokens=8, learning_rate=5e-3, grad_accumulation=1,
                              workdir=str(tmp_path / "work"))
    result = run_default_candidate(config, Quiet())
    json.dumps(result)
    assert set(result["arms"]) == {"base", "hsa_sft"} and result["candidate"] == "hsa_sft"
    assert result["n"] == {"fixed": 2, "heldout": 2, "ifeval": 2}
    assert result["arms"]["base"]["fixed"] == 0.0 and "judged_in" not in result["arms"]["base"]
    assert result["train_tokens"]["hsa_sft_rows"] == 2 and result["steps"]["hsa_sft"] == 2
    assert (tmp_path / "work" / "hat" / "stages" / "00-sft" / "adapter").is_dir()
    assert not (tmp_path / "work" / "hat" / "stages" / "01-opd").exists()  # no later stage is trained
    disjoint = result["lineage"]["disjoint"]
    assert disjoint["heldout_hashes_in_training"] == [] and disjoint["heldout_names_in_training"] == []
    ships, why = ship_decision(result)
    assert not ships and "does not clearly beat the base" in why  # a random model beats nobody
    assert "| HSA-SFT |" in render_default_markdown(result, why)

    # Resumed with the base's earlier scores: the trained stage is reused, the base is not judged again.
    earlier = {**result["arms"]["base"], "fixed": 0.5}
    again = run_default_candidate(config, Quiet(), base_scores=earlier)
    assert again["arms"]["base"]["fixed"] == 0.5 and again["arms"]["base"]["judged_in"]
    assert again["arms"]["hsa_sft"]["model_dir"] == result["arms"]["hsa_sft"]["model_dir"]
    assert again["training"] == result["training"] and result["training"]["num_tokens"] > 0
    assert "eval_base" not in again["timings_s"]  # the base was not judged by this call
    assert "judged in an earlier run" in render_default_markdown(again, "x")


@pytest.mark.timeout(1800)
def test_the_base_judged_apart_is_what_the_candidate_run_reports(tmp_path):
    """`--judge-arm base` judges the base into the run's cache (e.g. beside training, in another process);
    the candidate run then reads it instead of judging it again, and reports it as judged in this run."""
    config = ExperimentConfig(model="tiny", cases=2, train_examples=2, ifeval=2, max_new_tokens=8,
                              ifeval_new_tokens=8, learning_rate=5e-3, grad_accumulation=1,
                              workdir=str(tmp_path / "work"))
    reporter = Quiet()
    base = judge_arm(config, "base", reporter)
    assert base["n"] == {"fixed": 2, "heldout": 2, "ifeval": 2} and (tmp_path / "work" / "eval" / "base.json").is_file()
    assert reporter.lines.count("hat: evaluating base") == 1
    with pytest.raises(FileNotFoundError, match="not trained yet"):
        judge_arm(config, "hsa_sft", reporter)
    result = run_default_candidate(config, reporter)
    assert reporter.lines.count("hat: evaluating base") == 1  # read from the cache, not judged again
    assert "judged_in" not in result["arms"]["base"] and result["arms"]["base"]["fixed"] == base["fixed"]


def test_paired_comparisons_pair_arms_case_by_case():
    def arm(fixed, heldout):
        turns = {part: [{"case_id": f"c{i}", "accuracy": a} for i, a in enumerate(values)]
                 for part, values in (("fixed", fixed), ("heldout", heldout))}
        return {"fixed": sum(fixed) / len(fixed), "heldout": sum(heldout) / len(heldout), "turns": turns}

    raw = {"base": arm([0, 0, 0, 0], [0, 0, 0, 0]), "fixed_sft": arm([1, 1, 1, 1], [1, 0, 0, 0]),
           "hsa_sft": arm([1, 1, 1, 0], [1, 1, 1, 0]), "hsa_sft_opd": arm([1, 1, 0, 0], [0, 1, 1, 0]),
           "hat": arm([1, 1, 1, 1], [1, 1, 1, 1])}
    paired = paired_comparisons(raw, seed=13)
    vs_fixed = paired["heldout_vs_fixed_sft"]
    assert vs_fixed["hsa_sft"]["delta"] == 0.5 and (vs_fixed["hsa_sft"]["better"], vs_fixed["hsa_sft"]["worse"]) == (2, 0)
    assert vs_fixed["hsa_sft"]["mcnemar_p"] == 0.5  # 2 discordant cases, both one way: 2 * (1/2)^2
    # OPD: one case lost (c0), two gained (c1, c2) against Fixed-SFT; its own drop pairs c0 lost and c2 gained
    assert (vs_fixed["hsa_sft_opd"]["better"], vs_fixed["hsa_sft_opd"]["worse"]) == (2, 1)
    assert paired["drop"]["hsa_sft_opd"]["delta"] == 0.0 and paired["drop"]["hsa_sft_opd"]["worse"] == 1
    assert paired["drop"]["fixed_sft"]["delta"] == -0.75 and paired["drop"]["hat"]["ci"] == [0.0, 0.0]
    # the base got every held-out case wrong, so an arm removes the share of errors it gets right
    assert paired["heldout_error_reduction_vs_base"] == {"fixed_sft": 0.25, "hsa_sft": 0.75, "hsa_sft_opd": 0.5,
                                                         "hat": 1.0}


def test_the_oracle_protocol_reaches_both_training_pipelines(tmp_path):
    config = ExperimentConfig(model="tiny", cases=4, train_examples=4, workdir=str(tmp_path), oracle="skill-first")
    data = build_data(config)
    split = {"fixed_cases": data.train_pool[:2], "hsa_cases": data.train_pool[:2], "fixed_rows": 2, "hsa_rows": 4}
    configs = pipeline_configs(config, data, split, tmp_path)
    assert all(c["trajectories"]["teacher_config"] == {"skill_first": True, "mistake_rate": 0.0} for c in configs.values())
    default = pipeline_configs(ExperimentConfig(model="tiny", workdir=str(tmp_path)), data, split, tmp_path)
    assert all(c["trajectories"]["teacher_config"] == {"mistake_rate": 0.0} for c in default.values())
    named = pipeline_configs(ExperimentConfig(model="tiny", workdir=str(tmp_path), oracle="tools-first-named"),
                             data, split, tmp_path)
    assert all(c["trajectories"]["teacher_config"] == {"name_fields": True, "mistake_rate": 0.0}
               for c in named.values())
    with pytest.raises(ValueError, match="oracle must be"):
        pipeline_configs(ExperimentConfig(oracle="tools-last"), data, split, tmp_path)


def test_training_cases_can_come_from_many_rooms_and_eval_stays_in_its_own(tmp_path):
    one = build_data(ExperimentConfig(model="tiny", cases=4, train_examples=12, workdir=str(tmp_path)))
    many = build_data(ExperimentConfig(model="tiny", cases=4, train_examples=12, workdir=str(tmp_path),
                                       train_rooms=6))
    rooms = lambda cases: {c.room["room_id"] for c in cases}  # noqa: E731
    assert len(rooms(one.train_pool)) == 1 and len(rooms(many.train_pool)) > 1
    assert rooms(many.eval_cases) == rooms(one.eval_cases) and not rooms(many.eval_cases) & rooms(many.train_pool)
    with pytest.raises(ValueError, match="train_rooms"):
        build_data(ExperimentConfig(model="tiny", train_rooms=0, workdir=str(tmp_path)))


def test_single_hsa_states_give_hsa_sft_a_case_a_row_at_the_same_tokens_as_fixed_sft(tmp_path):
    from training.base_models import load_tokenizer
    from training.hat.experiment import split_training

    config = ExperimentConfig(model="tiny", cases=2, train_examples=6, workdir=str(tmp_path), hsa_states="single")
    data = build_data(config)
    tokenizer = load_tokenizer(config.base)
    split = split_training(config, data, tokenizer)
    assert split["hsa_rows"] == len(split["hsa_cases"]) == 6  # pairs would take 3 cases for 6 rows
    assert split["fixed_tokens"] >= split["hsa_tokens"] > 0
    hat = pipeline_configs(config, data, split, tmp_path)["hat"]
    assert hat["trajectories"]["single_state"] is True
    with pytest.raises(ValueError, match="hsa_states"):
        build_data(ExperimentConfig(model="tiny", workdir=str(tmp_path), hsa_states="triples"))


def test_hsa_knobs_reach_hsa_sfts_rows_and_not_fixed_sfts(tmp_path):
    from training.base_models import load_tokenizer
    from training.hat.experiment import split_training

    plain = ExperimentConfig(model="tiny", cases=2, train_examples=6, workdir=str(tmp_path), hsa_states="single")
    coded = dataclasses.replace(plain, hsa={"tool_definitions": 1.0, "rename_tool_p": 1.0,
                                            "tool_rename_styles": ["code"]})
    data = build_data(coded)
    tokenizer = load_tokenizer(plain.base)
    before, after = split_training(plain, data, tokenizer), split_training(coded, data, tokenizer)
    original = {t.name for t in data.spec.tools} | {s.name for s in data.spec.skills}
    # every HSA state now renames every tool to a bare code (kx41, kx-41, k7t), which the plain rows never drew
    new_names = set(after["hsa_variant_names"]) - set(before["hsa_variant_names"])
    assert new_names and all(re.fullmatch(r"[a-z]{1,3}[-_]?\d{1,3}|[a-z]\d{1,3}[a-z]", n) for n in new_names)
    assert set(after["hsa_variant_names"]) - new_names <= set(before["hsa_variant_names"]) | original
    configs = pipeline_configs(coded, data, after, tmp_path)
    assert configs["hat"]["trajectories"]["hsa"] == coded.hsa and "hsa" not in configs["fixed"]["trajectories"]
    assert "hsa" not in pipeline_configs(plain, data, before, tmp_path)["hat"]["trajectories"]
    with pytest.raises(ValueError, match="hsa: .*probability"):
        build_data(dataclasses.replace(plain, hsa={"rename_tool_p": 2}))
