"""The harness-reading study (issue 42): two disjoint eval splits, the recipe chosen on validation alone, and a
state folder that lets a later session, on a machine where var/ is gone, go on without retraining or rejudging."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from training.case_hashing import case_content_hash
from training.hat.experiment import ExperimentConfig
from training.hat.study import (
    Stopper,
    Study,
    StudyConfig,
    StudyPaused,
    build_study_data,
    format_status,
    study_status,
)
from training.hat.study_figures import study_result
from training.hat.study_state import StudyState, StudyStateError
from training.hat.targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]


class Recorder:
    def __init__(self):
        self.lines, self.logs = [], []
        self.hsa_sft_stepped = False  # HSA-SFT (the stage after Fixed-SFT) has logged an optimizer step

    def log(self, stage, step, total, metrics):
        self.logs.append((stage, step, total))
        self.hsa_sft_stepped |= any(line.startswith("study: fixed_sft trained") for line in self.lines)

    def line(self, text):
        self.lines.append(text)

    def checkpoint(self, result):
        pass


def toy(tmp_path, **changes) -> StudyConfig:
    experiment = ExperimentConfig(model="tiny", train_examples=4, opd_steps=1, max_new_tokens=8, ifeval_new_tokens=8,
                                  learning_rate=5e-3, grad_accumulation=1, workdir=str(tmp_path / "work"))
    return StudyConfig(experiment=experiment, validation_cases=2, test_cases=2, ifeval_validation=2, ifeval_test=2,
                       conditions=("original", "names", "all"), state_dir=str(tmp_path / "state"),
                       keep_checkpoint=True, **changes)


def test_the_splits_are_disjoint_from_each_other_and_from_training(tmp_path):
    config = dataclasses.replace(toy(tmp_path), validation_cases=6, test_cases=8)
    data = build_study_data(config)
    validation, test = data["validation"], data["test"]
    hashes = {split: {case_content_hash(c.to_dict()) for c in data[split].eval_cases} for split in data}
    messages = {split: {c.message.lower() for c in data[split].eval_cases} for split in data}
    trained = {case_content_hash(c.to_dict()) for c in (*validation.train_pool, *validation.rl_cases)}
    assert len(validation.eval_cases) == 6 and len(test.eval_cases) == 8
    assert not hashes["validation"] & hashes["test"] and not messages["validation"] & messages["test"]
    assert not trained & (hashes["validation"] | hashes["test"])
    # every pipeline gets both splits' cases and prompts as exclusions (its lineage guard checks them)
    assert validation.exclude == test.exclude
    assert set(validation.exclude) == {"hat-lsqa-validation", "hat-lsqa-test", "hat-ifeval-validation",
                                       "hat-ifeval-test"}
    assert set(validation.exclude["hat-lsqa-test"]) == hashes["test"]
    assert len(validation.ifeval) == len(test.ifeval) == 2
    assert not {case_content_hash(r) for r in validation.ifeval} & {case_content_hash(r) for r in test.ifeval}
    # each case has its own held-out edit; the same seed draws the same splits
    assert len({v.spec.content_hash for v in test.heldout}) == 8
    again = build_study_data(config)
    assert [c.case_id for c in again["test"].eval_cases] == [c.case_id for c in test.eval_cases]


def test_a_state_folder_belongs_to_one_study(tmp_path):
    config = toy(tmp_path)
    # how the run goes does not change what it measures
    assert dataclasses.replace(config, hours=2.5, commit_state=True, keep_checkpoint=False).fingerprint() == \
        config.fingerprint()
    assert dataclasses.replace(config, experiment=dataclasses.replace(config.experiment, eval_threads=2,
                                                                      workdir="elsewhere")).fingerprint() == \
        config.fingerprint()
    other = dataclasses.replace(config, test_cases=3)
    assert other.fingerprint() != config.fingerprint()
    # a knob added after a study began keeps the study's identity at its default, and is part of it when set
    assert "hsa" not in config.measured()["experiment"]
    knobbed = dataclasses.replace(config, experiment=dataclasses.replace(config.experiment,
                                                                         hsa={"opaque_noise_names_p": 0.5}))
    assert knobbed.measured()["experiment"]["hsa"] == {"opaque_noise_names_p": 0.5}
    assert knobbed.fingerprint() != config.fingerprint()
    state = StudyState(Path(config.state_dir))
    state.claim(config.fingerprint(), config.measured())
    state.claim(config.fingerprint(), config.measured())
    with pytest.raises(StudyStateError, match="another study"):
        state.claim(other.fingerprint(), other.measured())
    with pytest.raises(ValueError, match="conditions"):
        Study(dataclasses.replace(config, conditions=("original", "all")), Recorder())
    with pytest.raises(ValueError, match="ablation splits"):
        Study(dataclasses.replace(config, ablation_splits=("train",)), Recorder())


def _judged_files(state_dir: Path) -> dict[str, int]:
    return {str(p.relative_to(state_dir)): p.stat().st_mtime_ns for p in (state_dir / "judged").rglob("*.json")}


@pytest.mark.timeout(1800)
def test_the_study_resumes_from_its_committed_state_without_retraining_or_rejudging(tmp_path):
    # one edit kind beyond the targets', judged on the test split only (the default ablation split)
    config = dataclasses.replace(toy(tmp_path), conditions=("original", "names", "late_skill", "all"))
    state_dir, work = Path(config.state_dir), Path(config.experiment.workdir)

    # Session 1 is cut during HSA-SFT (4 optimizer steps): Fixed-SFT is kept, HSA-SFT's checkpoint too.
    first = Recorder()
    cut = Stopper(stop=lambda: first.hsa_sft_stepped)
    with pytest.raises(StudyPaused):
        Study(config, first, stopper=cut).run()
    assert "study: fixed_sft trained" in " ".join(first.lines)
    kept = StudyState(state_dir).kept_checkpoint("hsa_sft")
    assert kept is not None and (kept / "trainer_state.json").is_file()
    fixed = json.loads((state_dir / "stages" / "fixed_sft" / "result.json").read_text())
    assert fixed["path"] == "stages/00-sft/model" and fixed["wall_s"] > 0 and fixed["host"]["cores"]
    assert (state_dir / "stages" / "fixed_sft" / "adapter" / "adapter_model.safetensors").is_file()
    status = study_status(config)
    parts = {part["part"]: part for part in status["parts"]}
    assert parts["train fixed_sft"]["done"] and not parts["train hsa_sft"]["done"]
    assert parts["train hsa_sft"]["note"] == f"kept {kept.name}" and status["estimate_left_s"] > 0
    assert "train hsa_sft" in format_status(status)

    # Session 2 starts on a "new machine": var/ is gone, only the state folder survives.
    shutil.rmtree(work)
    second = Recorder()
    study = Study(config, second)
    study.run()
    result = study_result(study)
    text = " ".join(second.lines)
    assert "fixed_sft trained" not in text and "study: hsa_sft trained" in text
    assert f"study: hsa_sft resumes from the kept {kept.name}" in text
    resumed = re.search(r"sft: resumed at step (\d+) of 4", text)  # mid-stage, from the kept Trainer checkpoint
    assert resumed and 0 < int(resumed.group(1)) < 4 and kept.name == f"checkpoint-{resumed.group(1)}"
    assert StudyState(state_dir).kept_checkpoint("hsa_sft") is None  # dropped once the stage finished
    hsa = json.loads((state_dir / "stages" / "hsa_sft" / "result.json").read_text())
    assert hsa["resumed_from_kept_checkpoint"] is True
    # each session's share of the stage: its steps, wall time and host (the trainer's token count restarts)
    first_share, second_share = hsa["segments"]
    assert first_share["steps"][1] == int(resumed.group(1)) and second_share["steps"] == [int(resumed.group(1)) + 1, 4]
    assert all(share["wall_s"] > 0 and share["host"]["cores"] and share["num_tokens"] for share in hsa["segments"])
    assert hsa["wall_s"] == pytest.approx(first_share["wall_s"] + second_share["wall_s"], abs=0.2)
    opd = json.loads((state_dir / "stages" / "hsa_sft_opd" / "result.json").read_text())
    assert opd["parent_path"] == hsa["path"] == "stages/00-sft/model"  # OPD continued from the merged SFT model
    finished = study_status(config)["parts"]
    assert all(p["done"] for p in finished)
    # what each judged part measured, so a session's note can quote it before the study is done
    assert all(re.fullmatch(r"\d+(\.\d+)? % right of 2", p["note"]) for p in finished if p["part"].startswith("judge"))
    assert all(re.fullmatch(r"\d+\.\d % strict of 2", p["note"]) for p in finished if p["part"].startswith("ifeval"))

    # The result: both splits, every arm under both decodings; targets from the test split of the chosen arm.
    assert set(result["splits"]) == {"validation", "test"}
    for split in ("validation", "test"):
        for arm in ("base", "fixed_sft", "hsa_sft", "hsa_sft_opd"):
            entry = result["splits"][split]["arms"][arm]
            assert set(entry["decodings"]) == {"constrained", "free"} and entry["ifeval"]["n"] == 2
            assert set(entry["decodings"]["free"]["conditions"]) == {"original", "names", "all"} | (
                {"late_skill"} if split == "test" else set())
    assert set(result["targets"]) == {t.key for t in TARGETS}
    assert all(set(v) == {"value", "target", "n"} for v in result["targets"].values())
    assert result["targets"]["original_accuracy"]["n"] == 2 and result["targets"]["ifeval_delta"]["n"] == 2
    assert result["choice"]["split"] == "validation" and result["shipped"]["arm"] in ("hsa_sft", "hsa_sft_opd")
    assert result["targets_source"]["split"] == "test" and not result["ships"]  # a random model ships nowhere
    assert result["lineage"]["checked_by_pipeline_guard"]
    assert all(d["heldout_names_in_training"] == [] for d in result["lineage"]["disjoint"].values())
    record = json.loads(next((state_dir / "judged" / "test" / "base").rglob("original.json")).read_text())
    assert record["host"]["cpu"] and "eval_s" in record and record["split"] == "test"

    # What ships is what was judged: the base with the kept fp16 adapters merged in order.
    import torch
    from transformers import AutoModelForCausalLM

    from training.base_models import materialize_base, model_cache
    from training.default_model import adapter_chain, manifest, merge_adapters, package_adapters

    out = package_adapters([state_dir / "stages" / "hsa_sft", state_dir / "stages" / "hsa_sft_opd"], result,
                           "hsa_sft_opd", out_dir=tmp_path / "default")
    info = manifest(out)
    assert [entry["dir"] for entry in info["adapters"]] == ["00-sft", "01-opd"]
    assert info["decoding"] == result["shipped"]["decoding"] and set(info["targets"]) == set(result["targets"])
    judged_model = AutoModelForCausalLM.from_pretrained(work / "hat" / "stages" / "01-opd" / "model").state_dict()
    shipped = merge_adapters(materialize_base(config.experiment.base, model_cache(), seed=config.experiment.seed),
                             adapter_chain(out)).state_dict()
    assert judged_model.keys() == shipped.keys()
    assert all(torch.equal(judged_model[name], shipped[name]) for name in shipped)

    # Session 3, again on a fresh machine: nothing is trained or judged again.
    shutil.rmtree(work)
    judged = _judged_files(state_dir)
    third = Recorder()
    study = Study(config, third)
    study.run()
    again = study_result(study)
    assert not [line for line in third.lines if "trained" in line or "judging" in line or "IFEval for" in line]
    assert _judged_files(state_dir) == judged and again["targets"] == result["targets"]

    # The choice reads the validation split only: test records altered (and the choice made afresh) change the
    # test figures, never the choice.
    for path in (state_dir / "judged" / "test").rglob("*.json"):
        record = json.loads(path.read_text())
        for turn in record.get("turns", ()):
            turn["accuracy"], turn["outcome"] = 1, "replied"
        for verdict in record.get("verdicts", ()):
            verdict["strict"] = 1 - verdict["strict"]
        path.write_text(json.dumps(record))
    choice = json.loads((state_dir / "choice.json").read_text())
    (state_dir / "choice.json").unlink()
    study = Study(config, Recorder())
    study.run()
    altered = study_result(study)
    assert altered["targets"]["original_accuracy"]["value"] == 100.0
    remade = json.loads((state_dir / "choice.json").read_text())
    assert {k: v for k, v in remade.items() if k != "made_at"} == {k: v for k, v in choice.items() if k != "made_at"}

    # The command writes the docs from the state (the run before the study kept, labelled as the earlier run).
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import hat_experiment

    docs = tmp_path / "docs"
    docs.mkdir()
    notes = tmp_path / "notes.md"
    notes.write_text("## Reading the figures\n\nWhat the turns say.\n")
    for name in ("hat-reproduction", "default-model"):  # the docs as they stood before the study first finished
        for suffix in (".json", ".md"):
            shutil.copyfile(ROOT / "docs" / f"{name}-earlier{suffix}", docs / f"{name}{suffix}")
    args = ["--study", "--model", "tiny", "--validation-cases", "2", "--test-cases", "2", "--train-examples", "4",
            "--opd-steps", "1", "--ifeval-validation", "2", "--ifeval-test", "2", "--max-new-tokens", "8",
            "--ifeval-new-tokens", "8",
            "--lr", "5e-3", "--grad-accumulation", "1", "--conditions", "original,names,late_skill,all",
            "--state-dir", str(state_dir), "--workdir", str(work), "--docs-dir", str(docs),
            "--notes", str(notes)]
    assert hat_experiment.main(args) == 1  # done, not shipped
    written = json.loads((docs / "default-model.json").read_text())
    assert written["targets"] == altered["targets"] and written["study"]
    page = (docs / "default-model.md").read_text()
    assert "| original-harness accuracy | 100.0 % | ≥ 70.0 % | 2 | **met** |" in page
    assert re.search(r"hsa_sft \d+ s over 2 sessions \(steps 1–\d \d+ s on .+, steps \d–4 \d+ s on ", page)
    reproduction = (docs / "hat-reproduction.md").read_text()
    assert "## The earlier run" in reproduction and "| Fixed-Harness SFT | 100 |" in reproduction
    assert "other held-out edit kinds are measured on the test split" in reproduction
    assert "| arm | decoding | turns that loaded it | of them wrong | Δ late skill (paired) |" in reproduction
    assert re.search(r"\| Fixed-Harness SFT \| constrained \| \d \| \d \| [+−-]", reproduction)
    assert (docs / "hat-reproduction-earlier.md").is_file() and (docs / "default-model-earlier.json").is_file()
    assert "Paused" not in reproduction
    assert reproduction.endswith("What the turns say.\n") and page.endswith("What the turns say.\n")



def test_the_state_commits_its_own_folder_and_nothing_else(tmp_path, monkeypatch):
    import subprocess

    from training.hat import study_state

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "config", "user.email", "t@example.com"], check=True)
    subprocess.run([*git, "config", "user.name", "t"], check=True)
    (repo / "other.txt").write_text("someone else's work in progress")
    subprocess.run([*git, "add", "other.txt"], check=True)  # staged by someone else: must stay uncommitted
    monkeypatch.setattr(study_state, "ROOT", repo)
    state = StudyState(repo / "experiments" / "study", commit=True, commit_interval_s=3600)
    study_state.write_json(state.judged_path("test", "base", "free", "original"), {"turns": []})
    assert state.commit("first", force=True)
    assert not state.commit("too soon")  # within the interval, unforced
    assert not state.commit("nothing new", force=True)
    committed = subprocess.run([*git, "show", "--name-only", "--format=%s", "HEAD"], capture_output=True, text=True,
                               check=True).stdout.split()
    assert committed == ["first", "experiments/study/judged/test/base/free/original.json"]
    staged = subprocess.run([*git, "diff", "--cached", "--name-only"], capture_output=True, text=True).stdout.split()
    assert staged == ["other.txt"]
    assert not StudyState(tmp_path / "outside", commit=True).commit("x", force=True)  # not in the checkout


def test_auto_precision_is_resolved_once_and_kept_for_every_later_stage(tmp_path, monkeypatch):
    import training.base_models

    config = toy(tmp_path)
    assert config.experiment.precision == "auto"
    monkeypatch.setattr(training.base_models, "resolve_bf16", lambda precision, *, use_cpu: True)
    first = Study(config, Recorder())
    first.state.claim(config.fingerprint(), config.measured())
    first.pin_precision()
    assert first.experiment.precision == "bf16"
    # a later session on a host without bf16 instructions still trains in bf16, and it is the same study
    monkeypatch.setattr(training.base_models, "resolve_bf16", lambda precision, *, use_cpu: False)
    later = Study(config, Recorder())
    later.pin_precision()
    assert later.experiment.precision == "bf16" and later.config.fingerprint() == config.fingerprint()
    assert study_status(config)["rates"]["sft_tokens_per_s"] == 108.0  # the pinned precision's default rate
    # an explicit precision is not "auto": nothing is pinned or overridden
    explicit = dataclasses.replace(config, experiment=dataclasses.replace(config.experiment, precision="fp32"),
                                   state_dir=str(tmp_path / "explicit"))
    study = Study(explicit, Recorder())
    study.pin_precision()
    assert study.experiment.precision == "fp32" and not (tmp_path / "explicit" / "precision.json").exists()


def test_the_time_left_is_estimated_at_each_conditions_own_pace(tmp_path):
    config = toy(tmp_path)
    judged = Path(config.state_dir) / "judged" / "validation" / "fixed_sft" / "free"
    judged.mkdir(parents=True)
    for condition, seconds in (("original", 20.0), ("names", 100.0)):  # 2 and 10 s a turn
        (judged / f"{condition}.json").write_text(json.dumps({"arm": "fixed_sft", "eval_s": seconds,
                                                              "turns": [{"accuracy": 1}] * 10}))
    status = study_status(config)
    assert status["rates"]["turn_s"]["trained"] == 6.0
    assert status["rates"]["condition_turn_s"] == {"base": {}, "trained": {"names": 10.0, "original": 2.0}}
    estimate = {p["part"]: p["estimate_s"] for p in status["parts"]}
    assert estimate["judge hsa_sft test free names"] == 2 * 10.0  # two test cases at the renames' pace
    assert estimate["judge hsa_sft test free original"] == 2 * 2.0
    assert estimate["judge hsa_sft test free all"] == 2 * 6.0  # not judged anywhere yet: the trained arms' mean
    assert estimate["judge base test free names"] == 2 * 3.9  # no base record: the default
    assert "s a judged trained turn, by condition: names 10.0, original 2.0" in format_status(status)


def test_the_targets_parts_are_judged_before_the_rest_of_the_ablation(tmp_path, monkeypatch):
    config = dataclasses.replace(toy(tmp_path), conditions=("original", "names", "late_skill", "limits", "wording",
                                                            "all"))
    calls = []
    monkeypatch.setattr(Study, "train", lambda self: calls.append("train"))
    monkeypatch.setattr(Study, "judge", lambda self, split, arm, conditions=(): calls.append(
        (split, arm, tuple(conditions) or "every condition")))
    monkeypatch.setattr(Study, "choose", lambda self: calls.append("choose") or {"arm": "hsa_sft_opd",
                                                                                   "decoding": "free"})
    Study(config, Recorder()).run()
    targets = ("original", "names", "all")
    chosen = calls.index("choose")
    assert calls[0] == "train"
    assert calls[1:chosen] == [("validation", arm, targets) for arm in config.arms]
    test_order = ["hsa_sft_opd", "fixed_sft", "base", "hsa_sft"]
    assert calls[chosen + 1:chosen + 5] == [("test", arm, targets) for arm in test_order]
    # the other edit kinds on the test split only: nothing reads them on validation
    ablation_order = ["hsa_sft_opd", "fixed_sft", "hsa_sft", "base"]  # the trained arms first
    assert calls[chosen + 5:] == [("test", arm, "every condition") for arm in ablation_order]
    # the status counts the targets' parts apart from the rest, and lists no ablation part on validation
    status = study_status(config)
    assert 0 < status["targets_left_s"] < status["estimate_left_s"]
    parts = [p["part"] for p in status["parts"]]
    assert "judge base test free late_skill" in parts
    assert not [p for p in parts if " validation " in p and p.rsplit(" ", 1)[-1] in ("late_skill", "limits",
                                                                                      "wording")]
    # asked for, the validation split gets the ablation too, after the test split's
    both = dataclasses.replace(config, ablation_splits=("test", "validation"), state_dir=str(tmp_path / "both"))
    assert both.fingerprint() != config.fingerprint()
    calls.clear()
    Study(both, Recorder()).run()
    assert calls[calls.index("choose") + 5:] == [(split, arm, "every condition") for split in ("test", "validation")
                                                 for arm in ablation_order]
    assert "judge base validation free late_skill" in [p["part"] for p in study_status(both)["parts"]]


def test_a_stage_trained_over_sessions_is_reported_per_session_and_never_as_one_sessions_share():
    from training.hat.report import _training_words
    from training.hat.study_figures import training_figures

    xeon = {"cpu": "Xeon", "cores": 2}
    record = {"wall_s": 300.0, "host": xeon, "resumed_from_kept_checkpoint": True,
              "resolved_config": {"bf16": False},
              "metrics": {"num_tokens": 100.0, "tokens_per_s": 1.0, "first_loss": 0.5, "loss": 0.2},
              "segments": [{"steps": [1, 10], "wall_s": 200.0, "host": {"cpu": "EPYC", "cores": 2},
                            "first_loss": 1.0, "num_tokens": 400.0},
                           {"steps": [11, 14], "wall_s": 100.0, "host": xeon, "first_loss": 0.5, "num_tokens": 100.0}]}
    figures = training_figures(record)
    assert (figures["num_tokens"], figures["tokens_per_s"], figures["first_loss"]) == (500.0, round(500 / 300, 1), 1.0)
    assert _training_words("fixed_sft", figures) == (
        "fixed_sft 300 s over 2 sessions (steps 1–10 200 s on EPYC (2 cores), steps 11–14 100 s on Xeon (2 cores)), "
        "500 tokens at 1.7/s, loss 1.000 → 0.200, fp32, resumed from a kept checkpoint")
    # a session that did not record its tokens or losses: the whole stage's are unknown, not this session's
    record["segments"][0].update(num_tokens=None, first_loss=None, steps=None)
    figures = training_figures(record)
    assert figures["num_tokens"] is None and figures["tokens_per_s"] is None and figures["first_loss"] is None
    words = _training_words("fixed_sft", figures)
    assert "the earlier steps 200 s on EPYC" in words and "last loss 0.200" in words and "tokens at" not in words
    # one session, not resumed: its own figures are the stage's
    single = training_figures({**record, "resumed_from_kept_checkpoint": False, "segments": record["segments"][1:]})
    assert (single["num_tokens"], single["first_loss"]) == (100.0, 0.5)
