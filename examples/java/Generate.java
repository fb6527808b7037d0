// Greedy generation with oslo from Java: a causal model (a folder with
// config.json and safetensors, or an oslo checkpoint) and prompt token ids.
//
//   oslo-run --nproc-per-node 2 java -Djava.library.path=build/bindings/java \
//       -cp build/bindings/java/oslo.jar:build/examples/java/oslo-example-generate.jar \
//       Generate tests/models/fixtures/gpt2-tiny 12 52 441 221
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.LongBuffer;
import org.oslo.*;

public final class Generate {
  static LongBuffer longs(int n) {
    return ByteBuffer.allocateDirect(n * 8).order(ByteOrder.nativeOrder()).asLongBuffer();
  }

  public static void main(String[] args) {
    if (args.length < 3) {
      System.err.println("usage: Generate MODEL MAX_NEW_TOKENS ID...");
      System.exit(2);
    }
    Oslo.load();
    int maxNew = Integer.parseInt(args[1]);
    LongBuffer prompt = longs(args.length - 2);
    for (int i = 2; i < args.length; ++i) prompt.put(i - 2, Long.parseLong(args[i]));
    LongBuffer lengths = longs(1);
    lengths.put(0, args.length - 2);
    LongBuffer out = longs(maxNew), outLen = longs(1);
    // Under oslo-run, tensor parallel over every rank of the launch.
    String world = System.getenv().getOrDefault("WORLD_SIZE", "1");
    try (Context ctx = new Context("{\"tensor_parallel_size\": " + world + "}");
        Model model = new Model(ctx, args[0], -1);
        GenerateOptions options = new GenerateOptions()) {
      options.setMax_new_tokens(maxNew);
      model.generate(prompt, lengths, 1, options, null, out, outLen, null);
      StringBuilder s = new StringBuilder();
      for (int i = 0; i < outLen.get(0); ++i) s.append(i == 0 ? "" : " ").append(out.get(i));
      if (ctx.rank(oslo_group.OSLO_GROUP_WORLD) == 0)
        System.out.println(model.model_type() + " at TP=" + ctx.size(oslo_group.OSLO_GROUP_TENSOR)
            + ": " + s);
    } catch (OsloException e) {
      System.err.println("oslo: " + e);
      System.exit(1);
    }
  }
}
