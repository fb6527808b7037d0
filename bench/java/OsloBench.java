// Benchmarks of the Java binding (bench/java/run.sh):
//  - forward_1x64x64: the cost of one idiomatic call, lin.forward(x, y) of a
//    column-parallel linear 64 -> 64 with bias at world size 1, on tensors
//    made once;
//  - pass_256mb: a 256 MiB direct ByteBuffer handed to oslo without a copy
//    (Tensor.wrap) against a copy into a new oslo tensor, each followed by an
//    all-reduce, with the peak RSS growth of each.
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Locale;
import java.util.stream.Stream;
import org.oslo.Context;
import org.oslo.DType;
import org.oslo.ParallelLinear;
import org.oslo.Tensor;

/** Prints one BENCH line per measurement. */
public final class OsloBench {
  private OsloBench() {}

  private static final int CALLS = 20000;
  private static final int REPS = 7;
  private static final int PASS_REPS = 5;
  private static final long PASS_BYTES = 256L << 20;

  private static double median(double[] v) {
    double[] s = v.clone();
    Arrays.sort(s);
    return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  }

  /** A field of /proc/self/status in kB (VmRSS, VmHWM). */
  private static long statusKb(String field) throws IOException {
    for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
      if (line.startsWith(field + ":")) {
        return Long.parseLong(line.substring(field.length() + 1).trim().split("\\s+")[0]);
      }
    }
    throw new IOException("no " + field + " in /proc/self/status");
  }

  /** Resets VmHWM to the current RSS. */
  private static void resetPeak() throws IOException {
    Files.writeString(Path.of("/proc/self/clear_refs"), "5");
  }

  private static void forward(Context ctx) {
    try (ParallelLinear lin = ParallelLinear.column(ctx, 64, 64);
        Tensor x = ctx.tensor(DType.F32, 1, 64);
        Tensor y = ctx.tensor(DType.F32, 1, 64)) {
      x.copyFromHost(new float[64]);
      for (int i = 0; i < CALLS; ++i) lin.forward(x, y); // warm-up (JIT)
      double[] ns = new double[REPS];
      for (int r = 0; r < REPS; ++r) {
        long t0 = System.nanoTime();
        for (int i = 0; i < CALLS; ++i) lin.forward(x, y);
        ns[r] = (double) (System.nanoTime() - t0) / CALLS;
      }
      System.out.printf(Locale.ROOT,
          "BENCH lang=java case=forward_1x64x64 ns_per_call=%.1f calls=%d reps=%d%n", median(ns),
          CALLS, REPS);
    }
  }

  /**
   * One mode of pass_256mb: 1 warm-up and PASS_REPS timed repetitions, each
   * in a context of its own (made and closed outside the timed part), so the
   * CPU backend's cache of freed blocks cannot hide the copy's allocation.
   */
  private static void pass(Path dir, ByteBuffer buf, boolean wrap) throws IOException {
    long n = PASS_BYTES / 4;
    double[] ms = new double[PASS_REPS];
    double[] grow = new double[PASS_REPS];
    for (int r = -1; r < PASS_REPS; ++r) {
      Path store = dir.resolve("store-" + (wrap ? "w" : "c") + r);
      try (Context ctx = new Context("{\"rank\": 0, \"world_size\": 1, \"init_method\": \"file://"
              + store + "\"}")) {
        System.gc();
        resetPeak();
        long before = statusKb("VmRSS");
        long t0 = System.nanoTime();
        if (wrap) {
          try (Tensor t = Tensor.wrap(ctx, buf, DType.F32, n)) {
            ctx.allReduce(t);
          }
        } else {
          try (Tensor t = ctx.tensor(DType.F32, n)) {
            t.copyFromHost(buf);
            ctx.allReduce(t);
          }
        }
        double took = (System.nanoTime() - t0) / 1e6;
        if (r >= 0) {
          ms[r] = took;
          grow[r] = (statusKb("VmHWM") - before) / 1024.0;
        }
      }
    }
    System.out.printf(Locale.ROOT,
        "BENCH lang=java case=pass_256mb mode=%s ms=%.2f peak_rss_delta_mb=%.1f%n",
        wrap ? "wrap" : "copy", median(ms), median(grow));
  }

  /**
   * Runs both benchmarks at world size 1.
   *
   * @param args unused
   * @throws IOException when /proc/self cannot be read or the store not made
   */
  public static void main(String[] args) throws IOException {
    Path dir = Files.createTempDirectory("oslo-java-bench-");
    try (Context ctx = new Context("{\"rank\": 0, \"world_size\": 1, \"num_threads\": 1, \"init_method\": \"file://"
            + dir.resolve("store") + "\"}")) {
      forward(ctx);
      ByteBuffer buf = ByteBuffer.allocateDirect((int) PASS_BYTES).order(ByteOrder.nativeOrder());
      for (int i = 0; i < PASS_BYTES / 4; ++i) buf.putFloat(i * 4, i & 1023);
      pass(dir, buf, true);
      pass(dir, buf, false);
    } finally {
      try (Stream<Path> w = Files.walk(dir)) {
        for (Path p : (Iterable<Path>) w.sorted(Comparator.reverseOrder())::iterator)
          Files.deleteIfExists(p);
      }
    }
  }
}
