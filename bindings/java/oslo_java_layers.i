/*
 * oslo_java_layers.i - the Java part of the tensor-parallel layers and the
 * parameter sets (bindings/layers.i).
 *
 * Included by java/oslo_java.i, before oslo.h: the hand-written methods
 * (javacode) of ParallelLinear, ParallelEmbedding and ParamSet, built on
 * the private raw forms (m_param, m_vocab_range, m_add*) that
 * java/oslo_java.i declares.
 */

%typemap(javacode) struct oslo_parallel_linear %{
  private Object context;

  /** The context this layer was made in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the layer and its parameters; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** A column-parallel f32 layer with bias: each rank holds out/tp output features. */
  public static ParallelLinear column(Context ctx, long inFeatures, long outFeatures) {
    return column(ctx, inFeatures, outFeatures, true, false);
  }

  /** A column-parallel f32 layer; {@code gatherOutput}: all-gather the output. */
  public static ParallelLinear column(Context ctx, long inFeatures, long outFeatures,
      boolean bias, boolean gatherOutput) {
    return new ParallelLinear(ctx, LinearKind.COLUMN, inFeatures, outFeatures, bias,
        gatherOutput, true, DType.F32);
  }

  /** A row-parallel f32 layer with bias taking the column layer's split input. */
  public static ParallelLinear row(Context ctx, long inFeatures, long outFeatures) {
    return row(ctx, inFeatures, outFeatures, true, true);
  }

  /** A row-parallel f32 layer; {@code inputIsParallel}: the input is already split. */
  public static ParallelLinear row(Context ctx, long inFeatures, long outFeatures,
      boolean bias, boolean inputIsParallel) {
    return new ParallelLinear(ctx, LinearKind.ROW, inFeatures, outFeatures, bias, false,
        inputIsParallel, DType.F32);
  }

  private Tensor borrowed(int which) {
    Tensor t = param(which);
    return t == null ? null : t.keep(context, null, this);
  }

  /** This rank's slice of the weight (borrowed: valid while the layer lives). */
  public Tensor weight() {
    return borrowed(0);
  }

  /** This rank's slice of the bias, or null (borrowed). */
  public Tensor bias() {
    return borrowed(1);
  }

  /** The weight's gradient (borrowed). */
  public Tensor gradWeight() {
    return borrowed(2);
  }

  /** The bias's gradient, or null (borrowed). */
  public Tensor gradBias() {
    return borrowed(3);
  }

  /** The backward pass without the input gradient (the first layer's). */
  public void backward(Tensor input, Tensor gradOutput) {
    backward(input, gradOutput, null);
  }
%}
%typemap(javacode) struct oslo_parallel_embedding %{
  private Object context;

  /** The context this layer was made in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the layer and its table; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** An f32 vocabulary-parallel embedding. */
  public ParallelEmbedding(Context ctx, long vocabSize, long hiddenSize) {
    this(ctx, vocabSize, hiddenSize, DType.F32);
  }

  /** The first vocabulary row this rank holds. */
  public long vocabStart() {
    return vocabRange(0);
  }

  /** One past the last real vocabulary row this rank holds. */
  public long vocabEnd() {
    return vocabRange(1);
  }

  /** The rows this rank holds, padding included. */
  public long localRows() {
    return vocabRange(2);
  }

  /** This rank's rows of the table (borrowed: valid while the layer lives). */
  public Tensor weight() {
    Tensor t = param(0);
    return t == null ? null : t.keep(context, null, this);
  }

  /** The table's gradient (borrowed). */
  public Tensor gradWeight() {
    Tensor t = param(1);
    return t == null ? null : t.keep(context, null, this);
  }
%}
%typemap(javacode) struct oslo_param_set %{
  private Object context;
  /** What the set borrows, kept alive while it lives. */
  private final java.util.List<Object> held = new java.util.ArrayList<>();

  /** The context this set was made in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the set (not its tensors); safe to call more than once. */
  @Override
  public void close() {
    delete();
    held.clear();
  }

  /**
   * Adds {@code tensor} (and its gradient, or null) under {@code name};
   * {@code splitDim} is the dimension the tensor-parallel ranks split, or -1
   * when each holds all of it.
   */
  public void add(String name, Tensor tensor, Tensor grad, int splitDim) {
    nativeAdd(name, tensor, grad, splitDim);
    held.add(tensor);
    if (grad != null) held.add(grad);
  }

  /** Adds a linear layer's weight and bias as PREFIX.weight and PREFIX.bias. */
  public void addLinear(String prefix, ParallelLinear layer) {
    nativeAddLinear(prefix, layer);
    held.add(layer);
  }

  /** Adds an embedding's table as PREFIX.weight. */
  public void addEmbedding(String prefix, ParallelEmbedding embedding) {
    nativeAddEmbedding(prefix, embedding);
    held.add(embedding);
  }

  /** Clips the gradients to a global L2 norm of {@code maxNorm}; returns the norm before. */
  public double clipGradNorm(double maxNorm) {
    return clipGradNorm(maxNorm, 2.0);
  }

  /** The global L2 norm of the gradients over the tensor-parallel group. */
  public double gradNorm() {
    return clipGradNorm(0.0, 2.0);
  }
%}
