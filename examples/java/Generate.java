// Greedy generation with oslo from Java: a causal model (a folder with
// config.json and safetensors, or an oslo checkpoint) and prompt token ids,
// tensor parallel over the ranks of oslo-run.
//
//   oslo-run --nproc-per-node 2 java -Djava.library.path=build/bindings/java \
//       -cp build/bindings/java/oslo.jar:build/examples/java/oslo-example-generate.jar \
//       Generate tests/models/fixtures/gpt2-tiny 12 52 441 221
import java.util.Arrays;
import java.util.stream.Collectors;
import org.oslo.Context;
import org.oslo.Group;
import org.oslo.Model;
import org.oslo.OsloException;

/** Prints the greedy continuation of a prompt of token ids. */
public final class Generate {
  private Generate() {}

  /**
   * Generate MODEL MAX_NEW_TOKENS ID...
   *
   * @param args the model folder, the number of new tokens and the prompt's ids
   */
  public static void main(String[] args) {
    if (args.length < 3) {
      System.err.println("usage: Generate MODEL MAX_NEW_TOKENS ID...");
      System.exit(2);
    }
    int maxNewTokens = Integer.parseInt(args[1]);
    long[] prompt = Arrays.stream(args, 2, args.length).mapToLong(Long::parseLong).toArray();
    // Under oslo-run, tensor parallel over every rank of the launch.
    String world = System.getenv().getOrDefault("WORLD_SIZE", "1");
    try (Context ctx = new Context("{\"tensor_parallel_size\": " + world + "}");
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
