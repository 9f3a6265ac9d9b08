"""Launch command lines -> engine arguments, whatever the spelling.

Reads ``vllm serve ...``, ``python -m vllm.entrypoints.openai.api_server ...``, ``docker run ...
vllm/vllm-openai ...``, ``python -m sglang.launch_server ...``, ``text-generation-launcher ...``,
``llama-server ...``, Python keyword arguments (``LLM(..., gpu_memory_utilization=0.7)``), environment
assignments, and the ``non-default args: {...}`` dict vLLM prints. Flag names come from
catalog/launch_flags.yaml. Pure and total: unreadable parts end up in ``unknown_args``.
"""

from __future__ import annotations

import ast
import re
import shlex
from typing import Any

from llmtriage import catalog
from llmtriage.facts import Citation, LaunchConfig, LogFacts

_ENV_ASSIGN = re.compile(r"^(?P<key>[A-Z_][A-Z0-9_]*)=(?P<value>.*)$")
_KWARG = re.compile(r"^(?P<key>[a-z][a-z0-9_]*)=(?P<value>[^,()]+?)[,)]*$")
_LIST_EDGES = str.maketrans("", "", "[]'\",")


def _tokens(text: str) -> list[str]:
    joined = re.sub(r"\\\s*\n", " ", text)
    try:
        return shlex.split(joined, comments=False, posix=True)
    except ValueError:
        return joined.split()


def _normalise_flag(flag: str) -> str:
    if flag.startswith("--"):
        return "--" + flag[2:].lower().replace("_", "-")
    return flag


def _convert(kind: str, raw: str) -> Any:
    raw = raw.strip().rstrip(",")
    if kind == "int":
        return int(float(raw))
    if kind == "float":
        return float(raw)
    if kind == "bool":
        return raw.strip().lower() not in ("false", "0", "no", "off")
    return raw.strip("'\"")


def detect_engine(text: str) -> str | None:
    """The engine a command line starts, by catalog substrings."""
    lowered = text.lower()
    for engine, needles in catalog.launch_flags().engines.items():
        if any(n in lowered for n in needles):
            return engine
    return None


def parse_launch(text: str, source: str) -> LaunchConfig:
    """Parse a launch command line (or a prose description holding flag-like fragments)."""
    flags = catalog.launch_flags()
    config = LaunchConfig(engine=detect_engine(text), source=source)
    tokens = _tokens(text)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if (env := _ENV_ASSIGN.match(token)) is not None:
            _set_env(config, env.group("key"), env.group("value"), source)
            continue
        if token in ("-e", "--env") and i < len(tokens):
            if (env := _ENV_ASSIGN.match(tokens[i])) is not None:
                _set_env(config, env.group("key"), env.group("value"), source)
            i += 1
            continue
        if token.lower() in flags.model_positional_after and i < len(tokens) and not tokens[i].startswith("-"):
            _set(config, "model", "str", tokens[i], source, token + " " + tokens[i])
            i += 1
            continue
        if token.startswith("-"):
            name, eq, inline = token.partition("=")
            flag = _normalise_flag(name)
            found = flags.option_for(flag)
            if found is None:
                if not eq and flag not in flags.switches and i < len(tokens) and not tokens[i].startswith("-"):
                    config.unknown_args.append(f"{token} {tokens[i]}")
                    i += 1
                else:
                    config.unknown_args.append(token)
                continue
            option, switch_value = found
            if option.type == "bool":
                value: str = inline if eq else ("true" if switch_value else "false")
                if eq and not switch_value:
                    value = "false" if _convert("bool", inline) else "true"
                _set(config, option.field, "bool", value, source, token)
                continue
            if eq:
                raw = inline
            elif i < len(tokens):
                raw = tokens[i]
                i += 1
            else:
                config.unknown_args.append(token)
                continue
            _set(config, option.field, option.type, raw, source, f"{name} {raw}")
            continue
        if (kw := _KWARG.match(token.strip("(,"))) is not None:
            found = flags.option_for("--" + kw.group("key").replace("_", "-"))
            if found is not None:
                option, _ = found
                _set(config, option.field, option.type, kw.group("value"), source, token)
    return config


def apply_env(config: LaunchConfig, text: str, source: str) -> None:
    """Add the server's environment, ``NAME=value`` per line (``config/env.txt``, values shell-quoted)."""
    for line in text.splitlines():
        tokens = _tokens(line)
        if len(tokens) == 1 and (env := _ENV_ASSIGN.match(tokens[0])) is not None:
            _set_env(config, env.group("key"), env.group("value"), source)


def _set_env(config: LaunchConfig, key: str, value: str, source: str) -> None:
    config.env[key] = value
    field, kind = catalog.launch_flags().env.get(key, (None, "str"))
    if field is not None:
        _set(config, field, kind, value, source, f"{key}={value}")


def _set(config: LaunchConfig, field: str, kind: str, raw: str, source: str, shown: str) -> None:
    try:
        value = _convert(kind, raw.translate(_LIST_EDGES) if kind != "str" else raw)
    except ValueError:
        config.unknown_args.append(shown)
        return
    setattr(config, field, value)
    config.citations[field] = Citation(source=source, excerpt=shown)


def merge_args_dict(config: LaunchConfig, args_repr: str, citation: Citation) -> None:
    """Fill gaps of ``config`` from vLLM's ``non-default args: {...}`` log line."""
    try:
        args = ast.literal_eval(args_repr)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return
    if not isinstance(args, dict):
        return
    flags = catalog.launch_flags()
    for key, value in args.items():
        found = flags.option_for("--" + str(key).replace("_", "-"))
        if found is None:
            continue
        option, _ = found
        if getattr(config, option.field) is not None:
            continue
        raw = value[0] if isinstance(value, list) and value else value
        try:
            setattr(config, option.field, _convert(option.type, str(raw)))
        except ValueError:
            continue
        config.citations[option.field] = citation


def fold_log_hints(config: LaunchConfig, facts: LogFacts) -> None:
    """Fill what ``config`` does not say from the launch arguments the server printed in its log."""
    config.engine = config.engine or facts.engine
    args = facts.launch_hints.get("args_dict")
    if args is not None:
        merge_args_dict(config, args, facts.launch_hint_citations["args_dict"])
    max_len = facts.launch_hints.get("max_model_len")
    if config.max_model_len is None and max_len is not None and max_len.isdigit():
        config.max_model_len = int(max_len)
        config.citations["max_model_len"] = facts.launch_hint_citations["max_model_len"]
