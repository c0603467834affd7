"""Harness-State Augmentation on the demo harness: validity, determinism, per-dimension scope, ground truth."""

import asyncio
import dataclasses
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.augmentation import (
    DIMENSIONS,
    AugmentationError,
    HsaConfig,
    augment,
    augmentation_diff,
)
from harness.augmentation.noise import BANK
from harness.augmentation.text import mentions, paraphrase, rename_identifiers, split_sentences
from harness.simulator.cases import CATEGORIES, Case, Expected, ExpectedCall
from harness.spec import SpecInvalid, parse_files, read_dir, to_files, validate
from harness.spec.model import CACHE_TIERS, Condition, Hook
from harness.spec.template import render_template, template_names
from harness.spec.validate import name_problem

DEMO_DIR = Path(__file__).resolve().parents[2] / "harness" / "demo" / "avatar"
DEMO = parse_files(read_dir(DEMO_DIR))
DEMO_AGAIN = parse_files(read_dir(DEMO_DIR))
ROOM = json.loads((DEMO_DIR.parent / "room.json").read_text())
SKILLS = {s.name for s in DEMO.skills}
TOOLS = {t.name for t in DEMO.tools}
PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

probabilities = st.floats(0.0, 1.0)
configs = st.builds(
    HsaConfig,
    seed=st.integers(0, 3),
    skill_identifiers=probabilities, skill_content=probabilities, tool_definitions=probabilities,
    system_prompt=probabilities, hooks=probabilities,
    noise_skills_p=probabilities, max_noise_skills=st.integers(1, 6), opaque_noise_names_p=probabilities,
    rename_skill_p=probabilities,
    rewrite_skill_description_p=probabilities, mask_skill_description_p=probabilities,
    paraphrase_p=probabilities, paraphrase_rate=probabilities, mask_lines_p=probabilities,
    reorder_rules_p=probabilities, rename_tool_p=probabilities, rewrite_tool_description_p=probabilities,
    reorder_blocks_p=probabilities, pin_first_block=st.booleans(), reorder_items_p=probabilities,
    perturb_settings_p=probabilities,
    reply_max_chars_scale=st.tuples(st.floats(0.05, 1.0), st.floats(1.0, 20.0)),
    max_turns_delta=st.tuples(st.integers(-15, 0), st.integers(0, 15)),
    max_turns_floor=st.integers(1, 16),
    max_hook_retries_range=st.tuples(st.integers(0, 2), st.integers(2, 5)),
    hook_retries_p=probabilities, hook_retries_range=st.tuples(st.integers(1, 3), st.integers(3, 5)),
    hook_message_p=probabilities, switch_length_action_p=probabilities,
)
seeds = st.integers(0, 2**32 - 1)
EVERYTHING = HsaConfig(**dict.fromkeys(DIMENSIONS, 1.0), rename_skill_p=1.0, rename_tool_p=1.0,
                       noise_skills_p=1.0, hook_message_p=1.0, perturb_settings_p=1.0)


def model_visible_texts(spec):
    """Every text of a spec that can name a skill or a tool (binding targets and metadata excluded)."""
    for skill in spec.skills:
        yield f"skill {skill.name} description", skill.description
        yield f"skill {skill.name} body", skill.body
    for tool in spec.tools:
        yield f"tool {tool.name}", tool.description + " " + json.dumps(tool.parameters)
    for hook in spec.hooks:
        yield f"hook {hook.name}", " ".join([hook.message, hook.condition.expr, hook.condition.pattern])
    for block in spec.prompt:
        yield f"prompt {block.name}", block.template


def strip_marker(line):
    return re.sub(r"^\s*(\d+[.)]|[-*]|[a-z]\.)\s+", "", line)


def files_under(spec, prefix):
    return {path: text for path, text in to_files(spec).items() if path.startswith(prefix)}


def cases():
    room = {"room_id": ROOM["room_id"]}
    return [
        Case("c-product", "product_qa", room, "v1", "how much are the jeans on screen?",
             Expected(facts=("$72",), skills=("product-qa",),
                      tools=(ExpectedCall("get_product_info_by_link_id", {"link_id": "L003"}),))),
        Case("c-discount", "discount", room, "v1", "any coupon for L005?",
             Expected(facts=("20%",), skills=("discount-promotion",),
                      tools=(ExpectedCall("get_promotion", {"link_id": "L005"}),
                             ExpectedCall("issue_coupon", {"link_id": "L005", "discount_pct": 20})))),
        Case("c-order", "after_sales", room, "v2", "where is order O104512?",
             Expected(facts=("shipped",), skills=("after-sales", "clarify-follow-up"),
                      tools=(ExpectedCall("get_order_status", {"order_id": "O104512"}),)),
             faults={"get_order_status": "timeout"}, suite="tool_robustness"),
        Case("c-chat", "casual_chat", room, "v3", "hello from Texas!", Expected(skills=("casual-chat",))),
        Case("c-faq", "faq", room, "v4", "do you ship to Canada?",
             Expected(skills=("faq-reply",), tools=(ExpectedCall("search_faq"),))),
        Case("c-spam", "irrelevant", room, "v5", "dm me for crypto", Expected(silent=True)),
    ]


# Validity and determinism ------------------------------------------------------------------------


@PROPERTY
@given(config=configs, seed=seeds)
def test_every_augmented_demo_spec_is_valid_round_trips_and_keeps_tier_order(config, seed):
    aug = augment(DEMO, config, seed)
    assert validate(aug.spec) == []
    assert parse_files(to_files(aug.spec)) == aug.spec  # canonical: the files say exactly this spec
    tiers = [CACHE_TIERS.index(b.cache_tier) for b in aug.spec.prompt]
    assert tiers == sorted(tiers)
    assert Counter(b.name for b in aug.spec.prompt) == Counter(b.name for b in DEMO.prompt)
    for block in DEMO.prompt:  # a block never changes tier or variables
        moved = next(b for b in aug.spec.prompt if b.name == block.name)
        assert (moved.cache_tier, moved.variables) == (block.cache_tier, block.variables)


@PROPERTY
@given(config=configs, seed=seeds)
def test_same_seed_same_hash_and_mapping(config, seed):
    again = DEMO_AGAIN  # another object with the same content
    first, second = augment(DEMO, config, seed), augment(again, config, seed)
    assert first.spec.content_hash == second.spec.content_hash
    assert first.mapping.to_dict() == second.mapping.to_dict()
    assert json.loads(json.dumps(first.mapping.to_dict()))["seed"] == seed  # provenance is JSON-ready


def test_different_seeds_mostly_differ():
    hashes = {augment(DEMO, HsaConfig(), seed).spec.content_hash for seed in range(40)}
    assert len(hashes) >= 36
    assert DEMO.content_hash not in hashes  # at_least_one: never the identity by default
    assert augment(DEMO, HsaConfig(seed=1), 5).spec != augment(DEMO, HsaConfig(seed=2), 5).spec


def test_dimensions_draw_from_independent_streams():
    # Enabling another dimension never changes what a dimension does.
    for seed in range(6):
        alone = augment(DEMO, HsaConfig.only("hooks"), seed).spec
        both = augment(DEMO, HsaConfig.only("hooks", "skill_content"), seed).spec
        assert files_under(alone, "hooks/") == files_under(both, "hooks/")


def test_all_zero_is_the_identity():
    aug = augment(DEMO, HsaConfig(**dict.fromkeys(DIMENSIONS, 0.0)), 3)
    assert aug.spec == DEMO and aug.mapping.is_identity
    assert augmentation_diff(DEMO, aug).is_empty


@PROPERTY
@given(config=configs, seed=seeds)
def test_names_are_valid_fresh_and_never_collide(config, seed):
    aug = augment(DEMO, config, seed)
    m = aug.mapping
    skill_names, tool_names = [s.name for s in aug.spec.skills], [t.name for t in aug.spec.tools]
    assert len(set(skill_names) | set(tool_names)) == len(skill_names) + len(tool_names)
    for new in [*m.skills.values(), *m.tools.values(), *m.noise_skills]:
        assert new not in SKILLS | TOOLS | {"load_skill"}
    assert len(set(m.names.values())) == len(m.names)
    for name in skill_names:
        assert name_problem(name) is None
    for name in tool_names:
        assert name_problem(name, allow_underscore=True) is None
    assert {m.skill(s) for s in SKILLS} <= set(skill_names)
    assert {m.tool(t) for t in TOOLS} == set(tool_names)


# Each dimension alone ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_skill_identifiers_alone(seed):
    config = HsaConfig.only("skill_identifiers", rename_skill_p=0.6, noise_skills_p=1.0)
    aug = augment(DEMO, config, seed)
    m, spec = aug.mapping, aug.spec
    assert set(m.dimensions) == {"skill_identifiers"} and not m.tools and not m.settings
    names = m.names

    def renamed(text):
        return rename_identifiers(text, names)

    assert spec.settings == DEMO.settings
    assert [(b.order, b.name, renamed(b.template)) for b in DEMO.prompt] == \
           [(b.order, b.name, b.template) for b in spec.prompt]
    assert [dataclasses.replace(t, description=renamed(t.description)) for t in DEMO.tools] == list(spec.tools)
    for hook in DEMO.hooks:
        assert spec.hook(hook.name) == dataclasses.replace(hook, message=renamed(hook.message))
    for skill in DEMO.skills:
        new = spec.skill(m.skill(skill.name))
        assert (new.kind, new.allowed_tools, new.metadata, new.body) == \
               (skill.kind, skill.allowed_tools, skill.metadata, renamed(skill.body))
        if new.description != renamed(skill.description):
            assert any(op.target == skill.name and op.op.endswith("description") for op in m.operations)
    noise = [spec.skill(name) for name in m.noise_skills]
    assert 1 <= len(noise) <= config.max_noise_skills
    descriptions = [s.description for s in spec.skills]
    assert len(set(descriptions)) == len(descriptions)
    for skill in noise:  # irrelevant and self-contained: mentions no tool and no other skill
        assert skill.kind in ("reply", "strategy") and not skill.allowed_tools
        assert not any(mentions(skill.body + skill.description, name) for name in SKILLS | TOOLS)


def test_noise_skills_take_meaningless_names_only_when_asked():
    topical = {name for template in BANK for name in template.names}
    off = HsaConfig.only("skill_identifiers", noise_skills_p=1.0, max_noise_skills=3)
    on = dataclasses.replace(off, opaque_noise_names_p=1.0)
    named_off, named_on = [], []
    for seed in range(12):
        named_off += augment(DEMO, off, seed).mapping.noise_skills
        aug = augment(DEMO, on, seed)
        named_on += aug.mapping.noise_skills
        assert validate(aug.spec) == [] and len(set(aug.mapping.noise_skills)) == len(aug.mapping.noise_skills)
    assert named_off and all(re.sub(r"-\d+$", "", name) in topical for name in named_off)
    assert named_on and not set(named_on) & topical


@pytest.mark.parametrize("seed", range(4))
def test_skill_content_alone_changes_only_bodies_and_keeps_rules(seed):
    aug = augment(DEMO, HsaConfig.only("skill_content", mask_lines_p=0.7), seed)
    spec, m = aug.spec, aug.mapping
    assert set(m.dimensions) == {"skill_content"} and not m.names and not m.settings
    for prefix in ("harness.yaml", "tools/", "hooks/", "prompt/"):
        assert files_under(spec, prefix) == files_under(DEMO, prefix)
    for skill in DEMO.skills:
        new = spec.skill(skill.name)
        assert dataclasses.replace(new, body=skill.body) == skill
        if new.body != skill.body:
            assert m.skill_bodies[skill.name] == new.body
        masked = any(op.op == "mask_lines" and op.target == skill.name for op in m.operations)
        kept_rules = [strip_marker(line) for line in new.body.split("\n")]
        for rule in map(strip_marker, skill.body.split("\n")):
            if re.search(r"\d|\bnever\b|\bmust\b", rule, re.I) and not rule.startswith("Example"):
                # rules with numbers / never / must survive every content transform, numbers intact
                assert any(Counter(re.findall(r"\d+", rule)) == Counter(re.findall(r"\d+", kept))
                           and len(re.findall(r"(?i)\bnever\b", rule)) == len(re.findall(r"(?i)\bnever\b", kept))
                           for kept in kept_rules), (skill.name, rule)
        if not masked:
            assert len(re.findall(r"(?m)^\s*(\d+[.)])", new.body)) == len(re.findall(r"(?m)^\s*(\d+[.)])", skill.body))


def test_skill_content_mask_drops_only_low_importance_items():
    dropped = []
    for seed in range(12):
        aug = augment(DEMO, HsaConfig.only("skill_content", mask_lines_p=1.0, paraphrase_p=0.0,
                                           reorder_rules_p=0.0), seed)
        for op in aug.mapping.operations:
            assert op.op == "mask_lines"
            before, after = DEMO.skill(op.target).body, aug.spec.skill(op.target).body
            kept = {strip_marker(line) for line in after.split("\n")}
            gone = [strip_marker(line) for line in before.split("\n") if strip_marker(line) not in kept]
            assert 1 <= len(gone) <= 2
            for line in gone:
                assert not re.search(r"\bnever\b|\bmust\b", line, re.I)
                assert not re.search(r"\d", line) or line.startswith("Example")
            dropped.extend(gone)
    assert dropped  # the demo has droppable items (style notes, the worked example)


@pytest.mark.parametrize("seed", range(4))
def test_tool_definitions_alone_rename_every_reference(seed):
    aug = augment(DEMO, HsaConfig.only("tool_definitions", rename_tool_p=1.0), seed)
    spec, m = aug.spec, aug.mapping
    assert set(m.dimensions) == {"tool_definitions"} and not m.skills and not m.settings
    assert set(m.tools) == TOOLS  # rename_tool_p=1: all renamed
    assert files_under(spec, "prompt/").keys() == files_under(DEMO, "prompt/").keys()
    assert spec.settings == DEMO.settings
    for tool in DEMO.tools:  # binding, schema keys, limits unchanged: the same code runs
        new = spec.tool(m.tool(tool.name))
        assert (new.binding, new.timeout_ms, new.retries, new.side_effect) == \
               (tool.binding, tool.timeout_ms, tool.retries, tool.side_effect)
        assert new.parameters["properties"].keys() == tool.parameters["properties"].keys()
    for skill in DEMO.skills:
        new = spec.skill(skill.name)
        assert new.allowed_tools == tuple(m.tool(t) for t in skill.allowed_tools)
        assert new.body == rename_identifiers(skill.body, m.tools)
    for hook in DEMO.hooks:
        new = spec.hook(hook.name)
        expected = "*" if hook.matcher == "*" else "|".join(m.tool(t) for t in hook.matcher.split("|"))
        assert new.matcher == expected and new.action == hook.action and new.max_retries == hook.max_retries
    assert_no_dangling(spec, m)


def assert_no_dangling(spec, mapping):
    tools = {t.name for t in spec.tools}
    for hook in spec.hooks:
        assert hook.matcher == "*" or set(hook.matcher.split("|")) <= tools
    for skill in spec.skills:
        assert set(skill.allowed_tools) <= tools
    for where, text in model_visible_texts(spec):
        for old in mapping.names:
            assert not mentions(text, old), f"{where} still names {old!r}"


@pytest.mark.parametrize("seed", range(4))
def test_system_prompt_alone(seed):
    config = HsaConfig.only("system_prompt", reorder_blocks_p=1.0, perturb_settings_p=1.0)
    aug = augment(DEMO, config, seed)
    spec, m = aug.spec, aug.mapping
    assert set(m.dimensions) == {"system_prompt"} and not m.names
    for prefix in ("skills/", "tools/", "hooks/"):
        assert files_under(spec, prefix) == files_under(DEMO, prefix)
    assert spec.prompt[0].name == DEMO.prompt[0].name  # pin_first_block
    assert sorted(b.order for b in spec.prompt) == sorted(b.order for b in DEMO.prompt)
    assert [b.name for b in spec.prompt] != [b.name for b in DEMO.prompt]
    for block in spec.prompt:  # reordered bullets: same lines, maybe another order
        assert sorted(block.template.split("\n")) == sorted(DEMO.prompt[[b.name for b in DEMO.prompt].index(
            block.name)].template.split("\n"))
    assert_settings_recorded(DEMO, aug, config)
    assert set(m.settings) == {"reply_max_chars", "max_turns", "max_hook_retries"}


def assert_settings_recorded(original, aug, config):
    old, new = dataclasses.asdict(original.settings), dataclasses.asdict(aug.spec.settings)
    changed = {name: (old[name], new[name]) for name in old if old[name] != new[name]}
    assert changed == dict(aug.mapping.settings)
    assert set(changed) <= {"reply_max_chars", "max_turns", "max_hook_retries"}
    s = aug.spec.settings
    assert 10 <= s.reply_max_chars <= 2000 and len(s.fallback_reply) <= s.reply_max_chars
    assert 1 <= s.max_turns <= 16 and 0 <= s.max_hook_retries <= 5
    if "max_turns" in changed:
        assert s.max_turns >= min(config.max_turns_floor, original.settings.max_turns)
        assert config.max_turns_delta[0] <= s.max_turns - original.settings.max_turns <= config.max_turns_delta[1]
    if "max_hook_retries" in changed:
        assert config.max_hook_retries_range[0] <= s.max_hook_retries <= config.max_hook_retries_range[1]
    if "reply_max_chars" in changed:
        lo, hi = config.reply_max_chars_scale
        assert s.reply_max_chars % 10 == 0 or s.reply_max_chars == round(original.settings.reply_max_chars * lo)
        assert original.settings.reply_max_chars * lo - 10 <= s.reply_max_chars <= original.settings.reply_max_chars * hi
    for name, (_, value) in aug.mapping.settings.items():
        assert aug.mapping.setting(name, None) == value


@PROPERTY
@given(config=configs, seed=seeds)
def test_numeric_perturbations_within_valid_ranges_and_recorded(config, seed):
    assert_settings_recorded(DEMO, augment(DEMO, config, seed), config)


@pytest.mark.parametrize("seed", range(6))
def test_hooks_alone(seed):
    config = HsaConfig.only("hooks", hook_message_p=0.8, switch_length_action_p=0.5)
    aug = augment(DEMO, config, seed)
    spec, m = aug.spec, aug.mapping
    assert set(m.dimensions) == {"hooks"} and not m.names and not m.settings
    for prefix in ("harness.yaml", "skills/", "tools/", "prompt/"):
        assert files_under(spec, prefix) == files_under(DEMO, prefix)
    for hook in DEMO.hooks:
        new = spec.hook(hook.name)
        assert (new.event, new.matcher, new.condition, new.priority, new.enabled) == \
               (hook.event, hook.matcher, hook.condition, hook.priority, hook.enabled)
        if new.action != hook.action:  # only the length hook, only between rewrite and retry
            assert hook.name == "reply-length" and {new.action, hook.action} == {"rewrite", "retry_with_feedback"}
        if new.action == "retry_with_feedback":
            assert 1 <= new.max_retries <= 5 and new.message
            if new.max_retries != hook.max_retries:
                assert config.hook_retries_range[0] <= new.max_retries <= config.hook_retries_range[1]
        if hook.action in ("block", "fallback", "allow") or not hook.message:
            assert new.message == hook.message or hook.name == "reply-length"  # viewer-facing text untouched
        else:  # model-facing text: same template names, same numbers
            assert set(template_names(new.message)) == set(template_names(hook.message))
            assert Counter(re.findall(r"\d+", new.message)) >= Counter(re.findall(r"\d+", hook.message))
    rendered = {**dataclasses.asdict(spec.settings), **spec.variables}
    for new in m.hook_messages.values():
        assert new in {render_template(h.message, rendered) for h in spec.hooks}


def test_hooks_switch_length_action_both_ways():
    aug = augment(DEMO, HsaConfig.only("hooks", switch_length_action_p=1.0), 0)
    hook = aug.spec.hook("reply-length")
    assert hook.action == "retry_with_feedback" and "{{ reply_max_chars }}" in hook.message
    assert 1 <= hook.max_retries <= 5
    back = augment(aug.spec, HsaConfig.only("hooks", switch_length_action_p=1.0), 0).spec.hook("reply-length")
    assert back.action == "rewrite" and back.message == "" and back.max_retries == 0


# References in CEL and the optional drop ---------------------------------------------------------


def test_renames_reach_cel_literals_and_json_schema_values():
    extra = (
        Hook(name="audit-coupon", event="post_tool", matcher="issue_coupon",
             condition=Condition.cel('tool == "issue_coupon" && "issue_coupon" in ["issue_coupon"]'), action="allow"),
        Hook(name="needs-product-skill", event="reply", condition=Condition.cel(
            '"get_product_info_by_link_id" in tools_called && !("product-qa" in loaded_skills)'),
            action="retry_with_feedback", max_retries=1, message="Load product-qa before quoting a product."),
        Hook(name="only-known-tools", event="pre_tool", condition=Condition.json_schema(
            "tool", {"enum": sorted(TOOLS)}), action="deny", message="Unknown tool."),
    )
    spec = dataclasses.replace(DEMO, hooks=DEMO.hooks + extra)
    assert validate(spec) == []
    aug = augment(spec, HsaConfig.only("skill_identifiers", "tool_definitions", rename_skill_p=1.0,
                                       rename_tool_p=1.0), 9)
    m = aug.mapping
    coupon, product, qa = m.tool("issue_coupon"), m.tool("get_product_info_by_link_id"), m.skill("product-qa")
    assert aug.spec.hook("audit-coupon").condition.expr == f'tool == "{coupon}" && "{coupon}" in ["{coupon}"]'
    assert f'"{product}" in tools_called' in aug.spec.hook("needs-product-skill").condition.expr
    assert f'"{qa}" in loaded_skills' in aug.spec.hook("needs-product-skill").condition.expr
    assert aug.spec.hook("needs-product-skill").message == f"Load {qa} before quoting a product."
    assert set(aug.spec.hook("only-known-tools").condition.schema["enum"]) == {t.name for t in aug.spec.tools}
    assert_no_dangling(aug.spec, m)


def test_drop_is_opt_in_and_only_removes_unreferenced_unprotected_strategy_skills():
    config = HsaConfig.only("skill_identifiers", drop_skill_p=1.0, noise_skills_p=0.0, rename_skill_p=0.0,
                            rewrite_skill_description_p=0.0, mask_skill_description_p=0.0)
    aug = augment(DEMO, config, 0)
    # ground-numbers is referenced nowhere; multi-intent-triage is named in casual-chat's body
    assert aug.mapping.dropped_skills == ("ground-numbers",)
    with pytest.raises(KeyError):
        aug.mapping.skill("ground-numbers")
    protected = augment(DEMO, dataclasses.replace(config, protected_skills=("ground-numbers",)), 0)
    assert not protected.mapping.dropped_skills
    assert all(not op.op == "drop" for seed in range(20) for op in augment(DEMO, HsaConfig(), seed).mapping.operations)


# Ground truth and trajectories -------------------------------------------------------------------


@PROPERTY
@given(config=configs, seed=seeds)
def test_rewrite_case_keeps_expected_skills_and_tools_resolvable(config, seed):
    aug = augment(DEMO, config, seed)
    for case in cases():
        new = aug.mapping.rewrite_case(case)
        assert (new.expected.facts, new.expected.forbidden, new.expected.silent) == \
               (case.expected.facts, case.expected.forbidden, case.expected.silent)
        assert (new.message, new.room, new.category, new.case_id) == (case.message, case.room, case.category, case.case_id)
        for old, name in zip(case.expected.skills, new.expected.skills, strict=True):
            assert aug.spec.skill(name).kind == DEMO.skill(old).kind == "reply"
        for old, call in zip(case.expected.tools, new.expected.tools, strict=True):
            assert aug.spec.tool(call.name).binding == DEMO.tool(old.name).binding
            assert call.arguments == old.arguments
        assert set(new.faults) <= {t.name for t in aug.spec.tools}
        assert Case.from_dict(json.loads(json.dumps(new.to_dict()))) == new


def reference_trace(case):
    """The trace of a good turn for `case`, in the case's own names: the expected skill loaded, every
    expected tool called (and one of `any_of_tools` when none of them is), a reply stating the facts."""
    steps = [{"kind": "tool", "name": "load_skill", "arguments": json.dumps({"name": case.expected.skills[0]})}
             ] if case.expected.skills else []
    steps += [{"kind": "tool", "name": call.name, "arguments": json.dumps(dict(call.arguments))}
              for call in case.expected.tools]
    any_of = case.meta.get("any_of_tools") or []
    if any_of and not any(step["name"] in any_of for step in steps):
        steps.append({"kind": "tool", "name": any_of[0], "arguments": "{}"})
    silent = case.expected.silent
    return {"steps": steps, "silent": silent, "outcome": "silent" if silent else "replied",
            "reply": "" if silent else " ".join(case.expected.facts) or "Thanks for watching!",
            "skills_loaded": list(case.expected.skills[:1])}


def simulator_cases():
    """Simulated cases of every category on the demo room, including the ones whose meta names tools."""
    from harness.simulator import generate_cases, load_demo_room

    generated = generate_cases(7, 240, room=load_demo_room())
    picked = {}
    for case in generated:
        kind = (case.category, "any_of_tools" in case.meta, "forbidden_tools" in case.meta)
        picked.setdefault(kind, case)
    return list(picked.values())


SIMULATOR_CASES = simulator_cases()


def test_simulator_cases_cover_the_meta_tool_lists():
    assert any(c.meta.get("any_of_tools") for c in SIMULATOR_CASES)
    assert any(c.meta.get("forbidden_tools") for c in SIMULATOR_CASES)
    assert {c.category for c in SIMULATOR_CASES} == set(CATEGORIES)


@PROPERTY
@given(config=configs, seed=seeds)
def test_under_every_variant_the_reference_trace_scores_correct_and_old_names_do_not(config, seed):
    from evaluation.judges import judge_reference

    aug = augment(DEMO, config, seed)
    m = aug.mapping
    for case in SIMULATOR_CASES:
        new = m.rewrite_case(case)
        for key in ("any_of_tools", "forbidden_tools"):
            if key in case.meta:
                assert new.meta[key] == [m.tool(t) for t in case.meta[key]]
                assert set(new.meta[key]) <= {t.name for t in aug.spec.tools}
        verdict = judge_reference(new, reference_trace(new))
        assert (verdict.accuracy, verdict.effectiveness) == (1, 1.0), (case.case_id, verdict.reasons)
        referenced = [*case.expected.skills[:1], *(c.name for c in case.expected.tools),
                      *(case.meta.get("any_of_tools") or ())[:1]]
        if any(m.names.get(name, name) != name for name in referenced):
            old = judge_reference(new, reference_trace(case))
            assert old.effectiveness < 1.0, (case.case_id, m.names)
        for banned in case.meta.get("forbidden_tools") or ():
            misuse = reference_trace(new)
            misuse["steps"].append({"kind": "tool", "name": m.tool(banned), "arguments": "{}"})
            assert judge_reference(new, misuse).checks["tools"] is False, (case.case_id, banned)


def trajectory():
    body = DEMO.skill("product-qa").body
    feedback = render_template(DEMO.hook("factual-risk").message, {**dataclasses.asdict(DEMO.settings),
                                                                   **DEMO.variables})
    deny = DEMO.hook("validate-link-id-args").message
    return [
        {"role": "system", "content": "Skills: product-qa, casual-chat. Tools: get_product_info_by_link_id."},
        {"role": "user", "content": "[viewer v1] how much are the jeans?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_product_info_by_link_id",
                                                          "arguments": '{"link_id": "L3"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"error": deny})},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "get_product_info_by_link_id",
                                                          "arguments": '{"link_id": "L003"}'}},
            {"id": "c3", "type": "function", "function": {"name": "load_skill",
                                                          "arguments": '{"name": "product-qa"}'}}]},
        {"role": "tool", "tool_call_id": "c2", "content": json.dumps(ROOM["products"][2])},
        {"role": "tool", "tool_call_id": "c3", "content": body},
        {"role": "assistant", "content": "They're $70 today!"},
        {"role": "user", "content": f"[harness feedback] {feedback}"},
        {"role": "assistant", "content": "The High-Rise Straight Jeans are $72."},
    ]


@pytest.mark.parametrize("seed", range(3))
def test_rewrite_trajectory_renames_calls_skills_bodies_and_feedback(seed):
    aug = augment(DEMO, EVERYTHING, seed)
    m = aug.mapping
    original = trajectory()
    snapshot = json.dumps(original)
    new = m.rewrite_trajectory(original, system="SYSTEM")
    assert json.dumps(original) == snapshot  # input untouched
    product, qa = m.tool("get_product_info_by_link_id"), m.skill("product-qa")
    assert product != "get_product_info_by_link_id" and qa != "product-qa"
    assert new[0]["content"] == "SYSTEM"
    assert new[2]["tool_calls"][0]["function"]["name"] == product
    assert [c["function"]["name"] for c in new[4]["tool_calls"]] == [product, "load_skill"]
    assert json.loads(new[4]["tool_calls"][1]["function"]["arguments"]) == {"name": qa}
    assert new[4]["tool_calls"][0]["function"]["arguments"] == '{"link_id": "L003"}'
    assert new[6]["content"] == aug.spec.skill(qa).body  # the body the augmented load_skill returns
    constants = {**dataclasses.asdict(aug.spec.settings), **aug.spec.variables}
    assert new[8]["content"] == "[harness feedback] " + render_template(aug.spec.hook("factual-risk").message,
                                                                          constants)
    assert json.loads(new[3]["content"])["error"] == render_template(aug.spec.hook("validate-link-id-args").message,
                                                                     constants)
    assert new[9] == original[9] and new[1] == original[1]
    # without `system`, names inside the old system prompt are renamed
    assert qa in m.rewrite_trajectory(original)[0]["content"]
    assert not any(mentions(json.dumps(message), old) for message in new for old in m.names)


def test_rewrite_trajectory_accepts_trace_style_calls_and_the_skill_argument():
    aug = augment(DEMO, EVERYTHING, 1)
    m = aug.mapping
    messages = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "name": "search_faq", "arguments": '{"query": "ship to Canada"}'},
        {"id": "b", "name": "load_skill", "arguments": {"skill": "faq-reply"}}]},
        {"role": "tool", "tool_call_id": "a", "name": "search_faq", "content": "[]"}]
    new = m.rewrite_trajectory(messages)
    assert [c["name"] for c in new[0]["tool_calls"]] == [m.tool("search_faq"), "load_skill"]
    assert new[0]["tool_calls"][1]["arguments"] == {"skill": m.skill("faq-reply")}
    assert new[1]["name"] == m.tool("search_faq")


# End to end through the runtime ------------------------------------------------------------------


def test_augmented_spec_runs_end_to_end_with_renamed_tool_and_skill():
    from harness.model_protocol import ModelResponse, ToolCall
    from harness.runtime import RoomContext, ToolRegistry, TurnInput, run_turn
    from serving.backends.scripted import ScriptedBackend

    aug = augment(DEMO, EVERYTHING, 4)
    m = aug.mapping
    product, qa = m.tool("get_product_info_by_link_id"), m.skill("product-qa")
    assert product != "get_product_info_by_link_id" and qa != "product-qa"
    backend = ScriptedBackend([
        ModelResponse(tool_calls=(ToolCall("c1", product, '{"link_id": "L003"}'),
                                  ToolCall("c2", "load_skill", json.dumps({"name": qa})))),
        "The High-Rise Straight Jeans are $72 right now!",
    ])
    turn = TurnInput(message="how much are the jeans?", viewer_id="v1", room=RoomContext.from_dict(ROOM))
    result = asyncio.run(run_turn(aug.spec, turn, backend, ToolRegistry()))
    assert result.outcome == "replied", result.trace["reason"]
    assert result.reply == "The High-Rise Straight Jeans are $72 right now!"
    assert result.trace["skills_loaded"] == [qa] and result.trace["tools_called"] == [product, "load_skill"]
    tool_steps = [s for s in result.trace["steps"] if s["kind"] == "tool"]
    assert tool_steps[0]["result"]["link_id"] == "L003" and not tool_steps[0].get("error")
    assert tool_steps[1]["result"] == {"skill": qa, "kind": "reply"}
    offered = {t["function"]["name"] for t in backend.calls[0].tools}
    assert product in offered and "get_product_info_by_link_id" not in offered
    system = backend.calls[0].messages[0]["content"]
    assert f"<name>{qa}</name>" in system and f"- {product}:" in system
    assert str(aug.spec.settings.reply_max_chars) in system


# Config, preview, errors -------------------------------------------------------------------------


def test_config_validation_and_help():
    with pytest.raises(ValueError):
        HsaConfig(hooks=1.5)
    with pytest.raises(ValueError):
        HsaConfig(hook_retries_range=(0, 3))
    with pytest.raises(ValueError):
        HsaConfig(skill_rename_styles=("emoji",))
    with pytest.raises(ValueError):
        HsaConfig.only("prompt")
    assert set(HsaConfig.help()) == {f.name for f in dataclasses.fields(HsaConfig)}
    assert all(HsaConfig.help().values())
    assert HsaConfig(max_turns_delta=[0, 2]).max_turns_delta == (0, 2)


def test_preview_diff_shows_renames_and_limits():
    aug = augment(DEMO, EVERYTHING, 2)
    diff = augmentation_diff(DEMO, aug)
    changes = {(c.module, c.name): c.status for c in diff.changes}
    for old, new in aug.mapping.tools.items():
        assert changes[("tools", old)] == "removed" and changes[("tools", new)] == "added"
    for name in aug.mapping.noise_skills:
        assert changes[("skills", name)] == "added"
    assert changes[("settings", "harness")] == "changed"
    assert augmentation_diff(DEMO, aug.spec) == diff


def test_invalid_input_is_refused():
    broken = dataclasses.replace(DEMO, settings=dataclasses.replace(DEMO.settings, max_turns=99))
    with pytest.raises(SpecInvalid):
        augment(broken, HsaConfig(), 0)
    assert issubclass(AugmentationError, Exception)


def test_text_helpers_preserve_what_rules_depend_on():
    import random

    text = ('Never quote "$71.20" unless get_promotion says so; don\'t round {{ reply_max_chars }} or 3 '
            'items. Use when a viewer asks "how much" about a product.')
    for seed in range(20):
        out = paraphrase(text, random.Random(seed), 1.0)
        assert re.findall(r"\d+", out) == re.findall(r"\d+", text)
        assert '"$71.20"' in out and '"how much"' in out and "get_promotion" in out
        assert "{{ reply_max_chars }}" in out and out.startswith("Never")
    assert split_sentences('Asks "why? How?" (e.g. Foo. Bar) first. Then stop.') == \
        ['Asks "why? How?" (e.g. Foo. Bar) first.', "Then stop."]
    assert rename_identifiers("load product-qa, not product-qa-v2 or xproduct-qa; {{ product-qa }}",
                              {"product-qa": "item-info"}) == \
        "load item-info, not product-qa-v2 or xproduct-qa; {{ product-qa }}"
