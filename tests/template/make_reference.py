#!/usr/bin/env python3
"""Makes tests/template/reference.json: transformers' own renders of chat templates.

Run with the Hugging Face test environment (transformers 5, Jinja2 >= 3.1.6), e.g.

    /work/main/build/venv-hf/bin/python tests/template/make_reference.py

It writes reference.json with three tables:
  "families": for every template in fixtures/*.jinja (LLaMA-2 chat, LLaMA-3 and 3.1
      instruct, Mistral instruct v0.1 and v0.3, ChatML / Qwen2, Qwen2.5 with tools, Qwen3
      (thinking, tools),
      Gemma and Gemma 3, Phi-3, Zephyr) and several conversations (with and without a
      system message, multi-turn, quotes / newlines / unicode, tool calls, roles that
      break the template's rules), with add_generation_prompt off and on:
      tokenizer.apply_chat_template(messages, tokenize=False, ...) of a
      PreTrainedTokenizerFast carrying the family's special tokens, or the error it raised.
  "expressions": small templates rendered by transformers' own sandboxed Jinja2
      environment (chat_template_utils._compile_jinja_template: trim_blocks, lstrip_blocks,
      raise_exception, tojson, namespace, loop controls) with given variables: the text,
      or the error class when Jinja2 raised.
  "folders": for each folder in folders/ (a tokenizer.json with chat templates in
      tokenizer_config.json as a string or a named list, or in chat_template.jinja, special
      tokens in special_tokens_map.json, none, or one that does not parse): what
      AutoTokenizer.from_pretrained(folder).apply_chat_template renders, with and without
      add_generation_prompt and tools.
The C++ tests (test_template_reference.cpp, test_template_expr.cpp) compare oslo's renders
with these; nothing runs Python at test time.
"""
import json
import os
import sys

import jinja2
import transformers
from transformers import PreTrainedTokenizerFast
from transformers.utils.chat_template_utils import _compile_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
TOKENIZER_JSON = os.path.join(HERE, "..", "tokenizer", "fixtures", "gpt2_bpe", "tokenizer.json")

SPECIAL = {
    "llama2": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama31": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "mistral_v3": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "chatml": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwen25": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"},
    "gemma3": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    "phi3": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"},
    "zephyr": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city (\"°C\" or \"°F\").",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "The city"},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]}}},
]

U = "user"
A = "assistant"
S = "system"


def m(role, content, **kw):
    d = {"role": role, "content": content}
    d.update(kw)
    return d


CONVERSATIONS = {
    "single": [m(U, "Hello!")],
    "system": [m(S, "You are a pirate."), m(U, "Hi there")],
    "multi": [m(U, "What is 2+2?"), m(A, "4."), m(U, "And 3+3?")],
    "system_multi": [m(S, "Be brief."), m(U, "Name a colour."), m(A, "Blue."), m(U, "Another?")],
    "ends_assistant": [m(U, "Say hi"), m(A, "Hi!")],
    "tricky": [m(U, "  quotes ' \" and \\ backslash\nnew line\n\ttab  "),
               m(A, "ünïcödé — 日本語 🙂 {{ not a tag }} {% neither %}"),
               m(U, "</s> <|im_end|> [INST] special-looking text")],
    "empty_content": [m(U, ""), m(A, ""), m(U, "ok")],
    "bad_roles": [m(U, "one"), m(U, "two")],
    "null_key": [m(U, "hi", name=None)],
}
MULTIMODAL = [m(S, [{"type": "text", "text": "You look at pictures."}]),
              m(U, [{"type": "image"}, {"type": "text", "text": "  What is this?  "}])]
TOOL_CHAT = [m(S, "You can call tools."), m(U, "Weather in Paris?"),
             {"role": A, "content": "", "tool_calls": [
                 {"id": "call12345", "type": "function",
                  "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
             {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call12345"},
             m(U, "Thanks")]

# (family, conversation name, extra variables)
EXTRA_CASES = [
    ("gemma3", "multimodal", MULTIMODAL, {}),
    ("qwen25", "tools", TOOL_CHAT, {"tools": TOOLS}),
    ("qwen25", "tools_no_system", [m(U, "Add 2 and 3")], {"tools": TOOLS}),
    ("llama31", "tools", [m(U, "Weather in Oslo?")], {"tools": TOOLS, "date_string": "01 Jan 2025"}),
    ("llama31", "tool_call", [m(U, "Weather?"), {"role": A, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": {"temp": -3}}], {"tools": TOOLS, "date_string": "01 Jan 2025"}),
    ("mistral_v3", "tools", TOOL_CHAT[1:], {"tools": TOOLS}),
    ("qwen3", "thinking", [m(S, "sys"), m(U, "q1"), m(A, "<think>\nreason\n</think>\n\nans1"), m(U, "q2")], {}),
    ("qwen3", "tools_no_thinking", [m(U, "q1"), {"role": A, "content": "", "tool_calls": [
        {"function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]}, {"role": "tool", "content": "3"},
        {"role": "tool", "content": "again 3"}, m(A, "done", reasoning_content="hmm")],
     {"tools": TOOLS, "enable_thinking": False}),
]


def render_family(name, source, messages, agp, variables):
    tok = PreTrainedTokenizerFast(tokenizer_file=TOKENIZER_JSON, **SPECIAL[name])
    tok.chat_template = source
    try:
        return {"expected": tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=agp,
                                                    **variables)}
    except Exception as e:  # the template's own error (raise_exception, ...)
        return {"error": type(e).__name__, "message": str(e)}


def families():
    cases = []
    for fn in sorted(os.listdir(FIXTURES)):
        if not fn.endswith(".jinja"):
            continue
        name = fn[:-6]
        with open(os.path.join(FIXTURES, fn), encoding="utf-8") as f:
            source = f.read()
        convs = [(c, msgs, {}) for c, msgs in CONVERSATIONS.items()]
        convs += [(c, msgs, v) for fam, c, msgs, v in EXTRA_CASES if fam == name]
        if name == "llama31":
            convs = [(c, msgs, dict(v, date_string=v.get("date_string", "26 Jul 2024"))) for c, msgs, v in convs]
        for conv, msgs, variables in convs:
            for agp in (False, True):
                case = {"family": name, "template": fn, "conversation": conv, "special_tokens": SPECIAL[name],
                        "messages": msgs, "add_generation_prompt": agp, "variables": variables}
                case.update(render_family(name, source, msgs, agp, variables))
                cases.append(case)
            if conv in ("ends_assistant", "multi", "tricky"):  # a prefilled last message
                case = {"family": name, "template": fn, "conversation": conv, "special_tokens": SPECIAL[name],
                        "messages": msgs, "add_generation_prompt": False, "variables": variables,
                        "continue_final_message": True}
                case.update(render_family(name, source, msgs, False, dict(variables, continue_final_message=True)))
                cases.append(case)
    return cases


# Small templates and their variables: the expression language, filters, tests,
# statements and whitespace control.
EXPRESSIONS = [
    ("{{ 1 + 2 }}|{{ 7 - 10 }}|{{ 3 * 4 }}|{{ 7 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}", {}),
    ("{{ 1.5 + 1 }}|{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ 2.0 }}|{{ -0.0 }}|{{ 1/3 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true ~ [1] }}|{{ 'ab' * 3 }}|{{ [1, 2] * 2 }}|{{ 3 * 'x' }}", {}),
    ("{{ 'a' + 'b' }}|{{ [1] + [2, 3] }}|{{ (1, 2) + (3,) }}", {}),
    ("{{ 1 < 2 }}|{{ 2 <= 1 }}|{{ 'a' < 'b' }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ [1,2] == [1,2] }}|{{ 1 != 2 }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}", {}),
    ("{{ 'b' in 'abc' }}|{{ 2 in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ 'x' not in 'abc' }}|{{ 3 not in [1] }}", {}),
    ("{{ true and false }}|{{ 0 or 'x' }}|{{ '' and 1 }}|{{ not 0 }}|{{ not [] }}|{{ none or none }}", {}),
    ("{{ 'yes' if x else 'no' }}|{{ 'y' if not x }}|{{ x if x is defined else 'dflt' }}", {"x": 0}),
    ("{{ [1, 'a', \"b'\", none, true, 1.5, (1,), {'k': [2]}] }}|{{ {'a': 1, 'b': 'c'} }}|{{ ('x', 2) }}", {}),
    ("{{ 'it\\'s' }}|{{ \"q\\\"q\" }}|{{ 'tab\\tnl\\n' }}|{{ '\\x41\\u00e9\\U0001F600' }}|{{ 'a' 'b' }}", {}),
    ("{{ s[0] }}{{ s[-1] }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ s[:-2] }}|{{ s[10] }}|{{ l[1:] }}|{{ l[::2] }}|{{ l[-1] }}", {"s": "héllo", "l": [1, 2, 3, 4]}),
    ("{{ d.a }}|{{ d['b'] }}|{{ d.missing }}|{{ d['missing'] is defined }}|{{ d.items() | list }}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('a') }}|{{ d.get('z', 5) }}|{{ d.get('z') }}", {"d": {"a": 1, "b": "two"}}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}", {"d": {"z": 1, "a": 2, "m": 3}}),
    ("{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }} {% endfor %}", {"l": ["a", "b", "c"]}),
    ("{% for x in l %}{{ loop.previtem | default('-') }}{{ x }}{{ loop.nextitem | default('-') }}{{ loop.cycle('o', 'e') }} {% endfor %}", {"l": [1, 2, 3]}),
    ("{% for x in l if x is odd %}{{ x }}{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {"l": [1, 2, 3, 5]}),
    ("{% for x in l %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}", {"l": [0, 1, 2, 3, 4]}),
    ("{% for row in m %}{% for c in row %}{{ loop.index }}{{ c }}{% endfor %}/{{ loop.index }} {% endfor %}", {"m": [["a", "b"], ["c"]]}),
    ("{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}[{{ x }}]{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(total=0, names=[]) %}{% for i in range(4) %}{% set ns.total = ns.total + i %}{% set ns.names = ns.names + [i|string] %}{% endfor %}{{ ns.total }} {{ ns.names|join(',') }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (3, 4) %}{% set c, d = t %}{{ c + d }}", {}),
    ("{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]", {}),
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', '?') }} {{ greet(name='Cy', punct='.') }}", {}),
    ("{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}", {}),
    ("{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %}", {"x": 2}),
    ("{% with a = 5 %}{{ a }}{% endwith %}{{ a is defined }}", {}),
    ("{# a comment #}a{#- trimmed -#}   b", {}),
    ("{% raw %}{{ not rendered }}{% endraw %}", {}),
    ("a\n  {% if true %}\n  b\n  {% endif %}\nc\n  {{ 'd' }}\n", {}),
    ("x  {%- if true -%}  y  {%- endif -%}  z\n{{- ' w ' -}}\n v", {}),
    ("line1\n{%+ if true %}+kept{% endif +%}\nend", {}),
    ("{% if true %}\r\nwindows\r\n{% endif %}\r\n", {}),
    ("  {% for i in range(2) %}\n  {{ i }}\n  {% endfor %}\n", {}),
    ("{{ '  hi  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'Hello' | upper }}{{ 'Hello' | lower }}|{{ 'hello world' | title }}|{{ \"they're bill's\" | title }}|{{ 'hELLO' | capitalize }}", {}),
    ("{{ [1, 2, 3] | length }}|{{ 'héllo' | length }}|{{ {'a': 1} | length }}|{{ x | length }}|{{ [3, 1, 2] | count }}", {}),
    ("{{ [1, 2, 3] | join(', ') }}|{{ 'abc' | join('-') }}|{{ users | join(', ', attribute='name') }}|{{ [1, 2] | join }}", {"users": [{"name": "a"}, {"name": "b"}]}),
    ("{{ [1, 2, 3] | first }}|{{ [1, 2, 3] | last }}|{{ 'abc' | first }}|{{ 'abc' | last }}|{{ [] | first is defined }}", {}),
    ("{{ x | default('d') }}|{{ none | default('d') }}|{{ '' | default('d', true) }}|{{ 0 | d('z', boolean=true) }}|{{ 'v' | default('d') }}", {}),
    ("{{ 'a-b-c' | replace('-', '+') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'ab' | replace('', '.') }}", {}),
    ("{{ 42 | string }}|{{ '42' | int + 1 }}|{{ '3.9' | int }}|{{ 'x' | int }}|{{ 'x' | int(7) }}|{{ 3.9 | int }}|{{ '0x1A' | int(0, 16) }}|{{ '2.5' | float }}|{{ 'q' | float }}|{{ 3 | float }}", {}),
    ("{{ 'abc' | list }}|{{ {'a': 1, 'b': 2} | list }}|{{ {'a': 1} | items | list }}|{{ [3, 1, 2] | sort }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ ['b', 'A', 'c'] | sort }}|{{ [1, 2] | reverse | list }}|{{ 'abc' | reverse }}", {}),
    ("{{ [1, 1, 2, 'a', 'A'] | unique | list }}|{{ [3, 5, 1] | min }}|{{ [3, 5, 1] | max }}|{{ [1, 2, 3] | sum }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}|{{ 3.2 | round(method='ceil') }}", {}),
    ("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}|{{ ms | rejectattr('role', 'equalto', 'user') | list | length }}|{{ ms | map(attribute='x', default='-') | join }}|{{ ms | selectattr('flag') | list | length }}", {"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "flag": True}, {"role": "user", "content": "c"}]}),
    ("{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('even') | list }}|{{ ['a', 1, 'b'] | select('string') | list }}|{{ [0, 1, ''] | select | list }}|{{ ['a', 'b'] | map('upper') | join }}", {}),
    ("{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"\\n</s>' | tojson }}|{{ [1.0, 2.5, none, true] | tojson }}|{{ d | tojson(sort_keys=true) }}|{{ d | tojson(separators=(',', ':')) }}|{{ 'é' | tojson(ensure_ascii=true) }}", {"d": {"b": [1, {"c": "x"}], "a": None, "e": {}, "f": []}}),
    ("{{ 'line1\\nline2\\n\\nline4' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}", {}),
    ("{{ {'b': 1, 'a': 2} | dictsort }}|{{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }}", {}),
    ("{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ [] is sequence }}", {"x": 1}),
    ("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 2 is gt 1 }}{{ 'a' is lower }}{{ 'A' is upper }}{{ 2 is in [1, 2] }}{{ none is sameas none }}{{ range is callable }}{{ x is not none }}", {"x": None}),
    ("{{ '  a b  c ' .split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ ' x '.strip() }}|{{ 'xxyxx'.strip('x') }}|{{ ' x '.lstrip() }}.|{{ ' x '.rstrip() }}.", {}),
    ("{{ 'abc'.startswith('a') }}{{ 'abc'.startswith(('x', 'ab')) }}{{ 'abc'.endswith('bc') }}{{ 'Hello World'.upper() }}{{ 'Hello World'.lower() }}{{ \"they're\".title() }}{{ 'hello'.capitalize() }}{{ 'a-a'.replace('-', '=') }}{{ 'abcb'.find('b') }}{{ 'abcb'.rfind('b') }}{{ 'abcb'.count('b') }}{{ ', '.join(['x', 'y']) }}", {}),
    ("{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ '12'.isdigit() }}{{ 'a1'.isdigit() }}{{ ' '.isspace() }}", {}),
    ("{{ range(3) | list }}|{{ range(1, 7, 2) | list }}|{{ range(5, 0, -2) | list }}|{{ dict(a=1, b=2) }}|{{ namespace(a=1).a }}", {}),
    ("{{ messages[0]['content'] }}|{{ messages[0].content }}|{{ messages | length }}|{{ messages[-1].role }}|{{ (messages | last).content }}", {"messages": [{"role": "user", "content": "c1"}, {"role": "assistant", "content": "c2"}]}),
    ("{{ undefined_var }}|{{ undefined_var is defined }}|{{ undefined_var | default('z') }}|{% for x in undefined_var %}never{% endfor %}|{{ undefined_var == undefined_var }}", {}),
    ("{{ foo.bar }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ raise_exception('custom failure: ' ~ 42) }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ none.attr }}|{{ (none.attr) is defined }}", {}),
    ("{{ x.y.z }}", {"x": {}}),
    ("{% for x in 5 %}{% endfor %}", {}),
    ("{{ 'abc' < 1 }}", {}),
    ("{% set a, b = [1] %}", {}),
    ("{{ [1, 2][5] }}|{{ 'ab'[9] is defined }}|{{ {'a': 1}[0] is defined }}", {}),
    ("{{ -(3) }}|{{ +(-2) }}|{{ - 2 ** 2 }}|{{ (1 + 2) * 3 }}|{{ 2 + 3 * 4 }}|{{ 10 - 2 - 3 }}|{{ 2 ** 3 ** 2 }}", {}),
    ("{{ 1 + 2 ~ 3 }}", {}),
    ("{{ 'a' ~ 1 + 2 }}|{{ 'a' ~ 2 * 3 }}", {}),
    ("{{ -3 | abs }}|{{ not true | string }}|{{ 'x' if 1 else 'y' | upper }}|{{ [1, 2] | length > 1 }}", {}),
    ("{{ 0x1f }}|{{ 0o17 }}|{{ 0b101 }}|{{ 1_000 }}|{{ 1.5e3 }}|{{ 2E-2 }}", {}),
    ("{{ true }}{{ True }}{{ false }}{{ False }}{{ none }}{{ None }}", {}),
    ("{{ x }}|{{ y }}|{{ z }}|{{ w }}", {"x": 9007199254740993, "y": 1.0, "z": -2.5e-7, "w": [1, 2.0, "s", None, True, {"k": "v"}]}),
    ("{{ 'ab\\x01\\x7f\\u00a0é\\u200b' }}|{{ ['ab\\x01\\x7f\\u00a0é\\u200b\\n'] }}", {}),
    ("{%- set x = 'a' -%}\n  {{- x -}}\n  {%- if x %} yes {% endif -%}\n", {}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    ("{{ strftime_now('%Y') | length }}", {}),
    ("{{ (1, 2, 3)[1:] }}|{{ [] == () }}|{{ (1,) }}|{{ () }}", {}),
    ("{{ d.items is callable }}|{{ d.items()|list }}", {"d": {"items": 5}}),
    ("{{ d['items'] }}|{{ d.keys() | list }}", {"d": {"items": 5}}),
    ("{{ 'x' ~ loop }}", {}),
    ("{% for a in [[1, 2], [3, 4]] %}{% for b in a %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}", {}),
    ("{% set t = 'ok' %}{% macro m() %}{{ t }}{% endmacro %}{{ m() }}", {}),
    ("{{ messages | selectattr('role', '==', 'user') | list | length }}|{{ messages | map(attribute='role') | unique | list }}", {"messages": [{"role": "user"}, {"role": "user"}, {"role": "bot"}]}),
]

# Templates that must fail to parse (the reference records how jinja2 refused; oslo
# refuses them all when parsing, with OSLO_ERR_FORMAT).
SYNTAX_ERRORS = [
    "{{ 1 + }}",
    "{% if x %}unterminated",
    "{% for x in y %}{% endif %}",
    "{{ x",
    "{% endfor %}",
    "{{ 'unterminated }}",
    "{# never closed",
    "{{ x | no_such_filter }}",
    "{{ x is no_such_test }}",
    "{% include 'other.jinja' %}",
    "{% unknowntag %}",
    "{{ (1, 2 }}",
    "{{ x ]] }}",
    "{% set %}",
    "{% break %}",
    "{% macro f(x %}{% endmacro %}",
]


def expressions():
    out = []
    for src, variables in EXPRESSIONS:
        case = {"template": src, "variables": variables}
        try:
            case["expected"] = _compile_jinja_template(src).render(**variables)
        except Exception as e:
            case["error"] = type(e).__name__
            case["message"] = str(e)
        out.append(case)
    for src in SYNTAX_ERRORS:
        try:
            _compile_jinja_template(src).render()
            raise SystemExit("expected a syntax error from " + repr(src))
        except Exception as e:  # TemplateSyntaxError, TemplateAssertionError, no loader (include)
            out.append({"template": src, "variables": {}, "error": type(e).__name__, "message": str(e),
                        "syntax": True})
    return out


FOLDER_CHAT = [m(S, "Be kind."), m(U, "  Hello, world!  "), m(A, "Hi."), m(U, "Bye")]


def folders():
    """AutoTokenizer.from_pretrained(folder).apply_chat_template for the folders in folders/."""
    from transformers import AutoTokenizer
    out = []
    base = os.path.join(HERE, "folders")
    for name in sorted(os.listdir(base)):
        tok = AutoTokenizer.from_pretrained(os.path.join(base, name))
        case = {"folder": name, "has_chat_template": tok.chat_template is not None,
                "special_tokens": tok.special_tokens_map, "renders": []}
        for agp in (False, True):
            for variables in ({}, {"tools": TOOLS[:1]}):
                r = {"add_generation_prompt": agp, "variables": variables, "messages": FOLDER_CHAT}
                try:
                    r["expected"] = tok.apply_chat_template(FOLDER_CHAT, tokenize=False, add_generation_prompt=agp,
                                                            **variables)
                except Exception as e:
                    r["error"] = type(e).__name__
                    r["message"] = str(e)
                case["renders"].append(r)
        out.append(case)
    return out


def main():
    ref = {
        "generator": "tests/template/make_reference.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "families": families(),
        "expressions": expressions(),
        "folders": folders(),
    }
    with open(os.path.join(HERE, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(ref['families'])} family cases, {len(ref['expressions'])} expression cases, "
          f"{len(ref['folders'])} folders")


if __name__ == "__main__":
    sys.exit(main())
