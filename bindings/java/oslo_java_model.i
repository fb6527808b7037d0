/*
 * oslo_java_model.i - the Java part of the model (bindings/model.i).
 *
 * Included by java/oslo_java.i, before oslo.h: the hand-written methods
 * (javacode) of ModelInfo, GenerateOptions and Model (forward, embed and
 * generate over Java arrays, texts and BatchEncodings; trainStep,
 * backward and pipelineStats; the model's tokenizer). Their names,
 * Javadoc and lifetimes are in java/oslo_java.i.
 */

%typemap(javacode) struct oslo_model_info %{
  /** Frees the handle; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** Whether the model is causal (a language model: generate works). */
  public boolean isCausal() {
    return getIsCausal() != 0;
  }
%}
%typemap(javacode) struct oslo_generate_options %{
  private long[] eosTokenIds;

  /** Frees the options; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** Options for greedy generation of at most {@code maxNewTokens} tokens. */
  public GenerateOptions(long maxNewTokens) {
    this();
    setMaxNewTokens(maxNewTokens);
  }

  /** The ids that end a row (null: the model config's). */
  public void setEosTokenIds(long... ids) {
    eosTokenIds = ids == null ? null : ids.clone();
  }

  /** The ids that end a row, or null for the model config's. */
  public long[] getEosTokenIds() {
    return eosTokenIds == null ? null : eosTokenIds.clone();
  }
%}
%typemap(javacode) struct oslo_model %{
  private Object context;
  /** Open optimizers over this model. */
  private int children;
  /** The native model, once closed while optimizers were open. */
  private long deferred;

  synchronized void retain() {
    ++children;
  }

  synchronized void release() {
    if (--children == 0 && deferred != 0) {
      long p = deferred;
      deferred = 0;
      capiJNI.delete_Model(p);
      if (context != null) ((Context) context).release();
    }
  }

  /** The context this model was loaded in. */
  public Context context() {
    return (Context) context;
  }

  /** The folder (or checkpoint) this model was loaded from. */
  private String path;
  /** The tokenizer of that folder, once loaded (closed with the model). */
  private Tokenizer folderTokenizer;
  /** A tokenizer the caller set (the caller's: not closed with the model). */
  private Tokenizer userTokenizer;

  /** Frees the model and the tokenizer it loaded; safe to call more than once. */
  @Override
  public void close() {
    Tokenizer t;
    synchronized (this) {
      t = folderTokenizer;
      folderTokenizer = null;
    }
    if (t != null) t.close();
    delete();
  }

  /** The folder (or parallel checkpoint) this model was loaded from. */
  public String path() {
    return path;
  }

  /**
   * The tokenizer texts go through: the one given to
   * {@link #setTokenizer(Tokenizer)}, else the tokenizer of the model's
   * folder (tokenizer.json or tokenizer.model), loaded on first use and
   * closed with the model. A folder without one throws an OsloException
   * (the loader's status, IO for missing files) naming the folder.
   */
  public synchronized Tokenizer tokenizer() {
    if (userTokenizer != null) return userTokenizer;
    if (getCPtr(this) == 0)
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(), "the model is closed");
    if (folderTokenizer == null) {
      try {
        folderTokenizer = new Tokenizer(path);
      } catch (OsloException e) {
        throw new OsloException(e.statusCode(), "the model folder " + path
            + " has no tokenizer oslo can load (tokenizer.json or tokenizer.model): "
            + e.getMessage() + "; pass token ids, or call Model.setTokenizer");
      }
    }
    return folderTokenizer;
  }

  /**
   * Makes texts go through {@code tokenizer} (the caller keeps it and
   * closes it) instead of the folder's; null goes back to the folder's.
   */
  public synchronized void setTokenizer(Tokenizer tokenizer) {
    userTokenizer = tokenizer;
  }

  /** The id under padding: the config's pad_token_id, else 0 (masked out either way). */
  private long padId() {
    ModelInfo i = info();
    long p = i.getPadTokenId();
    long v = i.getVocabSize();
    i.close();
    return p >= 0 && p < v ? p : 0;
  }

  private static OsloException refuse(String what, String message) {
    return new OsloException(Status.INVALID_ARGUMENT.swigValue(), what + ": " + message);
  }

  /** Checks rows of token ids: non-null, non-empty, at least one row. */
  private static void checkRows(String what, long[][] ids) {
    if (ids == null) throw refuse(what, "the ids are null");
    if (ids.length == 0) throw refuse(what, "no rows; pass at least one row of token ids");
    for (int r = 0; r < ids.length; ++r) {
      if (ids[r] == null) throw refuse(what, "row " + r + " is null");
      if (ids[r].length == 0) throw refuse(what, "row " + r + " has no tokens");
    }
  }

  /** The token ids of texts, through {@link #tokenizer()}. */
  private long[][] encodeTexts(String what, java.util.List<String> texts) {
    if (texts == null) throw refuse(what, "the texts are null");
    if (texts.isEmpty()) throw refuse(what, "no texts; pass at least one");
    for (int i = 0; i < texts.size(); ++i)
      if (texts.get(i) == null) throw refuse(what, "text " + i + " is null");
    Tokenizer tok = tokenizer();
    long[][] ids = new long[texts.size()][];
    for (int i = 0; i < ids.length; ++i) {
      ids[i] = tok.encode(texts.get(i));
      if (ids[i].length == 0) throw refuse(what, "text " + i + " (\"" + texts.get(i)
          + "\") has no tokens");
    }
    return ids;
  }

  /** Loads a model keeping the checkpoint's dtype. Collective. */
  public Model(Context ctx, String path) {
    this(ctx, path, -1, 1, "");
  }

  /** Loads a model converting its weight matrices to {@code dtype}. Collective. */
  public Model(Context ctx, String path, DType dtype) {
    this(ctx, path, dtype.swigValue(), 1, "");
  }

  /**
   * Loads a model over the context's pipeline stages: {@code virtualStages}
   * model chunks per rank (1: none; the interleaved schedule otherwise) and
   * {@code layers} blocks per virtual stage, in order ({@code null}: split
   * evenly), e.g. {9, 3} to give the stage with the head fewer blocks.
   * {@code dtype} null keeps the checkpoint's. Collective.
   */
  public Model(Context ctx, String path, DType dtype, int virtualStages, int[] layers) {
    this(ctx, path, dtype == null ? -1 : dtype.swigValue(), virtualStages, joinCounts(layers));
  }

  private static String joinCounts(int[] layers) {
    if (layers == null) return "";
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < layers.length; ++i) b.append(i == 0 ? "" : ",").append(layers[i]);
    return b.toString();
  }

  static java.nio.LongBuffer directLongs(int n) {
    return java.nio.ByteBuffer.allocateDirect(n * 8).order(java.nio.ByteOrder.nativeOrder())
        .asLongBuffer();
  }

  static java.nio.FloatBuffer directFloats(long n) {
    return java.nio.ByteBuffer.allocateDirect(Math.toIntExact(n * 4))
        .order(java.nio.ByteOrder.nativeOrder()).asFloatBuffer();
  }

  /**
   * Runs one sequence of token ids: logits [seq, vocab] or hidden states
   * [seq, hidden], row-major. Collective.
   */
  public float[] forward(long[] ids, ModelOutput output) {
    if (ids == null) throw refuse("forward", "the ids are null");
    return forward(new long[][] {ids}, output)[0];
  }

  /**
   * Runs rows of token ids of any lengths (padded on the right inside, with
   * the attention mask built): row r's logits [len_r, vocab] or hidden
   * states [len_r, hidden], row-major, its real positions only (each as the
   * row alone gives them). Collective.
   */
  public float[][] forward(long[][] ids, ModelOutput output) {
    checkRows("forward", ids);
    if (output == null) throw refuse("forward", "the output kind is null");
    // Right padded by oslo_pad_batch.
    java.nio.LongBuffer[] padded = new java.nio.LongBuffer[2];
    int longest = BatchEncoding.padInto(ids, padId(), 0, 0, false, 0, false, padded);
    java.nio.LongBuffer flat = padded[0], mask = padded[1];
    ModelInfo i = info();
    int width = Math.toIntExact(output == ModelOutput.LOGITS ? i.getVocabSize() : i.getHiddenSize());
    i.close();
    java.nio.FloatBuffer out = directFloats((long) ids.length * longest * width);
    forward(flat, mask, null, ids.length, longest, output, out);
    float[][] result = new float[ids.length][];
    for (int r = 0; r < ids.length; ++r) {
      result[r] = new float[ids[r].length * width];
      out.position(r * longest * width);
      out.get(result[r]);
    }
    return result;
  }

  /** Normalised sentence embeddings of token-id rows of any lengths. Collective. */
  public float[][] embed(long[][] ids) {
    return embed(ids, true);
  }

  /**
   * Sentence embeddings (mean over the tokens, L2-normalised if
   * {@code normalize}) of token-id rows of any lengths (right padded). Collective.
   */
  public float[][] embed(long[][] ids, boolean normalize) {
    checkRows("embed", ids);
    java.nio.LongBuffer[] padded = new java.nio.LongBuffer[2];
    int longest = BatchEncoding.padInto(ids, padId(), 0, 0, false, 0, false, padded);
    return embedBuffers(padded[0], padded[1], ids.length, longest, normalize);
  }

  private float[][] embedBuffers(java.nio.LongBuffer flat, java.nio.LongBuffer mask, int rows,
      int seq, boolean normalize) {
    ModelInfo i = info();
    int hidden = Math.toIntExact(i.getHiddenSize());
    i.close();
    java.nio.FloatBuffer out = directFloats((long) rows * hidden);
    embed(flat, mask, rows, seq, normalize, out);
    float[][] result = new float[rows][hidden];
    for (float[] row : result) out.get(row);
    return result;
  }

  /**
   * Normalised sentence embeddings of texts, encoded by {@link #tokenizer()}
   * (the model folder's): {@code model.embed("A man is eating food.", "Hello!")}.
   * Collective.
   */
  public float[][] embed(String... texts) {
    return embed(texts == null ? null : java.util.Arrays.asList(texts), true);
  }

  /**
   * Sentence embeddings of texts, encoded by {@link #tokenizer()},
   * L2-normalised if {@code normalize}. Collective.
   */
  public float[][] embed(java.util.List<String> texts, boolean normalize) {
    if (texts == null) throw refuse("embed", "the texts are null");
    if (texts.isEmpty()) throw refuse("embed", "no texts; pass at least one");
    for (int i = 0; i < texts.size(); ++i)
      if (texts.get(i) == null) throw refuse("embed", "text " + i + " is null");
    // Encoded and right padded in one call (oslo_tokenizer_encode_batch).
    BatchEncoding b = tokenizer().encodeBatch(texts.toArray(new String[0]), Padding.RIGHT, true,
        padId());
    long[][] ids = b.getInputIds();
    long[][] mask = b.getAttentionMask();
    for (int i = 0; i < ids.length; ++i)
      if (ids[i].length == 0 || mask[i][0] == 0)
        throw refuse("embed", "text " + i + " (\"" + texts.get(i) + "\") has no tokens");
    int seq = ids[0].length;
    return embedBuffers(rows("embed: ids", ids, seq), rows("embed: mask", mask, seq), ids.length,
        seq, normalize);
  }

  /**
   * Normalised sentence embeddings of a tokenizer's padded batch
   * ({@link Tokenizer#encodeBatch(String[], Padding)}), over its mask. Collective.
   */
  public float[][] embed(BatchEncoding batch) {
    if (batch == null) throw refuse("embed", "the batch is null");
    long[][] ids = batch.getInputIds();
    long[][] mask = batch.getAttentionMask();
    checkRows("embed", ids);
    int seq = ids[0].length;
    for (int r = 0; r < ids.length; ++r)
      if (ids[r].length != seq)
        throw new OsloException(Status.SHAPE.swigValue(), "embed: the batch is not padded (row "
            + r + " has " + ids[r].length + " ids, row 0 " + seq + "); encode it with padding");
    return embedBuffers(rows("embed: ids", ids, seq), rows("embed: mask", mask, seq), ids.length,
        seq, true);
  }

  /** The new tokens of each prompt (EOS included when one was emitted). Collective. */
  public long[][] generate(long[][] prompts, GenerateOptions options) {
    return generateRows(prompts, options, null);
  }

  private long[][] generateRows(long[][] prompts, GenerateOptions options, float[] scores) {
    if (prompts == null) throw refuse("generate", "the prompts are null");
    if (prompts.length == 0) throw refuse("generate", "no prompts; pass at least one");
    for (int b = 0; b < prompts.length; ++b) {
      if (prompts[b] == null) throw refuse("generate", "prompt " + b + " is null");
      if (prompts[b].length == 0) throw refuse("generate", "prompt " + b + " has no tokens");
    }
    if (options == null) throw refuse("generate", "the options are null");
    int total = 0;
    for (long[] p : prompts) total += p.length;
    java.nio.LongBuffer ids = directLongs(total);
    java.nio.LongBuffer lengths = directLongs(prompts.length);
    for (int b = 0; b < prompts.length; ++b) {
      ids.put(prompts[b]);
      lengths.put(b, prompts[b].length);
    }
    long[] eos = options.getEosTokenIds();
    java.nio.LongBuffer eosBuf = null;
    if (eos != null) {
      eosBuf = directLongs(eos.length);
      eosBuf.put(eos);
    }
    int max = Math.toIntExact(options.getMaxNewTokens());
    if (max < 0) throw refuse("generate", "maxNewTokens " + max + " < 0");
    java.nio.LongBuffer out = directLongs(prompts.length * max);
    java.nio.LongBuffer outLengths = directLongs(prompts.length);
    java.nio.FloatBuffer outScores = scores == null ? null : directFloats(prompts.length);
    generate(ids, lengths, prompts.length, options, eosBuf, out, outLengths, outScores);
    long[][] result = new long[prompts.length][];
    for (int b = 0; b < prompts.length; ++b) {
      result[b] = new long[Math.toIntExact(outLengths.get(b))];
      out.position(b * max);
      out.get(result[b]);
      if (scores != null) scores[b] = outScores.get(b);
    }
    return result;
  }

  /** The new tokens of one prompt. Collective. */
  public long[] generate(long[] prompt, GenerateOptions options) {
    return generate(new long[][] {prompt}, options)[0];
  }

  /** At most {@code maxNewTokens} greedy new tokens of one prompt. Collective. */
  public long[] generate(long[] prompt, int maxNewTokens) {
    try (GenerateOptions o = new GenerateOptions(maxNewTokens)) {
      return generate(prompt, o);
    }
  }

  /**
   * Continues each text (encoded by {@link #tokenizer()}; prompts of
   * different lengths are batched with left padding inside): the new text
   * and ids of each. Collective.
   */
  public Generation[] generate(String[] prompts, GenerateOptions options) {
    long[][] ids = encodeTexts("generate", prompts == null ? null : java.util.Arrays.asList(prompts));
    float[] scores = new float[ids.length];
    long[][] out = generateRows(ids, options, scores);
    Tokenizer tok = tokenizer();
    Generation[] result = new Generation[out.length];
    for (int b = 0; b < out.length; ++b)
      result[b] = new Generation(tok.decode(out[b], true), out[b], scores[b]);
    return result;
  }

  /**
   * Continues one text: {@code model.generate("Once upon a time", o).getText()}.
   * Its ids equal {@code generate(tokenizer().encode(prompt), o)}. Collective.
   */
  public Generation generate(String prompt, GenerateOptions options) {
    return generate(new String[] {prompt}, options)[0];
  }

  /** At most {@code maxNewTokens} greedy new tokens of one text. Collective. */
  public Generation generate(String prompt, int maxNewTokens) {
    try (GenerateOptions o = new GenerateOptions(maxNewTokens)) {
      return generate(prompt, o);
    }
  }

  /**
   * Continues each row of a tokenizer's batch (its real tokens: the ids
   * where the mask is 1, whichever side it was padded on). Collective.
   */
  public long[][] generate(BatchEncoding batch, GenerateOptions options) {
    if (batch == null) throw refuse("generate", "the batch is null");
    long[][] rows = new long[batch.size()][];
    for (int r = 0; r < rows.length; ++r) rows[r] = batch.tokens(r);
    return generate(rows, options);
  }

  private static java.nio.LongBuffer rows(String what, long[][] rows, int seq) {
    if (rows == null) return null;
    java.nio.LongBuffer b = directLongs(rows.length * seq);
    for (int r = 0; r < rows.length; ++r) {
      if (rows[r].length != seq)
        throw new OsloException(Status.SHAPE.swigValue(), what + " row " + r
            + " has " + rows[r].length + " ids, ids rows " + seq);
      b.put(rows[r]);
    }
    return b;
  }

  /**
   * One micro-batch of causal-LM training on token-id rows of equal length
   * (see the buffer form): {@code labels} null are the ids with -100 where
   * the mask is 0, {@code mask} null is all 1, {@code optimizer} null only
   * accumulates the gradients. Collective.
   */
  public TrainStepResult trainStep(long[][] ids, long[][] labels, long[][] mask,
      Optimizer optimizer) {
    if (ids.length == 0)
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(), "trainStep: no rows");
    int seq = ids[0].length;
    if ((labels != null && labels.length != ids.length) || (mask != null && mask.length != ids.length))
      throw new OsloException(Status.SHAPE.swigValue(), "trainStep: labels or mask rows differ from ids rows");
    return trainStep(optimizer, rows("trainStep: ids", ids, seq),
        rows("trainStep: labels", labels, seq), rows("trainStep: mask", mask, seq), ids.length,
        seq);
  }

  /** One micro-batch with the labels made from the ids and mask. Collective. */
  public TrainStepResult trainStep(long[][] ids, long[][] mask, Optimizer optimizer) {
    return trainStep(ids, null, mask, optimizer);
  }

  /**
   * Backward from a loss on the last hidden states (an encoder's, or any
   * model's {@link ModelOutput#HIDDEN} output), on token-id rows of equal
   * length: {@code gradHidden} is d loss / d hidden states, row-major
   * [batch, seq, hidden] as {@link #forward(long[], ModelOutput)} returns
   * them; {@code mask} null is all 1, {@code tokenTypeIds} null all 0, and
   * {@code optimizer} null only accumulates the gradients (else it steps
   * after every gradAccumSteps micro-batches). The result's loss is 0.
   * Collective.
   */
  public TrainStepResult backward(long[][] ids, long[][] mask, long[][] tokenTypeIds,
      float[] gradHidden, Optimizer optimizer) {
    if (ids.length == 0)
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(), "backward: no rows");
    if (gradHidden == null)
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(), "backward: grad_hidden is null");
    int seq = ids[0].length;
    if ((mask != null && mask.length != ids.length)
        || (tokenTypeIds != null && tokenTypeIds.length != ids.length))
      throw new OsloException(Status.SHAPE.swigValue(),
          "backward: mask or token_type_ids rows differ from ids rows");
    java.nio.FloatBuffer grad = gradHidden.length == 0 ? null : directFloats(gradHidden.length);
    if (grad != null) grad.put(gradHidden);
    return backward(optimizer, rows("backward: ids", ids, seq), rows("backward: mask", mask, seq),
        rows("backward: token_type_ids", tokenTypeIds, seq), ids.length, seq, grad);
  }

  /**
   * Backward of one sequence of token ids from {@code gradHidden} [seq,
   * hidden] (row-major, as {@link #forward(long[], ModelOutput)} returns the
   * hidden states), mask all 1, token types all 0. Collective.
   */
  public TrainStepResult backward(long[] ids, float[] gradHidden, Optimizer optimizer) {
    return backward(new long[][] {ids}, null, null, gradHidden, optimizer);
  }

  /**
   * The pipeline schedule of this model's last trainStep: {this rank's
   * compute seconds, its wall seconds, the bubble over all stages} (1 - the
   * stages' compute summed / (stages x the longest wall time)); zeros
   * before a step and after one that ran no schedule (one stage,
   * microBatches 1). Not collective.
   */
  public double[] pipelineStats() {
    java.nio.DoubleBuffer out =
        java.nio.ByteBuffer.allocateDirect(24).order(java.nio.ByteOrder.nativeOrder()).asDoubleBuffer();
    pipelineStats(out);
    return new double[] {out.get(0), out.get(1), out.get(2)};
  }
%}
