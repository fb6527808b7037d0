/*
 * oslo_java_engine.i - the serving engine's Java part (bindings/engine.i).
 *
 * Included by java/oslo_java.i, before oslo.h: the names, Javadoc and
 * typemaps of Engine, EngineOptions, EngineStats, FinishReason and
 * RequestState, and Engine's hand-written methods (javacode). The raw
 * methods of engine.i are private here; Engine.add returns an
 * org.oslo.Request (Request.java: an Iterator and Iterable of
 * org.oslo.Output, and a Flow.Publisher of them), Engine.step a list of
 * org.oslo.Event. No call holds a lock of the JVM while it blocks
 * (Request.next, Engine.run): they are plain JNI calls; Engine counts the
 * calls in flight and destroys the native engine after the last one when
 * it is closed meanwhile.
 */

/* FinishReason and RequestState are hand-written Java enums
   (org/oslo/FinishReason.java, RequestState.java): generated ones would
   have constants (EOS) that clash with SpecialToken's in SWIG's one C
   namespace. */
%ignore oslo_finish_reason;
%ignore oslo_request_state;
%rename("$ignore", regextarget=1) "^OSLO_(FINISH|REQUEST)_";

/* The raw forms Engine's public methods build on. */
%rename(nativeAdd) oslo_engine::m_add;
%rename(nativeAddText) oslo_engine::m_add_text;
%rename(nativeCancel) oslo_engine::m_cancel;
%rename(nativeShutdown) oslo_engine::m_shutdown;
%rename(nativeStep) oslo_engine::m_step;
%rename(nativeEvent) oslo_engine::m_event;
%rename(nativeEventError) oslo_engine::m_event_error;
%rename(nativeRun) oslo_engine::m_run;
%rename(nativeNext) oslo_engine::m_next;
%rename(nativeState) oslo_engine::m_state;
%rename(nativeStats) oslo_engine::m_stats;
%javamethodmodifiers oslo_engine::m_add "private";
%javamethodmodifiers oslo_engine::m_add_text "private";
%javamethodmodifiers oslo_engine::m_cancel "private";
%javamethodmodifiers oslo_engine::m_shutdown "private";
%javamethodmodifiers oslo_engine::m_step "private";
%javamethodmodifiers oslo_engine::m_event "private";
%javamethodmodifiers oslo_engine::m_event_error "private";
%javamethodmodifiers oslo_engine::m_run "private";
%javamethodmodifiers oslo_engine::m_next "private";
%javamethodmodifiers oslo_engine::m_state "private";
%javamethodmodifiers oslo_engine::m_stats "private";

OSLO_JCLASSDOC(struct oslo_engine, "class", "A serving engine over a loaded causal Model: requests added at any time run together (continuous batching over a paged KV cache with prefix reuse) and stream back token by token (docs/SERVING.md). Create one on every rank of the model's context; add and read requests on world rank 0 and call run() on every other rank (it returns when rank 0 shuts the engine down or closes it). Close it (try-with-resources): it has no finalizer.")
OSLO_JCLASSDOC(struct oslo_engine_options, "class", "Limits of an Engine with their defaults: numBlocks KV blocks per rank (0: what kvMemoryBytes holds, default 1 GiB), blockSize tokens per block (16), maxSeqs running requests (64), maxStepTokens tokens per step (512), prefixCaching (true), idleWaitMs (20).")
OSLO_JCLASSDOC(struct oslo_engine_stats, "class", "What Engine.stats() reports: requests running and waiting, KV blocks used and in the pool (this rank), tokens cached, steps, prompt and generated tokens, prefix lookups and hits.")
OSLO_JDOC(oslo_engine::oslo_engine, "An engine over {@code model} with {@code options} (null: the defaults) and {@code tokenizer} (null: token ids only; text prompts, text output and stop strings need one). Not collective.")
OSLO_JDOC(oslo_engine_options::oslo_engine_options, "The defaults of oslo_engine_options_init.")

/* EngineOptions.setPrefixCaching(boolean) / getPrefixCaching(). */
%typemap(jni) int prefix_caching "jboolean"
%typemap(jtype) int prefix_caching "boolean"
%typemap(jstype) int prefix_caching "boolean"
%typemap(javain) int prefix_caching "$javainput"
%typemap(in) int prefix_caching "$1 = $input ? 1 : 0;"
%typemap(out) int prefix_caching "$result = (jboolean)($1 != 0);"
%typemap(javaout) int prefix_caching {
    return $jnicall;
  }

%typemap(javainterfaces) struct oslo_engine, struct oslo_engine_options, struct oslo_engine_stats
    "AutoCloseable"
%typemap(javafinalize) struct oslo_engine ""
%typemap(javaconstruct) struct oslo_engine {
    this($imcall, true);
    this.model = model;
  }
/* close() shuts the engine down (world rank 0; elsewhere it only closes)
   and destroys it now, or after the last call in flight returns. */
%typemap(javadestruct, methodname="delete", methodmodifiers="public synchronized",
         parameters="") struct oslo_engine {
    if (swigCPtr != 0) {
      if (swigCMemOwn) {
        swigCMemOwn = false;
        try {
          nativeShutdown();
        } catch (OsloException e) {
          // not rank 0 (its run() ends with rank 0's), or shut down already
        }
        if (busy > 0) {
          deferred = swigCPtr;
        } else {
          $jnicall;
        }
      }
      swigCPtr = 0;
    }
  }
%typemap(javacode) struct oslo_engine_options %{
  /** Frees the options; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }
%}
%typemap(javacode) struct oslo_engine_stats %{
  /** Frees the handle; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }
%}
%typemap(javacode) struct oslo_engine %{
  private Model model;
  /** Calls in flight (enter/leave). */
  private int busy;
  /** The native engine, once closed while calls were in flight. */
  private long deferred;

  /** An engine with the default limits and the model folder's tokenizer (none when the folder has none). */
  public Engine(Model model) {
    this(model, (EngineOptions) null);
  }

  /** An engine with {@code options} and the model folder's tokenizer (none when the folder has none). */
  public Engine(Model model, EngineOptions options) {
    this(model, options, folderTokenizer(model));
  }

  private static Tokenizer folderTokenizer(Model model) {
    if (model == null) throw refuse("Engine", "the model is null");
    try {
      return model.tokenizer();
    } catch (OsloException e) {
      return null;
    }
  }

  /** The model the engine serves. */
  public Model model() {
    return model;
  }

  /** Closes the engine: shuts it down (rank 0) and destroys it once no call is in flight. Idempotent. */
  @Override
  public void close() {
    delete();
  }

  private synchronized void enter() {
    if (swigCPtr == 0)
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(), "this Engine is closed");
    ++busy;
  }

  private synchronized void leave() {
    if (--busy == 0 && deferred != 0) {
      long p = deferred;
      deferred = 0;
      capiJNI.delete_Engine(p);
    }
  }

  static OsloException refuse(String what, String message) {
    return new OsloException(Status.INVALID_ARGUMENT.swigValue(), what + ": " + message);
  }

  /**
   * Queues a request of token ids continued as {@code options} says
   * (null: greedy, 20 new tokens; its EOS ids, else the model config's),
   * stopped early by any of {@code stop} (needs a tokenizer). The tokens are
   * those Model.generate gives the prompt alone. Thread-safe; world rank 0
   * only.
   */
  public Request add(long[] prompt, GenerateOptions options, String... stop) {
    if (prompt == null) throw refuse("add", "the prompt is null");
    java.nio.LongBuffer ids = Model.directLongs(Math.max(prompt.length, 1));
    ids.put(prompt);
    return addRaw(ids, prompt.length, null, options, stop);
  }

  /** Queues a text prompt, encoded by the engine's tokenizer with its special tokens; as {@link #add(long[], GenerateOptions, String...)}. */
  public Request add(String prompt, GenerateOptions options, String... stop) {
    if (prompt == null) throw refuse("add", "the prompt is null");
    return addRaw(null, 0, prompt, options, stop);
  }

  private Request addRaw(java.nio.LongBuffer ids, int n, String text, GenerateOptions options,
                         String[] stop) {
    java.nio.LongBuffer eos = null;
    long[] e = options == null ? null : options.getEosTokenIds();
    if (e != null) {
      eos = Model.directLongs(Math.max(e.length, 1));
      eos.put(e);
      if (e.length == 0) eos = null;
    }
    java.nio.ByteBuffer stopBytes = null;
    java.nio.LongBuffer stopLengths = null;
    if (stop != null && stop.length > 0) {
      byte[][] parts = new byte[stop.length][];
      int total = 0;
      for (int i = 0; i < stop.length; ++i) {
        if (stop[i] == null) throw refuse("add", "stop string " + i + " is null");
        parts[i] = stop[i].getBytes(java.nio.charset.StandardCharsets.UTF_8);
        total += parts[i].length;
      }
      stopBytes = java.nio.ByteBuffer.allocateDirect(Math.max(total, 1));
      stopLengths = Model.directLongs(stop.length);
      for (int i = 0; i < stop.length; ++i) {
        stopBytes.put(parts[i]);
        stopLengths.put(i, parts[i].length);
      }
    }
    enter();
    try {
      long id;
      if (text != null) {
        byte[] b = text.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        if (b.length == 0) throw refuse("add", "the prompt is empty");
        java.nio.ByteBuffer t = java.nio.ByteBuffer.allocateDirect(b.length);
        t.put(b);
        id = nativeAddText(t, true, options, eos, stopBytes, stopLengths);
      } else {
        // A direct buffer is never empty: an empty prompt is refused here.
        if (n == 0) throw refuse("add", "the prompt is empty; pass at least one token id");
        id = nativeAdd(ids, options, eos, stopBytes, stopLengths);
      }
      return new Request(this, id);
    } finally {
      leave();
    }
  }

  /** Cancels request {@code id}; true when it was live. Thread-safe. */
  boolean cancel(long id) {
    enter();
    try {
      return nativeCancel(id) != 0;
    } finally {
      leave();
    }
  }

  /** Where request {@code id} is. */
  RequestState state(long id) {
    enter();
    try {
      return RequestState.of(nativeState(id));
    } finally {
      leave();
    }
  }

  /** One oslo_engine_next of request {@code id} into the buffers; false on a plain timeout. */
  boolean next(long id, long timeoutMs, java.nio.LongBuffer info, java.nio.LongBuffer tokens,
               java.nio.ByteBuffer text) {
    enter();
    try {
      return nativeNext(id, timeoutMs, info, tokens, text) != 0;
    } finally {
      leave();
    }
  }

  /**
   * One step by hand (oslo_engine_step): the step's events. An engine
   * stepped by hand is neither run() nor read through its requests.
   * A failed step throws its error (every live request finished ERROR).
   */
  public java.util.List<Event> step() {
    enter();
    try {
      long n = nativeStep();
      java.util.List<Event> events = new java.util.ArrayList<>();
      java.nio.LongBuffer info = Model.directLongs(5);
      for (long i = 0; i < n; ++i) {
        nativeEvent(i, info, null, null);
        int nt = Math.toIntExact(info.get(1)), nx = Math.toIntExact(info.get(2));
        java.nio.LongBuffer toks = nt == 0 ? null : Model.directLongs(nt);
        java.nio.ByteBuffer text = nx == 0 ? null : java.nio.ByteBuffer.allocateDirect(nx);
        nativeEvent(i, info, toks, text);
        long[] t = new long[nt];
        if (toks != null) toks.duplicate().position(0).get(t); // Java 11
        byte[] b = new byte[nx];
        if (text != null) text.duplicate().position(0).get(b);
        FinishReason f = FinishReason.of(Math.toIntExact(info.get(3)));
        OsloException err = f == FinishReason.ERROR
            ? new OsloException(Math.toIntExact(info.get(4)), nativeEventError(i)) : null;
        events.add(new Event(info.get(0), t, new String(b, java.nio.charset.StandardCharsets.UTF_8),
                             f, err));
      }
      return events;
    } finally {
      leave();
    }
  }

  /**
   * Steps the engine until it is shut down (oslo_engine_run): what every
   * rank other than 0 calls, and rank 0 from a thread of its own (start()).
   * A failed step throws (every live request finished ERROR); call again to go on.
   */
  public void run() {
    enter();
    try {
      nativeRun();
    } finally {
      leave();
    }
  }

  /** Runs run() on a daemon thread of its own and returns it (it ends when the engine is shut down or closed). */
  public Thread start() {
    Thread t = new Thread(this::run, "oslo-engine-run");
    t.setDaemon(true);
    t.start();
    return t;
  }

  /** The engine's numbers now (close the result, or let the collector free it). Thread-safe. */
  public EngineStats stats() {
    enter();
    try {
      return nativeStats();
    } finally {
      leave();
    }
  }

  /** Shuts the engine down on every rank at the next step: live requests finish CANCELLED, run() returns, later adds are refused. World rank 0 only. */
  public void shutdown() {
    enter();
    try {
      nativeShutdown();
    } finally {
      leave();
    }
  }
%}
