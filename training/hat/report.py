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
