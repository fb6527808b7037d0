package org.oslo;

import java.nio.ByteBuffer;
import java.nio.LongBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.concurrent.Flow;

/**
 * A request added to an {@link Engine} ({@link Engine#add}): an {@link
 * Iterator} (and {@link Iterable}: a for-each loop) of its {@link Output}
 * pieces, ending after the piece that carries the finish reason, and a
 * {@link Flow.Publisher} of them (a callback form: {@link #subscribe}
 * delivers on a thread of its own, as demanded). Reading blocks in
 * oslo_engine_next outside any lock of the JVM (no synchronized block is
 * held by a waiting reader but this request's own), and steps the engine
 * when no thread runs it, so one thread can add and read. A request that
 * failed throws its {@link OsloException} from {@link #hasNext()}. Read a
 * request from one consumer.
 */
public final class Request implements Iterator<Output>, Iterable<Output>, Flow.Publisher<Output> {
  /** What one oslo_engine_next takes at most, and how long it waits before looking again. */
  private static final int TOKENS = 1024;
  private static final int TEXT = 16384;
  private static final long WAIT_MS = 200;

  private final Engine engine;
  private final long id;
  private Output pending;
  /** Set by the reader; read by finishReason() and state() without the reader's lock. */
  private volatile FinishReason finish;
  private OsloException error;
  private boolean subscribed;
  private LongBuffer info;
  private LongBuffer tokens;
  private ByteBuffer text;

  Request(Engine engine, long id) {
    this.engine = engine;
    this.id = id;
  }

  /** The request's id (1, 2, ...). */
  public long id() {
    return id;
  }

  /** The engine it was added to. */
  public Engine engine() {
    return engine;
  }

  /** Why it finished, once its last piece was read; else null. Not blocked by a reader. */
  public FinishReason finishReason() {
    return finish;
  }

  /** Where it is (FINISHED once its last piece was read). Not blocked by a reader. */
  public RequestState state() {
    if (finish != null) return RequestState.FINISHED;
    return engine.state(id);
  }

  /**
   * Cancels the request: its output ends with a piece whose finish reason
   * is CANCELLED. True when it was still live. Thread-safe (not blocked by
   * a reader).
   */
  public boolean cancel() {
    return engine.cancel(id);
  }

  /** Whether another piece follows (blocks until it is there). */
  @Override
  public synchronized boolean hasNext() {
    if (pending != null) return true;
    if (error != null) throw error;
    if (finish != null) return false;
    pending = take();
    return true;
  }

  /** The next piece (blocks until it is there). */
  @Override
  public synchronized Output next() {
    if (!hasNext()) throw new NoSuchElementException("request " + id + " has finished");
    Output o = pending;
    pending = null;
    return o;
  }

  /** This request, as an Iterable (for-each over its pieces). */
  @Override
  public Iterator<Output> iterator() {
    return this;
  }

  private Output take() {
    if (info == null) {
      info = Model.directLongs(3);
      tokens = Model.directLongs(TOKENS);
      text = ByteBuffer.allocateDirect(TEXT);
    }
    for (;;) {
      boolean got;
      info.put(2, 0);
      try {
        got = engine.next(id, WAIT_MS, info, tokens, text);
      } catch (OsloException e) {
        if (info.get(2) == FinishReason.ERROR.code()) {
          finish = FinishReason.ERROR;
          error = e;
        }
        throw e;
      }
      int n = Math.toIntExact(info.get(0)), nb = Math.toIntExact(info.get(1));
      int f = Math.toIntExact(info.get(2));
      if (!got || (n == 0 && nb == 0 && f == 0)) continue;
      long[] t = new long[n];
      tokens.duplicate().position(0).get(t); // Java 11: no absolute bulk get
      byte[] b = new byte[nb];
      text.duplicate().position(0).get(b);
      FinishReason r = FinishReason.of(f);
      if (r != null) finish = r;
      return new Output(t, new String(b, StandardCharsets.UTF_8), r);
    }
  }

  /** Reads the rest: every token and the whole text not read yet, with the finish reason. */
  public Output result() {
    long[] all = new long[16];
    int count = 0;
    StringBuilder s = new StringBuilder();
    for (Output o : this) {
      long[] t = o.getTokens();
      if (count + t.length > all.length)
        all = java.util.Arrays.copyOf(all, Math.max(2 * all.length, count + t.length));
      System.arraycopy(t, 0, all, count, t.length);
      count += t.length;
      s.append(o.getText());
    }
    return new Output(java.util.Arrays.copyOf(all, count), s.toString(), finishReason());
  }

  /**
   * Delivers the pieces to {@code subscriber} on a thread of their own, as
   * it requests them, then onComplete (or onError with the request's
   * failure). Cancelling the subscription cancels the request. One
   * subscriber per request.
   */
  @Override
  public void subscribe(Flow.Subscriber<? super Output> subscriber) {
    if (subscriber == null) throw new NullPointerException("subscriber");
    synchronized (this) {
      if (subscribed) {
        subscriber.onSubscribe(new Flow.Subscription() {
          @Override
          public void request(long n) {}

          @Override
          public void cancel() {}
        });
        subscriber.onError(new IllegalStateException("request " + id + " has a subscriber"));
        return;
      }
      subscribed = true;
    }
    Delivery d = new Delivery(subscriber);
    subscriber.onSubscribe(d);
    Thread t = new Thread(d::loop, "oslo-request-" + id);
    t.setDaemon(true);
    t.start();
  }

  private final class Delivery implements Flow.Subscription {
    private final Flow.Subscriber<? super Output> subscriber;
    private long demand;
    private boolean cancelled;
    private Throwable bad;

    Delivery(Flow.Subscriber<? super Output> subscriber) {
      this.subscriber = subscriber;
    }

    @Override
    public synchronized void request(long n) {
      if (n <= 0) {
        bad = new IllegalArgumentException("request(" + n + "): demand must be positive");
        cancelled = true;
      } else {
        demand = demand + n < 0 ? Long.MAX_VALUE : demand + n;
      }
      notifyAll();
    }

    @Override
    public void cancel() {
      synchronized (this) {
        if (cancelled) return;
        cancelled = true;
        notifyAll();
      }
      try {
        Request.this.cancel();
      } catch (OsloException e) {
        // the engine is closed: nothing runs any more
      }
    }

    void loop() {
      try {
        for (;;) {
          synchronized (this) {
            while (demand == 0 && !cancelled) wait();
            if (cancelled) {
              if (bad != null) subscriber.onError(bad);
              return;
            }
            --demand;
          }
          if (!hasNext()) {
            subscriber.onComplete();
            return;
          }
          subscriber.onNext(next());
        }
      } catch (OsloException e) {
        subscriber.onError(e);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        subscriber.onError(e);
      }
    }
  }
}
