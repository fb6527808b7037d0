"""Chat templates: what Tokenizer.apply_chat_template, get_chat_template and
oslo.apply_chat_template build on (the raw methods of bindings/chat_template.i
over oslo.h's oslo_tokenizer_*chat_template and oslo_chat_template_apply).

The arguments are transformers' (tokenizer.apply_chat_template(messages,
tokenize=False, ...)): the conversation is a list of message dicts, sent as
JSON (json.dumps); tools, documents and any other keyword argument become
the template's variables (one JSON object). Strings travel as UTF-8 bytes;
the text comes back with oslo's sizing rule (a first call sizes the buffer).
"""

import json

from . import capi as _c
from ._errors import InternalError, InvalidArgumentError, Status

# transformers' tokenization options of apply_chat_template: oslo returns the
# text (or its ids with tokenize=True) and takes none of them; passed on as
# template variables they would be silently ignored.
_TOKENIZING = ("padding", "truncation", "max_length", "return_tensors", "return_dict",
               "return_assistant_tokens_mask", "tokenizer_kwargs")


def _refuse(what, msg):
    return InvalidArgumentError(f"{what}: {msg}", Status.INVALID_ARGUMENT)


def _json(what, name, value):
    """UTF-8 JSON text of `value` (json.dumps), or the named error."""
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise _refuse(what, f"{name} cannot be written as JSON ({e})") from None


def _utf8(what, name, s):
    """A str or bytes argument as UTF-8 bytes; None stays None."""
    if s is None:
        return None
    if isinstance(s, str):
        try:
            return s.encode("utf-8")
        except UnicodeEncodeError as e:
            raise _refuse(what, f"{name} is not valid text ({e})") from None
    if isinstance(s, (bytes, bytearray)):
        return bytes(s)
    raise _refuse(what, f"{name} must be a str, not {type(s).__name__}")


def _conversations(what, messages):
    """(list of conversations, batched): transformers' rule, a list whose
    first item is itself a list is a batch of conversations."""
    if isinstance(messages, (str, bytes, bytearray)) or not isinstance(messages, (list, tuple)):
        raise _refuse(what, f"messages must be a list of message dicts (such as "
                            f"[{{\"role\": \"user\", \"content\": \"Hi\"}}]), not "
                            f"{type(messages).__name__}")
    if messages and isinstance(messages[0], (list, tuple)):
        for i, c in enumerate(messages):
            if not isinstance(c, (list, tuple)):
                raise _refuse(what, f"conversation {i} of the batch is {type(c).__name__}, "
                                    f"not a list of message dicts")
        return list(messages), True
    return [messages], False


def _variables(what, tools, documents, kwargs):
    """The template variables as UTF-8 JSON (None: none)."""
    for k in _TOKENIZING:
        if k in kwargs:
            raise _refuse(what, f"{k} is a tokenization option of transformers; oslo returns "
                                f"the text (or, with tokenize=True, its ids): encode it "
                                f"with Tokenizer.__call__ for {k}")
    v = dict(kwargs)
    if tools is not None:
        v["tools"] = list(tools) if isinstance(tools, tuple) else tools
    if documents is not None:
        v["documents"] = list(documents) if isinstance(documents, tuple) else documents
    return _json(what, "the template variables (tools, documents, keyword arguments)", v) \
        if v else None


def _sized(what, call):
    """The text of call(out): sized by a first call with out None."""
    n = call(None)
    buf = bytearray(n + 1)
    n2 = call(buf)
    if n2 != n:
        raise InternalError(f"{what}: {n2} bytes after sizing {n}", Status.INTERNAL)
    return bytes(buf[:n]).decode("utf-8")


def render(raw, what, messages, add_generation_prompt, chat_template, tools, documents,
           continue_final_message, kwargs):
    """Renders each conversation of `messages` with raw(messages_json,
    add_generation_prompt, chat_template, variables, continue_final_message,
    out) (a Tokenizer's raw apply_chat_template or capi.chat_template_apply):
    the text, or a list of texts for a batch."""
    convs, batched = _conversations(what, messages)
    tmpl = _utf8(what, "chat_template", chat_template)
    variables = _variables(what, tools, documents, kwargs)
    agp, cont = int(bool(add_generation_prompt)), int(bool(continue_final_message))
    texts = []
    for c in convs:
        m = _json(what, "the messages", list(c))
        texts.append(_sized(what, lambda out: raw(m, agp, tmpl, variables, cont, out)))
    return texts if batched else texts[0]


def source(raw, name):
    """The source of the template `name` (None: the default) through raw
    (a Tokenizer's raw get_chat_template)."""
    nm = _utf8("get_chat_template", "name", name)
    return _sized("get_chat_template", lambda out: raw(nm, out))


def apply_chat_template(chat_template, messages, add_generation_prompt=False, *, tools=None,
                        documents=None, continue_final_message=False, **kwargs):
    """Renders `messages` (a list of message dicts, or a batch of such
    lists) with the chat template whose source text is `chat_template`,
    without a tokenizer: the special tokens (bos_token, eos_token, ...) are
    then only what the keyword arguments set. The other arguments are
    Tokenizer.apply_chat_template's. Returns the text (a list of texts for
    a batch). Errors: InvalidArgumentError (an empty template, messages
    that are not a list of message dicts, a template's raise_exception with
    its text, an undefined value, continue_final_message with
    add_generation_prompt), FormatError (a template that does not parse,
    with its line and column), NotSupportedError."""
    what = "apply_chat_template"
    if chat_template is None or (isinstance(chat_template, (str, bytes)) and not chat_template):
        raise _refuse(what, "chat_template must be a template's source text (without a "
                            "tokenizer there is no template of its own; "
                            "Tokenizer.apply_chat_template uses the tokenizer's)")
    return render(_c.chat_template_apply, what, messages, add_generation_prompt, chat_template,
                  tools, documents, continue_final_message, kwargs)
