"""PipelineConfig.from_dict: a bad value anywhere is a ConfigError naming its path; a good one round-trips."""

import pytest

from tests.training.conftest import MINI_HARNESS
from training.pipeline_config import PipelineConfig
from training.rl_config import RlConfig
from training.validation import ConfigError

GOOD = {
    "model": {"base": "tiny-random-smollm2", "device": "cpu"},
    "harnesses": [{"label": "mini@v1", "files": MINI_HARNESS}],
    "data": {"simulator_seed": 5, "simulator_cases": 4},
    "stages": [{"kind": "sft", "config": {"max_steps": 2}}, {"kind": "opd", "config": {}},
               {"kind": "rl", "config": {"num_generations": 2, "per_device_train_batch_size": 2}}],
}


def bad(path, value):
    import copy

    data = copy.deepcopy(GOOD)
    target, keys = data, path
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return data


def test_good_config_round_trips():
    config = PipelineConfig.from_dict(GOOD)
    assert [s.kind for s in config.stages] == ["sft", "opd", "rl"]
    assert isinstance(config.stages[2].config, RlConfig) and config.stages[2].config.num_generations == 2
    again = PipelineConfig.from_dict(config.to_dict())
    assert again.fingerprint() == config.fingerprint()
    assert config.to_dict(with_files=False)["harnesses"][0]["content_hash"]


@pytest.mark.parametrize(("path", "value", "field"), [
    (("model", "finetune"), "half", "model.finetune"),
    (("model", "lora_r"), 0, "model.lora_r"),
    (("model", "device"), "tpu", "model.device"),
    (("model", "precision"), "fp8", "model.precision"),
    (("harnesses",), [], "harnesses"),
    (("harnesses", 0, "files"), {"harness.yaml": "format: nope"}, "harnesses[0].files"),
    (("data", "simulator_cases"), -1, "data.simulator_cases"),
    (("data", "cases_jsonl"), ["/no/such.jsonl"], "data.cases_jsonl[0]"),
    (("data", "exclude"), {"lsqa@v1": ["abc"]}, "data.exclude.lsqa@v1"),
    (("stages",), [], "stages"),
    (("stages", 0, "kind"), "dpo", "stages[0].kind"),
    (("stages", 0, "config", "max_steps"), 0, "stages[0].config.max_steps"),
    (("stages", 0, "config", "learning_rate"), "fast", "stages[0].config.learning_rate"),
    (("stages", 0, "config", "overlong"), "truncate", "stages[0].config.overlong"),
    (("stages", 0, "config", "bogus"), 1, "stages[0].config.bogus"),
    (("stages", 1, "config", "beta"), 2.0, "stages[1].config.beta"),
    (("stages", 2, "config", "num_generations"), 1, "stages[2].config.num_generations"),
    (("stages", 2, "config", "per_device_train_batch_size"), 3, "stages[2].config.per_device_train_batch_size"),
    (("stages", 2, "config", "rewards"), ["accuracy", "vibes"], "stages[2].config.rewards"),
    (("stages", 2, "config", "reward_weights"), [1.0], "stages[2].config.reward_weights"),
    (("seed",), "x", "seed"),
])
def test_bad_values_name_their_field(path, value, field):
    with pytest.raises(ConfigError) as error:
        PipelineConfig.from_dict(bad(path, value))
    assert error.value.field == field, str(error.value)


def test_cli_refuses_a_bad_config_naming_the_field(tmp_path, capsys):
    from training.cli import main

    path = tmp_path / "job.json"
    path.write_text(__import__("json").dumps(bad(("stages", 0, "config", "max_steps"), 0)))
    assert main(["--config", str(path), "--artifacts-dir", str(tmp_path / "out")]) == 2
    assert '"field": "stages[0].config.max_steps"' in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing started


def test_precision_resolves_per_device_and_reaches_the_trainer():
    from training.base_models import resolve_bf16
    from training.sft_config import SftConfig

    plain, amx = frozenset({"avx2", "fma"}), frozenset({"avx2", "amx_bf16", "amx_tile"})
    assert [resolve_bf16(p, use_cpu=True, flags=plain) for p in ("fp32", "bf16", "auto")] == [False, True, False]
    assert [resolve_bf16(p, use_cpu=True, flags=amx) for p in ("fp32", "bf16", "auto")] == [False, True, True]
    assert [resolve_bf16(p, use_cpu=False, flags=plain) for p in ("fp32", "bf16", "auto")] == [False, True, True]
    arguments = SftConfig().trainer_arguments(output_dir="/tmp/x", use_cpu=True, seed=1, bf16=True)
    assert arguments["bf16"] is True and arguments["use_cpu"] is True
    assert SftConfig().trainer_arguments(output_dir="/tmp/x", use_cpu=True, seed=1)["bf16"] is False


def test_cpu_flags_come_from_cpuinfo_and_bf16_without_instructions_is_warned():
    from training.base_models import cpu_flags, slow_bf16_warning

    cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\nflags\t: fpu avx2 fma\n"
    assert cpu_flags(cpuinfo) == frozenset({"fpu", "avx2", "fma"})
    assert cpu_flags("no flags here") == frozenset()
    plain = cpu_flags(cpuinfo)
    assert "no bf16 instructions" in slow_bf16_warning("bf16", use_cpu=True, flags=plain)
    assert slow_bf16_warning("bf16", use_cpu=True, flags=plain | {"avx512_bf16"}) is None
    assert slow_bf16_warning("bf16", use_cpu=False, flags=plain) is None
    assert slow_bf16_warning("auto", use_cpu=True, flags=plain) is None
