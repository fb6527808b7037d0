"""The tensor-parallel layers (oslo.ParallelLinear, ColumnParallelLinear,
RowParallelLinear, ParallelEmbedding, VocabParallelEmbedding) and
oslo.ParamSet, re-exported by the package (oslo/__init__.py)."""

import os

import numpy as _np

from . import capi as _c
from ._enums import DType, _dtype
from ._errors import InvalidArgumentError, Status
from ._handle import _Handle
from ._tensor import Tensor, _contiguous, _with_tensors


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
