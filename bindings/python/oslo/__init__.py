"""oslo: transformer models under tensor parallelism, from Python.

A thin layer over the SWIG-generated module oslo.capi (bindings/oslo.i),
which wraps the C ABI include/oslo.h. Every blocking call runs without the
GIL. Handles are closed by close(), by `with`, or when collected; a context
is destroyed only after every tensor and model made from it (each holds its
context), whatever order the garbage collector finds them in. close()
destroys the C object at once, even while an exception's traceback still
references its raw SWIG object; that object is left empty (using it raises
InvalidArgumentError "this ... is closed").
"""

import enum
import json
import os
import typing as _typing
from collections.abc import Mapping as _Mapping

import numpy as _np

from . import _chat
from . import capi as _c
from ._chat import apply_chat_template
from ._handle import _Handle, _destroy
from ._errors import (BackendUnavailableError, CommError, ConfigError, DTypeError, Error,
                      FormatError, InternalError, InvalidArgumentError, IOError,
                      NotSupportedError, OutOfMemoryError, ShapeError, Status, TimeoutError)

__all__ = [
    "Context", "Tensor", "ParallelLinear", "ColumnParallelLinear", "RowParallelLinear",
    "ParallelEmbedding", "VocabParallelEmbedding", "ParamSet", "Model", "ModelInfo", "Tokenizer",
    "Optimizer", "TrainStepResult", "OptimizerKind", "LRSchedule", "Group", "ReduceOp", "DType",
    "ModelOutput", "SpecialToken", "BatchEncoding", "Generation", "Status", "Error",
    "InvalidArgumentError", "OutOfMemoryError", "BackendUnavailableError", "CommError",
    "TimeoutError", "IOError", "FormatError", "ShapeError", "DTypeError", "ConfigError",
    "NotSupportedError", "InternalError", "merge", "reshard", "inspect", "version", "from_dlpack",
    "pad_batch", "Engine", "Request", "Output", "Completion", "Event", "EngineStats",
    "FinishReason", "RequestState", "apply_chat_template",
]

__version__ = _c.version_string()


def version():
    """Run-time version of the library, e.g. "0.3.0"."""
    return _c.version_string()


class Group(enum.IntEnum):
    """Process groups of a context (oslo_group)."""

    WORLD = _c.OSLO_GROUP_WORLD
    TENSOR = _c.OSLO_GROUP_TENSOR
    PIPELINE = _c.OSLO_GROUP_PIPELINE
    DATA = _c.OSLO_GROUP_DATA


class ReduceOp(enum.IntEnum):
    """Reductions of collectives (oslo_reduce_op)."""

    SUM = _c.OSLO_REDUCE_SUM
    AVG = _c.OSLO_REDUCE_AVG
    MAX = _c.OSLO_REDUCE_MAX
    MIN = _c.OSLO_REDUCE_MIN


class DType(enum.IntEnum):
    """Element types (oslo_dtype)."""

    F32 = _c.OSLO_DTYPE_F32
    F16 = _c.OSLO_DTYPE_F16
    BF16 = _c.OSLO_DTYPE_BF16
    I32 = _c.OSLO_DTYPE_I32
    I64 = _c.OSLO_DTYPE_I64


class ModelOutput(enum.IntEnum):
    """What Model.forward returns (oslo_model_output)."""

    LOGITS = _c.OSLO_MODEL_OUTPUT_LOGITS
    HIDDEN = _c.OSLO_MODEL_OUTPUT_HIDDEN


class SpecialToken(enum.IntEnum):
    """Special tokens of a tokenizer (oslo_special_token)."""

    BOS = _c.OSLO_SPECIAL_TOKEN_BOS
    EOS = _c.OSLO_SPECIAL_TOKEN_EOS
    PAD = _c.OSLO_SPECIAL_TOKEN_PAD
    UNK = _c.OSLO_SPECIAL_TOKEN_UNK
    CLS = _c.OSLO_SPECIAL_TOKEN_CLS
    SEP = _c.OSLO_SPECIAL_TOKEN_SEP
    MASK = _c.OSLO_SPECIAL_TOKEN_MASK


class OptimizerKind(enum.IntEnum):
    """Update rules of an Optimizer (oslo_optimizer_kind)."""

    ADAMW = _c.OSLO_OPTIMIZER_ADAMW
    SGD = _c.OSLO_OPTIMIZER_SGD


class LRSchedule(enum.IntEnum):
    """Learning-rate schedules, as transformers' get_scheduler (oslo_lr_schedule)."""

    CONSTANT = _c.OSLO_LR_CONSTANT
    CONSTANT_WITH_WARMUP = _c.OSLO_LR_CONSTANT_WITH_WARMUP
    LINEAR = _c.OSLO_LR_LINEAR
    COSINE = _c.OSLO_LR_COSINE


def _enum(cls, v, what):
    """A member of the IntEnum cls from a member, its value or its name
    (any case)."""
    if isinstance(v, str):
        try:
            return cls[v.upper()]
        except KeyError:
            names = ", ".join(repr(k.lower()) for k in cls.__members__)
            raise InvalidArgumentError(f"{what} {v!r} is not one of {names}",
                                       Status.INVALID_ARGUMENT) from None
    try:
        return cls(v)
    except ValueError:
        raise InvalidArgumentError(f"{what} {v!r} is not a {cls.__name__}",
                                   Status.INVALID_ARGUMENT) from None


# numpy <-> oslo dtypes. bfloat16 has no numpy type: its host copies are the
# raw bits as uint16.
_TO_NP = {DType.F32: _np.dtype(_np.float32), DType.F16: _np.dtype(_np.float16),
          DType.BF16: _np.dtype(_np.uint16), DType.I32: _np.dtype(_np.int32),
          DType.I64: _np.dtype(_np.int64)}
_FROM_NP = {_np.dtype(_np.float32): DType.F32, _np.dtype(_np.float16): DType.F16,
            _np.dtype(_np.int32): DType.I32, _np.dtype(_np.int64): DType.I64}
# The same as plain ints, for the per-call path of numpy arguments.
_FROM_NP_INT = {k: int(v) for k, v in _FROM_NP.items()}


def _dtype(d):
    """DType from a DType, its name ("f32", "bf16", ...) or a numpy dtype."""
    if d is None:
        return None
    if isinstance(d, DType):
        return d
    if isinstance(d, str) and d.upper() in DType.__members__:
        return DType[d.upper()]
    if isinstance(d, str) and d.lower() in ("bfloat16",):
        return DType.BF16
    try:
        return _FROM_NP[_np.dtype(d)]
    except (TypeError, KeyError):
        raise DTypeError(f"no oslo dtype for {d!r}", Status.DTYPE) from None


# ---------------------------------------------------------------------------
# Context
# ---------------------------------------------------------------------------

def _config_text(config, kwargs):
    if isinstance(config, os.PathLike):
        config = os.fspath(config)
    if config is None:
        config = {}
    if isinstance(config, dict):
        merged = dict(config)
        merged.update(kwargs)
        return json.dumps(merged)
    if isinstance(config, (bytes, bytearray)):
        config = bytes(config).decode("utf-8")
    if not isinstance(config, str):
        raise InvalidArgumentError(
            f"config must be a dict, JSON text or a path, not {type(config).__name__}",
            Status.INVALID_ARGUMENT)
    if kwargs:
        raise InvalidArgumentError("keyword options need a dict config (or none)",
                                   Status.INVALID_ARGUMENT)
    return config


class _Wrapped:
    """A numpy array wrapped in place for the length of one call: the bare
    SWIG handle, without a Tensor's dependency bookkeeping (the caller holds
    the array and the context for the whole call). close() destroys it."""

    __slots__ = ("_h",)

    def __init__(self, h):
        self._h = h

    def _handle(self):
        return self._h

    def close(self):
        h, self._h = self._h, None
        if h is not None:
            _destroy(h)  # oslo_tensor_destroy, even if a traceback holds h


def _as_tensor(ctx, x, writable):
    """(Tensor, temporary) for a Tensor or a numpy array (wrapped in place
    when it is C-contiguous with an oslo dtype; the temporary is closed by
    the caller after the call)."""
    if isinstance(x, Tensor):
        return x, False
    if isinstance(x, _np.ndarray):
        flags = x.flags
        if writable and not flags.writeable:
            raise InvalidArgumentError("the array is read-only", Status.INVALID_ARGUMENT)
        if not flags.c_contiguous:
            raise InvalidArgumentError("the array must be C-contiguous "
                                       "(numpy.ascontiguousarray makes one)",
                                       Status.INVALID_ARGUMENT)
        dt = _FROM_NP_INT.get(x.dtype)
        if dt is None:
            dt = int(_dtype(x.dtype))  # raises DTypeError naming the dtype
        return _Wrapped(_c.tensor_wrap(ctx._handle(), x, dt, x.shape)), True
    raise InvalidArgumentError(f"expected an oslo.Tensor or a numpy array, not {type(x).__name__}",
                               Status.INVALID_ARGUMENT)


def _with_tensors(ctx, modes, args, call):
    """Returns call(*handles): the tensor handles of `args` in order, each an
    oslo.Tensor or a numpy array (wrapped in place for this call only, see
    _as_tensor). `modes` has one letter per argument: "r" read, "w" written
    (a read-only array is refused); in capitals ("R", "W") the argument is
    optional and None is passed on as None. The arguments are converted in
    order before the call; the temporary wraps are closed after it, or as
    soon as a later argument is refused."""
    # One or two oslo.Tensors, the common case, without the loop below: this
    # runs on every layer and collective call (docs/BENCHMARKS.md 8.1).
    n = len(args)
    if n == 1:
        a = args[0]
        if isinstance(a, Tensor):
            return call(a._handle())
    elif n == 2:
        a, b = args
        if isinstance(a, Tensor) and isinstance(b, Tensor):
            return call(a._handle(), b._handle())
    handles = []
    temps = None
    try:
        for m, x in zip(modes, args):
            if isinstance(x, Tensor):
                handles.append(x._handle())
            elif x is None and m in "RW":
                handles.append(None)
            else:
                t = _as_tensor(ctx, x, m in "wW")[0]  # an array's temporary wrap, or raises
                if temps is None:
                    temps = [t]
                else:
                    temps.append(t)
                handles.append(t._handle())
        return call(*handles)
    finally:
        if temps:
            for t in temps:
                t.close()


def _contiguous(x):
    """x as a C-contiguous array when it is a numpy array (a copy only when
    it is not one already), unchanged otherwise."""
    return _np.ascontiguousarray(x) if isinstance(x, _np.ndarray) else x


class Context(_Handle):
    """A rank's view of the job (oslo_context_create): joins the rendezvous
    and connects the tensor, data, pipeline and world groups. Collective.

    `config`: a dict (keyword arguments are merged into it), JSON text, a
    path to a JSON file (str or os.PathLike), or None for the defaults.
    """

    def __init__(self, config=None, **kwargs):
        super().__init__(_c.Context(_config_text(config, kwargs)))

    def rank(self, group=Group.WORLD):
        """Rank of this process or thread in `group`."""
        return self._handle().rank(int(group))

    def size(self, group=Group.WORLD):
        """Number of ranks in `group`."""
        return self._handle().size(int(group))

    @property
    def backend(self):
        """Name of the backend ("cpu")."""
        return self._handle().backend()

    def transport(self, group=Group.WORLD):
        """Transport of `group`: "self", "shm" or "gloo"."""
        return self._handle().transport(int(group))

    def abort(self):
        """Makes pending and later collectives fail with CommError; any thread
        may call it at any time (the context must still be closed)."""
        # Not through _handle's lock-free check only: abort races with close
        # by design of the caller; a closed context has nothing to abort.
        h = self._h
        if h is not None:
            h.abort()

    def tensor(self, shape, dtype=DType.F32):
        """A zero-filled tensor on the context's device."""
        return Tensor(self, shape, dtype)

    def all_reduce(self, tensor, op=ReduceOp.SUM, group=Group.WORLD):
        """In-place all-reduce of an oslo.Tensor or numpy array; returns it."""
        _with_tensors(self, "w", (tensor,),
                      lambda t: self._handle().all_reduce(int(group), int(op), t))
        return tensor

    def all_gather(self, input, output=None, group=Group.WORLD):
        """Concatenates every rank's `input` along dimension 0 into `output`
        (allocated as a numpy array when None); returns `output`."""
        if output is None:
            shape = list(input.shape)
            if not shape:
                shape = [1]
            shape[0] *= self.size(group)
            dt = input.dtype if isinstance(input, _np.ndarray) else _TO_NP[input.dtype]
            output = _np.empty(shape, dtype=dt)
        _with_tensors(self, "rw", (input, output),
                      lambda i, o: self._handle().all_gather(int(group), i, o))
        return output

    def reduce_scatter(self, input, output=None, op=ReduceOp.SUM, group=Group.WORLD):
        """Reduces `input` over the group and leaves this rank's block (along
        dimension 0) in `output` (numpy, allocated when None); returns it."""
        if output is None:
            shape = list(input.shape)
            n = self.size(group)
            if not shape or shape[0] % n:
                raise ShapeError(f"reduce_scatter: dimension 0 of {tuple(shape)} is not "
                                 f"divisible by the group size {n}", Status.SHAPE)
            shape[0] //= n
            dt = input.dtype if isinstance(input, _np.ndarray) else _TO_NP[input.dtype]
            output = _np.empty(shape, dtype=dt)
        _with_tensors(self, "rw", (input, output),
                      lambda i, o: self._handle().reduce_scatter(int(group), int(op), i, o))
        return output

    def broadcast(self, tensor, root=0, group=Group.WORLD):
        """Copies group rank `root`'s tensor into every rank's; returns it."""
        _with_tensors(self, "w", (tensor,),
                      lambda t: self._handle().broadcast(int(group), int(root), t))
        return tensor

    def send(self, tensor, peer, group=Group.WORLD):
        """Sends to group rank `peer` (which calls recv)."""
        _with_tensors(self, "r", (tensor,),
                      lambda t: self._handle().send(int(group), int(peer), t))

    def recv(self, tensor, peer, group=Group.WORLD):
        """Receives into `tensor` what group rank `peer` sent; returns it."""
        _with_tensors(self, "w", (tensor,),
                      lambda t: self._handle().recv(int(group), int(peer), t))
        return tensor

    def barrier(self, group=Group.WORLD):
        """Blocks until every rank of the group arrived."""
        self._handle().barrier(int(group))

    def vocab_parallel_cross_entropy(self, logits, labels, vocab_size, ignore_index=-100,
                                     losses=None, grad_logits=None):
        """Cross-entropy over this rank's vocabulary slice of the logits
        [tokens, V_p/tp] with labels [tokens]; writes per-token losses and
        d(mean)/d(logits) when given (Tensors or numpy arrays); returns the
        mean loss. Collective over the tensor group."""
        return _with_tensors(
            self, "rrWW", (logits, labels, losses, grad_logits),
            lambda lg, lb, ls, gl: self._handle().vocab_parallel_cross_entropy(
                lg, lb, int(vocab_size), int(ignore_index), ls, gl))


# ---------------------------------------------------------------------------
# Tensor
# ---------------------------------------------------------------------------

class Tensor(_Handle):
    """An oslo tensor on a context's device: `Tensor(ctx, shape, dtype)` is
    zero-filled and owned; `Tensor.wrap(ctx, array)` shares a numpy array's
    memory (kept alive by the tensor)."""

    def __init__(self, ctx, shape, dtype=DType.F32, *, _h=None, _base=None):
        if _h is None:
            _h = _c.Tensor(ctx._handle(), int(_dtype(dtype)), [int(s) for s in shape])
        super().__init__(_h, ctx)
        self._base = _base
        self._ctx = ctx

    @classmethod
    def wrap(cls, ctx, array):
        """Wraps a writable, C-contiguous numpy array without copying."""
        if not isinstance(array, _np.ndarray):
            raise InvalidArgumentError("wrap needs a numpy array", Status.INVALID_ARGUMENT)
        if not array.flags.c_contiguous:
            raise InvalidArgumentError("wrap needs a C-contiguous array "
                                       "(numpy.ascontiguousarray makes one)",
                                       Status.INVALID_ARGUMENT)
        dt = _dtype(array.dtype)
        h = _c.tensor_wrap(ctx._handle(), array, int(dt), list(array.shape))
        return cls(ctx, None, _h=h, _base=array)

    @classmethod
    def from_numpy(cls, ctx, array, dtype=None):
        """A new tensor holding a copy of `array` (converted to `dtype`)."""
        dt = _dtype(dtype) if dtype is not None else _dtype(_np.asarray(array).dtype)
        a = _np.ascontiguousarray(array, dtype=_TO_NP[dt])
        t = cls(ctx, a.shape, dt)
        t.copy_from(a)
        return t

    @classmethod
    def _borrowed(cls, owner, h):
        """A tensor owned by `owner` (a layer): never destroyed here, and
        `owner` lives while it is referenced."""
        if h is None:
            return None
        t = cls.__new__(cls)
        _Handle.__init__(t, h, owner)
        t._base = None
        t._ctx = owner.context
        return t

    @property
    def context(self):
        return self._ctx

    @property
    def ndim(self):
        return self._handle().ndim()

    @property
    def shape(self):
        h = self._handle()
        return tuple(h.dim(i) for i in range(h.ndim()))

    @property
    def dtype(self):
        return DType(self._handle().dtype())

    @property
    def numel(self):
        return self._handle().numel()

    @property
    def nbytes(self):
        return self.numel * _TO_NP[self.dtype].itemsize

    def numpy(self):
        """A numpy copy (bf16: the raw bits as uint16)."""
        out = _np.empty(self.shape, dtype=_TO_NP[self.dtype])
        self.copy_to(out)
        return out

    def copy_to(self, array):
        """Copies the tensor into a C-contiguous numpy array of its size."""
        self._handle().copy_to_host(array)
        return array

    def copy_from(self, array):
        """Copies host memory (any buffer of the tensor's size) into the tensor."""
        if isinstance(array, _np.ndarray) and not array.flags.c_contiguous:
            array = _np.ascontiguousarray(array)
        self._handle().copy_from_host(array)
        return self

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """DLPack export sharing the tensor's memory (no copy): a DLPack 1.x
        capsule when the consumer accepts max_version >= (1, 0), else an
        unversioned one. The memory stays valid until the consumer is done,
        even after close(). A wrapped numpy array is exported by numpy."""
        if copy:
            raise BufferError("oslo exports share memory; copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"the tensor is on DLPack device {self.__dlpack_device__()}, "
                              f"not {tuple(dl_device)}")
        if self._base is not None:
            kw = {} if max_version is None else {"max_version": max_version}
            return self._base.__dlpack__(**kw)
        h = self._handle()
        if max_version is not None and tuple(max_version)[0] >= 1:
            return h.to_dlpack_versioned()
        return h.to_dlpack()

    def __dlpack_device__(self):
        d = self._handle().dlpack_device()
        return (d >> 32, d & 0xFFFFFFFF)

    @classmethod
    def _from_dlpack(cls, ctx, obj):
        if hasattr(obj, "__dlpack__"):
            try:
                cap = obj.__dlpack__(max_version=(1, 0))
            except TypeError:  # a producer older than DLPack 1.0
                cap = obj.__dlpack__()
        else:
            cap = obj
        h = _c.tensor_from_dlpack(ctx._handle(), cap)
        return cls(ctx, None, _h=h)

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        if self.closed:
            return "oslo.Tensor(closed)"
        return f"oslo.Tensor(shape={self.shape}, dtype={self.dtype.name})"


# ---------------------------------------------------------------------------
# Tensor-parallel layers and parameter sets
# ---------------------------------------------------------------------------

class ParallelLinear(_Handle):
    """y = x W^T + b split over the tensor group: kind "column" (output
    features split) or "row" (input features split). Weights start at zero."""

    def __init__(self, ctx, in_features, out_features, kind="column", bias=True,
                 gather_output=False, input_is_parallel=True, dtype=DType.F32):
        k = {"column": _c.OSLO_LINEAR_COLUMN, "row": _c.OSLO_LINEAR_ROW}.get(kind, kind)
        super().__init__(_c.ParallelLinear(ctx._handle(), int(k), int(in_features),
                                           int(out_features), int(bool(bias)),
                                           int(bool(gather_output)),
                                           int(bool(input_is_parallel)), int(_dtype(dtype))), ctx)
        self._ctx = ctx

    @property
    def context(self):
        return self._ctx

    def load_full(self, weight, bias=None):
        """Loads the unsharded weight [out, in] (and bias [out]); each rank
        keeps its slice."""
        self._load(self._handle().load_full, weight, bias)

    def load_shard(self, weight, bias=None):
        """Loads this rank's slice directly."""
        self._load(self._handle().load_shard, weight, bias)

    def _load(self, fn, weight, bias):
        _with_tensors(self._ctx, "rR", (_contiguous(weight), _contiguous(bias)), fn)

    @property
    def weight(self):
        """This rank's weight (borrowed: lives with the layer)."""
        return Tensor._borrowed(self, self._handle().param(0))

    @property
    def bias(self):
        return Tensor._borrowed(self, self._handle().param(1))

    @property
    def grad_weight(self):
        return Tensor._borrowed(self, self._handle().param(2))

    @property
    def grad_bias(self):
        return Tensor._borrowed(self, self._handle().param(3))

    def forward(self, input, output):
        """Writes the layer's output for `input` into `output` (Tensors or
        numpy arrays); returns output."""
        if type(input) is _np.ndarray and type(output) is _np.ndarray:
            # Both wrapped in place inside one C call (oslo.i, bind_array).
            self._handle().forward_arrays(self._ctx._handle(), input, output)
            return output
        _with_tensors(self._ctx, "rw", (input, output),
                      lambda i, o: self._handle().forward(i, o))
        return output

    def backward(self, input, grad_output, grad_input=None):
        """Adds the parameter gradients; writes grad_input when given."""
        if (type(input) is _np.ndarray and type(grad_output) is _np.ndarray
                and (grad_input is None or type(grad_input) is _np.ndarray)):
            self._handle().backward_arrays(self._ctx._handle(), input, grad_output, grad_input)
            return grad_input
        _with_tensors(self._ctx, "rrW", (input, grad_output, grad_input),
                      lambda i, g, gi: self._handle().backward(i, g, gi))
        return grad_input

    def zero_grad(self):
        self._handle().zero_grad()


class ColumnParallelLinear(ParallelLinear):
    """Megatron's ColumnParallelLinear: the output features split over the
    tensor group; gather_output=True all-gathers the full output."""

    def __init__(self, ctx, in_features, out_features, bias=True, gather_output=False,
                 dtype=DType.F32):
        super().__init__(ctx, in_features, out_features, "column", bias=bias,
                         gather_output=gather_output, dtype=dtype)


class RowParallelLinear(ParallelLinear):
    """Megatron's RowParallelLinear: the input features split over the tensor
    group, the partial outputs all-reduced; input_is_parallel=False splits a
    full input first."""

    def __init__(self, ctx, in_features, out_features, bias=True, input_is_parallel=True,
                 dtype=DType.F32):
        super().__init__(ctx, in_features, out_features, "row", bias=bias,
                         input_is_parallel=input_is_parallel, dtype=dtype)


class ParallelEmbedding(_Handle):
    """A vocabulary-parallel embedding [vocab_size, hidden_size]."""

    def __init__(self, ctx, vocab_size, hidden_size, dtype=DType.F32):
        super().__init__(_c.ParallelEmbedding(ctx._handle(), int(vocab_size), int(hidden_size),
                                              int(_dtype(dtype))), ctx)
        self._ctx = ctx

    @property
    def context(self):
        return self._ctx

    @property
    def vocab_range(self):
        """(start, end) of this rank's real rows."""
        h = self._handle()
        return h.vocab_range(0), h.vocab_range(1)

    @property
    def local_rows(self):
        return self._handle().vocab_range(2)

    def load_full(self, weight):
        """Loads the unsharded weight [vocab, hidden]; each rank keeps its rows."""
        _with_tensors(self._ctx, "r", (_contiguous(weight),),
                      lambda w: self._handle().load_full(w))

    def load_shard(self, weight):
        """Loads this rank's rows directly."""
        _with_tensors(self._ctx, "r", (_contiguous(weight),),
                      lambda w: self._handle().load_shard(w))

    @property
    def weight(self):
        return Tensor._borrowed(self, self._handle().param(0))

    @property
    def grad_weight(self):
        return Tensor._borrowed(self, self._handle().param(1))

    def forward(self, ids, output):
        _with_tensors(self._ctx, "rw", (ids, output),
                      lambda i, o: self._handle().forward(i, o))
        return output

    def backward(self, ids, grad_output):
        _with_tensors(self._ctx, "rr", (ids, grad_output),
                      lambda i, g: self._handle().backward(i, g))

    def zero_grad(self):
        self._handle().zero_grad()


#: Megatron's name for the vocabulary-parallel embedding.
VocabParallelEmbedding = ParallelEmbedding


class ParamSet(_Handle):
    """Named parameters for gradient clipping and sharded checkpoints. The
    set depends on what is added to it: closing an added tensor or layer
    closes the set first."""

    def __init__(self, ctx):
        super().__init__(_c.ParamSet(ctx._handle()), ctx)
        self._ctx = ctx

    def add(self, name, tensor, grad=None, split_dim=-1):
        """Adds an oslo.Tensor (and its gradient) split along split_dim
        across the tensor group, or replicated (-1)."""
        if not isinstance(tensor, Tensor) or (grad is not None and not isinstance(grad, Tensor)):
            raise InvalidArgumentError("ParamSet.add takes oslo.Tensor objects (the set keeps "
                                       "using them)", Status.INVALID_ARGUMENT)
        self._handle().add(str(name), tensor._handle(),
                           None if grad is None else grad._handle(), int(split_dim))
        for d in (tensor, grad):
            if d is not None:
                self._depend_on(d)

    def add_linear(self, prefix, layer):
        self._handle().add_linear(str(prefix), layer._handle())
        self._depend_on(layer)

    def add_embedding(self, prefix, emb):
        self._handle().add_embedding(str(prefix), emb._handle())
        self._depend_on(emb)

    def __len__(self):
        return self._handle().count()

    def clip_grad_norm(self, max_norm=0.0, norm_type=2.0):
        """The global gradient norm; scales the gradients when it exceeds
        max_norm > 0. Collective over the tensor group."""
        return self._handle().clip_grad_norm(float(max_norm), float(norm_type))

    def save_checkpoint(self, dir):
        """Sharded, atomic checkpoint. Collective over the world group."""
        self._handle().save_checkpoint(os.fspath(dir))

    def load_checkpoint(self, dir):
        """Loads a checkpoint saved at any tensor-parallel size. Collective."""
        self._handle().load_checkpoint(os.fspath(dir))


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


# ---------------------------------------------------------------------------
# What users pass: ragged id lists, texts, a tokenizer's batch
# ---------------------------------------------------------------------------

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
    """A GenerateOptions (oslo_generate_options, version 2) with the
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
                 return_scores=False, repetition_penalty=1.0, min_new_tokens=0):
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
        tokens. Defaults are Hugging Face's."""
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


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------

class TrainStepResult:
    """What Model.train_step and Optimizer.step report
    (oslo_train_step_result). mean_loss, grad_norm and lr are meaningful
    when `stepped`; grad_norm is NaN when neither clipping nor loss scaling
    asked for it; `step` counts the updates applied so far."""

    __slots__ = ("loss", "stepped", "skipped", "mean_loss", "grad_norm", "lr", "loss_scale",
                 "step")

    @classmethod
    def _of(cls, r):
        x = cls.__new__(cls)
        x.loss = r.loss
        x.stepped = bool(r.stepped)
        x.skipped = bool(r.skipped)
        x.mean_loss = r.mean_loss
        x.grad_norm = r.grad_norm
        x.lr = r.lr
        x.loss_scale = r.loss_scale
        x.step = r.step
        return x

    def __repr__(self):
        return ("TrainStepResult(" +
                ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")")


class Optimizer(_Handle):
    """An optimizer over every parameter of a Model (this rank's slices),
    with its learning-rate schedule, gradient clipping and loss scaler, and
    the training settings it runs the train steps with
    (oslo_optimizer_create). Defaults are PyTorch's (torch.optim.AdamW /
    SGD, torch.amp.GradScaler) and Hugging Face Trainer's (no weight decay
    for 1-D parameters unless decay_1d).

    The update rule (oslo_optimizer_options): kind: "adamw" or "sgd"
    (OptimizerKind); schedule: "constant", "constant_with_warmup", "linear"
    or "cosine" (LRSchedule; linear and cosine need total_steps > 0);
    max_grad_norm > 0 clips the global gradient norm; loss_scaling: None
    (on for f16 models), True or False.

    The training settings (oslo_train_options): grad_accum_steps:
    micro-batches per optimizer step; zero_stage, bucket_bytes,
    micro_batches and pipeline_head_split below.

    Data parallelism is automatic: when the context's data-parallel size is
    above 1, the gradients are averaged over the data-parallel group as
    PyTorch's DistributedDataParallel does (each data rank passes its own
    batch; train_step's loss is the mean over the data ranks), reduced in
    buckets of bucket_bytes of f32 gradient (default 25 MiB, DDP's
    bucket_cap_mb). zero_stage (DeepSpeed ZeRO): 0 (default) none; 1
    partitions the optimizer state and f32 master weights over the
    data-parallel group; 2 the gradients too; 3 the parameters too.

    Pipeline parallelism: micro_batches (default 1) cuts each train_step's
    batch into that many micro-batches; with pipeline stages (the
    context's pipeline-parallel size above 1) they run through the stages
    in 1F1B order, every stage passing the same batch, the loss coming
    from the last stage (zero_stage 0 or 1 only). pipeline_head_split
    (tied word embeddings, one model chunk per rank): 0 (default) off; a
    fraction in (0, 1] of each micro-batch's tokens whose head and loss the
    first stage runs with its token table; -1 the share that equalises the
    first and last stage's products. Model.pipeline_stats() reports the
    schedule of the last train_step.

    The optimizer keeps its model open; closing the model closes it first.
    Not collective to create; step() is collective over the tensor group
    (and the data-parallel group).
    """

    def __init__(self, model, *, kind="adamw", lr=1e-3, weight_decay=0.0, betas=(0.9, 0.999),
                 eps=1e-8, momentum=0.0, dampening=0.0, nesterov=False, decay_1d=False,
                 schedule="constant", warmup_steps=0, total_steps=0, max_grad_norm=0.0,
                 grad_accum_steps=1, loss_scaling=None, init_scale=65536.0, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000, zero_stage=0,
                 bucket_bytes=25 << 20, micro_batches=1, pipeline_head_split=0.0):
        if not isinstance(model, Model):
            raise InvalidArgumentError(f"Optimizer needs an oslo.Model, not "
                                       f"{type(model).__name__}", Status.INVALID_ARGUMENT)
        o = _c.OptimizerOptions()
        o.kind = int(_enum(OptimizerKind, kind, "kind"))
        o.lr = float(lr)
        o.weight_decay = float(weight_decay)
        o.beta1, o.beta2 = (float(b) for b in betas)
        o.eps = float(eps)
        o.momentum = float(momentum)
        o.dampening = float(dampening)
        o.nesterov = 1 if nesterov else 0
        o.decay_1d = 1 if decay_1d else 0
        o.schedule = int(_enum(LRSchedule, schedule, "schedule"))
        o.warmup_steps = int(warmup_steps)
        o.total_steps = int(total_steps)
        o.max_grad_norm = float(max_grad_norm)
        o.loss_scaling = -1 if loss_scaling is None else (1 if loss_scaling else 0)
        o.init_scale = float(init_scale)
        o.growth_factor = float(growth_factor)
        o.backoff_factor = float(backoff_factor)
        o.growth_interval = int(growth_interval)
        t = _c.TrainOptions()
        t.grad_accum_steps = int(grad_accum_steps)
        t.zero_stage = int(zero_stage)
        t.bucket_bytes = int(bucket_bytes)
        t.micro_batches = int(micro_batches)
        t.pipeline_head_split = float(pipeline_head_split)
        super().__init__(_c.Optimizer(model._handle(), o, t), model)
        self._model = model

    @property
    def model(self):
        return self._model

    def step(self):
        """The optimizer step now, from the gradients accumulated so far
        (however many micro-batches), then zeroes them; returns a
        TrainStepResult. Collective over the tensor group."""
        return TrainStepResult._of(self._handle().step())

    def zero_grad(self):
        """Zeroes the model's gradients and restarts the accumulation window."""
        self._handle().zero_grad()

    def save_checkpoint(self, dir, seed=0, epoch=0, data_position=0):
        """Saves a training checkpoint (oslo_checkpoint_save): the model's
        weights (f32 masters), this optimizer's state, step count, schedule
        and loss scale, and the caller's data position, atomically. Loads as
        a model checkpoint too; `oslo.merge` writes its weights. Call after
        an optimizer step. Collective over the world group."""
        seed = int(seed)
        if not 0 <= seed < 2**64:
            raise InvalidArgumentError(f"save_checkpoint: seed {seed} is not a 64-bit unsigned "
                                       "integer", Status.INVALID_ARGUMENT)
        # The binding passes the unsigned seed as its two's-complement int64.
        self._handle().save_checkpoint(os.fspath(dir), seed - 2**64 if seed >= 2**63 else seed,
                                       int(epoch), int(data_position))

    def load_checkpoint(self, dir):
        """Restores a training checkpoint into the model and this optimizer
        (oslo_checkpoint_load; bit-exact resume at the saved tensor-parallel
        size, re-sliced at another) and returns the saved
        {"seed", "epoch", "data_position"}. Collective over the world group."""
        out = _np.zeros(3, _np.int64)
        self._handle().load_checkpoint(os.fspath(dir), out)
        return {"seed": int(out[0]) & 0xFFFFFFFFFFFFFFFF, "epoch": int(out[1]),
                "data_position": int(out[2])}


def merge(src, dst, dtype=None, max_shard_bytes=0, overwrite=False):
    """Merges a parallel checkpoint into one Hugging Face folder."""
    d = -1 if dtype is None else int(_dtype(dtype))
    _c.model_merge(os.fspath(src), os.fspath(dst), d, int(max_shard_bytes), 1 if overwrite else 0)


def reshard(src, dst, tensor_parallel_size):
    """Rewrites a checkpoint or HF folder for another tensor-parallel size."""
    _c.model_reshard(os.fspath(src), os.fspath(dst), int(tensor_parallel_size))


def inspect(path, json=False):
    """Describes a checkpoint: text, or (json=True) the parsed JSON."""
    text = _c.checkpoint_inspect(os.fspath(path), 1 if json else 0)
    if json:
        import json as _json
        return _json.loads(text)
    return text


# ---------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------

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


def from_dlpack(ctx, obj):
    """Imports a DLPack producer (an object with __dlpack__) as an oslo.Tensor
    sharing its memory."""
    return Tensor._from_dlpack(ctx, obj)


# The serving engine (oslo/serve.py; it builds on the classes above).
from .serve import (Completion, Engine, EngineStats, Event, FinishReason, Output,  # noqa: E402
                    Request, RequestState)
