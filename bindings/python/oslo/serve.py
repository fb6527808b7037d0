"""The serving engine from Python: requests added at any time, run together
with continuous batching over a paged KV cache, each one streamed back as it
is generated (include/oslo.h, oslo_engine_*; docs/SERVING.md).

    with oslo.Engine(model) as engine:
        req = engine.add("Hello", max_new_tokens=20)
        for out in req:              # a generator per request
            print(out.text, end="")
        # or: async for out in req   (asyncio: many requests at once)

A request is an iterator of Output pieces (new token ids, their text, and
the finish reason on the last piece). Reading blocks without the GIL in
oslo_engine_next, which also steps the engine when no thread runs it, so a
single thread can add and read; Engine.run() drives it from a thread of its
own (and is what every rank other than 0 runs). Engine.step() steps by hand
and returns the step's events instead (then requests are not iterated).

An Engine holds its model (closing the model closes the engine). close()
shuts the engine down (on rank 0) and destroys it once the calls in flight
in other threads have returned.
"""

import asyncio
import concurrent.futures
import enum
import threading
import typing as _typing

import numpy as _np

from . import capi as _c
from ._errors import Error, InvalidArgumentError, Status, make as _make_error
from ._handle import _Handle
from ._inputs import _int_arg, _int_row, _refuse
from ._enums import _kv_dtype
from ._model import Model, _eos_ids, _generate_options
from ._tokenizer import Tokenizer

__all__ = ["Engine", "Request", "Output", "Completion", "Event", "EngineStats", "FinishReason",
           "RequestState"]


class FinishReason(enum.IntEnum):
    """Why a request finished (oslo_finish_reason)."""
    LENGTH = 1     # max_new_tokens generated
    EOS = 2        # an EOS id was generated (it is the last token)
    STOP = 3       # a stop string appeared (the text ends before it)
    CANCELLED = 4  # Request.cancel, Engine.shutdown or close
    ERROR = 5      # the step failed (reading the request raises its error)


class RequestState(enum.IntEnum):
    """Where a request is (oslo_request_state)."""
    UNKNOWN = 0   # never added (or finished, read, and forgotten by the engine)
    WAITING = 1   # waiting for KV blocks or a place in a step
    RUNNING = 2   # its prompt is being computed or it is generating
    FINISHED = 3  # finished


class Output(_typing.NamedTuple):
    """One piece of a request's output: its new token ids, their text
    (whole UTF-8 characters; "" without a tokenizer) and, on the last
    piece, why it finished (None before)."""

    tokens: list
    text: str
    finish_reason: _typing.Optional[FinishReason]

    @property
    def finished(self):
        return self.finish_reason is not None


class Completion(_typing.NamedTuple):
    """What Request.result() returns: every token and the whole text."""

    tokens: list
    text: str
    finish_reason: FinishReason


class Event(_typing.NamedTuple):
    """What one hand step (Engine.step) did for one request; error is the
    oslo.Error of a request that finished with FinishReason.ERROR."""

    request_id: int
    tokens: list
    text: str
    finish_reason: _typing.Optional[FinishReason]
    error: _typing.Optional[Error]


class EngineStats(_typing.NamedTuple):
    """oslo_engine_stats: counts at the end of the last step (KV numbers
    are this rank's)."""

    running: int
    waiting: int
    blocks_used: int
    blocks_total: int
    block_size: int
    cached_tokens: int
    kv_bytes_used: int
    steps: int
    prompt_tokens: int
    generated_tokens: int
    prefix_queries: int
    prefix_hits: int


# What one oslo_engine_next takes at most (the rest comes with the next
# call), and how long one waits before Python looks again (so Ctrl-C and
# close() are seen within that time).
_TOKENS = 1024
_TEXT = 16384
_WAIT_MS = 200


def _finish(v):
    return FinishReason(v) if v else None


def _stop_strings(stop):
    """(bytes, int64 lengths) of the stop strings, or (None, None)."""
    if stop is None:
        return None, None
    if isinstance(stop, str):
        stop = [stop]
    if isinstance(stop, (bytes, bytearray)) or not hasattr(stop, "__iter__"):
        raise _refuse("add", f"stop must be a string or a list of strings, not "
                             f"{type(stop).__name__}")
    parts = []
    for i, s in enumerate(stop):
        if not isinstance(s, str):
            raise _refuse("add", f"stop string {i} is {type(s).__name__}, not a str")
        parts.append(s.encode("utf-8"))
    if not parts:
        return None, None
    return b"".join(parts), _np.array([len(p) for p in parts], dtype=_np.int64)


class Request:
    """A request added to an Engine: an iterator (and async iterator) of
    its Output pieces, ending after the piece that carries the finish
    reason. A request that failed raises its oslo.Error (CommError,
    TimeoutError, ...) when read. Read each request from one consumer at a
    time (a lock keeps two readers from splitting one piece)."""

    def __init__(self, engine, request_id):
        self._engine = engine
        self.id = request_id
        self._lock = threading.Lock()
        self._finish = None
        self._error = None

    def __repr__(self):
        return f"<oslo.Request {self.id} of {self._engine!r}>"

    @property
    def engine(self):
        return self._engine

    @property
    def finish_reason(self):
        """Why it finished, once its last piece was read (else None)."""
        return self._finish

    @property
    def state(self):
        """Its RequestState (FINISHED once its last piece was read)."""
        if self._finish is not None:
            return RequestState.FINISHED
        return RequestState(self._engine._call(lambda h: int(h.state(self.id))))

    def cancel(self):
        """Cancels the request (oslo_engine_cancel): its output ends with a
        piece whose finish reason is CANCELLED. Returns whether it was still
        live. Thread-safe (also from another thread than the reader's)."""
        return bool(self._engine._call(lambda h: h.cancel(self.id)))

    def _take(self):
        """The next piece, blocking without the GIL; None after the last."""
        with self._lock:
            if self._finish is not None:
                if self._error is not None:
                    raise self._error
                return None
            info = _np.zeros(3, dtype=_np.int64)
            tokens = _np.empty(_TOKENS, dtype=_np.int64)
            text = bytearray(_TEXT)
            while True:
                try:
                    got = self._engine._call(
                        lambda h: h.next(self.id, _WAIT_MS, info, tokens, text))
                except Error as e:
                    if int(info[2]) == FinishReason.ERROR:  # the request's failure
                        self._finish, self._error = FinishReason.ERROR, e
                    raise
                n, nb, f = int(info[0]), int(info[1]), int(info[2])
                if not got or (n == 0 and nb == 0 and f == 0):
                    continue
                fin = _finish(f)
                if fin is not None:
                    self._finish = fin
                return Output(tokens[:n].tolist(), bytes(text[:nb]).decode("utf-8", "replace"),
                              fin)

    def __iter__(self):
        return self

    def __next__(self):
        piece = self._take()
        if piece is None:
            raise StopIteration
        return piece

    def __aiter__(self):
        return self

    async def __anext__(self):
        """The next piece without blocking the event loop: the blocking
        read runs on the engine's reader threads (Engine.reader_threads).
        Cancelling the awaiting task cancels the request."""
        loop = asyncio.get_running_loop()
        try:
            piece = await loop.run_in_executor(self._engine._readers(), self._take)
        except asyncio.CancelledError:
            try:
                self.cancel()
            except Error:
                pass
            raise
        if piece is None:
            raise StopAsyncIteration
        return piece

    def result(self):
        """Reads the rest of the output: a Completion of every token and
        the whole text not read yet, and the finish reason."""
        tokens, texts = [], []
        for piece in self:
            tokens += piece.tokens
            texts.append(piece.text)
        return Completion(tokens, "".join(texts), self._finish)

    async def aresult(self):
        """result() for asyncio."""
        tokens, texts = [], []
        async for piece in self:
            tokens += piece.tokens
            texts.append(piece.text)
        return Completion(tokens, "".join(texts), self._finish)


class Engine(_Handle):
    """A serving engine over a loaded causal model (oslo_engine_create):
    continuous batching, a paged KV cache with prefix reuse, streaming.

    On every rank of the model's context create one; add and read requests
    on world rank 0, and let every other rank call run() (it returns when
    rank 0 shuts the engine down or closes it). Usable as a context manager.
    """

    _mu = None

    def __init__(self, model, tokenizer=None, *, num_blocks=None, kv_memory_bytes=None,
                 block_size=None, max_seqs=None, max_step_tokens=None, prefix_caching=True,
                 idle_wait_ms=None, reader_threads=None, kv_dtype="f32"):
        """model: an oslo.Model (a causal language model). tokenizer: None
        for the model folder's when it has one (text prompts, text output
        and stop strings need one), an oslo.Tokenizer, or False for token
        ids only. num_blocks: KV blocks per rank (None: what
        kv_memory_bytes holds, default 1 GiB); block_size: tokens per block
        (16); max_seqs: running requests at most (64); max_step_tokens:
        tokens per step (512); prefix_caching: share the full blocks of
        equal prompt prefixes; idle_wait_ms: how long a step with nothing
        to do waits for work (20). reader_threads: the threads that read
        requests for `async for` (None: max_seqs + 4). kv_dtype: "f32" or
        "int8" (the KV cache as int8 rows with one scale per token and
        head: 3-4x the tokens in the same memory)."""
        if not isinstance(model, Model):
            raise _refuse("Engine", f"takes an oslo.Model, not {type(model).__name__}")
        self._mu = threading.Lock()
        self._busy = 0
        self._closing = False
        self._pool = None
        o = _c.EngineOptions()
        for name, v in (("num_blocks", num_blocks), ("kv_memory_bytes", kv_memory_bytes),
                        ("block_size", block_size), ("max_seqs", max_seqs),
                        ("max_step_tokens", max_step_tokens), ("idle_wait_ms", idle_wait_ms)):
            if v is not None:
                setattr(o, name, _int_arg(f"Engine: {name}", v))
        o.prefix_caching = 1 if prefix_caching else 0
        o.kv_dtype = int(_kv_dtype("Engine: kv_dtype", kv_dtype))
        if tokenizer is None:
            try:
                tokenizer = model.tokenizer
            except Error:
                tokenizer = None  # a folder without one: token ids only
        elif tokenizer is False:
            tokenizer = None
        elif not isinstance(tokenizer, Tokenizer):
            raise _refuse("Engine", f"tokenizer must be an oslo.Tokenizer, None or False, not "
                                    f"{type(tokenizer).__name__}")
        self._tokenizer = tokenizer
        workers = reader_threads if reader_threads is not None else int(o.max_seqs) + 4
        self._workers = max(1, _int_arg("Engine: reader_threads", workers))
        h = _c.Engine(model._handle(), o, tokenizer._handle() if tokenizer is not None else None)
        super().__init__(h, model)
        self._model = model

    def __repr__(self):
        return f"<oslo.Engine {'closed' if self._h is None else 'open'} over {self._model.path}>"

    @property
    def model(self):
        return self._model

    @property
    def tokenizer(self):
        """The tokenizer the engine decodes with (None: token ids only)."""
        return self._tokenizer

    # Calls in flight: close() destroys the engine after the last of them.
    def _call(self, fn):
        with self._mu:
            h = self._h
            if h is None or self._closing:
                raise InvalidArgumentError("this Engine is closed", Status.INVALID_ARGUMENT)
            self._busy += 1
        try:
            return fn(h)
        finally:
            self._leave()

    def _leave(self):
        with self._mu:
            self._busy -= 1
            last = self._busy == 0 and self._closing
            pool, self._pool = (self._pool, None) if last else (None, self._pool)
        if last:
            _Handle._release(self)
            if pool is not None:
                pool.shutdown(wait=False)

    def _release(self):
        # close(), the model's close() and the collector come here: shut
        # down on rank 0 (every rank's run() returns, every read ends), and
        # destroy once no call is in flight.
        if self._h is None or self._mu is None:
            return
        with self._mu:
            if self._h is None or self._closing:
                return
            self._closing = True
            self._busy += 1
            h = self._h
        try:
            h.shutdown()
        except Error:
            pass  # not rank 0 (its run() ends with rank 0's), or already shut down
        finally:
            self._leave()

    def _readers(self):
        with self._mu:
            if self._pool is None:
                if self._h is None or self._closing:
                    raise InvalidArgumentError("this Engine is closed", Status.INVALID_ARGUMENT)
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._workers, thread_name_prefix="oslo-engine-reader")
            return self._pool

    def add(self, prompt, max_new_tokens=20, *, do_sample=False, temperature=1.0, top_k=50,
            top_p=1.0, seed=0, repetition_penalty=1.0, min_new_tokens=0, eos_token_ids=None,
            stop=None, add_special_tokens=True):
        """Queues a request (oslo_engine_add / _add_text) and returns its
        Request. prompt: a list (or 1-D array) of token ids, or a text
        (encoded by the engine's tokenizer, with its special tokens unless
        add_special_tokens=False). The sampling options are
        Model.generate's (greedy by default; the same tokens as generate
        gives the prompt alone); eos_token_ids: an id or a list (None: the
        config's); stop: a string or a list of them that end the request
        (its text ends before the stop string; needs a tokenizer).
        Thread-safe; world rank 0 only."""
        o = _generate_options(max_new_tokens, do_sample, temperature, top_k, top_p, seed,
                              repetition_penalty, min_new_tokens)
        eos = _eos_ids(eos_token_ids)
        stop_bytes, stop_lengths = _stop_strings(stop)
        if isinstance(prompt, str):
            text = prompt.encode("utf-8")
            rid = self._call(lambda h: h.add_text(text, 1 if add_special_tokens else 0, o, eos,
                                                  stop_bytes, stop_lengths))
        else:
            if prompt is None or isinstance(prompt, (bytes, bytearray)):
                raise _refuse("add", f"the prompt must be token ids or a text, not "
                                     f"{type(prompt).__name__}")
            ids = _np.ascontiguousarray(_int_row("add", 0, prompt))
            rid = self._call(lambda h: h.add(ids, o, eos, stop_bytes, stop_lengths))
        return Request(self, int(rid))

    def step(self):
        """One step by hand (oslo_engine_step): returns its Events. An
        engine stepped by hand is neither run() nor read through its
        requests. A failed step raises its error, whose .events are the
        step's events (every live request finished with ERROR)."""
        try:
            n = self._call(lambda h: h.step())
        except Error as e:
            e.events = self._call(lambda h: self._events(h, None))
            raise
        return self._call(lambda h: self._events(h, n))

    @staticmethod
    def _events(h, n):
        out = []
        info = _np.zeros(5, dtype=_np.int64)
        i = 0
        while n is None or i < n:
            try:
                h.event(i, info, None, None)
            except InvalidArgumentError:
                if n is None:
                    break  # past the last event of a failed step
                raise
            tokens = _np.empty(int(info[1]), dtype=_np.int64)
            text = bytearray(int(info[2]))
            h.event(i, info, tokens, text)
            fin = _finish(int(info[3]))
            err = None
            if fin == FinishReason.ERROR:
                err = _make_error(int(info[4]), h.event_error(i))
            out.append(Event(int(info[0]), tokens.tolist(), bytes(text).decode("utf-8", "replace"),
                             fin, err))
            i += 1
        return out

    def run(self):
        """Steps the engine until it is shut down (oslo_engine_run), without
        the GIL: what every rank other than 0 calls, and rank 0 from a
        thread of its own (see start). A failed step raises its error (every
        live request finished with it); call again to go on."""
        self._call(lambda h: h.run())

    def start(self):
        """Runs run() on a daemon thread of its own and returns the thread
        (it ends when the engine is shut down or closed)."""
        t = threading.Thread(target=self.run, name="oslo-engine-run", daemon=True)
        t.start()
        return t

    def stats(self):
        """EngineStats now (oslo_engine_get_stats). Thread-safe."""
        s = self._call(lambda h: h.stats())
        return EngineStats(*(int(getattr(s, f)) for f in EngineStats._fields))

    def shutdown(self):
        """Shuts the engine down on every rank at the next step: live
        requests finish CANCELLED, later adds are refused, run() returns.
        World rank 0 only. Thread-safe."""
        self._call(lambda h: h.shutdown())

    def close(self):
        """Shuts the engine down (rank 0) and destroys it once no call of
        another thread is in flight. Idempotent."""
        _Handle.close(self)
