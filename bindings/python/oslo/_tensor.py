"""oslo.Context (a rank's view of the job and its collectives), oslo.Tensor
and oslo.from_dlpack, re-exported by the package (oslo/__init__.py), with
the helpers the layers and models share: numpy arrays wrapped in place for
the length of one call (_with_tensors)."""

import json
import os

import numpy as _np

from . import capi as _c
from ._enums import _FROM_NP_INT, _TO_NP, DType, Group, ReduceOp, _dtype
from ._errors import InvalidArgumentError, ShapeError, Status
from ._handle import _Handle, _destroy


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


def from_dlpack(ctx, obj):
    """Imports a DLPack producer (an object with __dlpack__) as an oslo.Tensor
    sharing its memory."""
    return Tensor._from_dlpack(ctx, obj)
