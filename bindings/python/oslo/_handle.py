"""Handles and their lifetimes: _Handle, the owner of one SWIG object of
oslo.capi, and the dependencies between handles (a tensor on its context, a
borrowed tensor on its layer, an engine on its model). Internal to the
package (oslo/__init__.py, oslo/serve.py)."""

import threading
import weakref

from . import capi as _c
from ._errors import InvalidArgumentError, Status

_lifetime = threading.Lock()


# The release_<handle> function of each SWIG class (bindings/python/
# oslo_python_extend.i): destroys the C object now and leaves the SWIG
# object empty, so a reference to it that outlives close() (a local of a
# frame that a traceback keeps) neither destroys it later, after its
# parents, nor reaches freed memory: passing it to any call raises
# InvalidArgumentError "this ... is closed".
_RELEASE = {_c.Context: _c.release_context, _c.Tensor: _c.release_tensor,
            _c.ParallelLinear: _c.release_parallel_linear,
            _c.ParallelEmbedding: _c.release_parallel_embedding,
            _c.ParamSet: _c.release_param_set, _c.Model: _c.release_model,
            _c.Optimizer: _c.release_optimizer, _c.Tokenizer: _c.release_tokenizer,
            _c.Engine: _c.release_engine}


def _destroy(h):
    """Destroys the C object of SWIG object h now when h owns it (a
    borrowed one is only emptied), whoever else still references h."""
    release = _RELEASE.get(type(h))
    if release is not None:
        release(h)
    # else not a handle class: its destructor runs with its last reference


class _Handle:
    """Owns one SWIG object (`_h`, destroyed by close() through _destroy:
    oslo_*_destroy), or borrows one (a layer's parameter tensors: never
    destroyed here, only emptied).

    An object depends on its parents (a tensor, layer or model on its
    context; a borrowed tensor on its layer; a parameter set on its context
    and on everything added to it): it holds them and is counted in them.
    close() closes the dependants first; when the garbage collector
    finalises a parent before its dependants (a reference cycle), the
    parent's destruction waits until the last dependant is gone.
    """

    _h = None
    _parents = ()

    def __init__(self, h, parent=None):
        self._h = h
        self._nchildren = 0
        self._close_pending = False
        self._children = weakref.WeakSet()
        self._parents = []
        if parent is not None:
            self._depend_on(parent)

    def _depend_on(self, parent):
        parent._handle()  # a closed parent cannot take dependants
        with _lifetime:
            parent._nchildren += 1
            parent._children.add(self)
            self._parents.append(parent)

    @property
    def closed(self):
        return self._h is None

    def _handle(self):
        h = self._h
        if h is None:
            raise InvalidArgumentError(f"this {type(self).__name__} is closed",
                                       Status.INVALID_ARGUMENT)
        return h

    def close(self):
        """Destroys the object (its dependants first). Idempotent."""
        for child in list(self._children):
            child.close()
        self._release()

    def _release(self):
        with _lifetime:
            if self._h is None:
                return
            if self._nchildren > 0:
                self._close_pending = True
                return
            h, self._h = self._h, None
            parents, self._parents = self._parents, []
        _destroy(h)  # now, even if a traceback's frame still holds h
        for parent in parents:
            with _lifetime:
                parent._nchildren -= 1
                parent._children.discard(self)
                last = parent._nchildren == 0 and parent._close_pending
            if last:
                parent._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self._release()
        except Exception:  # interpreter shutdown: modules may be gone
            pass
