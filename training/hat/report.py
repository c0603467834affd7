"""`docs/hat-reproduction.md` from the experiment's result dict (only measured figures: it renders the JSON)."""

from __future__ import annotations

from typing import Any

ARM_TITLES = {"base": "Base (untrained)", "fixed_sft": "Fixed-Harness SFT", "hsa_sft": "HSA-SFT",
              "hsa_sft_opd": "HSA-SFT + General OPD", "hat": "HAT (HSA-SFT + OPD + HSA-RL)"}


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def _ci(pair: list[float]) -> str:
    return f"[{_pct(pair[0])}, {_pct(pair[1])}]"


def _tuning_line(config: dict[str, Any]) -> str:
    how = (f"LoRA r={config.get('lora_r')} on every linear layer, merged after each stage"
           if config.get("finetune") == "lora" else "full fine-tuning")
    return (f"- Fine-tuning: {how}; SFT learning rate {config['learning_rate']}, {config['grad_accumulation']} "
            f"row(s) per step, {config['sft_epochs']} epoch(s); OPD {config.get('opd_learning_rate')}, "
            f"RL {config.get('rl_learning_rate')}; device {config['device']}.")


def _eval_line(config: dict[str, Any]) -> str:
    engine = config.get("engine") or ("llama.cpp" if config["device"] == "cpu" else "transformers")
    served = "each model exported to a Q8_0 GGUF and served by the `local` backend" if engine == "llama.cpp" \
        else "transformers"
    return (f"- Eval: greedy decoding through {engine} ({served}), at most {config['max_new_tokens']} new tokens "
            f"per agent model call and {config['ifeval_new_tokens']} per IFEval answer; a deadline, fallback or "
            "error is a failed answer.")


def _wrong(arm: dict[str, Any]) -> str:
    wrong = arm.get("wrong_answers")
    return f"{wrong['fixed']} / {wrong['heldout']}" if wrong else "—"


def _delta(pair: dict[str, Any]) -> str:
    if not pair or pair.get("delta") is None:
        return "—"
    p = pair["mcnemar_p"]
    return (f"{100 * pair['delta']:+.1f} [{100 * pair['ci'][0]:+.1f}, {100 * pair['ci'][1]:+.1f}] "
            f"({pair['better']}↑ {pair['worse']}↓{_p(p)}; n {pair['n']})")


def _p(p: float | None) -> str:
    if p is None:
        return ""
    return ", p < 0.001" if p < 0.001 else f", p = {p:.3g}"


def _paired_lines(paired: dict[str, Any] | None) -> list[str]:
    """Case-by-case differences: every arm answered the same cases, so these are the experiment's tests."""
    if not paired:
        return []
    lines = ["", "Paired, case by case (points; paired bootstrap 95% CI; ↑/↓ cases that got right/wrong; exact "
             "McNemar p): each arm's drop from the original harness to its held-out edit, each arm against "
             "Fixed-SFT under the held-out edits, and the share of the base's held-out errors the arm removes (the "
             "report's headline measure).", "",
             "| arm | held-out − original | held-out vs Fixed-SFT | held-out errors removed vs base |",
             "|---|---|---|---:|"]
    reduction = paired.get("heldout_error_reduction_vs_base", {})
    for arm, title in ARM_TITLES.items():
        removed = reduction.get(arm)
        lines.append(f"| {title} | {_delta(paired['drop'].get(arm))} | "
                     f"{_delta(paired['heldout_vs_fixed_sft'].get(arm)) if arm not in ('base', 'fixed_sft') else '—'} "
                     f"| {'—' if removed is None else f'{100 * removed:.1f} %'} |")
    return lines


def reproduction_table(result: dict[str, Any]) -> list[str]:
    """The reproduction's table of arms (one run's result of `run_experiment`)."""
    n, arms = result["n"], result["arms"]
    lines = [
        "Accuracy in % (reference judge; IFEval prompt-level strict), 95% bootstrap CI in brackets; Δ = held-out − "
        "original.",
        "",
        "| arm | n | original | held-out | Δ | IFEval (n) | eff. orig / held-out | wrong replies orig / held-out |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, title in ARM_TITLES.items():
        a = arms[arm]
        arm_n = a.get("n", n)
        lines.append(f"| {title} | {arm_n['fixed']} | {_pct(a['fixed'])} {_ci(a['fixed_ci'])} | {_pct(a['heldout'])} {_ci(a['heldout_ci'])} "
                     f"| {100 * (a['heldout'] - a['fixed']):+.1f} | {_pct(a['ifeval'])} {_ci(a['ifeval_ci']) if a.get('ifeval_ci') else ''} ({arm_n['ifeval']}) "
                     f"| {a['fixed_effectiveness']:.2f} / {a['heldout_effectiveness']:.2f} "
                     f"| {_wrong(a)} |")
    return lines


def render_markdown(result: dict[str, Any], notes: str = "") -> str:
    """The page; `notes` (the reading of the figures, written after the run) is appended as it is."""
    n, arms, tokens, steps = result["n"], result["arms"], result["train_tokens"], result["steps"]
    harness = result["harness"]
    lines = [
        "# HAT reproduction (issue 13)",
        "",
        f"Model `{result['model']}`, compact harness `{harness['path']}` (content hash "
        f"`{harness['content_hash'][:12]}`, first prompt {harness['system_prompt_tokens']} tokens with tool schemas). "
        f"Up to {max(a.get('n', n)['fixed'] for a in arms.values())} Live-Stream QA cases under the original harness, "
        "the same cases each under its own held-out harness edit, and up to "
        f"{max(a.get('n', n)['ifeval'] for a in arms.values())} IFEval-format prompts per arm (each arm's n is in the "
        f"table; the smallest is {n['fixed']} / {n['ifeval']}). Wall time {result['wall_s']:.0f} s.",
        "",
        "Command: `" + result.get("command", "python benchmarks/hat_experiment.py") + "`",
        "",
        *reproduction_table(result),
    ]
    lines += _paired_lines(result.get("paired"))
    disjoint = result["lineage"]["disjoint"]
    lines += [
        "",
        "## What was run",
        "",
        f"- Fixed-Harness SFT: {tokens['fixed_sft_rows']} oracle trajectories under the original harness, "
        f"{tokens['fixed_sft']} tokens, {steps['fixed_sft']} optimizer steps.",
        f"- HSA-SFT: {tokens['hsa_sft_rows']} trajectories ({_hsa_layout(result['config'])}), "
        f"{tokens['hsa_sft']} tokens, {steps['hsa_sft']} steps — Fixed-SFT took original-harness rows until it "
        "reached the same token count.",
        f"- General OPD: {steps['opd']} steps on the shipped general-instruction prompts (teacher: the base model).",
        f"- HSA-RL: {steps['rl']} GRPO steps on simulator episodes (half under HSA variants).",
        f"- Held-out edits (generator seed {result['config']['heldout_seed']}): every skill and tool renamed from word "
        "banks HSA never draws from, a skill added that no training harness had, reply_max_chars ×1.6–2 and "
        "max_turns +4..+6 (outside HSA's ranges), hand-reworded tool descriptions. One variant per case: "
        f"{disjoint['heldout_variants']} distinct variants. Held-out harness hashes found in training: "
        f"{len(disjoint['heldout_hashes_in_training'])}; held-out module names found in training: "
        f"{len(disjoint['heldout_names_in_training'])}.",
        f"- Lineage: the eval cases and IFEval prompts are passed to every training pipeline as `data.exclude` "
        f"({', '.join(f'{k}: {v}' for k, v in result['lineage']['excluded_eval_sets'].items())}); the pipeline's "
        "guard refuses any overlap before training, and every stage recorded `checked_disjoint`. Eval cases whose "
        f"content or normalised message occurred in training were skipped ({result['lineage']['skipped_near_duplicates']}).",
        _tuning_line(result["config"]),
        _eval_line(result["config"]),
        "- Turn outcomes per arm (original + held-out): " + "; ".join(
            f"{arm} " + ", ".join(f"{k} {v}" for k, v in arms[arm].get("outcomes", {}).items()) for arm in ARM_TITLES)
        + ".",
        f"- Timings (s): {', '.join(f'{k} {v}' for k, v in result['timings_s'].items())}.",
        "",
        "The full per-case list of held-out edits is in `docs/hat-reproduction.json` (`heldout_edits`).",
        "",
    ]
    if notes:
        lines += [notes.rstrip(), ""]
    return "\n".join(lines)


def _hsa_layout(config: dict[str, Any]) -> str:
    if config.get("hsa_states", "pairs") == "single":
        return "each case under one harness state, the original or one HSA variant, drawn per case"
    return "each case under the original and one HSA variant"


def render_default_markdown(result: dict[str, Any], decision: str, notes: str = "") -> str:
    """`docs/default-model.md`: the embedded default's candidate (HSA-SFT alone, `run_default_candidate`)."""
    arms, tokens, harness = result["arms"], result["train_tokens"], result["harness"]
    lines = [
        "# The embedded default model's candidate (issue 13)",
        "",
        f"HSA-SFT alone, trained as in the HAT reproduction (docs/hat-reproduction.md): model "
        f"`{result['model']}`, compact harness `{harness['path']}` (first prompt {harness['system_prompt_tokens']} "
        f"tokens), {tokens['hsa_sft_rows']} trajectories ({_hsa_layout(result['config'])}), "
        f"{tokens['hsa_sft']} tokens, {result['steps']['hsa_sft']} optimizer steps. Wall time {result['wall_s']:.0f} s.",
        "",
        "Command: `" + result.get("command", "python benchmarks/hat_experiment.py --default-candidate") + "`",
        "",
        "| arm | n | original | held-out | IFEval (n) | wrong replies orig / held-out |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for arm in ("base", "hsa_sft"):
        a = arms[arm]
        note = " (judged in an earlier run)" if a.get("judged_in") else ""
        lines.append(f"| {ARM_TITLES[arm]}{note} | {a['n']['fixed']} | {_pct(a['fixed'])} {_ci(a['fixed_ci'])} "
                     f"| {_pct(a['heldout'])} {_ci(a['heldout_ci'])} | {_pct(a['ifeval'])} ({a['n']['ifeval']}) "
                     f"| {_wrong(a)} |")
    lines += [
        "",
        f"Shipping decision (`training.default_model.ship_decision`): {decision}.",
        "",
        f"- Lineage: eval sets excluded from training ("
        f"{', '.join(f'{k}: {v}' for k, v in result['lineage']['excluded_eval_sets'].items())}); the pipeline's guard "
        f"checked it; {result['lineage']['skipped_near_duplicates']} eval cases skipped as near-duplicates of training.",
        _tuning_line(result["config"]),
        _eval_line(result["config"]),
        _training_line(result.get("training") or {}),
        f"- Timings of this run (s; a stage trained by an earlier run of the command counts ~0): "
        f"{', '.join(f'{k} {v}' for k, v in result['timings_s'].items())}.",
        "",
    ]
    if notes:
        lines += [notes.rstrip(), ""]
    return "\n".join(lines)


def _training_line(training: dict[str, Any]) -> str:
    if not training.get("tokens_per_s"):
        return "- Training: no record."
    return (f"- Training (the stage's record): {training['num_tokens']:.0f} tokens at {training['tokens_per_s']:.1f} "
            f"tokens/s (≈ {training['num_tokens'] / training['tokens_per_s'] / 60:.0f} min), loss "
            f"{training['first_loss']:.3f} → {training['loss']:.3f}.")


# -- the harness-reading study (issue 42, training.hat.study): its result renders two pages

DECODING_TITLES = {"constrained": "constrained", "free": "free"}
STUDY_CONDITIONS = ("original", "names", "late_skill", "limits", "wording", "all")
STUDY_CONDITION_HEADINGS = {"original": "original", "names": "renamed", "late_skill": "late skill",
                            "limits": "limits", "wording": "wording", "all": "all four"}


def _target_figure(unit: str, value: float | None) -> str:
    if value is None:
        return "not measured"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "pts":
        return f"{value:+.1f} pts"
    return f"{value:.2f}"


def targets_lines(targets: dict[str, Any]) -> list[str]:
    """The issue's targets table, from the result's `targets` (training.hat.targets.assess)."""
    from training.hat.targets import assess

    lines = ["| measure | value | target | n | met? |", "|---|---:|---:|---:|---|"]
    for row in assess(targets):
        bound = ("≥ " if row["higher_is_better"] else "≤ ") + _target_figure(row["unit"], row["target"])
        if row["met"] is None:
            verdict = "no value (see below)"
        elif row["met"]:
            verdict = "**met**"
        elif row["unit"] in ("%", "pts"):
            verdict = f"missed by {row['shortfall']:.1f} pts"
        else:
            verdict = f"missed by {row['shortfall']:.2f}"
        lines.append(f"| {row['title']} | {_target_figure(row['unit'], row['value'])} | {bound} | {row['n']} "
                     f"| {verdict} |")
    return lines


def _study_arm_rows(split: dict[str, Any], arms: list[str]) -> list[str]:
    heading = " | ".join(STUDY_CONDITION_HEADINGS[c] for c in STUDY_CONDITIONS)
    lines = [f"| arm | decoding | n | {heading} | Δ all four (paired) | IFEval (n) | wrong replies orig / all four |",
             "|---|---|---:|" + "---:|" * len(STUDY_CONDITIONS) + "---|---:|---:|"]
    for arm in arms:
        entry = split["arms"][arm]
        ifeval = entry["ifeval"]
        for decoding, figures in entry["decodings"].items():
            conditions = figures["conditions"]
            cells = " | ".join(f"{_pct(conditions[c]['accuracy'])}" if c in conditions else "—"
                               for c in STUDY_CONDITIONS)
            drop = _delta(conditions["all"]["vs_original"])
            lines.append(f"| {ARM_TITLES[arm]} | {DECODING_TITLES[decoding]} | {conditions['original']['n']} | {cells} "
                         f"| {drop} | {_pct(ifeval['accuracy'])} ({ifeval['n']}) "
                         f"| {conditions['original']['wrong_replies']} / {conditions['all']['wrong_replies']} |")
    return lines


def _vs_fixed_lines(split: dict[str, Any]) -> list[str]:
    lines = ["| arm | decoding | all four held-out edits: arm − Fixed-SFT (paired) |", "|---|---|---|"]
    for decoding, arms in split["heldout_vs_fixed_sft"].items():
        for arm, pair in arms.items():
            lines.append(f"| {ARM_TITLES[arm]} | {decoding} | {_delta(pair)} |")
    return lines


def _late_skill_lines(split: dict[str, Any], arms: list[str]) -> list[str]:
    """Who loads the late skill: no case needs it, so each load is a choice made by something other than the
    skill's description."""
    rows = [(arm, decoding, figures["conditions"]["late_skill"]) for arm in arms
            for decoding, figures in split["arms"][arm]["decodings"].items()
            if "added_skill_loads" in figures["conditions"].get("late_skill", {})]
    if not rows:
        return []
    lines = ["Under the late skill (an off-topic reply skill added under an unfamiliar name; no case needs it): "
             "the turns that loaded it, and of those the turns the judge failed.", "",
             "| arm | decoding | turns that loaded it | of them wrong | Δ late skill (paired) |", "|---|---|---:|---:|---|"]
    for arm, decoding, late in rows:
        loads = late["added_skill_loads"]
        lines.append(f"| {ARM_TITLES[arm]} | {DECODING_TITLES[decoding]} | {loads['turns']} | {loads['wrong']} "
                     f"| {_delta(late['vs_original'])} |")
    return [*lines, ""]


def _study_arms(result: dict[str, Any]) -> list[str]:
    return [arm for arm in ARM_TITLES if arm in result["splits"]["test"]["arms"]]


def _split_words(result: dict[str, Any], split: str) -> str:
    s = result["splits"][split]
    return (f"{s['cases']} Live-Stream QA cases (simulator seed {s['simulator_seed']}), each also under each held-out "
            f"edit kind and all four, and {s['ifeval_prompts']} IFEval prompts")


def render_study_default_markdown(result: dict[str, Any], notes: str = "") -> str:
    """`docs/default-model.md` from the study's result: the targets table first, then how the shipped arm was
    chosen and what it did on the test split."""
    from training.hat.ablation import condition_table

    shipped, choice = result["shipped"], result["choice"]
    arm, decoding = shipped["arm"], shipped["decoding"]
    test = result["splits"]["test"]
    config = result["config"]
    tokens, steps = result["train_tokens"], result["steps"]
    lines = [
        "# The embedded default model (issue 42: does it read its harness?)",
        "",
        f"The candidate is **{ARM_TITLES[arm]}** with **{decoding}** decoding, chosen on the validation split "
        f"({_split_words(result, 'validation')}): {choice['reason']}. The figures below come from the test split "
        f"({_split_words(result, 'test')}), judged once, after the choice; nothing was chosen on it.",
        "",
        "Command: `" + result.get("command", "python benchmarks/hat_experiment.py --study") + "`",
        "",
        f"## Targets (test split, {ARM_TITLES[arm]}, {decoding} decoding, paired case by case)",
        "",
        *targets_lines(result["targets"]),
        "",
        "Accuracy and drops in points of the share of turns the reference judge passes; a drop is the same cases "
        "under the edited harness minus the original (negative: the edit costs accuracy). Wrong facts: turns whose "
        "reply the judge failed (a fallback line is not one), as a share of the original-harness turns. IFEval: "
        "prompt-level strict, the candidate minus the base on the same prompts. Ratio: the candidate's drop under "
        "all four held-out edits over Fixed-SFT's under the same decoding (none when Fixed-SFT lost nothing).",
        "",
        f"Shipping decision (`training.default_model.ship_decision`, test split): "
        f"{'ships — ' if result['ships'] else 'not shipped — '}{result['decision']}.",
        "",
        f"## {ARM_TITLES[arm]} on the test split, {decoding} decoding",
        "",
        *condition_table(test["arms"][arm]["decodings"][decoding]["conditions"]),
        "",
        "## The choice (validation split only)",
        "",
        f"Rule: {choice['rule']}.",
        "",
        "| arm | decoding | distance | targets met | original | all four held-out | IFEval Δ |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in choice["ranking"]:
        delta = row["ifeval_delta"]
        lines.append(f"| {ARM_TITLES[row['arm']]} | {row['decoding']} | {row.get('distance', '—')} | {row['targets_met']} "
                     f"| {row['original']} | {row['heldout']} | {'—' if delta is None else f'{delta:+.1f}'} |")
    lines += [
        "",
        "## What was run",
        "",
        f"- Fixed-Harness SFT: {tokens['fixed_sft_rows']} oracle trajectories under the original harness, "
        f"{tokens['fixed_sft']} tokens, {steps.get('fixed_sft')} optimizer steps; HSA-SFT: {tokens['hsa_sft_rows']} "
        f"trajectories ({_hsa_layout(config)}), {tokens['hsa_sft']} tokens, {steps.get('hsa_sft')} steps; General "
        f"OPD: {steps.get('hsa_sft_opd')} steps from the merged HSA-SFT model"
        + (f"; HSA-RL: {steps.get('hat')} steps" if "hat" in steps else "") + ".",
        _tuning_line(config),
        _eval_line(config),
        f"- Shipped as: the base with the adapters of {', '.join(shipped['adapters'])} merged in that order "
        "(`training/default_model/manifest.json` lists them).",
        "- Training per stage: " + "; ".join(_training_words(a, t) for a, t in result["training"].items()) + ".",
        _study_lineage_line(result["lineage"]),
        f"- Work recorded over every session: {result['wall_s'] / 3600:.1f} h "
        f"({', '.join(f'{k} {v:.0f} s' for k, v in result['timings_s'].items())}); hosts: "
        + "; ".join(f"{h.get('cpu')} × {h.get('cores')} ({h.get('node')})" for h in result["hosts"]) + ".",
        "",
        "Every arm under both decodings and every held-out edit kind: docs/hat-reproduction.md.",
        "",
    ]
    if notes:
        lines += [notes.rstrip(), ""]
    return "\n".join(lines)


def _host_words(host: dict[str, Any] | None) -> str:
    host = host or {}
    return f"{host.get('cpu', '?')} ({host.get('cores', '?')} cores)"


def _training_words(arm: str, t: dict[str, Any]) -> str:
    """One stage's training: wall time and host, or each session's share when it ran over several; tokens, rate
    and losses where they are known for the whole stage."""
    segments = t.get("segments") or []
    if len(segments) > 1:
        shares = ", ".join(
            (f"steps {s['steps'][0]}–{s['steps'][1]}" if s.get("steps") else "the earlier steps")
            + f" {s.get('wall_s') or 0:.0f} s on {_host_words(s.get('host'))}" for s in segments)
        words = f"{arm} {t.get('wall_s') or 0:.0f} s over {len(segments)} sessions ({shares})"
    else:
        words = f"{arm} {t.get('wall_s') or 0:.0f} s on {_host_words(t.get('host'))}"
    if t.get("tokens_per_s"):
        words += f", {t['num_tokens']:.0f} tokens at {t['tokens_per_s']:.1f}/s"
    if t.get("loss") is not None:
        words += (f", loss {t['first_loss']:.3f} → {t['loss']:.3f}" if t.get("first_loss") is not None
                  else f", last loss {t['loss']:.3f}")
    precision = {True: "bf16", False: "fp32"}.get(t.get("bf16"))
    return words + (f", {precision}" if precision else "") + (
        ", resumed from a kept checkpoint" if t.get("resumed_from_kept_checkpoint") else "")


def _study_lineage_line(lineage: dict[str, Any]) -> str:
    disjoint = lineage["disjoint"]
    return (f"- Lineage: both splits' cases and IFEval prompts were every training pipeline's `data.exclude` ("
            f"{', '.join(f'{k}: {v}' for k, v in lineage['excluded_eval_sets'].items())}); the pipelines' guard "
            f"{'checked it for every stage' if lineage['checked_by_pipeline_guard'] else 'did NOT record a check for every stage'}; "
            "held-out harness hashes / module names found in training: "
            + ", ".join(f"{split} {len(d['heldout_hashes_in_training'])} / {len(d['heldout_names_in_training'])}"
                        for split, d in disjoint.items())
            + "; eval cases skipped as near-duplicates of training (or, for the test split, of validation): "
            + ", ".join(f"{split} {n}" for split, n in lineage["skipped_near_duplicates"].items()) + ".")


def render_study_reproduction_markdown(result: dict[str, Any], earlier: dict[str, Any] | None = None,
                                       earlier_page: str = "", notes: str = "") -> str:
    """`docs/hat-reproduction.md` from the study's result: every arm under both decodings and every held-out edit
    kind, test split then validation split; then the earlier run's table (`earlier`, a `run_experiment` result),
    labelled as such."""
    arms = _study_arms(result)
    harness = result["harness"]
    lines = [
        "# HAT reproduction on today's harness (issue 42)",
        "",
        f"Model `{result['model']}`, compact harness `{harness['path']}` (content hash "
        f"`{harness['content_hash'][:12]}`, first prompt {harness['system_prompt_tokens']} tokens with tool schemas). "
        "Each arm judged with harness-constrained decoding (a call can only name a declared tool or skill) and "
        "free, so the training's share of robustness shows apart from the decoding's. Produced by "
        "`benchmarks/hat_experiment.py --study` (training/hat/study.py); the shipped default's targets: "
        "docs/default-model.md.",
        "",
        "Command: `" + result.get("command", "python benchmarks/hat_experiment.py --study") + "`. Every figure "
        "below, with the per-condition outcomes and failure reasons: `docs/default-model.json` (`splits`).",
        "",
        f"## Test split ({_split_words(result, 'test')})",
        "",
        "Accuracy in % (reference judge) per condition; Δ: all four held-out edits − original, case by case (paired "
        "bootstrap 95% CI; ↑/↓ cases that got right/wrong; exact McNemar p); IFEval prompt-level strict.",
        "",
        *_study_arm_rows(result["splits"]["test"], arms),
        "",
        *_vs_fixed_lines(result["splits"]["test"]),
        "",
        *_late_skill_lines(result["splits"]["test"], arms),
        f"## Validation split ({_split_words(result, 'validation')}; the choice was made here)",
        "",
        *_study_arm_rows(result["splits"]["validation"], arms),
        "",
        *([] if "validation" in result["config"].get("ablation_splits", ["validation", "test"])
          or set(result["config"].get("conditions", ())) <= {"original", "names", "all"} else
          ["Judged under the original harness, the renames and all four edits only (what the choice reads); the "
           "other held-out edit kinds are measured on the test split.", ""]),
        _tuning_line(result["config"]),
        _eval_line(result["config"]),
        _study_lineage_line(result["lineage"]),
        "",
    ]
    if earlier:
        lines += [
            "## The earlier run (issue 13, before HSA's large name vocabulary and constrained decoding)",
            "",
            f"Kept for comparison, as measured then: {earlier['n']['fixed']} eval cases drawn from the simulator seed "
            "this study's validation split uses, one held-out edit per case with all four kinds, free decoding. "
            f"Command: `{earlier.get('command', '')}`."
            + (f" Its full page, with the reading written then: {earlier_page}." if earlier_page else ""),
            "",
            *reproduction_table(earlier),
            "",
        ]
    if notes:
        lines += [notes.rstrip(), ""]
    return "\n".join(lines)
