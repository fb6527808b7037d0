"""oslo: transformer models under tensor parallelism, from Python.

A thin layer over the SWIG-generated module oslo.capi (bindings/oslo.i),
which wraps the C ABI include/oslo.h. Every blocking call runs without the
GIL. Handles are closed by close(), by `with`, or when collected; a context
is destroyed only after every tensor and model made from it (each holds its
context), whatever order the garbage collector finds them in. close()
destroys the C object at once, even while an exception's traceback still
references its raw SWIG object; that object is left empty (using it raises
InvalidArgumentError "this ... is closed").

The package is split by area, each module re-exported here (every name
is oslo.X, its __module__ "oslo"): _enums.py (the enums), _tensor.py
(Context, Tensor, from_dlpack), _layers.py (the tensor-parallel layers,
ParamSet), _inputs.py (what users pass, pad_batch, BatchEncoding),
_model.py (Model, ModelInfo, Generation), _train.py (Optimizer,
TrainStepResult, merge, reshard, inspect), _tokenizer.py (Tokenizer),
_chat.py (apply_chat_template), serve.py (the serving engine),
_errors.py (the exceptions) and _handle.py (handles and their lifetimes).
"""

# enum, json and os stay names of the package, as they were before it was
# split into modules (dir(oslo) is unchanged).
import enum  # noqa: F401
import json  # noqa: F401
import os  # noqa: F401

from . import capi as _c
from ._chat import apply_chat_template
from ._enums import DType, Group, LRSchedule, ModelOutput, OptimizerKind, ReduceOp, SpecialToken
from ._errors import (BackendUnavailableError, CommError, ConfigError, DTypeError, Error,
                      FormatError, InternalError, InvalidArgumentError, IOError,
                      NotSupportedError, OutOfMemoryError, ShapeError, Status, TimeoutError)
from ._inputs import BatchEncoding, pad_batch
from ._layers import (ColumnParallelLinear, ParallelEmbedding, ParallelLinear, ParamSet,
                      RowParallelLinear, VocabParallelEmbedding)
from ._model import Generation, Model, ModelInfo
from ._tensor import Context, Tensor, from_dlpack
from ._tokenizer import Tokenizer
from ._train import Optimizer, TrainStepResult, inspect, merge, reshard

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


# The classes and functions of the modules above under the package's name,
# as when they were defined in this file (repr, pickle, help, Sphinx).
for _name in __all__:
    _obj = globals().get(_name)
    if getattr(_obj, "__module__", None) in ("oslo._enums", "oslo._tensor", "oslo._layers",
                                            "oslo._inputs", "oslo._model", "oslo._train",
                                            "oslo._tokenizer"):
        _obj.__module__ = __name__
del _name, _obj

# The serving engine (oslo/serve.py; it builds on the classes above).
from .serve import (Completion, Engine, EngineStats, Event, FinishReason, Output,  # noqa: E402
                    Request, RequestState)
