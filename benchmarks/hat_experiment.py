"""The HAT reproduction (issue 13): base, Fixed-SFT, HSA-SFT, HSA-SFT + OPD and HAT, judged under the
original harness, under held-out harness edits (one per case) and on IFEval-format prompts.

    python benchmarks/hat_experiment.py --model smollm2 --cases 100 --train-examples 400 --steps 4
    python benchmarks/hat_experiment.py --model tiny --cases 4 --train-examples 4 --steps 1 \
        --out-json /tmp/hat.json --out-md /tmp/hat.md          # toy scale, about a minute

Writes docs/hat-reproduction-earlier.json and .md (unless --out-* say otherwise; the study below owns
docs/hat-reproduction.md since it finished) and
prints the table. Everything is seeded (--seed, --heldout-seed); nothing is downloaded. What each arm
is and how the data are kept apart: training/hat/experiment.py.

--study runs the harness-reading study instead (issue 42, training/hat/study.py; `make harness-reading`):
validation and test splits, every arm under constrained and free decoding and every held-out edit kind,
the recipe chosen on validation, the targets from the test split. Its state is kept in --state-dir (commit
it: a later session on another machine goes on from it); run the same command again to go on, --status to
see what is left:

    python benchmarks/hat_experiment.py --study --model tiny --validation-cases 2 --test-cases 2 \
        --train-examples 2 --opd-steps 1 --ifeval-validation 2 --ifeval-test 2 --max-new-tokens 8 \
        --state-dir /tmp/hr-state --workdir /tmp/hr-work --docs-dir /tmp/hr-docs   # toy scale
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from training.hat.experiment import (  # noqa: E402
    HSA_STATES,
    ORACLES,
    ExperimentConfig,
    judge_arm,
    run_default_candidate,
    run_experiment,
)
from training.hat.report import render_default_markdown, render_markdown  # noqa: E402


class PrintReporter:
    def log(self, stage, step, total_steps, metrics):
        loss = metrics.get("loss")
        print(f"  {stage} {step}/{total_steps}" + (f" loss={loss:.4f}" if isinstance(loss, float) else ""),
              flush=True)

    def line(self, text):
        print(text, flush=True)

    def checkpoint(self, result):
        print(f"  checkpoint {result.stage}: {result.path}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("tiny", "smollm2"), default="smollm2")
    parser.add_argument("--cases", type=int, default=100, help="eval cases (each also under its held-out edit)")
    parser.add_argument("--train-examples", type=int, default=400, help="HSA-SFT trajectories")
    parser.add_argument("--steps", type=int, default=4, help="HSA-RL optimizer steps")
    parser.add_argument("--opd-steps", type=int, default=50)
    parser.add_argument("--rl-cases", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1, help="SFT passes over the data")
    parser.add_argument("--grad-accumulation", type=int, default=4, help="SFT rows per optimizer step")
    parser.add_argument("--eval-workers", type=int, default=2, help="arms judged at once, beside training")
    parser.add_argument("--eval-threads", type=int, default=1, help="llama.cpp threads per judged arm")
    parser.add_argument("--eval-limit", type=int, default=0,
                        help="judge only the first N eval cases (0: all); the training exclusions cover all --cases")
    parser.add_argument("--parallel-training", action="store_true",
                        help="train Fixed-SFT in a second process beside the HAT pipeline")
    parser.add_argument("--ifeval", type=int, default=0, help="IFEval prompts (0: all)")
    parser.add_argument("--lr", type=float, default=2e-4, help="SFT learning rate (LoRA; use ~5e-5 for full)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--ifeval-new-tokens", type=int, default=160, help="new tokens per IFEval answer")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu")
    parser.add_argument("--engine", choices=("", "llama.cpp", "transformers"), default="",
                        help="eval engine (default: llama.cpp on cpu, transformers on cuda)")
    parser.add_argument("--finetune", choices=("full", "lora"), default="lora")
    parser.add_argument("--precision", choices=("fp32", "bf16", "auto"), default="auto",
                        help="training precision (auto: bf16 on a GPU and on a CPU with AVX512-BF16/AMX, where it "
                             "trains ~1.6x faster; fp32 on other CPUs, which emulate bf16 many times slower)")
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--heldout-seed", type=int, default=1301)
    parser.add_argument("--workdir", help="scratch: models, GGUFs, prepared data (default var/hat-experiment; "
                                          "with --study var/harness-reading)")
    parser.add_argument("--oracle", choices=tuple(ORACLES), default="tools-first",
                        help="the oracle teacher's protocol: tools, skill, bare facts (the reproduction's); "
                             "tools-first-named: each fact after its tool-result field's name; skill-first: the skill, "
                             "then the tools, facts named (docs/default-model.md)")
    parser.add_argument("--train-rooms", type=int, default=1,
                        help="simulator rooms the training cases are set in (1: the reproduction's single room)")
    parser.add_argument("--hsa-states", choices=HSA_STATES, default="pairs",
                        help="HSA-SFT's rows: pairs, each case under the original and one HSA variant (the "
                             "reproduction's); single, each case under one of the two, drawn per case (twice the "
                             "distinct cases for the same rows)")
    parser.add_argument("--hsa", action="append", default=[], metavar="KNOB=VALUE",
                        help="an HsaConfig knob for HSA-SFT's rows, VALUE as JSON (e.g. rename_skill_p=1, "
                             "opaque_noise_names_p=0.5); repeat for more; harness/augmentation/config.py lists them")
    parser.add_argument("--out-json", default=str(ROOT / "docs" / "hat-reproduction-earlier.json"))
    parser.add_argument("--notes", help="a Markdown file appended to the page (the reading of the figures)")
    parser.add_argument("--render-only", action="store_true",
                        help="re-render --out-md from --out-json (e.g. with new --notes), without running")
    parser.add_argument("--out-md", default=str(ROOT / "docs" / "hat-reproduction-earlier.md"))
    parser.add_argument("--judge-arm", choices=("base", "fixed_sft", "hsa_sft", "hsa_sft_opd", "hat"),
                        help="only judge this arm into the workdir's eval cache (another process can share "
                             "the judging of a run; the run, resumed, reads it)")
    parser.add_argument("--package-default", action="store_true",
                        help="afterwards, copy HSA-SFT's adapter to training/default_model/ when its accuracy under "
                             "the original harness clearly beats the base's (95%% intervals apart) and its replies are "
                             "right more often than wrong")
    parser.add_argument("--default-candidate", action="store_true",
                        help="train and judge HSA-SFT alone (the embedded default's candidate) into "
                             "docs/default-model-earlier.json/.md, then package it when it passes the shipping rule")
    parser.add_argument("--base-from", help="with --default-candidate: take the base's scores from this result "
                                            "JSON (an earlier judging of the same base) instead of judging it again")
    study = parser.add_argument_group("the harness-reading study (--study)")
    study.add_argument("--study", action="store_true", help="run the harness-reading study (module docstring)")
    study.add_argument("--validation-cases", type=int, default=40, help="validation split: eval cases")
    study.add_argument("--test-cases", type=int, default=100, help="test split: eval cases")
    study.add_argument("--ifeval-validation", type=int, default=0, help="validation IFEval prompts (0: all)")
    study.add_argument("--ifeval-test", type=int, default=0, help="test IFEval prompts (0: all)")
    study.add_argument("--with-rl", action="store_true", help="also the HAT arm (HSA-RL after OPD; slow on a CPU)")
    study.add_argument("--conditions", default="",
                       help="comma-separated conditions judged (default all six; original, names, all at least)")
    study.add_argument("--ablation-splits", default="test",
                       help="comma-separated splits also judged under the other held-out edit kinds (the rest: "
                            "original, names, all only)")
    study.add_argument("--state-dir", default="experiments/harness-reading",
                       help="the study's committed state (adapters, records, choice)")
    study.add_argument("--keep-checkpoint", action="store_true",
                       help="a stage cut part way copies its Trainer checkpoint into --state-dir (~59 MB for "
                            "SmolLM2 LoRA r16), so the next session, on any machine, resumes mid-stage")
    study.add_argument("--hours", type=float, default=0.0,
                       help="stop cleanly after this many hours (0: never): the stage checkpoints, judging ends "
                            "its part; set it below the session's limit")
    study.add_argument("--commit-state", action="store_true",
                       help="git-commit --state-dir (alone) after each stage and every ~15 min of judging")
    study.add_argument("--status", action="store_true", help="print what is done and what is left, and exit")
    study.add_argument("--docs-dir", default=str(ROOT / "docs"),
                       help="where the study writes default-model.json/.md and hat-reproduction.md")
    args = parser.parse_args(argv)
    args.workdir = args.workdir or ("var/harness-reading" if args.study else "var/hat-experiment")
    if args.render_only:
        result = json.loads(Path(args.out_json).read_text(encoding="utf-8"))
        notes = Path(args.notes).read_text(encoding="utf-8") if args.notes else ""
        Path(args.out_md).write_text(render_markdown(result, notes), encoding="utf-8")
        return package_default(result, Path(args.workdir)) if args.package_default else 0
    config = ExperimentConfig(model=args.model, cases=args.cases, train_examples=args.train_examples,
                              rl_steps=args.steps, opd_steps=args.opd_steps, rl_cases=args.rl_cases,
                              sft_epochs=args.epochs, ifeval=args.ifeval, learning_rate=args.lr,
                              max_new_tokens=args.max_new_tokens, ifeval_new_tokens=args.ifeval_new_tokens,
                              seed=args.seed, heldout_seed=args.heldout_seed,
                              workdir=args.workdir, device=args.device, engine=args.engine,
                              finetune=args.finetune, lora_r=args.lora_r, precision=args.precision,
                              grad_accumulation=args.grad_accumulation, eval_workers=args.eval_workers,
                              eval_limit=args.eval_limit, eval_threads=args.eval_threads,
                              parallel_training=args.parallel_training, oracle=args.oracle,
                              train_rooms=args.train_rooms, hsa_states=args.hsa_states,
                              hsa=hsa_knobs(parser, args.hsa))
    if args.study:
        return harness_reading(config, args, argv)
    if args.default_candidate:
        return default_candidate(config, args, argv)
    if args.judge_arm:
        scores = judge_arm(config, args.judge_arm, PrintReporter())
        print(json.dumps({k: v for k, v in scores.items() if k != "turns"}, indent=1))
        return 0
    result = run_experiment(config, PrintReporter())
    result["command"] = "python benchmarks/hat_experiment.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    result["machine"] = {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}
    Path(args.out_json).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    markdown = render_markdown(result, Path(args.notes).read_text(encoding="utf-8") if args.notes else "")
    Path(args.out_md).write_text(markdown, encoding="utf-8")
    print(markdown)
    if args.package_default:
        return package_default(result, Path(args.workdir))
    return 0


def hsa_knobs(parser: argparse.ArgumentParser, pairs: list[str]) -> dict[str, object]:
    """`--hsa KNOB=VALUE` options as HsaConfig overrides; a bad one ends the run before anything starts."""
    from harness.augmentation import HsaConfig

    knobs: dict[str, object] = {}
    for pair in pairs:
        name, equals, raw = pair.partition("=")
        if not equals or not name.strip():
            parser.error(f"--hsa takes KNOB=VALUE, not {pair!r}")
        try:
            knobs[name.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            knobs[name.strip()] = raw
    try:
        HsaConfig(**knobs)
    except (TypeError, ValueError) as error:
        parser.error(f"--hsa: {error}")
    return knobs


def default_candidate(config: ExperimentConfig, args: argparse.Namespace, argv: list[str] | None) -> int:
    from training.default_model import SHIPPABLE_ARM, package_adapter, ship_decision

    base = json.loads(Path(args.base_from).read_text(encoding="utf-8"))["arms"]["base"] if args.base_from else None
    result = run_default_candidate(config, PrintReporter(), base_scores=base)
    result["command"] = "python benchmarks/hat_experiment.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    result["machine"] = {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}
    ships, why = ship_decision(result)
    result["ships"], result["decision"] = ships, why
    # the shipped default's recipe: its page is the -earlier one since the harness-reading study took default-model
    (ROOT / "docs" / "default-model-earlier.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n",
                                                               encoding="utf-8")
    notes = Path(args.notes).read_text(encoding="utf-8") if args.notes else ""
    markdown = render_default_markdown(result, ("ships — " if ships else "not shipped — ") + why, notes)
    (ROOT / "docs" / "default-model-earlier.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    if not (ships and args.package_default):
        return 0 if ships else 1
    out = package_adapter(Path(config.workdir) / "hat" / "stages" / "00-sft", result, SHIPPABLE_ARM)
    print(f"Packaged {SHIPPABLE_ARM} into {out}; `manage.py build_default_model` (make run) builds it.")
    return 0


def harness_reading(config: ExperimentConfig, args: argparse.Namespace, argv: list[str] | None) -> int:
    """The study (exit 0: done and the candidate ships; 1: done, not shipped; 3: stopped early, run it again)."""
    from training.hat.study import (
        CONDITIONS,
        Stopper,
        Study,
        StudyConfig,
        StudyPaused,
        format_status,
        study_status,
    )
    from training.hat.study_figures import study_result

    study_config = StudyConfig(experiment=config, validation_cases=args.validation_cases, test_cases=args.test_cases,
                               ifeval_validation=args.ifeval_validation, ifeval_test=args.ifeval_test,
                               with_rl=args.with_rl,
                               conditions=tuple(c for c in args.conditions.split(",") if c) or CONDITIONS,
                               ablation_splits=tuple(s for s in args.ablation_splits.split(",") if s),
                               state_dir=args.state_dir, keep_checkpoint=args.keep_checkpoint, hours=args.hours,
                               commit_state=args.commit_state)
    if args.status:
        print(format_status(study_status(study_config)))
        return 0
    stopper = Stopper(args.hours)
    stopper.install()
    study = Study(study_config, PrintReporter(), stopper=stopper)
    try:
        study.run()
    except StudyPaused as paused:
        print(f"Paused: {paused}")
        print(format_status(study_status(study_config)))
        return 3
    result = study_result(study)
    result["command"] = "python benchmarks/hat_experiment.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    notes = Path(args.notes).read_text(encoding="utf-8") if args.notes else ""
    write_study_docs(result, Path(args.docs_dir), notes)
    print(f"{'Ships' if result['ships'] else 'Not shipped'}: {result['decision']}")
    if result["ships"] and args.package_default:
        from training.default_model import package_adapters
        from training.hat.study import CHAINS
        from training.hat.study_state import StudyState

        state = StudyState(Path(args.state_dir))
        arm = result["shipped"]["arm"]
        out = package_adapters([state.stage_dir(stage) for stage in CHAINS[arm]], result, arm)
        print(f"Packaged {arm} ({' + '.join(CHAINS[arm])}) into {out}; `manage.py build_default_model` (make run) "
              "builds it.")
    return 0 if result["ships"] else 1


def write_study_docs(result: dict, docs: Path, notes: str = "") -> None:
    """default-model.json/.md and hat-reproduction.md from the study's result, `notes` (the reading of the figures)
    at the end of both pages. The first time, the pages of the run before the study (issue 13's reproduction and
    default candidate) move to `<name>-earlier.{json,md}`, and the new reproduction page shows that run's table,
    labelled."""
    from training.hat.report import render_study_default_markdown, render_study_reproduction_markdown

    docs.mkdir(parents=True, exist_ok=True)
    for name in ("hat-reproduction", "default-model"):
        earlier = docs / f"{name}.json"
        if earlier.is_file() and "study" not in json.loads(earlier.read_text(encoding="utf-8")) \
                and not (docs / f"{name}-earlier.json").exists():
            for suffix in (".json", ".md"):
                if (docs / f"{name}{suffix}").is_file():
                    (docs / f"{name}{suffix}").rename(docs / f"{name}-earlier{suffix}")
    earlier_path = docs / "hat-reproduction-earlier.json"
    earlier = json.loads(earlier_path.read_text(encoding="utf-8")) if earlier_path.is_file() else None
    (docs / "default-model.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n",
                                             encoding="utf-8")
    (docs / "default-model.md").write_text(render_study_default_markdown(result, notes), encoding="utf-8")
    (docs / "hat-reproduction.md").write_text(
        render_study_reproduction_markdown(result, earlier, "hat-reproduction-earlier.md" if earlier else "", notes),
        encoding="utf-8")


def package_default(result: dict, workdir: Path) -> int:
    from training.default_model import SHIPPABLE_ARM, package_adapter, ship_decision

    ships, why = ship_decision(result)
    if not ships:
        print(f"Not packaged: {why}.")
        return 1
    out = package_adapter(workdir / "hat" / "stages" / "00-sft", result, SHIPPABLE_ARM)
    print(f"Packaged {SHIPPABLE_ARM} into {out} ({why}); `manage.py build_default_model` (make run) builds it.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
