"""oslo.Model (forward, embed, generate, train_step, backward), its
oslo.ModelInfo and oslo.Generation, re-exported by the package
(oslo/__init__.py), and the generate options the serving engine
(oslo/serve.py) shares."""

import os
import typing as _typing

import numpy as _np

from . import capi as _c
from ._enums import DType, ModelOutput, _dtype, _kv_dtype
from ._errors import Error, InvalidArgumentError, ShapeError, Status
from ._handle import _Handle
from ._inputs import _int_arg, _int_row, _kind, _pad_rows, _ragged, _refuse
from ._tokenizer import Tokenizer
from ._train import Optimizer, TrainStepResult


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------

class ModelInfo:
    """Sizes of a loaded model, as in its config.json."""

    __slots__ = ("model_type", "vocab_size", "hidden_size", "num_layers", "num_heads",
                 "num_kv_heads", "max_positions", "is_causal", "dtype", "eos_token_id",
                 "pad_token_id")

    def __init__(self, model_type, i):
        self.model_type = model_type
        self.vocab_size = i.vocab_size
        self.hidden_size = i.hidden_size
        self.num_layers = i.num_layers
        self.num_heads = i.num_heads
        self.num_kv_heads = i.num_kv_heads
        self.max_positions = i.max_positions
        self.is_causal = bool(i.is_causal)
        self.dtype = DType(i.dtype)
        self.eos_token_id = i.eos_token_id
        self.pad_token_id = i.pad_token_id

    def __repr__(self):
        return "ModelInfo(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"


class Generation(_typing.NamedTuple):
    """What Model.generate returns for a text prompt: `text`, the new
    tokens decoded without special tokens; `ids`, the new token ids (ending
    with EOS if one was emitted, as generate returns for a prompt of ids);
    `score`, the beam score or the sum of the chosen tokens'
    log-probabilities. A named tuple: text, ids, score = m.generate("Hi")."""

    text: str
    ids: list
    score: float


def _generate_options(max_new_tokens, do_sample, temperature, top_k, top_p, seed,
                      repetition_penalty, min_new_tokens):
    """A GenerateOptions (oslo_generate_options, version 3) with the
    fields Model.generate and Engine.add share."""
    o = _c.GenerateOptions()
    o.max_new_tokens = int(max_new_tokens)
    o.do_sample = 1 if do_sample else 0
    o.temperature = float(temperature)
    o.top_k = int(top_k)
    o.top_p = float(top_p)
    o.seed = int(seed)
    o.repetition_penalty = float(repetition_penalty)
    o.min_new_tokens = int(min_new_tokens)
    return o


def _eos_ids(eos_token_id):
    """EOS ids as a contiguous int64 array (one id or a list), or None."""
    if eos_token_id is None:
        return None
    return _np.ascontiguousarray(_np.atleast_1d(_np.asarray(eos_token_id, dtype=_np.int64)))


def _ids_2d(x, name):
    a = _np.ascontiguousarray(x, dtype=_np.int64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ShapeError(f"{name} must be [batch, seq], not {a.shape}", Status.SHAPE)
    return a


class Model(_Handle):
    """A Hugging Face model (folder or oslo checkpoint) split over the
    context's tensor group (oslo_model_load). Collective: every rank of the
    tensor group makes the same calls with the same arguments.

    forward, embed and generate take what users have at hand: a [batch, seq]
    integer array, rows of token ids of any lengths (padded inside, with
    the attention mask built), texts (encoded by the tokenizer of the
    model's folder, loaded on first use), or what Tokenizer(texts) returns."""

    def __init__(self, ctx, path, dtype=None, *, pipeline_virtual_stages=1,
                 pipeline_layers=None):
        """Loads the model at path (oslo_model_load). dtype converts the
        weight matrices (None keeps the checkpoint's). With pipeline stages
        (the context's pipeline_parallel_size above 1):
        pipeline_virtual_stages model chunks per rank (the interleaved
        schedule), and pipeline_layers the blocks of each virtual stage, in
        order (None: split evenly), e.g. [9, 3] to give the stage holding the
        head fewer blocks."""
        d = -1 if dtype is None else int(_dtype(dtype))
        vs = _int_arg("pipeline_virtual_stages", pipeline_virtual_stages)
        layers = ""
        if pipeline_layers is not None:
            if isinstance(pipeline_layers, (str, bytes)) or not hasattr(pipeline_layers, "__iter__"):
                raise _refuse("pipeline_layers", "must be a sequence of block counts, not "
                              f"{type(pipeline_layers).__name__}")
            layers = ",".join(str(_int_arg(f"pipeline_layers[{i}]", c))
                              for i, c in enumerate(pipeline_layers))
        super().__init__(_c.Model(ctx._handle(), os.fspath(path), d, vs, layers), ctx)
        self._ctx = ctx
        self._path = os.fspath(path)
        self._tok = None
        i = self._h.info()
        self.info = ModelInfo(self._h.model_type(), i)

    @property
    def context(self):
        return self._ctx

    @property
    def path(self):
        """The folder the model was loaded from."""
        return self._path

    @property
    def tokenizer(self):
        """The tokenizer of the model's folder (its tokenizer.json or
        tokenizer.model), loaded on first use: texts passed to forward,
        embed and generate go through it. It belongs to the model (closing
        the model closes it). A folder without one raises the loader's
        error class (IOError for missing files) with a message naming the
        folder. Assign an oslo.Tokenizer to use another one."""
        t = self._tok
        if t is None or t.closed:
            self._handle()
            try:
                t = Tokenizer(self._path)
            except Error as e:
                raise type(e)(f"the model folder {self._path} has no tokenizer oslo can load "
                              f"(tokenizer.json or tokenizer.model): {e.message}; pass token "
                              "ids, or set model.tokenizer = oslo.Tokenizer(folder)",
                              e.status) from None
            t._depend_on(self)
            self._tok = t
        return t

    @tokenizer.setter
    def tokenizer(self, tok):
        if tok is not None and not isinstance(tok, Tokenizer):
            raise _refuse("tokenizer", f"must be an oslo.Tokenizer, not {type(tok).__name__}")
        self._tok = tok

    def _pad_id(self):
        """The id under padding: the config's pad_token_id, else 0 (masked
        out either way)."""
        p = self.info.pad_token_id
        return p if 0 <= p < self.info.vocab_size else 0

    def _texts(self, what, texts):
        tok = self.tokenizer
        rows = []
        for i, t in enumerate(texts):
            r = _np.asarray(tok.encode(t), dtype=_np.int64)
            if r.size == 0:
                raise _refuse(what, f"text {i} ({t!r}) has no tokens")
            rows.append(r)
        return rows

    def _batch(self, what, x, mask=None, token_type_ids=None):
        """(ids, mask, token_type_ids) as [batch, seq] int64 arrays (mask and
        token_type_ids may be None) from what the caller handed over."""
        kind = _kind(what, x)
        if kind == "encoding":
            if mask is None:
                mask = x.get("attention_mask")
            if token_type_ids is None:
                token_type_ids = x.get("token_type_ids")
            x = x["input_ids"]
            kind = _kind(what, x)
            if kind in ("encoding", "text", "texts"):
                raise _refuse(what, "\"input_ids\" must hold token ids")
        if kind in ("text", "texts"):
            if mask is not None or token_type_ids is not None:
                raise _refuse(what, "texts come without a mask or token_type_ids (their "
                                    "padding is made here)")
            texts = [x] if kind == "text" else list(x)
            # Encoded and right padded in one call (oslo_tokenizer_encode_batch).
            ids, built = self.tokenizer._encode_batch(texts, True, "right", self._pad_id())
            lengths = built.sum(axis=1).tolist()
            for i, (t, n) in enumerate(zip(texts, lengths)):
                if n == 0:
                    raise _refuse(what, f"text {i} ({t!r}) has no tokens")
        else:
            rows = [_int_row(what, 0, x)] if kind == "row" else _ragged(what, x)
            for i, r in enumerate(rows):
                if r.size == 0:
                    raise _refuse(what, f"row {i} has no tokens")
            lengths = [len(r) for r in rows]
            ids, built = _pad_rows(rows, self._pad_id())
        ragged = min(lengths) != max(lengths)

        def extra(name, v):
            if v is None:
                return None
            k = _kind(f"{what}: {name}", v)
            if k not in ("row", "rows"):
                raise _refuse(what, f"{name} must hold ints, like the ids")
            vr = [_int_row(f"{what}: {name}", 0, v)] if k == "row" else _ragged(
                f"{what}: {name}", v)
            if [len(r) for r in vr] != lengths:
                raise ShapeError(f"{what}: {name} rows have lengths {[len(r) for r in vr]}, "
                                 f"the ids {lengths}", Status.SHAPE)
            return _pad_rows(vr, 0)[0]

        m = extra("mask", mask)
        if m is None and ragged:
            m = built
        return ids, m, extra("token_type_ids", token_type_ids)

    def forward(self, ids, mask=None, token_type_ids=None, output="logits"):
        """Logits [batch, seq, vocab] or hidden states [batch, seq, hidden]
        (output="hidden") as float32 numpy. ids: a [batch, seq] (or [seq])
        integer array; rows of token ids of different lengths (right padded
        here, with the mask built: row i's values are at its first len(i)
        positions); texts (the model's tokenizer encodes them); or a
        tokenizer's output. mask and token_type_ids: like the ids (None:
        all 1, all 0)."""
        ids, mask, tti = self._batch("forward", ids, mask, token_type_ids)
        out_kind = ModelOutput[output.upper()] if isinstance(output, str) else ModelOutput(output)
        width = self.info.vocab_size if out_kind == ModelOutput.LOGITS else self.info.hidden_size
        b, s = ids.shape
        out = _np.empty((b, s, width), dtype=_np.float32)
        self._handle().forward(ids, mask, tti, b, s, int(out_kind), out)
        return out

    def embed(self, ids, mask=None, normalize=True):
        """Sentence embeddings [batch, hidden] (mean pooling over the mask,
        L2-normalised unless normalize=False), float32 numpy, one row per
        text or row of ids: ids as forward takes them, so
        m.embed(["A man is eating food.", "Hello!"]) and
        m.embed([tok.encode(s) for s in sentences]) both work."""
        ids, mask, _ = self._batch("embed", ids, mask)
        b, s = ids.shape
        out = _np.empty((b, self.info.hidden_size), dtype=_np.float32)
        self._handle().embed(ids, mask, b, s, 1 if normalize else 0, out)
        return out

    def generate(self, prompts, max_new_tokens=20, num_beams=1, do_sample=False,
                 temperature=1.0, top_k=50, top_p=1.0, seed=0, length_penalty=1.0,
                 early_stopping=False, eos_token_id=None, pad_token_id=None,
                 return_scores=False, repetition_penalty=1.0, min_new_tokens=0,
                 kv_cache_dtype="f32"):
        """Continues each prompt. A prompt of token ids (a list of ints; or
        a list of such lists, of any lengths; or a tokenizer's output, whose
        mask selects each row's tokens) gives the new tokens of each as a
        list of ints (ending with EOS if one was emitted), and with
        return_scores=True also the scores. A text (or a list of texts,
        encoded by the model's tokenizer) gives a Generation (or a list of
        them): .text, the new text without special tokens; .ids, the new
        token ids; .score. Ragged prompts are batched with left padding
        inside. repetition_penalty (> 0; 1: off) divides the score of every
        token already in the row (multiplies a negative one);
        min_new_tokens keeps EOS from being chosen before that many new
        tokens. kv_cache_dtype "int8" keeps the KV cache in int8 with one
        scale per token and head (docs/QUANTIZATION.md). Defaults are
        Hugging Face's."""
        what = "generate"
        kind = _kind(what, prompts)
        if kind == "encoding":
            ids, mask = prompts["input_ids"], prompts.get("attention_mask")
            if _kind(what, ids) not in ("row", "rows"):
                raise _refuse(what, "\"input_ids\" must hold token ids")
            rows = [_int_row(what, 0, ids)] if _kind(what, ids) == "row" else _ragged(what, ids)
            if mask is not None:
                mk = _kind(f"{what}: attention_mask", mask)
                ms = [_int_row(what, 0, mask)] if mk == "row" else _ragged(what, mask)
                if [len(r) for r in ms] != [len(r) for r in rows]:
                    raise ShapeError(f"{what}: attention_mask differs in shape from input_ids",
                                     Status.SHAPE)
                rows = [r[m != 0] for r, m in zip(rows, ms)]
            kind = "rows" if _kind(what, ids) == "rows" else "row"
        elif kind in ("text", "texts"):
            rows = self._texts(what, [prompts] if kind == "text" else prompts)
        elif kind == "row":
            rows = [_int_row(what, 0, prompts)]
        else:
            rows = _ragged(what, prompts)
        for i, r in enumerate(rows):
            if r.size == 0:
                raise _refuse(what, f"prompt {i} has no tokens")
        lengths = _np.array([len(p) for p in rows], dtype=_np.int64)
        flat = _np.ascontiguousarray(_np.concatenate(rows))
        o = _generate_options(max_new_tokens, do_sample, temperature, top_k, top_p, seed,
                              repetition_penalty, min_new_tokens)
        o.num_beams = int(num_beams)
        o.length_penalty = float(length_penalty)
        o.early_stopping = (-1 if early_stopping == "never" else 1 if early_stopping else 0)
        o.pad_token_id = -1 if pad_token_id is None else int(pad_token_id)
        o.kv_cache_dtype = int(_kv_dtype("generate: kv_cache_dtype", kv_cache_dtype))
        eos = _eos_ids(eos_token_id)
        b = len(rows)
        tokens = _np.empty((b, max(int(max_new_tokens), 0)), dtype=_np.int64)
        lens = _np.empty(b, dtype=_np.int64)
        scores = _np.empty(b, dtype=_np.float32)
        self._handle().generate(flat, lengths, b, o, eos, tokens, lens, scores)
        out = [tokens[i, :lens[i]].tolist() for i in range(b)]
        sc = [float(s) for s in scores]
        if kind in ("text", "texts"):
            tok = self.tokenizer
            gens = [Generation(tok.decode(ids, skip_special_tokens=True), ids, s)
                    for ids, s in zip(out, sc)]
            return gens[0] if kind == "text" else gens
        if kind == "row":
            out, sc = out[0], sc[0]
        return (out, sc) if return_scores else out

    def save(self, dir):
        """Saves a parallel checkpoint (oslo_model_save). Collective."""
        self._handle().save(os.fspath(dir))

    def train_step(self, ids, labels=None, mask=None, optimizer=None):
        """One micro-batch of causal-LM training (oslo_model_train_step):
        forward, loss (transformers': labels shifted inside, -100 ignored)
        and backward, adding to the model's gradients. ids, labels, mask:
        int arrays [batch, seq] (or [seq]); labels None: the ids with -100
        where the mask is 0; mask None: all 1. With an Optimizer over this
        model, it steps after every grad_accum_steps micro-batches. Returns
        a TrainStepResult (the loss is the same on every rank). Collective
        over the tensor group."""
        ids = _ids_2d(ids, "ids")
        labels = None if labels is None else _ids_2d(labels, "labels")
        mask = None if mask is None else _ids_2d(mask, "mask")
        for name, a in (("labels", labels), ("mask", mask)):
            if a is not None and a.shape != ids.shape:
                raise ShapeError(f"train_step: {name} {a.shape} differ from ids {ids.shape}",
                                 Status.SHAPE)
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise InvalidArgumentError(f"optimizer must be an oslo.Optimizer, not "
                                       f"{type(optimizer).__name__}", Status.INVALID_ARGUMENT)
        o = None if optimizer is None else optimizer._handle()
        b, s = ids.shape
        return TrainStepResult._of(self._handle().train_step(o, ids, labels, mask, b, s))

    def backward(self, ids, grad_hidden, mask=None, token_type_ids=None, optimizer=None):
        """One micro-batch trained from a loss computed from the hidden
        states (oslo_model_backward; any model, encoders included): the
        forward on ids [batch, seq], then the backward from grad_hidden,
        float32 [batch, seq, hidden] (d loss / d hidden states as
        forward(output="hidden") returns them; zeros at padding), adding to
        the model's gradients. With an Optimizer over this model, it steps
        after every grad_accum_steps micro-batches. Returns a
        TrainStepResult (loss 0). Collective over the tensor group."""
        ids = _ids_2d(ids, "ids")
        mask = None if mask is None else _ids_2d(mask, "mask")
        types = None if token_type_ids is None else _ids_2d(token_type_ids, "token_type_ids")
        for name, a in (("mask", mask), ("token_type_ids", types)):
            if a is not None and a.shape != ids.shape:
                raise ShapeError(f"backward: {name} {a.shape} differ from ids {ids.shape}",
                                 Status.SHAPE)
        g = _np.ascontiguousarray(grad_hidden, dtype=_np.float32)
        b, s = ids.shape
        if g.ndim != 3 or g.shape[:2] != (b, s):
            raise ShapeError(f"backward: grad_hidden {g.shape} is not [batch, seq, hidden] for "
                             f"ids {ids.shape}", Status.SHAPE)
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise InvalidArgumentError(f"optimizer must be an oslo.Optimizer, not "
                                       f"{type(optimizer).__name__}", Status.INVALID_ARGUMENT)
        o = None if optimizer is None else optimizer._handle()
        return TrainStepResult._of(self._handle().backward(o, ids, mask, types, b, s, g))

    def set_activation_checkpointing(self, enabled=True):
        """Recomputes each block in the backward of train_step instead of
        keeping its activations (equal gradients, less memory)."""
        self._handle().set_activation_checkpointing(1 if enabled else 0)

    def pipeline_stats(self):
        """The pipeline schedule of this model's last train_step
        (oslo_model_pipeline_stats): (this rank's compute seconds, its wall
        seconds, the bubble over all stages: 1 - the stages' compute summed
        / (stages x the longest wall time)); zeros before a step and after
        one that ran no schedule (one stage, micro_batches 1). Not
        collective."""
        out = _np.zeros(3, _np.float64)
        self._handle().pipeline_stats(out)
        return float(out[0]), float(out[1]), float(out[2])
