// Greedy generation with oslo from Java: a causal model (a folder with
// config.json and safetensors, or an oslo checkpoint) and prompt token ids,
// tensor parallel over the ranks of oslo-run.
//
//   oslo-run --nproc-per-node 2 java -Djava.library.path=build/bindings/java \
//       -cp build/bindings/java/oslo.jar:build/examples/java/oslo-example-generate.jar \
//       Generate [--device cpu|cuda[:N]] tests/models/fixtures/gpt2-tiny 12 52 441 221
//
// --device picks the backend as `oslo generate --device` does (default cpu).
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;
import org.oslo.Context;
import org.oslo.Group;
import org.oslo.Model;
import org.oslo.OsloException;

/** Prints the greedy continuation of a prompt of token ids. */
public final class Generate {
  private Generate() {}

  /**
   * The context config keys for --device (cpu, cuda or cuda:N, mapped as the oslo command line
   * maps them; the same as SemanticSearch's), or null for any other value.
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
   * Generate [--device cpu|cuda[:N]] MODEL MAX_NEW_TOKENS ID...
   *
   * @param argv the device, the model folder, the number of new tokens and the prompt's ids
   */
  public static void main(String[] argv) {
    List<String> rest = new ArrayList<>();
    String device = "cpu";
    for (int i = 0; i < argv.length; ++i) {
      if (!argv[i].equals("--device")) {
        rest.add(argv[i]);
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
    String[] args = rest.toArray(new String[0]);
    if (args.length < 3) {
      System.err.println("usage: Generate [--device cpu|cuda[:N]] MODEL MAX_NEW_TOKENS ID...");
      System.exit(2);
    }
    int maxNewTokens = Integer.parseInt(args[1]);
    long[] prompt = Arrays.stream(args, 2, args.length).mapToLong(Long::parseLong).toArray();
    // Under oslo-run, tensor parallel over every rank of the launch.
    String world = System.getenv().getOrDefault("WORLD_SIZE", "1");
    try (Context ctx = new Context("{\"tensor_parallel_size\": " + world + ", " + dev + "}");
        Model model = new Model(ctx, args[0])) {
      long[] tokens = model.generate(prompt, maxNewTokens);
      if (ctx.rank() == 0) {
        System.out.println(model.modelType() + " at TP=" + ctx.size(Group.TENSOR) + ": "
            + Arrays.stream(tokens).mapToObj(Long::toString).collect(Collectors.joining(" ")));
      }
    } catch (OsloException e) {
      System.err.println("oslo: " + e);
      System.exit(1);
    }
  }
}
