package org.oslo;

/**
 * The library as a whole: loading the JNI library, the version, and the
 * checkpoint tools that need no context (merge, reshard, inspect).
 */
public final class Oslo {
  private static boolean loaded;

  private Oslo() {}

  /**
   * Loads liboslo_jni once: from the file named by the environment variable
   * {@code OSLO_JNI_LIBRARY}, else from {@code java.library.path}. Every class
   * of org.oslo calls it before its first native call, so calling it is
   * optional (it reports a missing library early).
   */
  public static synchronized void load() {
    if (loaded) return;
    String path = System.getenv("OSLO_JNI_LIBRARY");
    if (path != null && !path.isEmpty()) System.load(path);
    else System.loadLibrary("oslo_jni");
    loaded = true;
  }

  /**
   * The run-time version of the library.
   *
   * @return e.g. "0.2.0"
   */
  public static String version() {
    return capi.version_string();
  }

  /**
   * The static name of a status.
   *
   * @param status a status
   * @return e.g. "OSLO_ERR_TIMEOUT: timed out"
   */
  public static String statusString(Status status) {
    return capi.status_string(status.swigValue());
  }

  /**
   * Merges a parallel checkpoint (or rewrites any Hugging Face folder) into
   * one Hugging Face folder, keeping the dtype, one safetensors file.
   *
   * @param src the checkpoint
   * @param dst the new folder (must not be a non-empty folder)
   */
  public static void merge(String src, String dst) {
    capi.model_merge(src, dst, -1, java.math.BigInteger.ZERO, false);
  }

  /**
   * Merges a parallel checkpoint into one Hugging Face folder.
   *
   * @param src the checkpoint
   * @param dst the new folder
   * @param dtype the float dtype to write, or null to keep the checkpoint's
   * @param maxShardBytes 0 for one model.safetensors, else the largest shard
   * @param overwrite replace an existing non-empty {@code dst}
   */
  public static void merge(String src, String dst, DType dtype, long maxShardBytes,
      boolean overwrite) {
    capi.model_merge(src, dst, dtype == null ? -1 : dtype.swigValue(),
        java.math.BigInteger.valueOf(maxShardBytes), overwrite);
  }

  /**
   * Rewrites a checkpoint for another tensor-parallel size, offline.
   *
   * @param src the checkpoint or Hugging Face folder
   * @param dst the new parallel checkpoint
   * @param tensorParallelSize the new size
   */
  public static void reshard(String src, String dst, int tensorParallelSize) {
    capi.model_reshard(src, dst, tensorParallelSize);
  }

  /**
   * Describes a checkpoint (format, layout, tensors) as aligned text.
   *
   * @param path a Hugging Face folder, parallel checkpoint or safetensors file
   * @return the description
   */
  public static String inspect(String path) {
    return capi.checkpoint_inspect(path, false);
  }

  /**
   * Describes a checkpoint as JSON.
   *
   * @param path a Hugging Face folder, parallel checkpoint or safetensors file
   * @return the description as JSON text
   */
  public static String inspectJson(String path) {
    return capi.checkpoint_inspect(path, true);
  }
}
