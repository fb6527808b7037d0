// The main job from Java: the real all-MiniLM-L6-v2 sentence-embedding model
// sharded over the ranks of the job (tensor parallelism), a small semantic
// search over a handful of sentences, the similarity table, and two checks:
// agreement with the unsharded model (rank 0 also loads it on its own) and
// with sentence-transformers' embeddings (reference.txt). The same output as
// examples/minilm/semantic_search.c, byte for byte up to the agreement block.
//
//   oslo-run --nproc-per-node 2 java -Djava.library.path=build/bindings/java \
//       -cp build/bindings/java/oslo.jar:build/examples/java/oslo-example-semantic-search.jar \
//       SemanticSearch [--device cpu|cuda[:N]] build/minilm examples/minilm/reference.txt
//
// --device picks the backend as `oslo generate --device` does (default cpu;
// cuda[:N] is the CUDA backend plugin on device N, else each rank's local
// device). Exits 0 when every embedding matches both references (cosine >= 0.9999).
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.oslo.Context;
import org.oslo.DType;
import org.oslo.Group;
import org.oslo.Model;
import org.oslo.ModelInfo;
import org.oslo.OsloException;
import org.oslo.Tensor;

/** Semantic search with MiniLM split over the ranks of oslo-run. */
public final class SemanticSearch {
  private SemanticSearch() {}

  /** What is printed: UTF-8 bytes, so "%.40s" can cut a sentence at a byte as C does. */
  private static final ByteArrayOutputStream OUT = new ByteArrayOutputStream();

  private static void print(String s) {
    OUT.writeBytes(s.getBytes(StandardCharsets.UTF_8));
  }

  private static void printf(String format, Object... args) {
    print(String.format(Locale.ROOT, format, args));
  }

  /**
   * C's "%.Nf" of a double: its exact binary value rounded half to even (as
   * glibc does; Java's Formatter rounds the shortest decimal half up).
   */
  private static String fixed(double v, int digits) {
    boolean negative = v < 0 || (v == 0 && 1 / v < 0);
    String s = new BigDecimal(Math.abs(v)).setScale(digits, RoundingMode.HALF_EVEN).toPlainString();
    return (negative ? "-" : "") + s;
  }

  private static double cosine(float[] a, float[] b) {
    double d = 0, na = 0, nb = 0;
    for (int i = 0; i < a.length; ++i) {
      d += (double) a[i] * b[i];
      na += (double) a[i] * a[i];
      nb += (double) b[i] * b[i];
    }
    return d / Math.sqrt(na * nb);
  }

  /**
   * The context config keys for --device (cpu, cuda or cuda:N, mapped as the oslo command line
   * maps them), or null for any other value.
   *
   * @param device the --device value
   * @return JSON members to put in a context config
   */
  static String deviceConfig(String device) {
    if (device.equals("cpu")) return "\"backend\": \"cpu\"";
    if (device.equals("cuda")) return "\"backend\": \"cuda\"";
    if (device.matches("cuda:[0-9]{1,4}"))
      return "\"backend\": \"cuda\", \"backend_options\": {\"device\": "
          + Integer.parseInt(device.substring(5)) + "}";
    return null;
  }

  /**
   * SemanticSearch [--device cpu|cuda[:N]] MODEL_DIR reference.txt
   *
   * @param argv the device, the model folder and the reference file
   * @throws IOException when reference.txt cannot be read
   */
  public static void main(String[] argv) throws IOException {
    List<String> args = new ArrayList<>();
    String device = "cpu";
    for (int i = 0; i < argv.length; ++i) {
      if (!argv[i].equals("--device")) {
        args.add(argv[i]);
      } else if (i + 1 < argv.length) {
        device = argv[++i];
      } else {
        System.err.println("--device needs a value");
        System.exit(2);
      }
    }
    String dev = deviceConfig(device);
    if (dev == null) {
      System.err.println(
          "--device must be cpu, cuda or cuda:N (N a device index), got \"" + device + "\"");
      System.exit(2);
    }
    if (args.size() != 2) {
      System.err.println("usage: SemanticSearch [--device cpu|cuda[:N]] MODEL_DIR reference.txt");
      System.exit(2);
    }
    String modelDir = args.get(0);
    // Sentences and sentence-transformers' embeddings from reference.txt.
    List<String> lines = new ArrayList<>(Files.readAllLines(Path.of(args.get(1))));
    lines.removeIf(l -> l.startsWith("#"));
    String[] head = lines.get(0).trim().split("\\s+");
    int n = Integer.parseInt(head[0]), dim = Integer.parseInt(head[1]);
    List<String> sent = new ArrayList<>();
    float[][] st = new float[n][dim];
    for (int i = 0; i < n; ++i) {
      sent.add(lines.get(1 + 2 * i));
      String[] v = lines.get(2 + 2 * i).trim().split("\\s+");
      for (int k = 0; k < dim; ++k) st[i][k] = Float.parseFloat(v[k]);
    }

    // One context over the job's ranks (oslo-run's environment): all of them
    // form the tensor-parallel group.
    String world = System.getenv("WORLD_SIZE");
    String cfg = world == null ? "{" + dev + "}"
        : "{\"tensor_parallel_size\": " + Integer.parseInt(world) + ", \"timeout_seconds\": 120, "
            + dev + "}";
    boolean ok = true;
    try (Context ctx = new Context(cfg)) {
      int rank = ctx.rank(), tp = ctx.size(Group.TENSOR);
      float[][] e;
      try (Model model = new Model(ctx, modelDir); ModelInfo info = model.info()) {
        if (info.getHiddenSize() != dim) {
          System.err.printf(Locale.ROOT, "reference has %d values per sentence, the model %d%n",
              dim, info.getHiddenSize());
          System.exit(1);
        }
        // Texts straight in: the model folder's tokenizer encodes them ([CLS] ... [SEP]), and
        // the rows of different lengths are padded with a mask inside.
        e = model.embed(sent, true);

        if (rank == 0) {
          // The unsharded model, on rank 0 alone (a context of its own).
          Path store = Path.of("/tmp/oslo-semantic-search-" + ProcessHandle.current().pid());
          float[][] u;
          try (Context solo = new Context("{\"rank\": 0, \"world_size\": 1, \"init_method\": "
                  + "\"file://" + store + "\", " + dev + "}");
              Model full = new Model(solo, modelDir)) {
            u = full.embed(sent, true);
          }
          Files.deleteIfExists(store);

          printf("all-MiniLM-L6-v2 split over %d ranks (tensor parallel)\n\n", tp);
          printf("query: \"%s\"\n", sent.get(0));
          int[] order = new int[n - 1];
          for (int i = 1; i < n; ++i) order[i - 1] = i;
          for (int i = 0; i < n - 1; ++i) // rank the others by similarity, as the C example
            for (int j = i + 1; j < n - 1; ++j)
              if (cosine(e[0], e[order[j]]) > cosine(e[0], e[order[i]])) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
              }
          for (int i = 0; i < n - 1; ++i)
            printf("  %s  \"%s\"\n", fixed(cosine(e[0], e[order[i]]), 4), sent.get(order[i]));

          printf("\ncosine similarity (TP=%d)\n     ", tp);
          for (int j = 0; j < n; ++j) printf("  [%d] ", j);
          print("\n");
          for (int i = 0; i < n; ++i) {
            printf("[%d] ", i);
            for (int j = 0; j < n; ++j) printf(" %5s ", fixed(cosine(e[i], e[j]), 2));
            byte[] b = sent.get(i).getBytes(StandardCharsets.UTF_8);
            print("  ");
            OUT.write(b, 0, Math.min(40, b.length)); // "%.40s": the first 40 bytes
            print("\n");
          }

          double worstSt = 1, worstU = 1, maxDiff = 0;
          for (int i = 0; i < n; ++i) {
            worstSt = Math.min(worstSt, cosine(e[i], st[i]));
            worstU = Math.min(worstU, cosine(e[i], u[i]));
            for (int k = 0; k < dim; ++k)
              maxDiff = Math.max(maxDiff, Math.abs((double) e[i][k] - u[i][k]));
          }
          ok = worstSt >= 0.9999 && worstU >= 0.9999;
          printf("\nagreement of the TP=%d embeddings (%d sentences x %d values):\n", tp, n, dim);
          printf("  vs the unsharded model (TP=1):  min cosine %s, max |diff| %.2e\n",
              fixed(worstU, 7), maxDiff);
          printf("  vs sentence-transformers:       min cosine %s\n", fixed(worstSt, 7));
          print(ok ? "MATCH\n" : "MISMATCH\n");
          System.out.write(OUT.toByteArray());
          System.out.flush();
        }
      }
      // Every rank exits with rank 0's verdict.
      try (Tensor t = ctx.tensor(DType.F32, 1)) {
        t.copyFromHost(new float[] {ok ? 1 : 0});
        ctx.broadcast(0, t);
        ok = t.toFloatArray()[0] == 1;
      }
    } catch (OsloException ex) {
      System.err.println("oslo: " + ex);
      System.exit(1);
    }
    System.exit(ok ? 0 : 1);
  }
}
