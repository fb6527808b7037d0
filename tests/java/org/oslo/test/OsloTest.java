package org.oslo.test;

import static org.junit.jupiter.api.Assertions.*;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.LongBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.oslo.*;

/** The Java binding's tests (ctest java_*; one JUnit method each). */
public class OsloTest {
  @BeforeAll
  static void load() {
    Oslo.load();
  }

  static FloatBuffer directFloats(int n) {
    return ByteBuffer.allocateDirect(n * 4).order(ByteOrder.nativeOrder()).asFloatBuffer();
  }

  static LongBuffer directLongs(int n) {
    return ByteBuffer.allocateDirect(n * 8).order(ByteOrder.nativeOrder()).asLongBuffer();
  }

  static String worldConfig() {
    String w = System.getenv("WORLD_SIZE");
    return "{\"tensor_parallel_size\": " + (w == null ? "1" : w) + ", \"timeout_seconds\": 120}";
  }

  @Test
  void contextFromConfig() {
    assertFalse(Oslo.version().isEmpty());
    try (Context ctx = new Context("{\"tensor_parallel_size\": 1}")) {
      assertEquals(0, ctx.rank(oslo_group.OSLO_GROUP_WORLD));
      assertEquals(1, ctx.size(oslo_group.OSLO_GROUP_TENSOR));
      assertNotNull(ctx.backend());
      ctx.close();
      ctx.close(); // idempotent
    }
  }

  @Test
  void badConfig() {
    OsloException e = assertThrows(OsloException.class,
        () -> new Context("{\"tensor_parallel_size\": \"two\""));
    assertNotEquals(oslo_status.OSLO_OK, e.status());
    assertFalse(e.getMessage().isEmpty(), "message read in the failing call");
    OsloException e2 = assertThrows(OsloException.class,
        () -> new Context("{\"no_such_key\": 1}"));
    assertEquals(oslo_status.OSLO_ERR_CONFIG, e2.status(), e2.toString());
    assertTrue(e2.getMessage().contains("no_such_key"), e2.getMessage());
  }

  @Test
  void tensorDirectFloatBufferNoCopy() {
    try (Context ctx = new Context("")) {
      FloatBuffer buf = directFloats(6);
      for (int i = 0; i < 6; ++i) buf.put(i, i + 0.5f);
      try (Tensor t = capi.tensor_wrap(ctx, buf, oslo_dtype.OSLO_DTYPE_F32, new long[] {2, 3})) {
        assertSame(ctx, t.context());
        assertEquals(6, t.numel());
        assertEquals(3, t.dim(1));
        // The tensor uses the buffer's memory: a collective on it changes the buffer.
        ctx.all_reduce(oslo_group.OSLO_GROUP_WORLD, oslo_reduce_op.OSLO_REDUCE_SUM, t);
        FloatBuffer out = directFloats(6);
        t.copy_to_host(out);
        for (int i = 0; i < 6; ++i) assertEquals(i + 0.5f, out.get(i));
        buf.put(4, 42f); // written through Java, seen by oslo without a copy
        t.copy_to_host(out);
        assertEquals(42f, out.get(4));
        // Round trip through an owned tensor.
        try (Tensor u = new Tensor(ctx, oslo_dtype.OSLO_DTYPE_F32, new long[] {6})) {
          u.copy_from_host(buf);
          FloatBuffer back = directFloats(6);
          u.copy_to_host(back);
          assertEquals(buf, back);
          // Wrong size: the binding refuses it with the status.
          OsloException e = assertThrows(OsloException.class, () -> u.copy_to_host(directFloats(5)));
          assertEquals(oslo_status.OSLO_ERR_SHAPE, e.status(), e.toString());
        }
        // Heap buffers are refused.
        assertThrows(IllegalArgumentException.class,
            () -> t.copy_to_host(FloatBuffer.allocate(6)));
      }
    }
  }

  @Test
  void tensorFloatArray() {
    try (Context ctx = new Context("");
        Tensor t = Tensor.of(ctx, new float[] {1, 2, 3, 4, 5, 6}, 2, 3)) {
      assertEquals(2, t.ndim());
      assertArrayEquals(new float[] {1, 2, 3, 4, 5, 6}, t.toFloatArray());
      t.copy_from_host(new float[] {6, 5, 4, 3, 2, 1});
      assertArrayEquals(new float[] {6, 5, 4, 3, 2, 1}, t.toFloatArray());
      OsloException e = assertThrows(OsloException.class, () -> t.copy_from_host(new float[5]));
      assertEquals(oslo_status.OSLO_ERR_SHAPE, e.status());
      t.close();
      // A closed handle: SWIG passes a null pointer, oslo refuses it.
      OsloException c = assertThrows(OsloException.class, t::numel);
      assertEquals(oslo_status.OSLO_ERR_INVALID_ARGUMENT, c.status(), c.toString());
    }
  }

  /** 2 ranks under oslo-run: Context.abort from another thread ends rank 0's
   * all-reduce that rank 1 never joins, long before the timeout. */
  @Test
  void abortFromAnotherThread() throws Exception {
    String w = System.getenv("WORLD_SIZE");
    assertEquals("2", w, "runs on 2 ranks");
    try (Context ctx = new Context("{\"tensor_parallel_size\": 2, \"timeout_seconds\": 60}")) {
      int r = ctx.rank(oslo_group.OSLO_GROUP_WORLD);
      ctx.barrier(oslo_group.OSLO_GROUP_WORLD);
      if (r == 0) {
        Thread watchdog = new Thread(() -> {
          try {
            Thread.sleep(500);
          } catch (InterruptedException ignored) {
          }
          ctx.abort();
        });
        long t0 = System.nanoTime();
        watchdog.start();
        try (Tensor t = Tensor.of(ctx, new float[] {1, 1, 1, 1}, 4)) {
          OsloException e = assertThrows(OsloException.class,
              () -> ctx.all_reduce(oslo_group.OSLO_GROUP_WORLD, oslo_reduce_op.OSLO_REDUCE_SUM, t));
          assertEquals(oslo_status.OSLO_ERR_COMM, e.status(), e.toString());
        }
        watchdog.join();
        double s = (System.nanoTime() - t0) / 1e9;
        assertTrue(s < 30, "abort took " + s + " s");
      } else {
        Thread.sleep(3000);
        assertThrows(OsloException.class, () -> ctx.barrier(oslo_group.OSLO_GROUP_WORLD));
      }
    }
  }

  /** Run on 2 ranks under oslo-run (WORLD_SIZE, RANK from the launcher). */
  @Test
  void allReduceRanks() {
    try (Context ctx = new Context(worldConfig())) {
      int r = ctx.rank(oslo_group.OSLO_GROUP_WORLD);
      int n = ctx.size(oslo_group.OSLO_GROUP_WORLD);
      FloatBuffer buf = directFloats(4);
      for (int i = 0; i < 4; ++i) buf.put(i, i + r);
      try (Tensor t = capi.tensor_wrap(ctx, buf, oslo_dtype.OSLO_DTYPE_F32, new long[] {4})) {
        ctx.all_reduce(oslo_group.OSLO_GROUP_WORLD, oslo_reduce_op.OSLO_REDUCE_SUM, t);
      }
      for (int i = 0; i < 4; ++i) {
        float want = 0;
        for (int k = 0; k < n; ++k) want += i + k;
        assertEquals(want, buf.get(i), "element " + i + " on rank " + r);
      }
    }
  }

  static long[] ints(String json, String key) {
    Matcher m = Pattern.compile("\"" + key + "\"\\s*:\\s*\\[([^\\]]*)\\]").matcher(json);
    assertTrue(m.find(), key);
    String[] parts = m.group(1).split(",");
    long[] out = new long[parts.length];
    for (int i = 0; i < parts.length; ++i) out[i] = Long.parseLong(parts[i].trim());
    return out;
  }

  static FloatBuffer logits(Model m, long[] ids, int vocab) {
    LongBuffer in = directLongs(ids.length);
    in.put(ids);
    FloatBuffer out = directFloats(ids.length * vocab);
    m.forward(in, null, null, 1, ids.length, oslo_model_output.OSLO_MODEL_OUTPUT_LOGITS, out);
    return out;
  }

  /** 2 ranks under oslo-run: save at TP=2, then rank 0 loads at TP=1 with
   * the same logits. */
  @Test
  void checkpointSaveTp2LoadTp1() throws Exception {
    String fixture = System.getProperty("oslo.fixture");
    Path out = Path.of(System.getProperty("oslo.out"));
    String rank = System.getenv("RANK");
    assertEquals("2", System.getenv("WORLD_SIZE"), "runs on 2 ranks");
    long[] ids = {52, 72, 269, 326, 461, 76, 430};
    int vocab = 515;
    Path ckpt = out.resolve("ckpt-tp2");
    if ("0".equals(rank)) { // before the context: no rank has started
      if (Files.exists(out)) {
        try (var w = Files.walk(out)) {
          w.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
      }
      Files.createDirectories(out);
    }
    FloatBuffer want;
    try (Context ctx = new Context(worldConfig()); Model m = new Model(ctx, fixture, -1)) {
      assertEquals(2, ctx.size(oslo_group.OSLO_GROUP_TENSOR));
      want = logits(m, ids, vocab);
      m.save(ckpt.toString());
      ctx.barrier(oslo_group.OSLO_GROUP_WORLD);
    }
    if (!"0".equals(rank)) return;
    assertTrue(capi.checkpoint_inspect(ckpt.toString(), 0).contains("tensors"));
    String cfg = "{\"rank\": 0, \"world_size\": 1, \"init_method\": \"file://"
        + out.resolve("store") + "\"}";
    try (Context ctx = new Context(cfg); Model m = new Model(ctx, ckpt.toString(), -1)) {
      assertEquals(1, ctx.size(oslo_group.OSLO_GROUP_TENSOR));
      FloatBuffer got = logits(m, ids, vocab);
      float maxDiff = 0;
      for (int i = 0; i < got.capacity(); ++i) maxDiff = Math.max(maxDiff, Math.abs(got.get(i) - want.get(i)));
      assertTrue(maxDiff < 1e-4, "max diff " + maxDiff);
    }
  }

  /** GPT-2 greedy generation equal to transformers (reference.json). */
  @Test
  void gpt2Greedy() throws Exception {
    String fixture = System.getProperty("oslo.fixture");
    assertNotNull(fixture, "-Doslo.fixture=tests/models/fixtures/gpt2-tiny");
    String ref = Files.readString(Path.of(fixture, "reference.json"));
    try (Context ctx = new Context(worldConfig());
        Model m = new Model(ctx, fixture, -1);
        GenerateOptions o = new GenerateOptions()) {
      assertSame(ctx, m.context());
      o.setMax_new_tokens(12);
      o.setPad_token_id(0);
      LongBuffer eos = directLongs(1);
      eos.put(0, 334);
      for (int i = 0; i < 3; ++i) {
        long[] want = ints(ref, "greedy_" + i);
        // prompts: "prompts": [[...], [...], [...]]; prompt i is want's prefix
        // of prompt_lengths[i] tokens.
        long len = ints(ref, "prompt_lengths")[i];
        LongBuffer prompt = directLongs((int) len);
        for (int k = 0; k < len; ++k) prompt.put(k, want[k]);
        LongBuffer lengths = directLongs(1);
        lengths.put(0, len);
        LongBuffer out = directLongs(12);
        LongBuffer outLen = directLongs(1);
        m.generate(prompt, lengths, 1, o, eos, out, outLen, null);
        List<Long> got = new ArrayList<>(), exp = new ArrayList<>();
        for (int k = 0; k < outLen.get(0); ++k) got.add(out.get(k));
        for (int k = (int) len; k < want.length; ++k) exp.add(want[k]);
        assertEquals(exp, got, "greedy " + i);
      }
    }
  }
}
