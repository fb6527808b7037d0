"""The enums of oslo.h as Python IntEnums (Group, ReduceOp, DType, ModelOutput,
SpecialToken, OptimizerKind, LRSchedule), re-exported by the package
(oslo/__init__.py), and the conversions the other modules share: an enum
from its name or value, a DType from a numpy dtype and back."""

import enum

import numpy as _np

from . import capi as _c
from ._errors import DTypeError, InvalidArgumentError, Status


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
    #: int8: the storage of the int8 KV cache (Model.generate's
    #: kv_cache_dtype, Engine's kv_dtype), not a tensor's.
    I8 = _c.OSLO_DTYPE_I8
    #: Block-quantized weight formats (docs/QUANTIZATION.md): a model's
    #: dtype, not a tensor's.
    Q8_0 = _c.OSLO_DTYPE_Q8_0
    Q4_0 = _c.OSLO_DTYPE_Q4_0
    Q4_K = _c.OSLO_DTYPE_Q4_K
    Q6_K = _c.OSLO_DTYPE_Q6_K
    Q4_G128 = _c.OSLO_DTYPE_Q4_G128


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


def _kv_dtype(what, v):
    """The KV cache's storage from "f32" / "int8" (or "i8", a DType)."""
    if isinstance(v, str) and v.lower() in ("int8", "i8"):
        return DType.I8
    if isinstance(v, str) and v.lower() in ("f32", "float32"):
        return DType.F32
    if v in (DType.F32, DType.I8):
        return DType(v)
    raise DTypeError(f"{what} {v!r} is not 'f32' or 'int8'", Status.DTYPE)


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
