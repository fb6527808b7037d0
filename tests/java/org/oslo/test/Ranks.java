package org.oslo.test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Runs a test body on every rank of a 2-rank job, as the shared cases' _w2
 * variants do: as processes under oslo-run ({@code java_<case>_procs}: the
 * body runs once in this JVM with the launcher's RANK and WORLD_SIZE), or as
 * threads of this JVM ({@code java_<case>_threads}, system property
 * {@code oslo.threads=N}: N threads, each with its own context, explicit
 * rank and a file:// rendezvous).
 */
final class Ranks {
  /** A test body given its rank's context configuration (JSON text). */
  interface Body {
    /**
     * Runs on one rank.
     *
     * @param config the context configuration of this rank
     * @throws Exception when the rank fails
     */
    void run(String config) throws Exception;
  }

  private Ranks() {}

  /**
   * The number of ranks: {@code oslo.threads}, else WORLD_SIZE, else 1.
   *
   * @return the world size of the job
   */
  static int world() {
    String t = System.getProperty("oslo.threads");
    if (t != null) return Integer.parseInt(t);
    String w = System.getenv("WORLD_SIZE");
    return w == null ? 1 : Integer.parseInt(w);
  }

  /**
   * Whether the ranks are threads of this JVM.
   *
   * @return true with {@code -Doslo.threads=N}
   */
  static boolean threads() {
    return System.getProperty("oslo.threads") != null;
  }

  /**
   * Runs {@code body} on every rank (see the class comment); rethrows the
   * first rank's failure, the others suppressed in it.
   *
   * @param body the test body
   * @throws Exception the failure of a rank
   */
  static void run(Body body) throws Exception {
    int world = world();
    if (!threads()) {
      body.run("{\"tensor_parallel_size\": " + world + ", \"timeout_seconds\": 120}");
      return;
    }
    Path store = tempDir("oslo-java-ranks-").resolve("store");
    List<Throwable> errors = new ArrayList<>();
    List<Thread> ts = new ArrayList<>();
    for (int r = 0; r < world; ++r) {
      String cfg = "{\"rank\": " + r + ", \"world_size\": " + world
          + ", \"tensor_parallel_size\": " + world + ", \"init_method\": \"file://" + store
          + "\", \"timeout_seconds\": 120}";
      Thread t = new Thread(() -> {
        try {
          body.run(cfg);
        } catch (Throwable e) {
          synchronized (errors) {
            errors.add(e);
          }
        }
      }, "rank-" + r);
      ts.add(t);
      t.start();
    }
    for (Thread t : ts) t.join();
    if (errors.isEmpty()) return;
    Throwable first = errors.get(0);
    for (Throwable e : errors.subList(1, errors.size())) first.addSuppressed(e);
    if (first instanceof Exception) throw (Exception) first;
    if (first instanceof Error) throw (Error) first;
    throw new AssertionError(first);
  }

  /**
   * A new temporary directory.
   *
   * @param prefix its name's prefix
   * @return its path
   * @throws IOException when it cannot be created
   */
  static Path tempDir(String prefix) throws IOException {
    return Files.createTempDirectory(prefix);
  }
}
