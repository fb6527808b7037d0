#!/usr/bin/env python3
"""Rewrites C and C++ sources written against oslo 0.2 to the 0.3 API.

    python3 tools/migrate-0.3.py FILE...       (then clang-format -i FILE...)

0.3 moves the training settings out of the optimizer (see CHANGELOG.md):

- grad_accum_steps, zero_stage, bucket_bytes, micro_batches and
  pipeline_head_split left oslo_optimizer_options for a new versioned
  oslo_train_options (oslo_train_options_init, OSLO_TRAIN_OPTIONS_VERSION);
- oslo_optimizer_create(model, &options, &out) takes it as a third argument:
  oslo_optimizer_create(model, &options, &train, &out) (NULL: defaults);
- oslo_optimizer_pipeline_stats(optimizer, ...) became
  oslo_model_pipeline_stats(model, ...), the last train step of the model.

For every `oslo_optimizer_options X` whose training fields the file uses
(`X.zero_stage = 2;`, reads too), this script declares `oslo_train_options
X_train` after X, initialises it after X's oslo_optimizer_options_init
statement (wrapped in the same checking macro, if any), or copies it where X
is copied from another such variable (`oslo_optimizer_options s = o;`),
renames the uses to X_train.field and passes &X_train to
oslo_optimizer_create (NULL where the file sets no training field).
oslo_optimizer_pipeline_stats(OPT, ...) becomes oslo_model_pipeline_stats
(MODEL, ...) where OPT is the out argument of an oslo_optimizer_create call
of the same file (MODEL its first argument).

Running it again on a migrated file changes nothing. What it cannot rewrite
(an optimizer options struct reached through a pointer or a parameter,
or declared with an initialiser list, a version given by number, an
optimizer it cannot trace to its model) is reported as FILE:LINE: messages to fix by hand; the exit status is
then 1. Comments and strings are left alone; do not run it on oslo.h.
"""
import re
import sys

TRAIN_FIELDS = ("grad_accum_steps", "zero_stage", "bucket_bytes", "micro_batches",
                "pipeline_head_split")
OPT_TYPE = "oslo_optimizer_options"
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# `oslo_optimizer_options X;` or `oslo_optimizer_options X = Y;` (one declarator)
DECL = re.compile(r"^([ \t]*)(?:const[ \t]+)?" + OPT_TYPE +
                  r"[ \t]+(\w+)[ \t]*(?:=[ \t]*([^;{]*?)[ \t]*)?;[ \t]*\n", re.M)
REF = re.compile(r"\b" + OPT_TYPE + r"\s*(?:const\s*)?[&*]+\s*(?:const\s+)?(\w+)")
FIELD_USE = re.compile(r"\b(\w+)(\s*(?:\.|->)\s*)(" + "|".join(TRAIN_FIELDS) + r")\b")


def line_of(src, i):
    return src.count("\n", 0, i) + 1


def skip_literal(src, i):
    """If src[i] opens a comment, string or char literal, returns the index
    after it; otherwise i."""
    if src.startswith("//", i):
        j = src.find("\n", i)
        return len(src) if j < 0 else j
    if src.startswith("/*", i):
        j = src.find("*/", i + 2)
        return len(src) if j < 0 else j + 2
    if src[i] in "\"'":
        q, j = src[i], i + 1
        while j < len(src) and src[j] != q:
            j += 2 if src[j] == "\\" else 1
        return j + 1
    return i


def code_mask(src):
    """A list of booleans: True where src is code (not a comment or literal)."""
    mask, i = [True] * len(src), 0
    while i < len(src):
        j = skip_literal(src, i)
        if j != i:
            for k in range(i, min(j, len(src))):
                mask[k] = False
            i = j
        else:
            i += 1
    return mask


def split_call(src, open_paren):
    """Returns (args, index after the closing parenthesis) of the call whose
    '(' is at open_paren; args are the top-level comma-separated texts."""
    depth, i, start, args = 0, open_paren + 1, open_paren + 1, []
    while i < len(src):
        j = skip_literal(src, i)
        if j != i:
            i = j
            continue
        c = src[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                args.append(src[start:i])
                return args, i + 1
            depth -= 1
        elif c == "," and depth == 0:
            args.append(src[start:i])
            start = i + 1
        i += 1
    raise ValueError("unbalanced parentheses")


def calls(src, mask, name):
    """(start of the name, index of '(') of every call of `name` in code."""
    for m in re.finditer(r"\b" + name + r"\s*\(", src):
        if mask[m.start()]:
            yield m.start(), m.end() - 1


def addr_of(arg):
    """`X` for an argument `&X` (X an identifier), else None."""
    m = re.fullmatch(r"\s*&\s*(\w+)\s*", arg)
    return m.group(1) if m else None


def migrate(src, path, problems):
    mask = code_mask(src)
    decls = {}  # name -> its declarations (a name may be declared in several scopes)
    for m in DECL.finditer(src):
        if mask[m.start(2)]:
            decls.setdefault(m.group(2), []).append(m)
    # Names also declared as a reference or pointer (parameters, aliases):
    # their fields live in some other variable's struct.
    refs = {m.group(1) for m in REF.finditer(src) if mask[m.start(1)]}
    for r in refs:
        decls.pop(r, None)
    # Declared in a form not rewritten (`= {0}`, several declarators, ...).
    others = {m.group(1) for m in re.finditer(r"\b" + OPT_TYPE + r"\s+(\w+)", src)
              if mask[m.start()] and m.group(1) not in decls}
    # Which variables need a companion: those whose training fields are used,
    # and copies of (or sources of) such variables.
    need = set()
    for m in FIELD_USE.finditer(src):
        if not mask[m.start()]:
            continue
        var = m.group(1)
        if var in decls and "." in m.group(2):
            need.add(var)
        elif var in refs or var in others:
            problems.append("%s:%d: %s%s%s: move this training field to an oslo_train_options by "
                            "hand (%s is an oslo_optimizer_options reference, pointer or declaration this tool "
                            "does not rewrite)" %
                            (path, line_of(src, m.start()), var, m.group(2).strip(), m.group(3),
                             var))
    changed = True
    while changed:
        changed = False
        for name, ms in decls.items():
            for m in ms:
                init = (m.group(3) or "").strip()
                if init in decls and (name in need) != (init in need):
                    need.update((name, init))
                    changed = True
    for name in sorted(need):
        if re.search(r"\boslo_train_options\s+" + name + r"_train\b", src):
            problems.append("%s:%d: %s_train is declared already; not migrated" %
                            (path, line_of(src, decls[name][0].start()), name))
    need = {n for n in need if not re.search(r"\boslo_train_options\s+" + n + r"_train\b", src)}

    edits = []  # (start, end, text)
    for m in (m for name in need for m in decls[name]):
        name, indent, init = m.group(2), m.group(1), (m.group(3) or "").strip()
        if init in decls:
            text = "%soslo_train_options %s_train = %s_train;\n" % (indent, name, init)
        elif init:
            problems.append("%s:%d: %s is initialised from `%s`: give %s_train its training "
                            "fields by hand" % (path, line_of(src, m.start()), name, init, name))
            text = "%soslo_train_options %s_train;\n" % (indent, name)
        else:
            text = "%soslo_train_options %s_train;\n" % (indent, name)
        edits.append((m.end(), m.end(), text))

    for start, paren in calls(src, mask, "oslo_optimizer_options_init"):
        args, after = split_call(src, paren)
        var = addr_of(args[0]) if args else None
        version = args[1].strip() if len(args) == 2 else ""
        if version != "OSLO_OPTIMIZER_OPTIONS_VERSION":
            problems.append("%s:%d: oslo_optimizer_options_init(..., %s): 0.3's versions start "
                            "again at 1 (OSLO_OPTIMIZER_OPTIONS_VERSION); oslo 0.2's 2 to 4 are "
                            "refused" % (path, line_of(src, start), version))
        # The companion's _init follows a successful one (of a version 0.2 knew).
        if var not in need or version not in ("OSLO_OPTIMIZER_OPTIONS_VERSION", "1", "2", "3",
                                              "4"):
            continue
        # The whole statement, from its line's start to its ';'.
        ls = src.rfind("\n", 0, start) + 1
        semi = src.find(";", after)
        le = src.find("\n", semi)
        le = len(src) if le < 0 else le + 1
        stmt = src[ls:le]
        call = src[start:after]
        new_call = "oslo_train_options_init(&%s_train, OSLO_TRAIN_OPTIONS_VERSION)" % var
        edits.append((le, le, stmt.replace(call, new_call, 1)))

    for m in FIELD_USE.finditer(src):
        if mask[m.start()] and m.group(1) in need and "." in m.group(2):
            edits.append((m.start(1), m.end(1), m.group(1) + "_train"))

    optimizers = {}  # optimizer variable -> model expression
    for start, paren in calls(src, mask, "oslo_optimizer_create"):
        args, after = split_call(src, paren)
        if len(args) == 4:
            out = addr_of(args[3])
            if out:
                optimizers[out] = args[0].strip()
            continue  # 0.3 already
        if len(args) != 3:
            problems.append("%s:%d: oslo_optimizer_create takes 3 arguments in 0.2, found %d; "
                            "left alone" % (path, line_of(src, start), len(args)))
            continue
        out = addr_of(args[2])
        if out:
            optimizers[out] = args[0].strip()
        opt = args[1].strip()
        var = addr_of(opt)
        if var in need:
            train = "&%s_train" % var
        elif opt in ("NULL", "nullptr", "0") or var in decls:
            cxx = path.endswith((".cpp", ".cc", ".cxx", ".hpp", ".hh", ".C"))
            train = "nullptr" if opt == "nullptr" or cxx else "NULL"
        else:
            problems.append("%s:%d: oslo_optimizer_create(..., %s, ...): pass its training "
                            "settings (an oslo_train_options, or NULL) as the third argument by "
                            "hand" % (path, line_of(src, start), opt))
            continue
        edits.append((paren + 1 + sum(len(a) + 1 for a in args[:2]),
                      paren + 1 + sum(len(a) + 1 for a in args[:2]), " %s," % train))

    for start, paren in calls(src, mask, "oslo_optimizer_pipeline_stats"):
        args, after = split_call(src, paren)
        opt = args[0].strip() if args else ""
        if len(args) != 4 or opt not in optimizers:
            problems.append("%s:%d: oslo_optimizer_pipeline_stats(%s, ...) is now "
                            "oslo_model_pipeline_stats(model, ...) over the optimizer's model; "
                            "the optimizer is not an out argument of an oslo_optimizer_create "
                            "here: fix by hand" % (path, line_of(src, start), opt))
            continue
        lead = args[0][:len(args[0]) - len(args[0].lstrip())]
        edits.append((start, paren + 1 + len(args[0]),
                      "oslo_model_pipeline_stats(%s%s" % (lead, optimizers[opt])))

    out, pos = [], 0
    for s, e, text in sorted(edits, key=lambda x: (x[0], x[1])):
        out.append(src[pos:s])
        out.append(text)
        pos = e
    out.append(src[pos:])
    return "".join(out)


def main(paths):
    problems = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            src = f.read()
        new = migrate(src, path, problems)
        if new != src:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
    # By file, then line (the checks run one kind at a time).
    for p in sorted(problems, key=lambda p: (p.split(":")[0], int(p.split(":")[1]))):
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
