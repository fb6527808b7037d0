"""Writes tests/bindings/chat_template_reference.txt: a few of the chat
template renders of tests/template/reference.json (transformers'
apply_chat_template(..., tokenize=False), written by
tests/template/make_reference.py), chosen to cover every argument of the
bindings' chat template calls, for the shared cases chat_template_folder,
chat_template_options and chat_template_errors (tests/bindings/cases.txt) of
C, Python, Java and Go.

Plain text, so every language's test reads it without a JSON library:
records of "KEY VALUE" lines (VALUE: the rest of the line), each ended by a
line "end"; "#" starts a comment line. Keys:
  kind       render (apply a template), source (get a template's source) or
             has (has_chat_template)
  label      what the record checks (for failure messages)
  case       the shared case it belongs to (folder, options or errors)
  folder     a folder of tests/template/folders, or "-" (no tokenizer)
  template   "-" (the tokenizer's), "name N" (one of its templates by name),
             "file F" (the source text of tests/template/fixtures/F) or
             "text T" (source text T, escaped)
  name       (source) the template's name, "-" for the default
  messages   the conversation: JSON text, one line
  variables  more template variables: a JSON object, one line ("{}": none)
  add_generation_prompt, continue_final_message   0 or 1
  expected   the text, escaped (render, source), or 0/1 (has)
  error      STATUS SUBSTRING: the call fails with that oslo status (its
             Status name without OSLO_ERR_) and a message holding
             SUBSTRING (escaped)
Escapes: \\n newline, \\t tab, \\r carriage return, \\\\ backslash, and \\s a
space (those that end a line only: tools strip trailing spaces).

The texts come from reference.json (transformers 5 and Jinja2); a few
records are derived from its renders, said so in their label: a template
chosen by name gives the render of the template the tokenizer would choose
itself; a caller's own template on a folder reads the folder's special
tokens as reference.json lists them. Error substrings are transformers'
exception text (raise_exception) or oslo's message (an error transformers
words differently).

Run: python3 tests/bindings/make_chat_template_reference.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "template")
OUT = os.path.join(HERE, "chat_template_reference.txt")


def esc(s):
    s = s.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    # Spaces that end the line, as \s: editors and tools strip them.
    body = s.rstrip(" ")
    return body + "\\s" * (len(s) - len(body))


def one_line(v):
    s = json.dumps(v, ensure_ascii=False)
    assert "\n" not in s
    return s


def record(out, **kv):
    for k, v in kv.items():
        out.append(f"{k} {v}")
    out.append("end")


def render(out, case, label, folder, template, r, variables=None, cont=False, expected=None,
           error=None):
    kv = dict(kind="render", label=label, case=case, folder=folder, template=template,
              messages=one_line(r["messages"]),
              variables=one_line(variables if variables is not None else r["variables"]),
              add_generation_prompt=int(r["add_generation_prompt"]),
              continue_final_message=int(cont))
    if error is not None:
        kv["error"] = error
    else:
        kv["expected"] = esc(expected if expected is not None else r["expected"])
    record(out, **kv)


def main():
    with open(os.path.join(TEMPLATE, "reference.json"), encoding="utf-8") as f:
        ref = json.load(f)
    folders = {c["folder"]: c for c in ref["folders"]}

    def folder_render(name, agp, tools):
        for r in folders[name]["renders"]:
            if r["add_generation_prompt"] == agp and ("tools" in r["variables"]) == tools:
                return r
        raise KeyError((name, agp, tools))

    def family(fam, conv, agp, cont=False):
        for c in ref["families"]:
            if (c["family"], c["conversation"], c["add_generation_prompt"],
                    c.get("continue_final_message", False)) == (fam, conv, agp, cont):
                return c
        raise KeyError((fam, conv, agp, cont))

    out = [f"# written by tests/bindings/make_chat_template_reference.py from "
           f"tests/template/reference.json (transformers {ref['transformers']}, Jinja2 "
           f"{ref['jinja2']}); see that script for the format"]

    # chat_template_folder: a tokenizer folder's own template.
    for name in ("cfg_list", "cfg_string", "jinja_file", "special_map", "no_template"):
        record(out, kind="has", label=f"{name}: has_chat_template", case="folder", folder=name,
               expected=int(folders[name]["has_chat_template"]))
    for name in ("cfg_list", "cfg_string", "jinja_file", "special_map"):
        for agp in (False, True):
            r = folder_render(name, agp, False)
            render(out, "folder", f"{name}{' +gen' if agp else ''}", name, "-", r)
    # tools select the folder's "tool_use" template.
    r = folder_render("cfg_list", False, True)
    render(out, "folder", "cfg_list +tools (its tool_use template)", "cfg_list", "-", r)
    with open(os.path.join(TEMPLATE, "folders", "jinja_file", "chat_template.jinja"),
              encoding="utf-8") as f:
        record(out, kind="source", label="jinja_file: the default template's source",
               case="folder", folder="jinja_file", name="-", expected=esc(f.read()))
    with open(os.path.join(TEMPLATE, "folders", "cfg_list", "tokenizer_config.json"),
              encoding="utf-8") as f:
        for t in json.load(f)["chat_template"]:
            record(out, kind="source", label=f"cfg_list: template {t['name']}'s source",
                   case="folder", folder="cfg_list", name=t["name"], expected=esc(t["template"]))

    # chat_template_options: a template by name, a caller's own template
    # (with and without a tokenizer), variables, continue_final_message.
    r = folder_render("cfg_list", True, True)
    render(out, "options", "cfg_list: tool_use by name (derived: the template tools select)",
           "cfg_list", "name tool_use", r)
    r = folder_render("cfg_list", True, False)
    render(out, "options", "cfg_list: default by name with tools (derived: the render "
           "without tools, which default ignores)", "cfg_list", "name default", r,
           variables=folder_render("cfg_list", True, True)["variables"])
    bos = folders["cfg_list"]["special_tokens"]["bos_token"]
    msgs = {"messages": [{"role": "user", "content": "x \u00b0C \U0001F680"}],
            "add_generation_prompt": False, "variables": {}}
    render(out, "options", "cfg_list with a template of the caller's (derived: its bos_token)",
           "cfg_list", "text " + esc("{{ bos_token }}!{{ messages[0].content }}"), msgs,
           expected=bos + "!x \u00b0C \U0001F680")
    for fam, conv, agp, cont in (("chatml", "single", True, False),
                                 ("chatml", "ends_assistant", False, True),
                                 ("llama31", "tools", True, False),
                                 ("qwen3", "tools_no_thinking", False, False)):
        c = family(fam, conv, agp, cont)
        variables = dict(c["special_tokens"])
        variables.update(c["variables"])
        label = f"{fam}/{conv}{' +gen' if agp else ''}{' +continue' if cont else ''} " \
                f"(no tokenizer; variables {', '.join(sorted(c['variables'])) or 'none'})"
        render(out, "options", label, "-", "file " + c["template"], c, variables=variables,
               cont=cont)

    # chat_template_errors.
    r = folder_render("no_template", True, False)
    render(out, "errors", "no_template: no chat template (oslo's message)", "no_template", "-",
           r, error="INVALID_ARGUMENT has no chat template")
    r = folder_render("broken", False, False)
    render(out, "errors", f"broken: {r['error']}", "broken", "-", r,
           error="FORMAT " + esc(r["message"]))
    c = family("gemma", "system", False)
    variables = dict(c["special_tokens"])
    render(out, "errors", "gemma/system: the template's raise_exception", "-",
           "file " + c["template"], c, variables=variables, error="INVALID_ARGUMENT " +
           esc(c["message"]))
    for label, text, sub in (
            ("messages that are not JSON (oslo's message)", '[{"role": "user"', "not valid JSON"),
            ("a message that is not an object (oslo's message)", '[1]',
             "messages[0] is not a JSON object"),
            ("an empty conversation (oslo's message)", "[]", "empty conversation")):
        record(out, kind="render", label=label, case="errors", folder="cfg_list", template="-",
               messages=text, variables="{}", add_generation_prompt=0, continue_final_message=0,
               error="INVALID_ARGUMENT " + esc(sub))
    r = folder_render("cfg_list", True, False)
    render(out, "errors", "continue_final_message with add_generation_prompt (oslo's message)",
           "cfg_list", "-", r, cont=True, error="INVALID_ARGUMENT not compatible")
    record(out, kind="source", label="jinja_file: no template named tool_use (oslo's message)",
           case="errors", folder="jinja_file", name="tool_use",
           error="INVALID_ARGUMENT no chat template named 'tool_use'")
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
