#!/usr/bin/env python3
"""Rewrites C and C++ sources written against oslo 0.1 to the 0.2 API.

    python3 tools/migrate-0.2.py FILE...       (then clang-format -i FILE...)

0.2 settles names and argument order (see the rule at the top of oslo.h and
CHANGELOG.md). This script renames the functions that moved and reorders the
arguments of every call whose order changed. Run it ONCE per file: a second
run would reorder the calls again. Calls it cannot rewrite, because the 0.2
function takes a versioned options struct instead of positional arguments,
are reported as FILE:LINE: messages to fix by hand; the exit status is then 1.
`oslo_linear_options o = oslo_linear_default_options();` becomes a declaration
and an oslo_parallel_linear_options_init call. Enum values and the options
type were renamed separately (the command in CHANGELOG.md; run it first).

Only calls are rewritten: comments, strings and declarations of your own are
left alone (a declaration spelled like a call is rewritten too, so do not run
it on oslo.h itself).
"""
import re
import sys

# old name -> (new name, new order as indices into the old arguments)
PERMUTE = {
    "oslo_context_create": ("oslo_context_create", (1, 0)),
    "oslo_context_rank": ("oslo_context_rank", (1, 2, 0)),
    "oslo_context_size": ("oslo_context_size", (1, 2, 0)),
    "oslo_context_backend": ("oslo_context_backend", (2, 3, 0, 1)),
    "oslo_tensor_create": ("oslo_tensor_create", (1, 2, 3, 4, 0)),
    "oslo_tensor_wrap": ("oslo_tensor_wrap", (1, 2, 3, 4, 5, 0)),
    "oslo_tensor_copy_to_host": ("oslo_tensor_copy_to_host", (2, 0, 1)),
    "oslo_tensor_ndim": ("oslo_tensor_ndim", (1, 0)),
    "oslo_tensor_shape": ("oslo_tensor_shape", (1, 0)),
    "oslo_tensor_dtype": ("oslo_tensor_dtype", (1, 0)),
    "oslo_tensor_numel": ("oslo_tensor_numel", (1, 0)),
    "oslo_tensor_data": ("oslo_tensor_data", (1, 0)),
    "oslo_tensor_to_dlpack": ("oslo_tensor_to_dlpack", (1, 0)),
    "oslo_tensor_from_dlpack": ("oslo_tensor_from_dlpack", (1, 2, 0)),
    "oslo_all_reduce": ("oslo_context_all_reduce", (0, 1, 3, 2)),
    "oslo_all_gather": ("oslo_context_all_gather", (1, 2, 3, 0)),
    "oslo_reduce_scatter": ("oslo_context_reduce_scatter", (1, 2, 4, 3, 0)),
    "oslo_broadcast": ("oslo_context_broadcast", (0, 1, 3, 2)),
    "oslo_send": ("oslo_context_send", (0, 1, 3, 2)),
    "oslo_recv": ("oslo_context_recv", (1, 2, 3, 0)),
    "oslo_barrier": ("oslo_context_barrier", (0, 1)),
    "oslo_parallel_linear_create": ("oslo_parallel_linear_create", (1, 2, 0)),
    "oslo_parallel_linear_params": ("oslo_parallel_linear_params", (4, 0, 1, 2, 3)),
    "oslo_parallel_linear_forward": ("oslo_parallel_linear_forward", (1, 2, 0)),
    "oslo_parallel_linear_backward": ("oslo_parallel_linear_backward", (1, 2, 3, 0)),
    "oslo_parallel_embedding_vocab_range": ("oslo_parallel_embedding_vocab_range", (3, 0, 1, 2)),
    "oslo_parallel_embedding_params": ("oslo_parallel_embedding_params", (2, 0, 1)),
    "oslo_parallel_embedding_forward": ("oslo_parallel_embedding_forward", (1, 2, 0)),
    "oslo_param_set_create": ("oslo_param_set_create", (1, 0)),
    "oslo_param_set_count": ("oslo_param_set_count", (1, 0)),
    "oslo_clip_grad_norm": ("oslo_param_set_clip_grad_norm", (1, 2, 3, 0)),
    "oslo_checkpoint_save": ("oslo_param_set_save_checkpoint", (0, 1)),
    "oslo_checkpoint_load": ("oslo_param_set_load_checkpoint", (0, 1)),
}

# old name -> what to do by hand (0.2 takes a versioned options struct)
FLAG = {
    "oslo_linear_default_options":
        "oslo_linear_default_options() is gone: declare `oslo_parallel_linear_options o;` and "
        "call oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION)",
    "oslo_parallel_embedding_create":
        "oslo_parallel_embedding_create(out, ctx, vocab, hidden, dtype) is now "
        "oslo_parallel_embedding_create(ctx, &options, &out) with an "
        "oslo_parallel_embedding_options (oslo_parallel_embedding_options_init)",
    "oslo_vocab_parallel_cross_entropy":
        "oslo_vocab_parallel_cross_entropy(losses, mean, grad, ctx, logits, labels, vocab, "
        "ignore) is now oslo_context_vocab_parallel_cross_entropy(ctx, logits, labels, "
        "&options, losses, grad, &mean) with an oslo_vocab_parallel_cross_entropy_options",
}

# `oslo_linear_options o = oslo_linear_default_options();` (one declarator)
DEFAULT_DECL = re.compile(
    r"^([ \t]*)(?:oslo_linear_options|oslo_parallel_linear_options) (\w+) = "
    r"oslo_linear_default_options\(\);", re.M)

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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


def rewrite(src, path, problems):
    out, i = [], 0
    while i < len(src):
        j = skip_literal(src, i)
        if j != i:
            out.append(src[i:j])
            i = j
            continue
        m = IDENT.match(src, i)
        if not m:
            out.append(src[i])
            i += 1
            continue
        name, end = m.group(0), m.end()
        k = end
        while k < len(src) and src[k] in " \t\n":
            k += 1
        is_call = k < len(src) and src[k] == "(" and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))
        if is_call and name in FLAG:
            problems.append("%s:%d: %s" % (path, src.count("\n", 0, i) + 1, FLAG[name]))
        if is_call and name in PERMUTE:
            new_name, order = PERMUTE[name]
            args, after = split_call(src, k)
            if len(args) != len(order):
                problems.append("%s:%d: %s takes %d arguments in 0.1, found %d; left alone" %
                                (path, src.count("\n", 0, i) + 1, name, len(order), len(args)))
                out.append(name)
                i = end
                continue
            inner = rewrite("\n".join(a.strip() + "\x00" for a in args), path, problems)
            new_args = [a.strip() for a in inner.split("\x00")[:-1]]
            out.append("%s(%s)" % (new_name, ", ".join(new_args[o] for o in order)))
            i = after
            continue
        out.append(name)
        i = end
    return "".join(out)


def main(paths):
    problems = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            src = f.read()
        new = DEFAULT_DECL.sub(
            r"\1oslo_parallel_linear_options \2;\n"
            r"\1oslo_parallel_linear_options_init(&\2, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);", src)
        new = rewrite(new, path, problems)
        if new != src:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
