/*
 * oslo_java_tensor.i - the Java part of the context and the tensor
 * (bindings/tensor.i).
 *
 * Included by java/oslo_java.i, before oslo.h: the hand-written methods
 * (javacode) of Context (the count of open handles made in it, close, the
 * collectives over Tensors and float arrays, tensor) and Tensor (of, wrap,
 * keep, shape, the host copies), and tensor_wrap's javaout (the tensor
 * keeps its context and buffer alive). Their names, Javadoc and lifetimes
 * are in java/oslo_java.i.
 */

%typemap(javacode) struct oslo_context %{
  /** Open handles made in this context. */
  private int children;
  /** The native context, once closed while children were open. */
  private long deferred;

  synchronized void retain() {
    ++children;
  }

  synchronized void release() {
    if (--children == 0 && deferred != 0) {
      long p = deferred;
      deferred = 0;
      capiJNI.delete_Context(p);
    }
  }

  /**
   * A context with every default: a single rank, or the ranks of the
   * launcher whose environment this process runs in (oslo-run, torchrun).
   */
  public Context() {
    this("");
  }

  /**
   * Closes the context; safe to call more than once. The native context is
   * destroyed now, or when the last open handle made in it is closed.
   */
  @Override
  public void close() {
    delete();
  }

  /** This rank in the world group. */
  public int rank() {
    return rank(Group.WORLD);
  }

  /** The number of ranks in the world group. */
  public int size() {
    return size(Group.WORLD);
  }

  /** Sums {@code tensor} over the world group, in place. */
  public void allReduce(Tensor tensor) {
    allReduce(Group.WORLD, ReduceOp.SUM, tensor);
  }

  /** Reduces {@code tensor} with {@code op} over the world group, in place. */
  public void allReduce(ReduceOp op, Tensor tensor) {
    allReduce(Group.WORLD, op, tensor);
  }

  /** Reduces {@code values} with {@code op} over {@code group}, in place (copied twice). */
  public void allReduce(Group group, ReduceOp op, float[] values) {
    try (Tensor t = Tensor.of(this, values, values.length)) {
      allReduce(group, op, t);
      t.copyToHost(values);
    }
  }

  /** Sums {@code values} over the world group, in place (copied twice). */
  public void allReduce(float[] values) {
    allReduce(Group.WORLD, ReduceOp.SUM, values);
  }

  /** Concatenates every world rank's {@code input} along dimension 0 into {@code output}. */
  public void allGather(Tensor input, Tensor output) {
    allGather(Group.WORLD, input, output);
  }

  /** Every rank's {@code values} of {@code group}, one after another in rank order. */
  public float[] allGather(Group group, float[] values) {
    float[] out = new float[values.length * size(group)];
    try (Tensor in = Tensor.of(this, values, values.length);
        Tensor o = new Tensor(this, DType.F32, out.length)) {
      allGather(group, in, o);
      o.copyToHost(out);
    }
    return out;
  }

  /** Every world rank's {@code values}, one after another in rank order. */
  public float[] allGather(float[] values) {
    return allGather(Group.WORLD, values);
  }

  /** Copies world rank {@code root}'s {@code tensor} to every rank. */
  public void broadcast(int root, Tensor tensor) {
    broadcast(Group.WORLD, root, tensor);
  }

  /** Waits until every rank of the world group has called it. */
  public void barrier() {
    barrier(Group.WORLD);
  }

  /** A new zero-filled tensor in this context. */
  public Tensor tensor(DType dtype, long... shape) {
    return new Tensor(this, dtype, shape);
  }
%}
%typemap(javacode) struct oslo_tensor %{
  private Object context;
  /** Memory this tensor uses in place (a wrapped direct buffer). */
  private Object memory;
  /** The layer a borrowed parameter tensor belongs to. */
  private Object owner;

  Tensor keep(Object ctx, Object mem, Object own) {
    context = ctx;
    memory = mem;
    owner = own;
    if (swigCMemOwn && ctx != null) ((Context) ctx).retain();
    return this;
  }

  /** The context this tensor was made in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the tensor (a layer's parameter is only let go); safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /**
   * A tensor over the memory of a direct buffer, used in place without a copy
   * (its whole capacity, native byte order). The tensor keeps the buffer alive.
   *
   * @throws IllegalArgumentException if the buffer is not direct
   * @throws OsloException if its size is not the shape's ({@link Status#SHAPE})
   */
  public static Tensor wrap(Context ctx, java.nio.Buffer buffer, DType dtype, long... shape) {
    return capi.tensor_wrap(ctx, buffer, dtype, shape);
  }

  /** A new f32 tensor holding a copy of {@code data}, of the given shape. */
  public static Tensor of(Context ctx, float[] data, long... shape) {
    Tensor t = new Tensor(ctx, DType.F32, shape);
    try {
      t.copyFromHost(data);
    } catch (RuntimeException e) {
      t.close();
      throw e;
    }
    return t;
  }

  /** The extents of the dimensions. */
  public long[] shape() {
    long[] s = new long[ndim()];
    for (int i = 0; i < s.length; ++i) s[i] = dim(i);
    return s;
  }

  private static java.nio.FloatBuffer directFloats(int n) {
    return java.nio.ByteBuffer.allocateDirect(n * 4).order(java.nio.ByteOrder.nativeOrder())
        .asFloatBuffer();
  }

  /** Copies {@code src} (numel elements) into this f32 tensor. */
  public void copyFromHost(float[] src) {
    java.nio.FloatBuffer b = directFloats(src.length);
    b.put(src);
    copyFromHost(b);
  }

  /** Copies this f32 tensor into {@code dst} (numel elements). */
  public void copyToHost(float[] dst) {
    java.nio.FloatBuffer b = directFloats(dst.length);
    copyToHost(b);
    b.get(dst);
  }

  /** This f32 tensor's elements as a new array. */
  public float[] toFloatArray() {
    float[] out = new float[Math.toIntExact(numel())];
    copyToHost(out);
    return out;
  }
%}

/* Java: the tensor keeps its context and the direct buffer alive. */
%typemap(javaout) oslo_tensor *bind_tensor_wrap {
    long cPtr = $jnicall;
    return (cPtr == 0) ? null : new Tensor(cPtr, $owner).keep(ctx, out, null);
  }
