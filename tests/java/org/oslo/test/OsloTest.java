package org.oslo.test;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Random;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.oslo.Context;
import org.oslo.DType;
import org.oslo.GenerateOptions;
import org.oslo.Group;
import org.oslo.Model;
import org.oslo.ModelInfo;
import org.oslo.LRSchedule;
import org.oslo.ModelOutput;
import org.oslo.Optimizer;
import org.oslo.OptimizerKind;
import org.oslo.OptimizerOptions;
import org.oslo.Oslo;
import org.oslo.OsloException;
import org.oslo.ParallelLinear;
import org.oslo.ParamSet;
import org.oslo.ReduceOp;
import org.oslo.Status;
import org.oslo.Tensor;
import org.oslo.Tokenizer;
import org.oslo.TrainState;
import org.oslo.TrainOptions;
import org.oslo.TrainStepResult;

/**
 * The Java binding's tests: one ctest per method. The shared cases of
 * tests/bindings/cases.txt are {@code java_<case>} (a _w2 case twice: 2 JVMs
 * under oslo-run, or 2 threads of one JVM, see {@link Ranks}); the
 * Java-specific ones have descriptive names.
 */
public class OsloTest {
  static FloatBuffer directFloats(int n) {
    return ByteBuffer.allocateDirect(n * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
  }

  static String property(String name) {
    String v = System.getProperty(name);
    assertNotNull(v, "-D" + name + "=... (set by tests/java/CMakeLists.txt)");
    return v;
  }

  // ----------------------------------------------------------------------
  // Shared cases (tests/bindings/cases.txt)
  // ----------------------------------------------------------------------

  /** context_from_config: a context from JSON text. */
  @Test
  void contextFromConfig() {
    assertFalse(Oslo.version().isEmpty());
    Context ctx = new Context("{\"tensor_parallel_size\": 1, \"timeout_seconds\": 30}");
    assertEquals(0, ctx.rank());
    assertEquals(1, ctx.size());
    assertEquals(0, ctx.rank(Group.TENSOR));
    assertEquals(1, ctx.size(Group.TENSOR));
    assertEquals("cpu", ctx.backend());
    ctx.close();
    ctx.close(); // idempotent
    try (Context defaults = new Context()) { // every default
      assertEquals(1, defaults.size());
    }
  }

  /** context_from_json_file: the same config from a JSON file path. */
  @Test
  void contextFromJsonFile() throws IOException {
    Path dir = Ranks.tempDir("oslo-java-config-");
    Path file = dir.resolve("config.json");
    Files.writeString(file, "{\"model_parallelism\": {\"tensor_parallel_size\": 1},"
        + " \"backend\": \"cpu\", \"timeout_seconds\": 30}");
    try (Context ctx = new Context(file.toString())) {
      assertEquals(0, ctx.rank());
      assertEquals(1, ctx.size(Group.TENSOR));
      assertEquals("cpu", ctx.backend());
    } finally {
      Files.delete(file);
      Files.delete(dir);
    }
  }

  /** context_bad_config: the named CONFIG error with its message. */
  @Test
  void contextBadConfig() {
    OsloException e = assertThrows(OsloException.class,
        () -> new Context("{\"tensor_paralel_size\": 2}"));
    assertEquals(Status.CONFIG, e.status(), e.toString());
    assertEquals(10, e.statusCode());
    assertTrue(e.getMessage().contains("tensor_paralel_size"), e.getMessage());
    e = assertThrows(OsloException.class, () -> new Context("{\"tensor_parallel_size\": 0}"));
    assertEquals(Status.CONFIG, e.status(), e.toString());
    assertTrue(e.getMessage().contains("tensor_parallel_size"), e.getMessage());
    e = assertThrows(OsloException.class, () -> new Context("{\"tensor_parallel_size\": 2}"));
    assertEquals(Status.CONFIG, e.status(), "world 1 is not divisible: " + e);
    // Invalid JSON is a FORMAT error.
    e = assertThrows(OsloException.class, () -> new Context("{\"tensor_parallel_size\": "));
    assertEquals(Status.FORMAT, e.status(), e.toString());
    // The message is read in the failing call: a later success changes nothing.
    OsloException b = assertThrows(OsloException.class,
        () -> new Context("{\"backend\": \"no such backend!\"}"));
    new Context().close();
    assertEquals(Status.CONFIG, b.status(), b.toString());
    assertTrue(b.getMessage().contains("backend"), b.getMessage());
  }

  /** collectives_w2: all-reduce (sum, max) and all-gather over 2 ranks. */
  @Test
  void collectivesW2() throws Exception {
    int world = Ranks.world();
    assertEquals(2, world, "runs on 2 ranks");
    Ranks.run(cfg -> {
      try (Context ctx = new Context(cfg)) {
        int r = ctx.rank();
        assertEquals(world, ctx.size());
        assertEquals(world, ctx.size(Group.TENSOR));
        // All-reduce over a direct buffer wrapped without a copy.
        FloatBuffer buf = directFloats(6);
        for (int i = 0; i < 6; ++i) buf.put(i, i + r);
        try (Tensor t = Tensor.wrap(ctx, buf, DType.F32, 2, 3)) {
          ctx.allReduce(t);
        }
        for (int i = 0; i < 6; ++i) {
          float want = 0;
          for (int k = 0; k < world; ++k) want += i + k;
          assertEquals(want, buf.get(i), "sum, element " + i + " on rank " + r);
        }
        // Max over owned tensors, on the tensor group.
        try (Tensor t = Tensor.of(ctx, new float[] {r, -r, 10 * r}, 3)) {
          ctx.allReduce(Group.TENSOR, ReduceOp.MAX, t);
          assertArrayEquals(new float[] {world - 1, 0, 10 * (world - 1)}, t.toFloatArray());
        }
        // float[] in place.
        float[] v = {1 + r, 2};
        ctx.allReduce(v);
        assertArrayEquals(new float[] {3, 4}, v);
        // All-gather along dimension 0 in rank order.
        try (Tensor in = Tensor.of(ctx, new float[] {r, r + 0.5f}, 1, 2);
            Tensor out = ctx.tensor(DType.F32, world, 2)) {
          ctx.allGather(in, out);
          assertArrayEquals(new long[] {world, 2}, out.shape());
          float[] g = out.toFloatArray();
          for (int k = 0; k < world; ++k) {
            assertEquals(k, g[2 * k]);
            assertEquals(k + 0.5f, g[2 * k + 1]);
          }
        }
        assertArrayEquals(new float[] {0, 10, 1, 11}, ctx.allGather(new float[] {r, 10 + r}));
        // A shape mismatch is the same error on every rank.
        try (Tensor in = ctx.tensor(DType.F32, 2); Tensor out = ctx.tensor(DType.F32, 2 * world + 1)) {
          OsloException e = assertThrows(OsloException.class, () -> ctx.allGather(in, out));
          assertEquals(Status.SHAPE, e.status(), e.toString());
        }
        ctx.barrier();
      }
    });
  }

  static double[] gaussians(Random rng, int n) {
    double[] v = new double[n];
    for (int i = 0; i < n; ++i) v[i] = rng.nextGaussian();
    return v;
  }

  static float[] floats(double[] v) {
    float[] f = new float[v.length];
    for (int i = 0; i < v.length; ++i) f[i] = (float) v[i];
    return f;
  }

  /** y[rows, out] = x[rows, in] * w[out, in]^T + b, in f64. */
  static double[] linear(double[] x, double[] w, double[] b, int rows, int in, int out) {
    double[] y = new double[rows * out];
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < out; ++o) {
        double s = b[o];
        for (int i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
        y[r * out + o] = s;
      }
    return y;
  }

  static void assertClose(double[] want, float[] got, double tol, String what) {
    assertEquals(want.length, got.length, what + ": size");
    double worst = 0;
    for (int i = 0; i < want.length; ++i) worst = Math.max(worst, Math.abs(want[i] - got[i]));
    assertTrue(worst <= tol, what + ": max |diff| " + worst);
  }

  /** The f32 values of w[rows, cols]'s columns [c0, c1) (or rows when byRows). */
  static double[] slice(double[] w, int rows, int cols, int lo, int hi, boolean byRows) {
    if (byRows) return Arrays.copyOfRange(w, lo * cols, hi * cols);
    double[] s = new double[rows * (hi - lo)];
    for (int r = 0; r < rows; ++r)
      for (int c = lo; c < hi; ++c) s[r * (hi - lo) + c - lo] = w[r * cols + c];
    return s;
  }

  /**
   * mlp_tp2_forward_backward_w2: column (8 -> 16) then row (16 -> 8) with
   * bias at TP=2; output, input gradient and weight and bias gradients equal
   * the unsharded f64 computation.
   */
  @Test
  void mlpTp2ForwardBackwardW2() throws Exception {
    final int d = 8, h = 16, rows = 3;
    Random rng = new Random(3);
    double[] w1 = gaussians(rng, h * d), b1 = gaussians(rng, h);
    double[] w2 = gaussians(rng, d * h), b2 = gaussians(rng, d);
    double[] x = gaussians(rng, rows * d), gy = gaussians(rng, rows * d);
    // Unsharded, in f64: mid = x w1^T + b1, y = mid w2^T + b2.
    double[] mid = linear(x, w1, b1, rows, d, h);
    double[] y = linear(mid, w2, b2, rows, h, d);
    double[] gmid = new double[rows * h], gx = new double[rows * d];
    double[] gw2 = new double[d * h], gb2 = new double[d], gw1 = new double[h * d];
    double[] gb1 = new double[h];
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < d; ++o) {
        gb2[o] += gy[r * d + o];
        for (int i = 0; i < h; ++i) {
          gw2[o * h + i] += gy[r * d + o] * mid[r * h + i];
          gmid[r * h + i] += gy[r * d + o] * w2[o * h + i];
        }
      }
      for (int o = 0; o < h; ++o) {
        gb1[o] += gmid[r * h + o];
        for (int i = 0; i < d; ++i) {
          gw1[o * d + i] += gmid[r * h + o] * x[r * d + i];
          gx[r * d + i] += gmid[r * h + o] * w1[o * d + i];
        }
      }
    }
    assertEquals(2, Ranks.world(), "runs on 2 ranks");
    Ranks.run(cfg -> {
      try (Context ctx = new Context(cfg);
          ParallelLinear fc1 = ParallelLinear.column(ctx, d, h);
          ParallelLinear fc2 = ParallelLinear.row(ctx, h, d)) {
        int r = ctx.rank(Group.TENSOR), n = ctx.size(Group.TENSOR);
        int lo = r * h / n, hi = (r + 1) * h / n, local = hi - lo;
        try (Tensor tw1 = Tensor.of(ctx, floats(w1), h, d); Tensor tb1 = Tensor.of(ctx, floats(b1), h);
            Tensor tw2 = Tensor.of(ctx, floats(w2), d, h); Tensor tb2 = Tensor.of(ctx, floats(b2), d)) {
          fc1.loadFull(tw1, tb1);
          fc2.loadFull(tw2, tb2);
        }
        assertArrayEquals(new long[] {local, d}, fc1.weight().shape());
        assertSame(ctx, fc1.weight().context());
        try (Tensor tx = Tensor.of(ctx, floats(x), rows, d);
            Tensor tmid = ctx.tensor(DType.F32, rows, local);
            Tensor ty = ctx.tensor(DType.F32, rows, d);
            Tensor tgy = Tensor.of(ctx, floats(gy), rows, d);
            Tensor tgmid = ctx.tensor(DType.F32, rows, local);
            Tensor tgx = ctx.tensor(DType.F32, rows, d)) {
          fc1.forward(tx, tmid);
          fc2.forward(tmid, ty);
          assertClose(slice(mid, rows, h, lo, hi, false), tmid.toFloatArray(), 1e-4, "mid");
          assertClose(y, ty.toFloatArray(), 1e-4, "output");
          fc1.zeroGrad();
          fc2.zeroGrad();
          fc2.backward(tmid, tgy, tgmid);
          fc1.backward(tx, tgmid, tgx);
          assertClose(gx, tgx.toFloatArray(), 1e-4, "input gradient");
          assertClose(slice(gw2, d, h, lo, hi, false), fc2.gradWeight().toFloatArray(), 1e-4,
              "row weight gradient");
          assertClose(gb2, fc2.gradBias().toFloatArray(), 1e-4, "row bias gradient");
          assertClose(slice(gw1, h, d, lo, hi, true), fc1.gradWeight().toFloatArray(), 1e-4,
              "column weight gradient");
          assertClose(Arrays.copyOfRange(gb1, lo, hi), fc1.gradBias().toFloatArray(), 1e-4,
              "column bias gradient");
        }
      }
    });
  }

  /**
   * clip_grad_norm_w2: the global gradient norm of a column layer's sharded
   * weight and bias plus a replicated tensor equals the unsharded one;
   * clipping scales every gradient by max_norm / (norm + 1e-6).
   */
  @Test
  void clipGradNormW2() throws Exception {
    final int in = 4, out = 6;
    Random rng = new Random(7);
    double[] gw = gaussians(rng, out * in), gb = gaussians(rng, out), gr = gaussians(rng, 5);
    double sq = 0;
    for (double[] g : List.of(gw, gb, gr))
      for (double v : g) sq += v * v;
    double want = Math.sqrt(sq);
    assertEquals(2, Ranks.world(), "runs on 2 ranks");
    Ranks.run(cfg -> {
      try (Context ctx = new Context(cfg);
          ParallelLinear fc = ParallelLinear.column(ctx, in, out);
          Tensor rep = ctx.tensor(DType.F32, 5);
          Tensor repGrad = Tensor.of(ctx, floats(gr), 5);
          ParamSet ps = new ParamSet(ctx)) {
        int r = ctx.rank(Group.TENSOR), n = ctx.size(Group.TENSOR);
        int lo = r * out / n, hi = (r + 1) * out / n;
        fc.gradWeight().copyFromHost(floats(Arrays.copyOfRange(gw, lo * in, hi * in)));
        fc.gradBias().copyFromHost(floats(Arrays.copyOfRange(gb, lo, hi)));
        ps.addLinear("fc", fc);
        ps.add("replicated", rep, repGrad, -1);
        assertEquals(3, ps.count());
        double norm = ps.gradNorm();
        assertEquals(want, norm, 1e-4 * want, "global norm");
        float[] before = fc.gradWeight().toFloatArray();
        double max = want / 4;
        assertEquals(want, ps.clipGradNorm(max), 1e-4 * want, "norm before clipping");
        double scale = max / (want + 1e-6);
        float[] after = fc.gradWeight().toFloatArray();
        for (int i = 0; i < after.length; ++i)
          assertEquals(before[i] * scale, after[i], 1e-5, "scaled weight gradient " + i);
        float[] rg = repGrad.toFloatArray();
        for (int i = 0; i < rg.length; ++i)
          assertEquals(gr[i] * scale, rg[i], 1e-5, "scaled replicated gradient " + i);
        assertEquals(max, ps.gradNorm(), 1e-4 * max, "norm after clipping");
      }
    });
  }

  static long[] ints(String json, String key) {
    Matcher m = Pattern.compile("\"" + key + "\"\\s*:\\s*\\[([^\\]]*)\\]").matcher(json);
    assertTrue(m.find(), key);
    return Arrays.stream(m.group(1).split(",")).mapToLong(s -> Long.parseLong(s.trim())).toArray();
  }

  /** checkpoint_save_tp2_load_tp1: GPT-2 saved at TP=2 (2 processes), loaded at TP=1. */
  @Test
  void checkpointSaveTp2LoadTp1() throws Exception {
    String fixture = property("oslo.fixture");
    Path out = Path.of(property("oslo.out"));
    String rank = System.getenv("RANK");
    assertEquals("2", System.getenv("WORLD_SIZE"), "runs on 2 ranks under oslo-run");
    long[] ids = {52, 72, 269, 326, 461, 76, 430};
    Path ckpt = out.resolve("ckpt-tp2");
    if ("0".equals(rank)) { // before the context: no rank has started
      if (Files.exists(out)) {
        try (Stream<Path> w = Files.walk(out)) {
          for (Path p : (Iterable<Path>) w.sorted(Comparator.reverseOrder())::iterator)
            Files.delete(p);
        }
      }
      Files.createDirectories(out);
    }
    float[] want;
    try (Context ctx = new Context(
            "{\"tensor_parallel_size\": 2, \"timeout_seconds\": 120}");
        Model m = new Model(ctx, fixture)) {
      assertEquals(2, ctx.size(Group.TENSOR));
      want = m.forward(ids, ModelOutput.LOGITS);
      m.save(ckpt.toString());
      ctx.barrier();
    }
    if (!"0".equals(rank)) return;
    assertTrue(Oslo.inspect(ckpt.toString()).contains("tensors"));
    String cfg = "{\"rank\": 0, \"world_size\": 1, \"init_method\": \"file://"
        + out.resolve("store") + "\"}";
    try (Context ctx = new Context(cfg); Model m = new Model(ctx, ckpt.toString())) {
      assertEquals(1, ctx.size(Group.TENSOR));
      float[] got = m.forward(ids, ModelOutput.LOGITS);
      assertEquals(ids.length * 515, got.length);
      float maxDiff = 0;
      for (int i = 0; i < got.length; ++i) maxDiff = Math.max(maxDiff, Math.abs(got[i] - want[i]));
      assertTrue(maxDiff < 1e-4, "max diff " + maxDiff);
    }
  }

  /**
   * abort_from_thread_w2: Context.abort from another thread ends rank 0's
   * all-reduce that rank 1 never joins, long before the timeout, with COMM.
   */
  @Test
  void abortFromThreadW2() throws Exception {
    assertEquals(2, Ranks.world(), "runs on 2 ranks");
    Ranks.run(cfg -> {
      try (Context ctx = new Context(cfg.replace("\"timeout_seconds\": 120",
          "\"timeout_seconds\": 60"))) {
        int r = ctx.rank();
        ctx.barrier();
        if (r == 0) {
          Thread watchdog = new Thread(() -> {
            try {
              Thread.sleep(500);
            } catch (InterruptedException ignored) {
              Thread.currentThread().interrupt();
            }
            ctx.abort();
          });
          long t0 = System.nanoTime();
          watchdog.start();
          try (Tensor t = Tensor.of(ctx, new float[] {1, 1, 1, 1}, 4)) {
            OsloException e = assertThrows(OsloException.class, () -> ctx.allReduce(t));
            assertEquals(Status.COMM, e.status(), e.toString());
          }
          watchdog.join();
          double s = (System.nanoTime() - t0) / 1e9;
          assertTrue(s < 30, "abort took " + s + " s");
        } else {
          Thread.sleep(3000);
          assertThrows(OsloException.class, ctx::barrier);
        }
      }
    });
  }

  /** Sentences and sentence-transformers' embeddings of examples/minilm/reference.txt. */
  static final class Reference {
    final String[] sentences;
    final float[][] embeddings;

    Reference(Path path) throws IOException {
      List<String> lines = Files.readAllLines(path);
      lines.removeIf(l -> l.startsWith("#"));
      String[] head = lines.get(0).trim().split("\\s+");
      int n = Integer.parseInt(head[0]), dim = Integer.parseInt(head[1]);
      sentences = new String[n];
      embeddings = new float[n][dim];
      for (int i = 0; i < n; ++i) {
        sentences[i] = lines.get(1 + 2 * i);
        String[] v = lines.get(2 + 2 * i).trim().split("\\s+");
        assertEquals(dim, v.length, "values of sentence " + i);
        for (int k = 0; k < dim; ++k) embeddings[i][k] = Float.parseFloat(v[k]);
      }
    }
  }

  static double cosine(float[] a, float[] b) {
    double d = 0, na = 0, nb = 0;
    for (int i = 0; i < a.length; ++i) {
      d += (double) a[i] * b[i];
      na += (double) a[i] * a[i];
      nb += (double) b[i] * b[i];
    }
    return d / Math.sqrt(na * nb);
  }

  /**
   * model_bert_minilm_embed_tp2_w2: the real all-MiniLM-L6-v2 at TP=2, its
   * tokenizer from Java: embeddings equal sentence-transformers'
   * (reference.txt, cosine >= 0.9999).
   */
  @Test
  void modelBertMinilmEmbedTp2W2() throws Exception {
    String dir = property("oslo.minilm");
    Reference ref = new Reference(Path.of(property("oslo.minilm.reference")));
    long[][] ids;
    try (Tokenizer tok = new Tokenizer(dir)) {
      ids = new long[ref.sentences.length][];
      for (int i = 0; i < ids.length; ++i) {
        ids[i] = tok.encode(ref.sentences[i]);
        assertEquals(101, ids[i][0], "[CLS]");
        assertEquals(102, ids[i][ids[i].length - 1], "[SEP]");
      }
      assertTrue(tok.decode(ids[0], true).contains("man"), tok.decode(ids[0], true));
    }
    assertEquals(2, Ranks.world(), "runs on 2 ranks");
    Ranks.run(cfg -> {
      try (Context ctx = new Context(cfg); Model m = new Model(ctx, dir)) {
        assertEquals(2, ctx.size(Group.TENSOR));
        assertEquals("bert", m.modelType());
        try (ModelInfo info = m.info()) {
          assertFalse(info.isCausal());
          assertEquals(ref.embeddings[0].length, info.getHiddenSize());
        }
        float[][] e = m.embed(ids);
        double worst = 1;
        for (int i = 0; i < e.length; ++i) worst = Math.min(worst, cosine(e[i], ref.embeddings[i]));
        assertTrue(worst >= 0.9999, "worst cosine " + worst);
        // Logits of an encoder are refused.
        OsloException x = assertThrows(OsloException.class,
            () -> m.forward(ids[0], ModelOutput.LOGITS));
        assertEquals(Status.NOT_SUPPORTED, x.status(), x.toString());
      }
    });
  }

  /**
   * model_gpt2_generate_tp2_w2: GPT-2 at TP=2 generating greedily the tokens
   * of transformers (reference.json).
   */
  @Test
  void modelGpt2GenerateTp2W2() throws Exception {
    String fixture = property("oslo.fixture");
    String ref = Files.readString(Path.of(fixture, "reference.json"));
    long[] lengths = ints(ref, "prompt_lengths");
    assertEquals(2, Ranks.world(), "runs on 2 ranks");
    Ranks.run(cfg -> {
      try (Context ctx = new Context(cfg);
          Model m = new Model(ctx, fixture);
          GenerateOptions o = new GenerateOptions(12)) {
        assertSame(ctx, m.context());
        assertEquals(2, ctx.size(Group.TENSOR));
        o.setPadTokenId(0);
        o.setEosTokenIds(334);
        for (int i = 0; i < lengths.length; ++i) {
          long[] want = ints(ref, "greedy_" + i);
          int len = (int) lengths[i];
          long[] got = m.generate(Arrays.copyOf(want, len), o);
          assertArrayEquals(Arrays.copyOfRange(want, len, want.length), got, "greedy " + i);
        }
      }
    });
  }

  /**
   * GPT-2 tiny at TP=2 trained 20 AdamW steps (cosine, warmup 3,
   * accumulation 2, clipping 1.0) on tests/bindings/train_gpt2_tiny.txt:
   * every step's mean loss within 1e-4 (relative) of PyTorch's loop on every
   * rank; a token outside the vocabulary is refused, named.
   */
  @Test
  void trainGpt2TinyTp2W2() throws Exception {
    String fixture = property("oslo.fixture");
    List<String> lines = Files.readAllLines(Path.of(property("oslo.train")));
    String[] head = lines.get(0).split(" ");
    int n = Integer.parseInt(head[1]), batch = Integer.parseInt(head[3]);
    int seq = Integer.parseInt(head[5]), steps = Integer.parseInt(head[7]);
    int accum = Integer.parseInt(head[9]);
    long[][][] ids = new long[n][][], mask = new long[n][][];
    double[] losses = new double[steps];
    for (int i = 0, k = 0; i < 2 * n + steps; ++i) {
      String[] f = lines.get(1 + i).split(" ");
      if (f[0].equals("loss")) {
        losses[k++] = Double.parseDouble(f[1]);
        continue;
      }
      long[][] rows = new long[batch][seq];
      for (int b = 0; b < batch; ++b)
        for (int t = 0; t < seq; ++t) rows[b][t] = Long.parseLong(f[1 + b * seq + t]);
      if (f[0].equals("ids")) ids[i / 2] = rows;
      else mask[i / 2] = rows;
    }
    assertEquals(2, Ranks.world(), "runs on 2 ranks");
    Ranks.run(cfg -> {
      try (Context ctx = new Context(cfg);
          Model m = new Model(ctx, fixture, DType.F32);
          OptimizerOptions o = new OptimizerOptions();
          TrainOptions t = new TrainOptions()) {
        assertEquals(2, ctx.size(Group.TENSOR));
        o.setKind(OptimizerKind.ADAMW);
        o.setLr(2e-3);
        o.setWeightDecay(0.01);
        o.setSchedule(LRSchedule.COSINE);
        o.setWarmupSteps(3);
        o.setTotalSteps(steps);
        t.setGradAccumSteps(accum);
        o.setMaxGradNorm(1.0);
        assertFalse(o.getDecay1d(), "1-D parameters without weight decay by default");
        try (Optimizer opt = new Optimizer(m, o, t)) {
          assertSame(m, opt.model());
          for (int i = 0; i < n; ++i) {
            TrainStepResult r = m.trainStep(ids[i], mask[i], opt);
            assertTrue(Double.isFinite(r.getLoss()), "micro-batch " + i + ": " + r);
            if ((i + 1) % accum != 0) {
              assertFalse(r.getStepped(), "micro-batch " + i + ": " + r);
              continue;
            }
            int k = i / accum;
            assertTrue(r.getStepped() && !r.getSkipped() && r.getStep() == k + 1, "step " + k + ": " + r);
            double err = Math.abs(r.getMeanLoss() - losses[k]) / Math.abs(losses[k]);
            assertTrue(err < 1e-4, "step " + k + ": loss " + r.getMeanLoss() + " vs PyTorch "
                + losses[k] + " (relative error " + err + ")");
          }
          long[][] bad = new long[batch][];
          for (int b = 0; b < batch; ++b) bad[b] = ids[0][b].clone();
          long vocab;
          try (ModelInfo info = m.info()) {
            vocab = info.getVocabSize();
          }
          bad[0][1] = vocab + 7;
          OsloException e = assertThrows(OsloException.class, () -> m.trainStep(bad, mask[0], opt));
          assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
          assertTrue(e.getMessage().contains(Long.toString(vocab + 7)), e.getMessage());
        }
      }
    });
  }

  /**
   * An error in flight while the context closes (cases.txt:
   * train_error_in_flight): a ZeRO-3 train step with a label outside the
   * vocabulary throws inside try-with-resources on the context, which closes
   * the context with the model and the optimizer still open; they are
   * closed after it, optimizer last. The expected error; the optimizer
   * still steps before it is closed and refuses a step after; the JVM
   * exits cleanly.
   */
  @Test
  void trainErrorInFlight() throws Exception {
    errorInFlight(1);
  }

  /** {@link #trainErrorInFlight()} on 2 data-parallel ranks. */
  @Test
  void trainErrorInFlightW2() throws Exception {
    errorInFlight(2);
  }

  private static void errorInFlight(int world) throws Exception {
    String fixture = property("oslo.fixture");
    assertEquals(world, Ranks.world(), "runs on " + world + " rank(s)");
    Ranks.run(text -> {
      // Data-parallel ranks: ZeRO-3 partitions over them.
      String cfg = text.replace("\"tensor_parallel_size\": " + world, "\"tensor_parallel_size\": 1");
      long[][] ids = {{5, 9, 14, 3}, {7, 1, 2, 8}};
      long[][] bad = {{5, 9, 1_000_000_000L, 3}, {7, 1, 2, 8}};
      Model[] m = new Model[1];
      Optimizer[] opt = new Optimizer[1];
      OsloException e = assertThrows(OsloException.class, () -> {
        try (Context ctx = new Context(cfg); OptimizerOptions o = new OptimizerOptions();
            TrainOptions t = new TrainOptions()) {
          assertEquals(world, ctx.size(Group.DATA), "DP");
          m[0] = new Model(ctx, fixture, DType.F32);
          o.setKind(OptimizerKind.SGD);
          o.setLr(0.1);
          t.setZeroStage(3);
          opt[0] = new Optimizer(m[0], o, t);
          assertTrue(m[0].trainStep(ids, null, opt[0]).getStepped(), "a good ZeRO-3 step first");
          m[0].trainStep(ids, bad, null, opt[0]);
        }
      });
      assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
      assertTrue(e.getMessage().contains("outside the vocabulary"), e.getMessage());
      m[0].close();
      // Still open, the optimizer keeps its model and context: it steps.
      assertTrue(opt[0].step().getStepped(), "a step after the context and the model closed");
      opt[0].close();
      opt[0].close();
      OsloException closed = assertThrows(OsloException.class, () -> opt[0].step());
      assertEquals(Status.INVALID_ARGUMENT, closed.status(), closed.toString());
    });
  }

  // ----------------------------------------------------------------------
  // Java-specific
  // ----------------------------------------------------------------------

  /**
   * An optimizer keeps its model: the model closed first is destroyed when
   * the optimizer is closed. OptimizerOptions and TrainOptions have the C
   * defaults; a bad option is refused, named.
   */
  @Test
  void optimizerKeepsModel() {
    try (Context ctx = new Context(); OptimizerOptions o = new OptimizerOptions();
        TrainOptions t = new TrainOptions()) {
      assertEquals(OptimizerKind.ADAMW, o.getKind());
      assertEquals(1e-3, o.getLr());
      assertEquals(LRSchedule.CONSTANT, o.getSchedule());
      assertEquals(-1, o.getLossScaling());
      assertEquals(1, t.getGradAccumSteps());
      assertEquals(0, t.getZeroStage());
      assertEquals(1, t.getMicroBatches());
      assertEquals(0.0, t.getPipelineHeadSplit());
      Model m = new Model(ctx, property("oslo.fixture"));
      o.setLr(-1);
      OsloException e = assertThrows(OsloException.class, () -> new Optimizer(m, o));
      assertTrue(e.getMessage().contains("lr"), e.getMessage());
      o.setLr(0.1);
      o.setKind(OptimizerKind.SGD);
      long[][] ids = {{5, 9, 14, 3}};
      Optimizer closed = new Optimizer(m);
      closed.close();
      e = assertThrows(OsloException.class, () -> m.trainStep(ids, null, closed));
      assertTrue(e.getMessage().contains("closed"), e.getMessage());
      Optimizer opt = new Optimizer(m, o);
      m.setActivationCheckpointing(true);
      try (TrainStepResult r = m.trainStep(ids, null, null)) {
        assertTrue(r.getLoss() > 0 && !r.getStepped(), r.toString());
      }
      m.close();
      e = assertThrows(OsloException.class, () -> m.trainStep(ids, null, null));
      assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
      TrainStepResult s = opt.step(); // the native model lives on
      assertTrue(s.getStepped() && s.getStep() == 1 && Math.abs(s.getLr() - 0.1) < 1e-12, s.toString());
      opt.zeroGrad();
      opt.close(); // the native model is destroyed now
      e = assertThrows(OsloException.class, opt::step);
      assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
    }
  }

  /**
   * The data-parallel training options (TrainOptions): zeroStage 0 and 25 MiB
   * buckets by default; on a TP=1 context ZeRO stages 1, 2 and 3 with a
   * small bucketBytes train (SGD lowers the loss) with the losses of stage
   * 0; stage 7 and bucketBytes 2 are INVALID_ARGUMENT, each named.
   */
  @Test
  void optimizerDataParallelOptions() {
    try (Context ctx = new Context();
        OptimizerOptions o = new OptimizerOptions();
        TrainOptions t = new TrainOptions();
        Model m = new Model(ctx, property("oslo.fixture"))) {
      assertEquals(0, t.getZeroStage());
      assertEquals(25L << 20, t.getBucketBytes());
      t.setZeroStage(7);
      OsloException e = assertThrows(OsloException.class, () -> new Optimizer(m, null, t));
      assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
      assertTrue(e.getMessage().contains("zero_stage"), e.getMessage());
      t.setZeroStage(1);
      t.setBucketBytes(2);
      e = assertThrows(OsloException.class, () -> new Optimizer(m, o, t));
      assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
      assertTrue(e.getMessage().contains("bucket_bytes"), e.getMessage());
      o.setKind(OptimizerKind.SGD);
      o.setLr(0.1);
      t.setBucketBytes(4096);
      long[][] ids = {{5, 9, 14, 3}};
      double[][] losses = new double[4][3];
      for (int stage = 0; stage <= 3; ++stage) { // a fresh model each
        t.setZeroStage(stage);
        try (Model mz = new Model(ctx, property("oslo.fixture"));
            Optimizer opt = new Optimizer(mz, o, t)) {
          for (int i = 0; i < 3; ++i) {
            try (TrainStepResult r = mz.trainStep(ids, null, opt)) {
              assertTrue(r.getStepped() && r.getStep() == i + 1, "ZeRO-" + stage + ": " + r);
              losses[stage][i] = r.getLoss();
            }
          }
        }
        double[] l = losses[stage];
        assertTrue(l[2] < l[1] && l[1] < l[0], "ZeRO-" + stage + ": SGD lowers the loss");
        for (int i = 0; i < 3; ++i) // at DP=1 the stages agree
          assertEquals(losses[0][i], l[i], 1e-6 * Math.abs(losses[0][i]), "ZeRO-" + stage);
      }
    }
  }

  /**
   * The pipeline training options (TrainOptions): microBatches 1 by
   * default; 2 micro-batches of one row on one stage give the loss of the
   * 2-row batch and Model.pipelineStats reports the schedule (zeros before
   * a step and after a step without one); 3 of 2 rows is INVALID_ARGUMENT
   * naming the micro-batches.
   */
  @Test
  void optimizerPipelineOptions() {
    try (Context ctx = new Context();
        OptimizerOptions o = new OptimizerOptions();
        TrainOptions t = new TrainOptions()) {
      assertEquals(1L, t.getMicroBatches());
      o.setKind(OptimizerKind.SGD);
      o.setLr(0.1);
      long[][] ids = {{5, 9, 14, 3}, {7, 8, 21, 40}};
      double[] losses = new double[2];
      for (int k = 0; k < 2; ++k) {
        t.setMicroBatches(k + 1);
        try (Model m = new Model(ctx, property("oslo.fixture"));
            Optimizer opt = new Optimizer(m, o, t)) {
          double[] st = m.pipelineStats();
          assertTrue(st[0] == 0 && st[1] == 0 && st[2] == 0, "zeros before a step");
          try (TrainStepResult r = m.trainStep(ids, null, opt)) {
            losses[k] = r.getLoss();
          }
          st = m.pipelineStats();
          if (k == 0) {
            assertTrue(st[0] == 0 && st[1] == 0 && st[2] == 0, "one micro-batch: no schedule");
          } else {
            assertTrue(st[0] > 0 && st[0] <= st[1] && st[2] >= 0 && st[2] < 1,
                java.util.Arrays.toString(st));
            t.setMicroBatches(3);
            try (Optimizer bad = new Optimizer(m, o, t)) {
              OsloException e = assertThrows(OsloException.class, () -> m.trainStep(ids, null, bad));
              assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
              assertTrue(e.getMessage().contains("micro-batches"), e.getMessage());
            }
            // The head split reaches the C train options: on one stage it
            // is NOT_SUPPORTED, naming it.
            t.setMicroBatches(2);
            t.setPipelineHeadSplit(-1);
            OsloException e = assertThrows(OsloException.class, () -> new Optimizer(m, o, t));
            assertEquals(Status.NOT_SUPPORTED, e.status(), e.toString());
            assertTrue(e.getMessage().contains("pipeline_head_split"), e.getMessage());
            t.setPipelineHeadSplit(0);
          }
        }
      }
      assertEquals(losses[0], losses[1], 1e-5 * Math.abs(losses[0]));
    }
  }

  /**
   * Model's pipeline options reach oslo_model_load: on one stage, blocks
   * {2} (all of gpt2-tiny's) generate what the plain load generates, and
   * {1} is INVALID_ARGUMENT naming the sum.
   */
  @Test
  void modelPipelineLayers() {
    long[] prompt = {5, 9, 14, 3};
    try (Context ctx = new Context()) {
      long[] want;
      try (Model m = new Model(ctx, property("oslo.fixture"))) {
        want = m.generate(prompt, 6);
      }
      try (Model m = new Model(ctx, property("oslo.fixture"), DType.F32, 1, new int[] {2})) {
        assertArrayEquals(want, m.generate(prompt, 6));
      }
      OsloException e = assertThrows(OsloException.class,
          () -> new Model(ctx, property("oslo.fixture"), null, 1, new int[] {1}));
      assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
      assertTrue(e.getMessage().contains("sum to 1"), e.getMessage());
    }
  }

  static void deleteTree(Path dir) throws IOException {
    if (!Files.exists(dir)) return;
    try (Stream<Path> w = Files.walk(dir)) {
      for (Path p : (Iterable<Path>) w.sorted(Comparator.reverseOrder())::iterator)
        Files.delete(p);
    }
  }

  static OptimizerOptions adamw2e3() {
    OptimizerOptions o = new OptimizerOptions();
    o.setKind(OptimizerKind.ADAMW);
    o.setLr(2e-3);
    return o;
  }

  /**
   * Optimizer.saveCheckpoint / loadCheckpoint: resuming from a training
   * checkpoint in a new model and optimizer gives bitwise the losses of the
   * uninterrupted run and the saved TrainState; a model folder is not a
   * training checkpoint (FORMAT).
   */
  @Test
  void trainingCheckpointResume() throws IOException {
    String fixture = property("oslo.fixture");
    Path dir = Files.createTempDirectory("oslo-java-train-ckpt");
    long[][] ids = {{5, 9, 14, 3, 77, 2}, {40, 41, 42, 43, 44, 45}};
    double[] want = new double[2];
    try (Context ctx = new Context(); OptimizerOptions o = adamw2e3()) {
      try (Model m = new Model(ctx, fixture); Optimizer opt = new Optimizer(m, o)) {
        for (int i = 0; i < 2; ++i)
          try (TrainStepResult r = m.trainStep(ids, null, opt)) {
            assertTrue(r.getStepped(), r.toString());
          }
        opt.saveCheckpoint(dir.toString(), new TrainState(7, 1, 42));
        for (int i = 0; i < 2; ++i)
          try (TrainStepResult r = m.trainStep(ids, null, opt)) {
            want[i] = r.getLoss();
          }
      }
      try (Model m = new Model(ctx, dir.toString()); Optimizer opt = new Optimizer(m, o)) {
        TrainState s = opt.loadCheckpoint(dir.toString());
        assertEquals(new TrainState(7, 1, 42), s, s.toString());
        assertEquals(7, s.getSeed());
        assertEquals(1, s.getEpoch());
        assertEquals(42, s.getDataPosition());
        for (int i = 0; i < 2; ++i)
          try (TrainStepResult r = m.trainStep(ids, null, opt)) {
            assertEquals(Double.doubleToLongBits(want[i]), Double.doubleToLongBits(r.getLoss()),
                "step " + i + ": resumed " + r.getLoss() + ", uninterrupted " + want[i]);
            assertEquals(3 + i, r.getStep(), r.toString());
          }
      }
      try (Model m = new Model(ctx, fixture); Optimizer opt = new Optimizer(m, o)) {
        OsloException e = assertThrows(OsloException.class, () -> opt.loadCheckpoint(fixture));
        assertEquals(Status.FORMAT, e.status(), e.toString());
        assertTrue(e.getMessage().contains("training checkpoint"), e.getMessage());
      }
    } finally {
      deleteTree(dir);
    }
  }

  /**
   * Model.backward trains an encoder from a loss on its hidden states: with
   * gradHidden = h (the gradient of sum(h^2)/2) one SGD step lowers sum(h^2);
   * a gradient of the wrong size is refused by name.
   */
  @Test
  void encoderBackward() {
    String bert = Path.of(property("oslo.fixture")).resolveSibling("bert-tiny").toString();
    try (Context ctx = new Context(); Model m = new Model(ctx, bert);
        OptimizerOptions o = new OptimizerOptions()) {
      o.setKind(OptimizerKind.SGD);
      o.setLr(0.05);
      long[] ids = {2, 40, 41, 99, 3};
      float[] h = m.forward(ids, ModelOutput.HIDDEN);
      try (Optimizer opt = new Optimizer(m, o)) {
        OsloException e = assertThrows(OsloException.class,
            () -> m.backward(ids, Arrays.copyOf(h, h.length - 1), opt));
        assertEquals(Status.SHAPE, e.status(), e.toString());
        assertTrue(e.getMessage().contains("grad_hidden"), e.getMessage());
        try (TrainStepResult r = m.backward(ids, h, opt)) {
          assertTrue(r.getStepped() && r.getStep() == 1 && r.getLoss() == 0, r.toString());
        }
      }
      float[] h2 = m.forward(ids, ModelOutput.HIDDEN);
      double before = 0, after = 0;
      for (float x : h) before += (double) x * x;
      for (float x : h2) after += (double) x * x;
      assertTrue(after < before, "sum(h^2) " + before + " -> " + after);
    }
  }

  /** A direct FloatBuffer wrapped as a tensor is used in place, both ways. */
  @Test
  void tensorDirectBufferNoCopy() {
    try (Context ctx = new Context()) {
      FloatBuffer buf = directFloats(6);
      for (int i = 0; i < 6; ++i) buf.put(i, i + 0.5f);
      try (Tensor t = Tensor.wrap(ctx, buf, DType.F32, 2, 3)) {
        assertSame(ctx, t.context());
        assertEquals(6, t.numel());
        assertEquals(DType.F32, t.dtype());
        assertArrayEquals(new long[] {2, 3}, t.shape());
        ctx.allReduce(t);
        buf.put(4, 42f); // written through Java, seen by oslo without a copy
        assertEquals(42f, t.toFloatArray()[4]);
        // Written by oslo, seen through Java.
        t.copyFromHost(new float[] {6, 5, 4, 3, 2, 1});
        assertEquals(6f, buf.get(0));
        assertEquals(1f, buf.get(5));
        // The address oslo uses is the buffer's.
        try (Tensor u = Tensor.wrap(ctx, ByteBuffer.allocateDirect(24), DType.F32, 6)) {
          assertTrue(u.dataPtr() != 0);
        }
      }
    }
  }

  /** float[] in and out, copied once each way. */
  @Test
  void tensorFloatArrays() {
    try (Context ctx = new Context();
        Tensor t = Tensor.of(ctx, new float[] {1, 2, 3, 4, 5, 6}, 2, 3)) {
      assertEquals(2, t.ndim());
      assertArrayEquals(new float[] {1, 2, 3, 4, 5, 6}, t.toFloatArray());
      t.copyFromHost(new float[] {6, 5, 4, 3, 2, 1});
      float[] back = new float[6];
      t.copyToHost(back);
      assertArrayEquals(new float[] {6, 5, 4, 3, 2, 1}, back);
    }
  }

  /** A heap buffer is refused (IllegalArgumentException), never copied. */
  @Test
  void heapBufferRefused() {
    try (Context ctx = new Context(); Tensor t = ctx.tensor(DType.F32, 6)) {
      assertThrows(IllegalArgumentException.class, () -> t.copyToHost(FloatBuffer.allocate(6)));
      assertThrows(IllegalArgumentException.class,
          () -> Tensor.wrap(ctx, FloatBuffer.allocate(6), DType.F32, 6));
    }
  }

  /** A buffer or array of the wrong size is the library's SHAPE error. */
  @Test
  void wrongSizeRefused() {
    try (Context ctx = new Context(); Tensor t = ctx.tensor(DType.F32, 6)) {
      OsloException e = assertThrows(OsloException.class, () -> t.copyToHost(directFloats(5)));
      assertEquals(Status.SHAPE, e.status(), e.toString());
      e = assertThrows(OsloException.class, () -> t.copyFromHost(new float[7]));
      assertEquals(Status.SHAPE, e.status(), e.toString());
      e = assertThrows(OsloException.class, () -> Tensor.wrap(ctx, directFloats(5), DType.F32, 6));
      assertEquals(Status.SHAPE, e.status(), e.toString());
      assertThrows(IllegalArgumentException.class,
          () -> ctx.tensor(DType.F32, 1, 1, 1, 1, 1, 1, 1, 1, 1));
    }
  }

  /** A closed handle is refused with INVALID_ARGUMENT; close is idempotent. */
  @Test
  void closedHandleRefused() {
    try (Context ctx = new Context()) {
      Tensor t = ctx.tensor(DType.F32, 2);
      t.close();
      t.close();
      OsloException e = assertThrows(OsloException.class, t::numel);
      assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
      ParallelLinear l = ParallelLinear.column(ctx, 4, 4, false, false);
      assertNull(l.bias(), "a layer without bias");
      l.close();
      e = assertThrows(OsloException.class, l::zeroGrad);
      assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
      GenerateOptions o = new GenerateOptions(3);
      o.setDoSample(true);
      assertTrue(o.getDoSample());
      o.close();
      e = assertThrows(OsloException.class, o::getMaxNewTokens); // a struct field
      assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
      assertTrue(e.getMessage().contains("closed"), e.getMessage());
    }
  }

  /**
   * Closing a context while handles made in it are open closes the Context
   * object at once and destroys the native context with the last of them.
   */
  @Test
  void contextCloseWaitsForChildren() {
    Context ctx = new Context();
    Tensor x = Tensor.of(ctx, new float[] {1, 2}, 1, 2);
    Tensor y = Tensor.of(ctx, new float[] {5, 5}, 1, 2);
    ParallelLinear l = ParallelLinear.column(ctx, 2, 2);
    ctx.close();
    OsloException e = assertThrows(OsloException.class, () -> ctx.rank());
    assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
    l.forward(x, y); // the native context lives on: zero weights and bias
    assertArrayEquals(new float[] {0, 0}, y.toFloatArray());
    x.close();
    y.close();
    l.close(); // the last one: the native context is destroyed now
    ctx.close();
  }

  /** Tokenizer: String in, long[] out and back (GPT-2 tiny's byte-level BPE). */
  @Test
  void tokenizerStrings() {
    try (Tokenizer tok = new Tokenizer(property("oslo.fixture"))) {
      String text = "The quick brown fox jumps over the lazy dog";
      long[] ids = tok.encode(text);
      assertTrue(ids.length > 0);
      assertEquals(text, tok.decode(ids, true));
      assertArrayEquals(new long[0], tok.encode(""));
      assertEquals("", tok.decode());
      assertEquals(ids[0], tok.tokenToId(tok.idToToken(ids[0])));
      assertTrue(tok.vocabSize() > 0);
    }
  }
}
