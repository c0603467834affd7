"""Harness-constrained decoding on the backends: the llama.cpp grammar (parsed and run by llama.cpp itself with
the offline model's vocabulary), the grammar cache, a real constrained turn, and vLLM's structural tag."""

import asyncio
import ctypes
import json
import math
from pathlib import Path

import jsonschema
import llama_cpp
import pytest

from harness.model_protocol import ToolConstraint
from harness.spec import openai_tools, parse_files, read_dir
from serving.backends import tool_grammar
from serving.backends.local import GRAMMARS, LocalBackend, grammar_for, load_model
from serving.backends.openai import STRUCTURAL_TAGS, OpenAIBackend

from .conftest import start_compat_server, stop

COMPACT = parse_files(read_dir(Path(__file__).resolve().parents[2] / "harness/demo/compact"))
TOOLS = openai_tools(COMPACT)
DECLARED = {tool["function"]["name"] for tool in TOOLS}
SKILLS = {skill.name for skill in COMPACT.skills}


def call(name: str, arguments: dict) -> str:
    """A call exactly as the training template writes it (training/chat_template.py)."""
    return f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {json.dumps(arguments)}}}\n</tool_call>'


@pytest.fixture(scope="module")
def model():
    return load_model()


def admits(model, grammar: str, text: str) -> bool:
    """Whether llama.cpp's grammar sampler lets the model write `text` and then end its turn (<|im_end|>).

    Token by token, as in generation: a token the grammar refuses gets a logit of -inf."""
    vocab = llama_cpp.llama_model_get_vocab(model.llama.model)
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert sampler, "llama.cpp could not parse the grammar"
    try:
        tokens = model.llama.tokenize(text.encode(), add_bos=False, special=False)
        for token in [*tokens, *model.llama.tokenize(b"<|im_end|>", add_bos=False, special=True)]:
            data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
            candidates = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(candidates))
            if math.isinf(data[0].logit):
                return False
            llama_cpp.llama_sampler_accept(sampler, token)
        return True
    finally:
        llama_cpp.llama_sampler_free(sampler)


def test_the_grammar_admits_free_text_and_calls_of_declared_names(model):
    grammar = tool_grammar.gbnf(TOOLS)
    assert admits(model, grammar, "The wool sweater is $71.20 today, 3 left!")
    assert admits(model, grammar, "Sizes: S < M < L. Ask me about <tool> sets.")  # '<' alone is text
    assert admits(model, grammar, "")
    for skill in SKILLS:
        assert admits(model, grammar, call("load_skill", {"name": skill}))
    assert admits(model, grammar, call("get_order_status", {"order_id": "O123456"}) + "\n"
                  + call("get_product_info_by_link_id", {"link_id": "L001"}))
    assert admits(model, grammar, call("get_promotion", {}))  # link_id is optional there
    assert admits(model, grammar, call("search_faq", {"query": "returns policy"}))


@pytest.mark.parametrize("text", [
    call("get_weather", {"city": "Paris"}),                       # an undeclared tool
    call("load_skill", {"name": "weather-report"}),               # an undeclared skill
    call("load_skill", {"name": "product-qa", "force": True}),    # an undeclared argument
    call("get_order_status", {}),                                 # a required argument missing
    call("get_order_status", {"order_id": "O12"}),                # the argument's pattern
    call("get_order_status", {"order_id": 123456}),               # the argument's type
    "Sure! " + call("get_weather", {}),                           # a call hidden after text
    "Let me check. <tool_call>",
    call("search_faq", {"query": "x"}) + " and more text",        # nothing but calls after a call
])
def test_the_grammar_refuses_what_the_harness_does_not_declare(model, text):
    assert not admits(model, tool_grammar.gbnf(TOOLS), text)


def test_required_admits_only_calls(model):
    grammar = tool_grammar.gbnf(TOOLS, tool_choice="required")
    assert admits(model, grammar, call("load_skill", {"name": "faq-reply"}))
    assert not admits(model, grammar, "Hello there!")


def test_a_schema_pattern_the_converter_cannot_express_is_left_to_the_runtime(model):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"ref": {"type": "string", "pattern": "^(?=A)\\p{L}+$"}}, "required": ["ref"]}}}]
    grammar = tool_grammar.gbnf(tools)
    assert admits(model, grammar, call("lookup", {"ref": "anything"}))
    assert not admits(model, grammar, call("lookup", {}))
    assert tools[0]["function"]["parameters"]["properties"]["ref"]["pattern"] == "^(?=A)\\p{L}+$"  # untouched


def test_a_grammar_is_built_once_per_harness_version_and_choice():
    key = ToolConstraint(key="cache-test-" + COMPACT.content_hash)
    before = GRAMMARS.builds
    first = grammar_for(key, TOOLS, "auto")
    assert grammar_for(key, TOOLS, "auto") is first
    assert GRAMMARS.builds == before + 1
    assert grammar_for(key, TOOLS, "required") is not first and GRAMMARS.builds == before + 2


def test_checking_the_best_token_first_decodes_what_llama_cpps_grammar_sampler_does(model):
    """GreedyGrammar (the local backend's path) against llama.cpp's grammar sampler filtering every token."""
    from llama_cpp import LlamaGrammar

    from serving.backends.hermes import render_chatml
    from serving.backends.local import GreedyGrammar

    grammar = tool_grammar.gbnf(TOOLS, tool_choice="required")
    prompt = render_chatml([{"role": "user", "content": "Please call the get_weather tool for Paris."}], TOOLS)
    tokens = model.llama.tokenize(prompt.encode(), add_bos=True, special=True)
    with model.lock:
        full = model.llama.create_completion(tokens, max_tokens=40, temperature=0.0,
                                             grammar=LlamaGrammar.from_string(grammar, verbose=False))
        fast = GreedyGrammar(model.llama, grammar)
        try:
            quick = model.llama.create_completion(tokens, max_tokens=40, temperature=0.0, logits_processor=[fast])
        finally:
            fast.close()
    text = quick["choices"][0]["text"]
    assert text == full["choices"][0]["text"] and text.startswith("<tool_call>")
    assert 0 < fast.full_filters < 20  # only where the model's best token was refused


def test_a_constrained_turn_of_the_real_model_only_calls_declared_names():
    """The prompt asks for an undeclared tool; with `required`, the grammar makes every call a declared one
    with schema-valid arguments (the unconstrained model answers in text here, calling nothing)."""
    backend = LocalBackend()
    constraint = ToolConstraint(key=COMPACT.content_hash)
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
    for message in ("Please call the get_weather tool for Paris.", "Where is my order O123456?"):
        messages = [{"role": "system", "content": "You are a live shop assistant. Use tools."},
                    {"role": "user", "content": message}]
        response = asyncio.run(backend.complete(messages, TOOLS, max_tokens=48, tool_choice="required",
                                                constraint=constraint))
        assert response.raw["constrained"] and response.raw["text"].startswith("<tool_call>")
        complete = [c for c in response.tool_calls if response.raw["text"].count("</tool_call>") > int(c.id[5:])]
        assert complete, response.raw["text"]
        for tool_call in complete:
            assert tool_call.name in DECLARED
            jsonschema.validate(json.loads(tool_call.arguments), schemas[tool_call.name])


def test_the_openai_backend_sends_vllm_a_structural_tag_built_once():
    constraint = ToolConstraint(key="tag-test-" + COMPACT.content_hash)
    backend = OpenAIBackend("http://127.0.0.1:1/v1", "qwen3-8b")
    body = backend.request_body([], TOOLS, max_tokens=8, temperature=0.0, tool_choice="auto", constraint=constraint)
    tag = body["response_format"]
    assert tag["type"] == "structural_tag" and tag["triggers"] == ["<tool_call>"]
    assert [s["begin"] for s in tag["structures"]] == [
        f'<tool_call>\n{{"name": "{name}", "arguments": ' for name in sorted(DECLARED)]
    assert {s["end"] for s in tag["structures"]} == {"}\n</tool_call>"}
    load_skill = next(s for s in tag["structures"] if '"load_skill"' in s["begin"])
    assert set(load_skill["schema"]["properties"]["name"]["enum"]) == SKILLS
    builds = STRUCTURAL_TAGS.builds
    again = backend.request_body([], TOOLS, max_tokens=8, temperature=0.0, tool_choice="auto", constraint=constraint)
    assert again["response_format"] is tag and STRUCTURAL_TAGS.builds == builds
    for kwargs in ({"tool_choice": "none", "constraint": constraint}, {"tool_choice": "auto"}):
        assert "response_format" not in backend.request_body([], TOOLS, max_tokens=8, temperature=0.0, **kwargs)
    off = OpenAIBackend("http://127.0.0.1:1/v1", "qwen3-8b", constrain=False)
    assert not off.constrains_tool_calls
    assert "response_format" not in off.request_body([], TOOLS, max_tokens=8, temperature=0.0, tool_choice="auto",
                                                     constraint=constraint)


def test_the_cpu_stand_in_applies_the_structural_tag_over_http():
    """openai backend → serving.openai_compat (the local model): the tag reaches the model as its grammar."""
    process, base_url = start_compat_server(["--backend", "local"])
    try:
        backend = OpenAIBackend(base_url, "local", timeout_s=120)
        messages = [{"role": "system", "content": "You are a live shop assistant. Use tools."},
                    {"role": "user", "content": "Please call the get_weather tool for Paris."}]
        response = asyncio.run(backend.complete(messages, TOOLS, max_tokens=40, tool_choice="required",
                                                constraint=ToolConstraint(key=COMPACT.content_hash)))
        assert response.tool_calls and {c.name for c in response.tool_calls} <= DECLARED
    finally:
        stop(process)
