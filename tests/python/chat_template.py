"""Chat templates from Python (Tokenizer.has_chat_template,
get_chat_template, apply_chat_template and oslo.apply_chat_template): the
chat_template_* cases of tests/bindings/cases.txt against transformers'
renders (tests/bindings/chat_template_reference.txt, the format in
tests/bindings/make_chat_template_reference.py), plus what only Python
has (batches, tokenize=True, the refused transformers options).

  python chat_template.py chat_template_folder REFERENCE TEMPLATE_DIR
  python chat_template.py chat_template_options REFERENCE TEMPLATE_DIR
  python chat_template.py chat_template_errors REFERENCE TEMPLATE_DIR
(TEMPLATE_DIR: tests/template, with folders/ and fixtures/)
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import check, main, raises  # noqa: E402

import oslo  # noqa: E402

_ESC = {"n": "\n", "t": "\t", "r": "\r", "s": " ", "\\": "\\"}


def unescape(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\":
            out.append(_ESC[s[i + 1]])
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def records(path, case):
    """The records of `case` (folder, options or errors)."""
    recs, cur = [], {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            if line == "end":
                recs.append(cur)
                cur = {}
                continue
            k, _, v = line.partition(" ")
            cur[k] = v
    mine = [r for r in recs if r["case"] == case]
    check(mine, f"no records of case {case} in {path}")
    return mine


class Tokenizers:
    """The folders' tokenizers, loaded once each."""

    def __init__(self, template_dir):
        self.dir = template_dir
        self.loaded = {}

    def __call__(self, folder):
        if folder == "-":
            return None
        if folder not in self.loaded:
            self.loaded[folder] = oslo.Tokenizer(os.path.join(self.dir, "folders", folder))
        return self.loaded[folder]

    def template(self, spec):
        """A record's template: None, a name or a source text."""
        if spec == "-":
            return None
        kind, _, v = spec.partition(" ")
        if kind == "name":
            return v
        if kind == "text":
            return unescape(v)
        check(kind == "file", f"template {spec!r}")
        with open(os.path.join(self.dir, "fixtures", v), encoding="utf-8") as f:
            return f.read()


def run(toks, r):
    """What the record's call returns (or raises)."""
    label = r["label"]
    tok = toks(r["folder"])
    if r["kind"] == "has":
        return tok.has_chat_template
    if r["kind"] == "source":
        return tok.get_chat_template(None if r["name"] == "-" else r["name"])
    try:
        messages = json.loads(r["messages"])
    except ValueError:
        # Python's messages are always written as JSON by json.dumps; NaN is
        # what it writes that is no JSON.
        messages = [{"role": "user", "content": math.nan}]
    variables = json.loads(r["variables"])
    tools = variables.pop("tools", None)
    documents = variables.pop("documents", None)
    agp = r["add_generation_prompt"] == "1"
    cont = r["continue_final_message"] == "1"
    tmpl = toks.template(r["template"])
    if tok is None:
        check(tmpl is not None, f"{label}: no tokenizer and no template")
        return oslo.apply_chat_template(tmpl, messages, agp, tools=tools, documents=documents,
                                        continue_final_message=cont, **variables)
    return tok.apply_chat_template(messages, agp, chat_template=tmpl, tools=tools,
                                   documents=documents, continue_final_message=cont,
                                   **variables)


def check_record(toks, r):
    label = r["label"]
    if "error" in r:
        status, _, sub = r["error"].partition(" ")
        sub = unescape(sub)
        e = raises(oslo.Error, run, toks, r)
        check(e.status == oslo.Status[status] and sub in e.message,
              f"{label}: want {status} with {sub!r}, got {e.status!r} {e.message!r}")
        return
    got = run(toks, r)
    if r["kind"] == "has":
        check(got is (r["expected"] == "1"), f"{label}: {got!r}")
        return
    want = unescape(r["expected"])
    check(got == want, f"{label}\n  want {want!r}\n  got  {got!r}")


def _cases(reference, template_dir, case):
    toks = Tokenizers(template_dir)
    recs = records(reference, case)
    for r in recs:
        check_record(toks, r)
    print(f"{len(recs)} records of case {case} checked")
    return toks


def chat_template_folder(reference, template_dir):
    """A folder's own template: has_chat_template, its source by name, its
    renders with and without the generation prompt, tools choosing its
    tool_use template."""
    _cases(reference, template_dir, "folder")


def chat_template_options(reference, template_dir):
    """A template by name, a caller's own template (with a tokenizer and
    without one: oslo.apply_chat_template), variables (tools, date_string,
    enable_thinking), continue_final_message; then a batch of
    conversations and tokenize=True."""
    toks = _cases(reference, template_dir, "options")
    tok = toks("cfg_list")
    a = [{"role": "user", "content": "one"}]
    b = [{"role": "user", "content": "two"}, {"role": "assistant", "content": "2"}]
    got = tok.apply_chat_template([a, b], add_generation_prompt=True)
    want = [tok.apply_chat_template(a, True), tok.apply_chat_template(b, True)]
    check(got == want and want[0] == "[user] one\n[assistant] ", f"batch: {got!r}")
    check(oslo.apply_chat_template("{{ messages | length }}", [a, b]) == ["1", "2"],
          "batch without a tokenizer")
    ids = tok.apply_chat_template(a, True, tokenize=True)
    check(ids == tok.encode(want[0], add_special_tokens=False), f"tokenize=True: {ids}")
    check(tok.apply_chat_template([a, b], True, tokenize=True) ==
          [tok.encode(t, add_special_tokens=False) for t in want], "tokenize=True of a batch")
    # A tuple of messages and of tools, as a list.
    check(tok.apply_chat_template(tuple(a), tools=({"x": 1},)) == "TOOLS [{\"x\": 1}]\n"
          "[user] one\n", "tuples")


def chat_template_errors(reference, template_dir):
    """No template, a template that does not parse, raise_exception, bad
    messages, continue_final_message with add_generation_prompt, unknown
    names: the named oslo.Error with oslo's message; then what Python
    refuses itself."""
    toks = _cases(reference, template_dir, "errors")
    tok = toks("cfg_list")
    m = [{"role": "user", "content": "x"}]
    for bad, sub in (("hi", "messages must be a list of message dicts"),
                     ({"role": "user"}, "messages must be a list of message dicts"),
                     ([{"role": "user", "content": object()}], "cannot be written as JSON")):
        e = raises(oslo.InvalidArgumentError, tok.apply_chat_template, bad)
        check(sub in e.message, e.message)
    e = raises(oslo.InvalidArgumentError, tok.apply_chat_template, m, return_tensors="np")
    check("return_tensors is a tokenization option" in e.message, e.message)
    e = raises(oslo.InvalidArgumentError, tok.apply_chat_template, m, chat_template="{{ 1 }}\0")
    check("holds a NUL byte (at byte 7 of 8)" in e.message, e.message)
    e = raises(oslo.InvalidArgumentError, tok.apply_chat_template, m, chat_template=3)
    check("chat_template must be a str" in e.message, e.message)
    e = raises(oslo.InvalidArgumentError, oslo.apply_chat_template, "", m)
    check("chat_template must be a template's source text" in e.message, e.message)
    e = raises(oslo.InvalidArgumentError, tok.apply_chat_template, m, x=float("inf"))
    check("not valid JSON" in e.message, e.message)
    no = toks("no_template")
    e = raises(oslo.InvalidArgumentError, no.get_chat_template)
    check("has no chat template" in e.message, e.message)
    no.close()
    e = raises(oslo.InvalidArgumentError, no.apply_chat_template, m)
    check("closed" in e.message, e.message)


if __name__ == "__main__":
    main({f.__name__: f for f in (chat_template_folder, chat_template_options,
                                  chat_template_errors)})
