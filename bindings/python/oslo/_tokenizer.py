"""oslo.Tokenizer (encode, decode, batches as Hugging Face's tokenizers do,
chat templates), re-exported by the package (oslo/__init__.py)."""

import os
from collections.abc import Mapping as _Mapping

import numpy as _np

from . import _chat
from . import capi as _c
from ._enums import SpecialToken
from ._errors import InternalError, Status
from ._handle import _Handle
from ._inputs import BatchEncoding, _is_id, _refuse, _side


class Tokenizer(_Handle):
    """A Hugging Face tokenizer (tokenizer.json or SentencePiece .model) from
    a folder or a file. Needs no context; usable from many threads at once."""

    def __init__(self, path):
        super().__init__(_c.Tokenizer(os.fspath(path)))

    def encode(self, text, add_special_tokens=True):
        """Token ids of `text` (str or UTF-8 bytes) as a list of ints."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        h = self._handle()
        n = h.encode(data, int(add_special_tokens), None)
        ids = _np.empty(n, dtype=_np.int64)
        if n:
            n2 = h.encode(data, int(add_special_tokens), ids)
            if n2 != n:
                raise InternalError(f"encode: {n2} ids after sizing {n}", Status.INTERNAL)
        return ids.tolist()

    def __call__(self, text, padding=False, add_special_tokens=True, padding_side="right",
                 pad_id=None, max_length=None, return_tensors=None, truncation=False,
                 truncation_side="right"):
        """Encodes a text or a list of texts as Hugging Face's
        tokenizer(texts, padding=True, truncation=..., max_length=...) does,
        returning a BatchEncoding with "input_ids" and "attention_mask" (1
        on real tokens, 0 on padding). padding: False (rows keep their
        lengths), True or "longest" (pad to the longest row) or "max_length"
        (pad to max_length). max_length: the most ids a row may hold (None:
        no limit); truncation=True cuts a longer row's text ids from
        truncation_side ("right" or "left"), keeping its special tokens;
        without truncation a longer row is an error (Hugging Face would
        only warn). padding_side: "right" or "left". pad_id: the id under
        padding (None: the tokenizer's padding token, else 0).
        return_tensors: None (lists of ints) or "np" ([batch, seq] int64
        arrays; rows must then be of equal length). A single text gives one
        list each (or [1, seq] arrays), as in Hugging Face. The texts are
        encoded once (oslo_tokenizer_encode_batch)."""
        what = "tokenizer"
        single = isinstance(text, str)
        if single:
            texts = [text]
        else:
            if text is None or isinstance(text, (bytes, bytearray, _Mapping)) or not hasattr(
                    text, "__len__"):
                raise _refuse(what, f"takes a text or a list of texts, not "
                                    f"{type(text).__name__}")
            texts = list(text)
            if not texts:
                raise _refuse(what, "got an empty list of texts")
            for i, t in enumerate(texts):
                if not isinstance(t, str):
                    raise _refuse(what, f"text {i} is {type(t).__name__} ({t!r}), not str")
        if padding is True or padding == "longest":
            mode = "longest"
        elif padding is False or padding is None or padding == "do_not_pad":
            mode = None
        elif padding == "max_length":
            if not _is_id(max_length) or max_length < 1:
                raise _refuse(what, f"padding=\"max_length\" needs max_length >= 1, not "
                                    f"{max_length!r}")
            mode = "max_length"
        else:
            raise _refuse(what, f"padding must be True, False, \"longest\", \"max_length\" "
                                f"or \"do_not_pad\", not {padding!r}")
        if max_length is not None and (not _is_id(max_length) or max_length < 1):
            raise _refuse(what, f"max_length must be None or an int >= 1, not {max_length!r}")
        if truncation and max_length is None:
            raise _refuse(what, "truncation=True needs max_length")
        _side(what, "padding_side", padding_side)
        _side(what, "truncation_side", truncation_side)
        if return_tensors not in (None, "np"):
            raise _refuse(what, f"return_tensors must be None or \"np\", not {return_tensors!r}")
        if pad_id is None:
            p = self.special_id(SpecialToken.PAD)
            pad_id = 0 if p is None else p
        elif not _is_id(pad_id) or pad_id < 0:
            raise _refuse(what, f"pad_id must be an int >= 0, not {pad_id!r}")
        ids, mask = self._encode_batch(texts, add_special_tokens, padding_side, pad_id,
                                       max_length or 0, bool(truncation), truncation_side,
                                       mode == "max_length")
        if mode is None:
            lengths = mask.sum(axis=1)
            if padding_side == "left":
                ids = [r[len(r) - n:].tolist() for r, n in zip(ids, lengths)]
            else:
                ids = [r[:n].tolist() for r, n in zip(ids, lengths)]
            mask = [[1] * int(n) for n in lengths]
        else:
            ids, mask = ids.tolist(), mask.tolist()
        if return_tensors == "np":
            if len({len(r) for r in ids}) > 1:
                raise _refuse(what, "rows of different lengths cannot make an array; pass "
                                    "padding=True")
            ids = _np.array(ids, dtype=_np.int64).reshape(len(ids), -1)
            mask = _np.array(mask, dtype=_np.int64).reshape(len(mask), -1)
        elif single:
            ids, mask = ids[0], mask[0]
        return BatchEncoding(input_ids=ids, attention_mask=mask)

    def _encode_batch(self, texts, add_special_tokens, padding_side, pad_id, max_length=0,
                      truncation=False, truncation_side="right", pad_to_max_length=False):
        """oslo_tokenizer_encode_batch of a list of str: (ids, mask) as
        [batch, seq] int64 arrays, padded on padding_side ("right" or
        "left") with pad_id to the longest row, or to max_length with
        pad_to_max_length; max_length (0: none) cuts longer rows with
        truncation and refuses them without. Each text is encoded once: the
        first call's capacity holds every row a text's bytes can make (a
        second call only when a row comes out longer)."""
        data = [t.encode("utf-8") for t in texts]
        lengths = _np.array([len(d) for d in data], dtype=_np.int64)
        text = b"".join(data)
        args = (text, lengths, int(add_special_tokens),
                _side("tokenizer", "padding_side", padding_side), int(pad_id), int(max_length),
                int(truncation), _side("tokenizer", "truncation_side", truncation_side),
                int(pad_to_max_length))
        guess = max(len(d) for d in data) + 8
        if pad_to_max_length:
            guess = max_length
        elif max_length:
            guess = min(guess, max_length)
        h = self._handle()
        ids = _np.empty(len(data) * guess, dtype=_np.int64)
        mask = _np.empty(len(data) * guess, dtype=_np.int64)
        seq = h.encode_batch(*args, ids, mask)
        if len(data) * seq > ids.size:
            ids = _np.empty(len(data) * seq, dtype=_np.int64)
            mask = _np.empty(len(data) * seq, dtype=_np.int64)
            seq2 = h.encode_batch(*args, ids, mask)
            if seq2 != seq:
                raise InternalError(f"encode_batch: {seq2} ids a row after sizing {seq}",
                                    Status.INTERNAL)
        n = len(data) * seq
        return ids[:n].reshape(len(data), seq), mask[:n].reshape(len(data), seq)

    def decode(self, ids, skip_special_tokens=False):
        """Text of token ids."""
        a = _np.ascontiguousarray(ids, dtype=_np.int64).reshape(-1)
        h = self._handle()
        n = h.decode(a, int(skip_special_tokens), None)
        buf = bytearray(n + 1)
        h.decode(a, int(skip_special_tokens), buf)
        return bytes(buf[:n]).decode("utf-8")

    def __len__(self):
        return self._handle().vocab_size()

    @property
    def vocab_size(self):
        return self._handle().vocab_size()

    def token_to_id(self, token):
        """Id of the vocabulary's spelling `token`, or None."""
        data = token.encode("utf-8") if isinstance(token, str) else bytes(token)
        i = self._handle().token_to_id(data)
        return None if i < 0 else i

    def id_to_token(self, id):
        """The vocabulary's spelling of token `id`."""
        h = self._handle()
        n = h.id_to_token(int(id), None)
        buf = bytearray(n + 1)
        h.id_to_token(int(id), buf)
        return bytes(buf[:n]).decode("utf-8", errors="replace")

    def special_id(self, which):
        """Id of a special token (SpecialToken or its name), or None."""
        if isinstance(which, str):
            which = SpecialToken[which.upper()]
        i = self._handle().special_id(int(which))
        return None if i < 0 else i

    # Chat templates (oslo/_chat.py).

    @property
    def has_chat_template(self):
        """Whether the tokenizer's folder came with a chat template
        (chat_template.jinja, additional_chat_templates/ or
        tokenizer_config.json's "chat_template")."""
        return bool(self._handle().has_chat_template())

    def get_chat_template(self, name=None):
        """The source text of the chat template `name` ("default",
        "tool_use", ...; None: the one apply_chat_template uses).
        InvalidArgumentError when there is none of that name."""
        return _chat.source(self._handle().get_chat_template, name)

    def apply_chat_template(self, messages, add_generation_prompt=False, *, chat_template=None,
                            tools=None, documents=None, continue_final_message=False,
                            tokenize=False, **kwargs):
        """The prompt text of a conversation, exactly as transformers'
        tokenizer.apply_chat_template(messages, tokenize=False, ...) renders
        it. messages: a list of message dicts ({"role": "user", "content":
        "Hi"}; other keys are passed on, those whose value is None dropped),
        or a list of such lists (a batch: a list of texts). chat_template:
        None (the tokenizer's: "tool_use" when tools are given and it has
        one, else its default), the name of one of its templates, or a
        template's source text. tools (JSON schemas), documents and any
        other keyword argument (date_string, enable_thinking, ...) are the
        template's variables, as transformers' **kwargs. continue_final_message:
        end inside the last message, so the model continues it (not with
        add_generation_prompt). tokenize=True returns the ids of the text
        instead (encoded without adding special tokens: the template writes
        them), as transformers' default does. Errors: InvalidArgumentError
        (no chat template, messages that are not a list of message dicts,
        the template's raise_exception with its text, an undefined value,
        a transformers tokenization option such as return_tensors),
        FormatError (a template that does not parse, with its line and
        column), NotSupportedError."""
        text = _chat.render(self._handle().apply_chat_template, "apply_chat_template", messages,
                            add_generation_prompt, chat_template, tools, documents,
                            continue_final_message, kwargs)
        if not tokenize:
            return text
        if isinstance(text, list):
            return [self.encode(t, add_special_tokens=False) for t in text]
        return self.encode(text, add_special_tokens=False)
