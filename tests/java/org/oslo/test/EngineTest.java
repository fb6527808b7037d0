package org.oslo.test;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Flow;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.oslo.Context;
import org.oslo.DType;
import org.oslo.Engine;
import org.oslo.EngineOptions;
import org.oslo.EngineStats;
import org.oslo.Event;
import org.oslo.FinishReason;
import org.oslo.GenerateOptions;
import org.oslo.Group;
import org.oslo.Model;
import org.oslo.OsloException;
import org.oslo.Output;
import org.oslo.Request;
import org.oslo.RequestState;
import org.oslo.Status;
import org.oslo.Tokenizer;

/**
 * The serving engine from Java (tests/bindings/cases.txt engine_*): every
 * request's tokens equal Model.generate of its prompt alone, computed before
 * the engine exists (while an engine lives its model belongs to the thread
 * that steps it).
 */
public class EngineTest {
  static final long EOS = 334;

  /** The fixture's prompts (prompt i: the first prompt_lengths[i] ids of greedy_i). */
  static long[][] prompts(String ref) {
    long[] lengths = OsloTest.ints(ref, "prompt_lengths");
    long[][] p = new long[lengths.length][];
    for (int i = 0; i < p.length; ++i)
      p[i] = Arrays.copyOf(OsloTest.ints(ref, "greedy_" + i), (int) lengths[i]);
    return p;
  }

  /** Four requests of different prompts, lengths and sampling. */
  static GenerateOptions[] options() {
    GenerateOptions[] o = new GenerateOptions[4];
    for (int i = 0; i < 4; ++i) {
      o[i] = new GenerateOptions();
      o[i].setEosTokenIds(EOS);
    }
    o[0].setMaxNewTokens(12);
    o[1].setMaxNewTokens(7);
    o[1].setDoSample(true);
    o[1].setSeed(java.math.BigInteger.valueOf(11));
    o[1].setTopK(20);
    o[1].setTemperature(0.8f);
    o[2].setMaxNewTokens(12);
    o[3].setMaxNewTokens(9);
    o[3].setDoSample(true);
    o[3].setSeed(java.math.BigInteger.valueOf(3));
    o[3].setTopP(0.9f);
    o[3].setRepetitionPenalty(1.3f);
    return o;
  }

  static long[][] requestPrompts(long[][] p) {
    long[] longer = new long[3 + p[2].length];
    System.arraycopy(p[0], 0, longer, 0, 3);
    System.arraycopy(p[2], 0, longer, 3, p[2].length);
    return new long[][] {p[0], p[1], p[2], longer};
  }

  /**
   * An engine of 256 KV blocks (a test needs few; the default is 1 GiB of
   * them), with the model folder's tokenizer or, without, none.
   */
  static Engine engine(Model m, boolean tokenizer) {
    try (EngineOptions o = new EngineOptions()) {
      o.setNumBlocks(256);
      return tokenizer ? new Engine(m, o) : new Engine(m, o, null);
    }
  }

  /** Reads every request on a thread of its own (the Iterator). */
  static List<List<Output>> readAll(Request[] reqs) throws Exception {
    List<CompletableFuture<List<Output>>> fs = new ArrayList<>();
    for (Request r : reqs) {
      fs.add(CompletableFuture.supplyAsync(() -> {
        List<Output> out = new ArrayList<>();
        for (Output o : r) out.add(o);
        return out;
      }));
    }
    List<List<Output>> all = new ArrayList<>();
    for (CompletableFuture<List<Output>> f : fs) all.add(f.get(120, TimeUnit.SECONDS));
    return all;
  }

  static void checkPieces(String what, List<Output> pieces, long[] want, Tokenizer tok) {
    List<Long> tokens = new ArrayList<>();
    StringBuilder text = new StringBuilder();
    for (int i = 0; i < pieces.size(); ++i) {
      Output o = pieces.get(i);
      for (long t : o.getTokens()) tokens.add(t);
      text.append(o.getText());
      if (i < pieces.size() - 1) assertNull(o.getFinishReason(), what + ": finished early");
    }
    long[] got = tokens.stream().mapToLong(Long::longValue).toArray();
    assertArrayEquals(want, got, what + ": the engine's tokens are generate's");
    FinishReason fin = pieces.get(pieces.size() - 1).getFinishReason();
    assertEquals(want[want.length - 1] == EOS ? FinishReason.EOS : FinishReason.LENGTH, fin, what);
    if (tok != null) {
      String full = tok.decode(got, true); // as the engine decodes: without special tokens
      String alt = fin == FinishReason.EOS ? tok.decode(Arrays.copyOf(got, got.length - 1), true)
          : full;
      assertTrue(text.toString().equals(full) || text.toString().equals(alt),
          what + ": text \"" + text + "\" is the decoded \"" + full + "\"");
    }
  }

  /** engine_stream_gpt2: four requests added together, read concurrently through Iterator. */
  @Test
  void engineStreamGpt2() throws Exception {
    String fixture = OsloTest.property("oslo.fixture");
    String ref = Files.readString(Path.of(fixture, "reference.json"));
    long[][] p = requestPrompts(prompts(ref));
    GenerateOptions[] o = options();
    try (Context ctx = new Context("{\"tensor_parallel_size\": 1, \"timeout_seconds\": 120}");
        Model m = new Model(ctx, fixture)) {
      long[][] want = new long[4][];
      for (int i = 0; i < 4; ++i) want[i] = m.generate(p[i], o[i]);
      // GenerateOptions version 2: minNewTokens holds EOS back (greedy 0
      // ends with EOS after 4 tokens), repetitionPenalty changes greedy 2.
      try (GenerateOptions g = new GenerateOptions(12)) {
        g.setEosTokenIds(EOS);
        g.setMinNewTokens(6);
        assertTrue(want[0].length < 6 && m.generate(p[0], g).length >= 6, "minNewTokens");
        g.setMinNewTokens(0);
        g.setRepetitionPenalty(3f);
        assertFalse(Arrays.equals(want[2], m.generate(p[2], g)), "repetitionPenalty");
      }
      // GenerateOptions version 3 and EngineOptions version 2: the int8 KV
      // cache gives the same tokens from generate and from an Engine (the
      // same int8 bytes through two attention paths).
      try (GenerateOptions g8 = new GenerateOptions(10);
          EngineOptions eo8 = new EngineOptions()) {
        g8.setKvCacheDtype(DType.I8);
        eo8.setKvDtype(DType.I8);
        eo8.setNumBlocks(64);
        long[] w8 = m.generate(p[0], g8);
        try (Engine e8 = new Engine(m, eo8)) {
          assertArrayEquals(w8, e8.add(p[0], g8).result().getTokens(), "int8 KV cache");
        }
      }
      Tokenizer tok = m.tokenizer();
      try (EngineOptions eo = new EngineOptions()) {
        eo.setBlockSize(4);
        eo.setNumBlocks(96);
        eo.setMaxSeqs(8);
        try (Engine e = new Engine(m, eo)) {
          Request[] reqs = new Request[4];
          for (int i = 0; i < 4; ++i) reqs[i] = e.add(p[i], o[i]);
          List<List<Output>> all = readAll(reqs);
          for (int i = 0; i < 4; ++i) {
            checkPieces("request " + i, all.get(i), want[i], tok);
            assertEquals(RequestState.FINISHED, reqs[i].state());
            assertFalse(reqs[i].hasNext(), "a finished request has nothing more");
          }
          // A text prompt, then the same with a stop string inside its text.
          String text = "The quick brown fox jumps over the lazy dog";
          Output full = e.add(text, o[2]).result();
          assertTrue(full.getText().length() > 6, full.toString());
          String stop = full.getText().substring(3, 6);
          Output cut = e.add(text, o[2], stop).result();
          assertEquals(FinishReason.STOP, cut.getFinishReason());
          assertEquals(full.getText().substring(0, full.getText().indexOf(stop)), cut.getText());
          try (EngineStats st = e.stats()) {
            assertEquals(4, st.getBlockSize());
            assertEquals(96, st.getBlocksTotal());
            assertTrue(st.getSteps() > 0 && st.getRunning() == 0);
          }
        }
      }
    }
  }

  /** engine_cancel_and_errors: cancel mid-stream (through Flow.Publisher), bad requests, hand stepping. */
  @Test
  void engineCancelAndErrors() throws Exception {
    String fixture = OsloTest.property("oslo.fixture");
    String ref = Files.readString(Path.of(fixture, "reference.json"));
    long[][] p = prompts(ref);
    try (Context ctx = new Context("{\"tensor_parallel_size\": 1, \"timeout_seconds\": 120}");
        Model m = new Model(ctx, fixture);
        GenerateOptions six = new GenerateOptions(6);
        GenerateOptions hundred = new GenerateOptions(100)) {
      six.setEosTokenIds(EOS);
      long[] alone = m.generate(p[1], six);
      Engine e = engine(m, true);
      // Cancel mid-stream from a Flow.Subscriber: the request ends CANCELLED.
      Request r = e.add(p[0], hundred);
      CompletableFuture<List<Output>> done = new CompletableFuture<>();
      r.subscribe(new Flow.Subscriber<Output>() {
        final List<Output> got = new ArrayList<>();
        Flow.Subscription sub;

        @Override
        public void onSubscribe(Flow.Subscription s) {
          sub = s;
          s.request(1);
        }

        @Override
        public void onNext(Output o) {
          got.add(o);
          if (got.size() == 1) assertTrue(r.cancel(), "cancel a live request");
          sub.request(1);
        }

        @Override
        public void onError(Throwable t) {
          done.completeExceptionally(t);
        }

        @Override
        public void onComplete() {
          done.complete(got);
        }
      });
      List<Output> got = done.get(120, TimeUnit.SECONDS);
      assertEquals(FinishReason.CANCELLED, got.get(got.size() - 1).getFinishReason());
      assertTrue(got.stream().mapToInt(x -> x.getTokens().length).sum() < 100);
      assertFalse(r.cancel(), "cancel again");
      // Bad requests: the named error; the engine goes on.
      OsloException x = assertThrows(OsloException.class, () -> e.add(new long[0], six));
      assertEquals(Status.INVALID_ARGUMENT, x.status());
      x = assertThrows(OsloException.class, () -> e.add(new long[] {1, 1 << 30}, six));
      assertEquals(Status.INVALID_ARGUMENT, x.status());
      try (GenerateOptions big = new GenerateOptions(500)) {
        x = assertThrows(OsloException.class, () -> e.add(p[0], big));
        assertEquals(Status.INVALID_ARGUMENT, x.status());
      }
      x = assertThrows(OsloException.class, () -> e.add(p[0], six, ""));
      assertEquals(Status.INVALID_ARGUMENT, x.status());
      assertArrayEquals(alone, e.add(p[1], six).result().getTokens(), "after the errors");
      e.close();
      x = assertThrows(OsloException.class, () -> e.add(p[0], six));
      assertEquals(Status.INVALID_ARGUMENT, x.status());
      // Bad options.
      try (EngineOptions eo = new EngineOptions()) {
        eo.setBlockSize(0);
        x = assertThrows(OsloException.class, () -> new Engine(m, eo, null));
        assertEquals(Status.INVALID_ARGUMENT, x.status());
      }
      // Stepping by hand: the step's events; without a tokenizer, ids only.
      try (Engine h = engine(m, false)) {
        x = assertThrows(OsloException.class, () -> h.add("Hello", six));
        assertTrue(x.getMessage().contains("tokenizer"), x.getMessage());
        Request a = h.add(p[1], six);
        List<Long> toks = new ArrayList<>();
        boolean finished = false;
        for (int i = 0; i < 200 && !finished; ++i) {
          for (Event ev : h.step()) {
            if (ev.getRequestId() != a.id()) continue;
            for (long t : ev.getTokens()) toks.add(t);
            finished = ev.getFinishReason() != null;
            assertNull(ev.getError());
          }
        }
        assertArrayEquals(alone, toks.stream().mapToLong(Long::longValue).toArray(), "hand-stepped");
        Request b = h.add(p[0], six);
        x = assertThrows(OsloException.class, b::hasNext);
        assertEquals(Status.INVALID_ARGUMENT, x.status());
      }
    }
  }

  /** engine_tp2_w2: rank 0 adds and reads, rank 1 runs run() until rank 0 shuts down. */
  @Test
  void engineTp2W2() throws Exception {
    String fixture = OsloTest.property("oslo.fixture");
    String ref = Files.readString(Path.of(fixture, "reference.json"));
    long[][] p = requestPrompts(prompts(ref));
    assertEquals(2, Ranks.world(), "runs on 2 ranks");
    Ranks.run(cfg -> {
      GenerateOptions[] o = options();
      try (Context ctx = new Context(cfg); Model m = new Model(ctx, fixture)) {
        assertEquals(2, ctx.size(Group.TENSOR));
        long[][] want = new long[4][];
        for (int i = 0; i < 4; ++i) want[i] = m.generate(p[i], o[i]);
        try (Engine e = engine(m, true)) {
          if (ctx.rank(Group.WORLD) != 0) {
            e.run(); // until rank 0 shuts the engine down
            return;
          }
          Request[] reqs = new Request[4];
          for (int i = 0; i < 4; ++i) reqs[i] = e.add(p[i], o[i]);
          List<List<Output>> all = readAll(reqs);
          for (int i = 0; i < 4; ++i) checkPieces("TP=2 request " + i, all.get(i), want[i], null);
          e.shutdown();
        }
      } finally {
        for (GenerateOptions x : o) x.close();
      }
    });
  }
}
