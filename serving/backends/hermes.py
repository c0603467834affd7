"""Hermes-style tool calling over a ChatML prompt, for models served without a tool parser.

The tool section, the `<tool_call>` blocks and the `<tool_response>` turns are those of Qwen3's chat
template, which vLLM's `hermes` tool parser reads. Rendering the local model's prompts the same way
makes its trajectories look like the production model's, so traces, evaluation and training data do
not depend on which backend produced them.

One difference: each tool is written as its compact signature (`signature`: name, description and
parameters, minified JSON), not the whole chat-completions definition. The wrapper, `strict` and
`additionalProperties` tell a model nothing it can act on, and on the embedded 135M model the tool
block was 60% of the first prompt (674 → 427 tokens for the compact demo harness), which is what a
CPU pays for on every turn and every training row. Stored trajectories keep the full definitions.
"""

import json
import re
from typing import Any

from harness.model_protocol import ToolCall

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# SmolLM2's chat template adds this system turn when a conversation has none.
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

TOOLS_PREAMBLE = (
    "# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_INSTRUCTION = (
    "</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

# A block ends at its closing tag, at the next opening tag (a forgotten close), or at the end of the
# text (generation stopped inside the block).
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGUMENTS = re.compile(r'"(?:arguments|parameters)"\s*:\s*')


def signature(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as the prompt shows it: name, description, parameters (a signature is its own signature)."""
    function = tool.get("function", tool)
    parameters = _without_closed_objects(function.get("parameters") or {"type": "object", "properties": {}})
    return {"name": function["name"], "description": function.get("description", ""), "parameters": parameters}


def signatures(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [signature(tool) for tool in tools]


def _without_closed_objects(schema: Any) -> Any:
    """The schema less `additionalProperties` (the arguments are validated against the full schema anyway)."""
    if isinstance(schema, dict):
        return {key: _without_closed_objects(value) for key, value in schema.items() if key != "additionalProperties"}
    if isinstance(schema, list):
        return [_without_closed_objects(item) for item in schema]
    return schema


def tools_section(tools: list[dict[str, Any]]) -> str:
    """The `# Tools` text appended to the system message: one minified JSON signature per line."""
    lines = [json.dumps(signature(tool), ensure_ascii=False, separators=(",", ":")) for tool in tools]
    return "\n".join([TOOLS_PREAMBLE, *lines, TOOLS_INSTRUCTION])


def render_chatml(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """The whole prompt, ending with the open assistant turn the model completes."""
    messages = list(messages)
    system = DEFAULT_SYSTEM
    if messages and messages[0].get("role") == "system":
        system = _text(messages.pop(0).get("content"))
    if tools:
        system = f"{system}\n\n{tools_section(tools)}" if system else tools_section(tools)
    parts = [_turn("system", system)]
    tool_responses: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            tool_responses.append(f"<tool_response>\n{_text(message.get('content'))}\n</tool_response>")
            continue
        if tool_responses:  # SmolLM2 has no tool role: consecutive results form one user turn
            parts.append(_turn("user", "\n".join(tool_responses)))
            tool_responses = []
        if role == "assistant":
            parts.append(_turn("assistant", _assistant_text(message)))
        else:
            parts.append(_turn(role or "user", _text(message.get("content"))))
    if tool_responses:
        parts.append(_turn("user", "\n".join(tool_responses)))
    parts.append(f"{IM_START}assistant\n")
    return "".join(parts)


def parse_tool_calls(text: str) -> tuple[str, tuple[ToolCall, ...]]:
    """Split generated text into content and tool calls (ids `call_<n>`).

    A block whose JSON does not parse is still a call: its name is recovered when it can be and its
    arguments keep the raw text, so the runtime reports a tool error the model can correct.
    """
    calls = []
    for index, match in enumerate(_TOOL_CALL.finditer(text)):
        name, arguments = _parse_call_body(match.group(1).strip())
        calls.append(ToolCall(id=f"call_{index}", name=name, arguments=arguments))
    content = _TOOL_CALL.sub("", text).replace("</tool_call>", "")
    return content.strip(), tuple(calls)


def _parse_call_body(body: str) -> tuple[str, str]:
    try:
        value = json.loads(body)
    except ValueError:
        value = None
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        arguments = value.get("arguments", value.get("parameters", {}))
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        return value["name"], arguments
    name_match = _NAME.search(body)
    name = json.loads(f'"{name_match.group(1)}"') if name_match else ""
    arguments_match = _ARGUMENTS.search(body)
    if not arguments_match:
        return name, body
    try:  # a valid arguments object in a broken wrapper (typically the closing brace is missing)
        arguments, _ = json.JSONDecoder().raw_decode(body, arguments_match.end())
    except ValueError:
        return name, body[arguments_match.end():].strip()
    return name, arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _assistant_text(message: dict[str, Any]) -> str:
    blocks = [_text(message.get("content"))] if message.get("content") else []
    for call in message.get("tool_calls") or ():
        function = call.get("function", call)  # OpenAI shape, or flat {"name", "arguments"}
        arguments = function.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        blocks.append(f'<tool_call>\n{{"name": {json.dumps(function.get("name", ""))}, '
                      f'"arguments": {arguments}}}\n</tool_call>')
    return "\n".join(blocks)


def _turn(role: str, content: str) -> str:
    return f"{IM_START}{role}\n{content}{IM_END}\n"


def _text(content: Any) -> str:
    """Message content as text: a string, None, or a list of OpenAI content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)
