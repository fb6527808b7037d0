"""What users pass to the models and the tokenizer: rows of token ids of any
lengths, texts, a tokenizer's batch (BatchEncoding), their checks (each a
clear InvalidArgumentError), and oslo.pad_batch, re-exported by the package
(oslo/__init__.py)."""

from collections.abc import Mapping as _Mapping

import numpy as _np

from . import capi as _c
from ._errors import InvalidArgumentError, ShapeError, Status


def _refuse(what, msg):
    return InvalidArgumentError(f"{what}: {msg}", Status.INVALID_ARGUMENT)


def _int_arg(what, v):
    """An int argument (an int or numpy integer, not a bool or float)."""
    if isinstance(v, bool) or not isinstance(v, (int, _np.integer)):
        raise _refuse(what, f"must be an int, not {type(v).__name__}")
    return int(v)


def _int_row(what, i, row):
    """One row of token ids as an int64 array: a list, tuple or 1-D integer
    numpy array of ints (not bools, floats, strings or None)."""
    if isinstance(row, (str, bytes)) or row is None:
        raise _refuse(what, f"row {i} is {type(row).__name__}, not a list of token ids")
    try:
        a = _np.asarray(row)
    except (TypeError, ValueError, OverflowError) as e:
        raise _refuse(what, f"row {i} is not a list of token ids ({e})") from None
    if a.ndim != 1:
        raise _refuse(what, f"row {i} is not a flat list of token ids (shape {a.shape})")
    if a.size and a.dtype.kind not in "iu":
        bad = next((v for v in row if not _is_id(v)), a.flat[0])
        raise _refuse(what, f"row {i} holds {bad!r} ({type(bad).__name__}); token ids are ints")
    return a.astype(_np.int64, copy=False)


def _is_id(v):
    return isinstance(v, (int, _np.integer)) and not isinstance(v, (bool, _np.bool_))


def _kind(what, x):
    """What a model call was handed: "text" (one str), "texts" (a list of
    str), "row" (one list of ids), "rows" (a list of lists of ids, or a
    2-D array) or "encoding" (a mapping with "input_ids", as a tokenizer's
    call returns)."""
    if x is None:
        raise _refuse(what, "got None; pass token ids, texts or a tokenizer's output")
    if isinstance(x, str):
        return "text"
    if isinstance(x, _Mapping):
        if "input_ids" not in x:
            raise _refuse(what, "a mapping must hold \"input_ids\" (as Tokenizer(texts) returns)")
        return "encoding"
    if isinstance(x, _np.ndarray):
        if x.ndim == 1:
            return "row"
        if x.ndim == 2:
            return "rows"
        raise ShapeError(f"{what}: ids must be [batch, seq] or [seq], not {x.shape}",
                         Status.SHAPE)
    if isinstance(x, (bytes, bytearray)) or not hasattr(x, "__len__"):
        raise _refuse(what, f"got {type(x).__name__}; pass token ids, texts or a tokenizer's "
                            "output")
    if len(x) == 0:
        raise _refuse(what, "got an empty list; pass at least one text or row of token ids")
    kinds = set()
    for v in x:
        if isinstance(v, str):
            kinds.add("texts")
        elif _is_id(v):
            kinds.add("row")
        elif v is not None and not isinstance(v, (bytes, bytearray)) and hasattr(v, "__len__"):
            kinds.add("rows")
        else:
            raise _refuse(what, f"got an element {v!r} ({type(v).__name__}); a list must hold "
                                "only texts, only token ids, or only rows of token ids")
    if len(kinds) > 1:
        raise _refuse(what, "a list mixes " + " and ".join(sorted(
            {"texts": "texts", "row": "token ids", "rows": "rows of token ids"}[k]
            for k in kinds)) + "; pass one kind")
    return kinds.pop()


def _ragged(what, rows):
    """A list of int64 rows from a list of rows or a 2-D array."""
    if isinstance(rows, _np.ndarray):
        if rows.dtype.kind not in "iu":
            raise _refuse(what, f"ids have dtype {rows.dtype}; token ids are integers")
        return [r.astype(_np.int64) for r in rows]
    return [_int_row(what, i, r) for i, r in enumerate(rows)]


def _side(what, name, v):
    """0 for "right", 1 for "left" (oslo_side)."""
    if v not in ("right", "left"):
        raise _refuse(what, f"{name} must be \"right\" or \"left\", not {v!r}")
    return 1 if v == "left" else 0


def _pad_rows(rows, pad_id, padding_side="right", max_length=0, truncation=False,
              truncation_side="right", pad_to_max_length=False):
    """oslo_pad_batch of int64 rows: (ids [batch, seq] int64, mask [batch,
    seq] int64 with 1 on the real tokens)."""
    lengths = _np.array([len(r) for r in rows], dtype=_np.int64)
    flat = _np.concatenate(rows).astype(_np.int64, copy=False) if len(rows) else _np.empty(0,
                                                                                          _np.int64)
    args = (flat, lengths, _side("pad_batch", "padding_side", padding_side), int(pad_id),
            int(max_length), int(truncation),
            _side("pad_batch", "truncation_side", truncation_side), int(pad_to_max_length))
    seq = _c.pad_batch(*args, None, None)
    ids = _np.empty((len(rows), seq), dtype=_np.int64)
    mask = _np.empty((len(rows), seq), dtype=_np.int64)
    if ids.size:
        _c.pad_batch(*args, ids, mask)
    return ids, mask


def pad_batch(rows, pad_id, padding=True, padding_side="right", max_length=None,
              truncation=False, truncation_side="right"):
    """Pads rows of token ids of any lengths into a BatchEncoding of
    [batch, seq] int64 arrays ("input_ids", "attention_mask": 1 on real
    tokens, 0 on padding), as Hugging Face's tokenizer.pad (and
    DataCollatorWithPadding) does (oslo_pad_batch). rows: a list of lists
    (or 1-D arrays) of ints, or a 2-D integer array. pad_id: the id under
    padding (>= 0). padding: True or "longest" (to the longest row) or
    "max_length" (to max_length). max_length: the most ids a row may hold
    (None: no limit); a longer row is cut with truncation=True (from
    truncation_side, "right" or "left") and refused without it."""
    what = "pad_batch"
    if isinstance(rows, _np.ndarray) and rows.ndim != 2:
        raise _refuse(what, f"takes rows of ids: a 2-D array, not one of shape {rows.shape}")
    if not isinstance(rows, _np.ndarray) and (isinstance(rows, (str, bytes, _Mapping)) or
                                              not hasattr(rows, "__len__")):
        raise _refuse(what, f"takes a list of rows of ids, not {type(rows).__name__}")
    rows = _ragged(what, rows)
    if not rows:
        raise _refuse(what, "got no rows; pass at least one")
    if not _is_id(pad_id) or pad_id < 0:
        raise _refuse(what, f"pad_id must be an int >= 0, not {pad_id!r}")
    if padding not in (True, "longest", "max_length"):
        raise _refuse(what, f"padding must be True, \"longest\" or \"max_length\", not "
                            f"{padding!r}")
    if max_length is not None and (not _is_id(max_length) or max_length < 1):
        raise _refuse(what, f"max_length must be None or an int >= 1, not {max_length!r}")
    ids, mask = _pad_rows(rows, pad_id, padding_side, max_length or 0, bool(truncation),
                          truncation_side, padding == "max_length")
    return BatchEncoding(input_ids=ids, attention_mask=mask)


class BatchEncoding(dict):
    """What Tokenizer(texts) returns, as Hugging Face's BatchEncoding: a dict
    with "input_ids" and "attention_mask" (lists of lists of ints, or
    [batch, seq] int64 numpy arrays with return_tensors="np"; one list each
    for a single text), also readable as attributes (enc.input_ids). Model
    calls take it as it is: model.embed(tok(texts, padding=True))."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None
