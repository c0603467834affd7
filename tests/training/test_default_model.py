"""The embedded-default machinery: a LoRA adapter with its manifest builds (merged, exported) into a GGUF
once, the `local` backend serves it, and a base other than the manifest's is refused.

The adapter here is made in the test on a tiny random model of SmolLM2's architecture (seconds); whether
the project commits a trained adapter is decided by the HAT reproduction (docs/hat-reproduction.md).
"""

from __future__ import annotations

import json

import pytest

from training.base_models import TINY, gguf_path, materialize_base, model_cache
from training.default_model import (
    ADAPTER_FILE,
    DefaultModelError,
    ShipRule,
    adapter_chain,
    beats_base,
    build_default_gguf,
    built_path,
    gguf_name,
    manifest,
    merge_adapters,
    package_adapter,
    package_adapters,
    sha256,
    ship_decision,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


@pytest.fixture(scope="module")
def tiny_adapter(tmp_path_factory):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    directory = tmp_path_factory.mktemp("adapter")
    base = AutoModelForCausalLM.from_pretrained(materialize_base(TINY, model_cache(), seed=0), dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))  # non-zero: merging must change weights
    model.save_pretrained(directory)
    (directory / "manifest.json").write_text(json.dumps({
        "name": "tiny-test", "base": {"name": TINY, "gguf_file": gguf_path().name,
                                      "gguf_sha256": sha256(gguf_path())}}))
    return directory


def test_no_adapter_means_no_default(tmp_path):
    assert manifest(tmp_path) is None
    assert build_default_gguf(tmp_path / "var", tmp_path) is None
    assert built_path(tmp_path / "var", tmp_path) is None


def test_the_adapter_builds_once_into_a_gguf_the_local_backend_serves(tmp_path, tiny_adapter):
    import asyncio

    from serving.backends.local import LocalBackend

    assert built_path(tmp_path, tiny_adapter) is None
    path = build_default_gguf(tmp_path, tiny_adapter)
    assert path.name == gguf_name(tiny_adapter) == f"harnessops-default-{sha256(tiny_adapter / ADAPTER_FILE)[:12]}.q8_0.gguf"
    assert built_path(tmp_path, tiny_adapter) == path
    assert json.loads(path.with_suffix(".json").read_text())["name"] == "tiny-test"
    modified = path.stat().st_mtime_ns
    assert build_default_gguf(tmp_path, tiny_adapter) == path and path.stat().st_mtime_ns == modified  # once

    response = asyncio.run(LocalBackend(path, n_ctx=512, n_threads=1).complete(
        [{"role": "user", "content": "hi"}], [], max_tokens=4))
    assert response.raw["model"] == path.name and response.tokens_out >= 1


def test_a_base_other_than_the_manifests_is_refused(tmp_path, tiny_adapter):
    import shutil

    adapter = tmp_path / "adapter"
    shutil.copytree(tiny_adapter, adapter)
    info = json.loads((adapter / "manifest.json").read_text())
    info["base"]["gguf_sha256"] = "0" * 64
    (adapter / "manifest.json").write_text(json.dumps(info))
    with pytest.raises(DefaultModelError, match="SHA-256 differs"):
        build_default_gguf(tmp_path / "var", adapter)
    assert not (tmp_path / "var" / "models").exists() or not list((tmp_path / "var" / "models").iterdir())


def test_the_local_backend_serves_the_built_default(settings, tmp_path, tiny_adapter, monkeypatch):
    from serving import model_config
    from training import default_model

    settings.VAR_DIR = tmp_path
    settings.LOCAL_MODEL = None
    monkeypatch.setattr(default_model, "ADAPTER_DIR", tiny_adapter)
    assert model_config.local_model_path() is None  # not built yet: the base model
    path = build_default_gguf(tmp_path, tiny_adapter)
    assert model_config.local_model_path() == path
    assert model_config.backend_for("local").model_path == path
    settings.LOCAL_MODEL = "/models/other.gguf"
    assert model_config.local_model_path() == "/models/other.gguf"


def test_only_a_stage_trained_on_the_base_packages_as_the_default(tmp_path, tiny_adapter):
    scores = {"fixed": 0.5, "heldout": 0.4, "ifeval": 0.3, "fixed_ci": [0.4, 0.6], "heldout_ci": [0.3, 0.5]}
    result = {"model": TINY, "n": {"fixed": 2, "heldout": 2, "ifeval": 1},
              "arms": {"hsa_sft": scores, "hsa_sft_opd": scores, "base": scores}}
    for name, parent in (("sft", TINY), ("opd", "/runs/hat/stages/00-sft/model")):
        stage = tmp_path / name
        (stage / "adapter").mkdir(parents=True)
        for file in (ADAPTER_FILE, "adapter_config.json"):
            (stage / "adapter" / file).write_bytes((tiny_adapter / file).read_bytes())
        (stage / "result.json").write_text(json.dumps({"parent_path": parent, "data_lineage": {"cases": 3}}))
    packaged = package_adapter(tmp_path / "sft", result, "hsa_sft", out_dir=tmp_path / "out")
    info = manifest(packaged)
    assert info["arm"] == "hsa_sft" and info["metrics"]["fixed"] == 0.5 and info["lineage"]["stage"]["cases"] == 3
    with pytest.raises(DefaultModelError, match="not from the base"):
        package_adapter(tmp_path / "opd", result, "hsa_sft_opd", out_dir=tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


def _stage(directory, adapter, parent, path):
    (directory / "adapter").mkdir(parents=True)
    for file in (ADAPTER_FILE, "adapter_config.json"):
        (directory / "adapter" / file).write_bytes((adapter / file).read_bytes())
    (directory / "result.json").write_text(json.dumps({"stage": directory.name, "parent_path": parent, "path": path,
                                                       "data_lineage": {"cases": 3}}))
    return directory


@pytest.fixture(scope="module")
def second_adapter(tmp_path_factory):
    """Another LoRA adapter of the tiny model's shape (an OPD stage's, trained on the SFT merge)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    directory = tmp_path_factory.mktemp("opd-adapter")
    torch.manual_seed(7)
    base = AutoModelForCausalLM.from_pretrained(materialize_base(TINY, model_cache(), seed=0), dtype=torch.float32)
    get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                    init_lora_weights=False)).save_pretrained(directory)
    return directory


def test_chained_stages_ship_as_adapters_merged_in_order(tmp_path, tiny_adapter, second_adapter):
    """HSA-SFT then OPD on the merged SFT model: the manifest lists both adapters; the default built from it is the
    base with both merged in that order, not either alone; a single-adapter manifest still works as before."""
    import torch

    scores = {"fixed": 0.5, "heldout": 0.4, "ifeval": 0.3, "fixed_ci": [0.4, 0.6], "heldout_ci": [0.3, 0.5]}
    result = {"model": TINY, "n": {"fixed": 2, "heldout": 2, "ifeval": 1},
              "arms": {"hsa_sft_opd": scores, "base": scores}}
    sft = _stage(tmp_path / "sft", tiny_adapter, TINY, "stages/00-sft/model")
    opd = _stage(tmp_path / "opd", second_adapter, "stages/00-sft/model", "stages/01-opd/model")
    out = package_adapters([sft, opd], result, "hsa_sft_opd", out_dir=tmp_path / "out")
    info = manifest(out)
    assert [entry["dir"] for entry in info["adapters"]] == ["00-sft", "01-opd"] and info["arm"] == "hsa_sft_opd"
    assert adapter_chain(out) == [out / "00-sft", out / "01-opd"] and not (out / ADAPTER_FILE).exists()
    assert gguf_name(out) != gguf_name(tiny_adapter)
    base_dir = materialize_base(TINY, model_cache())
    both = merge_adapters(base_dir, adapter_chain(out)).state_dict()
    first_only = merge_adapters(base_dir, [out / "00-sft"]).state_dict()
    name = next(k for k in both if "q_proj" in k)
    assert not torch.equal(both[name], first_only[name])
    assert build_default_gguf(tmp_path / "var", out).name == gguf_name(out)
    (out / "01-opd" / ADAPTER_FILE).unlink()
    assert manifest(out) is None  # an adapter the manifest lists is missing: no default, not half of one
    # An OPD adapter whose parent is not the packaged SFT stage is a model nobody trained.
    stray = _stage(tmp_path / "stray", second_adapter, "/elsewhere/stages/00-sft/model", "stages/01-opd/model")
    with pytest.raises(DefaultModelError, match="the stage packaged before it"):
        package_adapters([sft, stray], result, "hsa_sft_opd", out_dir=tmp_path / "out2")
    # Packaging one stage again into the same folder leaves no adapter of the chain behind.
    single = package_adapters([sft], {**result, "arms": {"hsa_sft": scores, "base": scores}}, "hsa_sft",
                              out_dir=tmp_path / "out")
    assert "adapters" not in manifest(single) and adapter_chain(single) == [single]
    assert not (single / "00-sft").exists() and gguf_name(single).startswith(
        f"harnessops-default-{sha256(single / ADAPTER_FILE)[:12]}")


def test_a_study_ships_on_its_test_split_not_its_validation_split():
    """A study's result carries both splits; the shipping rule reads the test split's figures."""
    good, bad = shippable(), shippable(37, 63, heldout=0.35)
    study = {"splits": {"validation": {"figures": good["arms"]}, "test": {"figures": bad["arms"]}}}
    ships, why = ship_decision(study)
    assert not ships and "37 correct vs 63 wrong" in why
    study = {"splits": {"validation": {"figures": bad["arms"]}, "test": {"figures": good["arms"]}}}
    assert ship_decision(study)[0] and beats_base(study)


@pytest.mark.django_db
def test_the_console_names_the_trained_default_and_opens_the_playground_on_its_harness(
        client, members, workspace, settings, tmp_path, tiny_adapter, monkeypatch):
    from harness import services
    from harness.spec import parse_files, read_dir
    from serving.model_state import backend_description
    from training import default_model
    from training.hat.experiment import COMPACT_HARNESS
    from workspaces.access import Actor

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    for file in (ADAPTER_FILE, "adapter_config.json"):
        (adapter / file).write_bytes((tiny_adapter / file).read_bytes())
    compact = parse_files(read_dir(COMPACT_HARNESS))
    info = {**json.loads((tiny_adapter / "manifest.json").read_text()), "name": "smollm2-135m-hat-hsa-sft",
            "harness": {"path": "harness/demo/compact", "content_hash": compact.content_hash},
            "metrics": {"fixed": 0.61, "heldout": 0.42, "base_fixed": 0.0}}
    (adapter / "manifest.json").write_text(json.dumps(info))
    settings.VAR_DIR, settings.LOCAL_MODEL, settings.MODEL_BACKEND = tmp_path, None, "local"
    monkeypatch.setattr(default_model, "ADAPTER_DIR", adapter)
    assert "a HAT-trained adapter" not in backend_description("local")["model"]  # not built: the base answers
    build_default_gguf(tmp_path, adapter)
    described = backend_description("local")
    assert described["model"].startswith("smollm2-135m-hat-hsa-sft")
    assert "61% of viewer questions" in described["note"] and "42% after harness edits" in described["note"]
    for name, files in (("avatar", read_dir(COMPACT_HARNESS.parent / "avatar")), ("avatar-compact",
                                                                                    read_dir(COMPACT_HARNESS))):
        services.harness_create(actor=Actor.system("test"), workspace=workspace, name=name, files=files,
                                message="first")
    client.force_login(members["operator"])
    page = client.get(f"/w/{workspace.slug}/playground/").content.decode()
    assert '<option value="avatar-compact" selected>' in page
    assert "smollm2-135m-hat-hsa-sft" in page


def test_only_a_clear_margin_over_the_base_ships():
    def result(arm_ci, base_ci):
        return {"arms": {"hsa_sft": {"fixed_ci": arm_ci}, "base": {"fixed_ci": base_ci}}}

    assert beats_base(result([0.21, 0.40], [0.0, 0.0]))
    assert not beats_base(result([0.0, 0.05], [0.0, 0.0]))       # a zero lower bound is no margin
    assert not beats_base(result([0.30, 0.50], [0.25, 0.45]))    # overlapping intervals


def shippable(correct=72, wrong=12, *, heldout=0.66, heldout_wrong=15, ifeval=0.45, base_heldout=0.0,
              base_ifeval=0.473, n=100):
    """A result whose candidate meets every condition by default (the issue's targets), each changeable."""
    arm = {"fixed": correct / n, "fixed_ci": [correct / n - 0.09, correct / n + 0.09], "heldout": heldout,
           "ifeval": ifeval, "n": {"fixed": n, "heldout": n, "ifeval": 100},
           "wrong_answers": {"fixed": wrong, "heldout": heldout_wrong}}
    base = {"fixed": 0.0, "fixed_ci": [0.0, 0.0], "heldout": base_heldout, "ifeval": base_ifeval}
    return {"arms": {"hsa_sft": arm, "base": base}}


def test_a_model_that_answers_wrong_as_often_as_right_does_not_ship():
    assert ship_decision(shippable())[0]
    ships, why = ship_decision(shippable(37, 63, heldout=0.35))
    assert not ships and "37 correct vs 63 wrong" in why
    ships, why = ship_decision(shippable(5, 0, heldout=0.05))    # no margin over the base
    assert not ships and "does not clearly beat the base" in why


@pytest.mark.parametrize("change, reason", [
    ({"heldout": 0.37, "heldout_wrong": 10}, "held-out edits cost 35.0 points"),        # the shipped default's gap
    ({"heldout": 0.05, "base_heldout": 0.10, "correct": 15, "wrong": 5}, "below the base's 0.1"),
    ({"wrong": 24}, "24 of 100 turns (24%) state a wrong fact under the original harness"),
    ({"heldout_wrong": 30}, "30 of 100 turns (30%) state a wrong fact under the held-out edits"),
    ({"ifeval": 0.254}, "IFEval 0.254 is 21.9 points below the base's 0.473"),
])
def test_held_out_accuracy_wrong_facts_and_ifeval_against_the_base_each_block_shipping(change, reason):
    ships, why = ship_decision(shippable(**change))
    assert not ships and reason in why, why


def test_every_failed_condition_is_named_and_missing_evidence_is_a_failure():
    ships, why = ship_decision(shippable(60, 24, heldout=0.37, heldout_wrong=25, ifeval=0.254))
    assert not ships and why.count("; ") == 3  # held-out drop, two wrong-fact shares, IFEval
    bare = shippable()
    for key in ("heldout", "ifeval", "wrong_answers"):
        del bare["arms"]["hsa_sft"][key]
    ships, why = ship_decision(bare)
    assert not ships
    assert "held-out accuracy (the candidate's and the base's) was not measured" in why
    assert "IFEval (the candidate's and the base's) was not measured" in why
    assert "no wrong-fact count under the held-out edits" in why
    ships, why = ship_decision(shippable(wrong=24), rule=ShipRule(max_wrong_fact_share=0.25))
    assert ships and "wrong-fact shares 24% / 15%" in why


@pytest.mark.django_db(transaction=True)
def test_the_shipped_default_answers_how_much_is_l001_from_the_tool(client, workspace, settings, tmp_path):
    """The committed adapter itself, not a stand-in: built and served by the local backend on the compact avatar
    it was trained for, it answers the playground's first question with a price the product tool returned."""
    from harness import services
    from harness.spec import read_dir
    from serving.models import Trace
    from serving.services import api_key_create, room_upsert
    from training.hat.experiment import COMPACT_HARNESS
    from workspaces.access import Actor

    assert manifest() is not None, "the project ships a trained default (training/default_model/)"
    settings.VAR_DIR, settings.LOCAL_MODEL, settings.MODEL_BACKEND = tmp_path, None, "local"
    build_default_gguf(tmp_path)
    system = Actor.system("t")
    harness = services.harness_create(actor=system, workspace=workspace, name="avatar-compact",
                                      files=read_dir(COMPACT_HARNESS), message="first")
    services.label_move(actor=system, harness=harness, name="production", version=harness.head, reason="ship")
    product = {"link_id": "L001", "name": "Merino Crew-Neck Sweater", "price": 89.0, "promo_price": 71.2}
    room_upsert(workspace=workspace, harness=harness, context={
        "room_id": "demo-room", "title": "Demo", "currency": "$", "on_screen": "L001", "products": [product],
        "faq": [], "promotions": [], "orders": []})
    token = api_key_create(actor=system, workspace=workspace, name="platform", scopes=["read"])[1]
    response = client.post("/api/v1/rooms/demo-room/reply", json.dumps({"message": "How much is L001?", "viewer_id": "v1"}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    body = response.json()
    trace = Trace.objects.get(trace_id=body["trace_id"])
    assert body["outcome"] == "replied", (body, trace.data.get("reason"))
    assert body["model"].startswith("harnessops-default-")
    looked_up = [s for s in trace.data["steps"] if s["kind"] == "tool" and s["name"] == "get_product_info_by_link_id"]
    assert looked_up and json.loads(looked_up[0]["arguments"]) == {"link_id": "L001"}
    assert "89" in body["reply"] or "71.2" in body["reply"], body["reply"]
