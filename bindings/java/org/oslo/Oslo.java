package org.oslo;

/**
 * The library as a whole: loading the JNI library, the version, the
 * checkpoint tools that need no context (merge, reshard, inspect), and chat
 * templates without a tokenizer (applyChatTemplate).
 */
public final class Oslo {
  private static boolean loaded;

  private Oslo() {}

  /**
   * Loads liboslo_jni (and liboslo) once, from the first of:
   *
   * <ol>
   *   <li>the file named by the environment variable {@code OSLO_JNI_LIBRARY};
   *   <li>the folder named by the system property {@code oslo.library.path}
   *       (its liboslo.so.0 first when it has one, then liboslo_jni.so);
   *   <li>{@code java.library.path}, when one of its folders holds
   *       liboslo_jni.so ({@code -Djava.library.path=build/bindings/java});
   *   <li>the jar: its {@code /native/linux-x86_64/} libraries, extracted into
   *       a private per-user cache checked by SHA-256 (the system property
   *       {@code oslo.cache.dir}, else {@code $XDG_CACHE_HOME/oslo}, else
   *       {@code ~/.cache/oslo}), then loaded.
   * </ol>
   *
   * Every class of org.oslo calls it before its first native call, so calling
   * it is optional; it reports a failure as an {@link OsloException}
   * (unsupported platform, unwritable cache, a jar whose natives do not match
   * their digests, a library that does not load) where the first native call
   * would raise it wrapped in an {@link ExceptionInInitializerError}.
   */
  public static synchronized void load() {
    if (loaded) return;
    String path = System.getenv("OSLO_JNI_LIBRARY");
    String dir = System.getProperty("oslo.library.path");
    if (path != null && !path.isEmpty()) {
      System.load(path);
    } else if (dir != null && !dir.isEmpty()) {
      java.nio.file.Path d = java.nio.file.Paths.get(dir).toAbsolutePath();
      java.nio.file.Path lib = d.resolve("liboslo.so.0");
      if (java.nio.file.Files.isRegularFile(lib)) System.load(lib.toString());
      System.load(d.resolve(System.mapLibraryName("oslo_jni")).toString());
    } else if (onLibraryPath(System.mapLibraryName("oslo_jni"))) {
      System.loadLibrary("oslo_jni");
    } else {
      NativeLoader.loadFromJar();
    }
    loaded = true;
  }

  /** Whether a folder of java.library.path holds the file. */
  private static boolean onLibraryPath(String file) {
    String path = System.getProperty("java.library.path", "");
    for (String d : path.split(java.io.File.pathSeparator)) {
      if (!d.isEmpty() && java.nio.file.Files.isRegularFile(java.nio.file.Paths.get(d, file))) {
        return true;
      }
    }
    return false;
  }

  /**
   * The run-time version of the library.
   *
   * @return e.g. "0.3.0"
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
   * Renders a conversation with a chat template of one's own, without a
   * tokenizer (oslo_chat_template_apply with no tokenizer): the special
   * tokens ({@code bos_token}, {@code eos_token}, ...) are then only what
   * the options' variables set. {@link Tokenizer#applyChatTemplate(String,
   * ChatTemplateOptions)} renders with a tokenizer's templates.
   *
   * @param chatTemplate the template's source text (Jinja2, as transformers
   *     runs it)
   * @param messagesJson a JSON array of message objects, such as
   *     {@code [{"role": "user", "content": "Hi"}]}
   * @param options null: the defaults; its chat template must be unset (the
   *     template is {@code chatTemplate})
   * @return the prompt text
   * @throws OsloException INVALID_ARGUMENT (an empty template, a template
   *     in the options too, bad messages or variables, the template's
   *     raise_exception with its text, an undefined value), FORMAT (a
   *     template that does not parse: its line and column), NOT_SUPPORTED
   */
  public static String applyChatTemplate(String chatTemplate, String messagesJson,
      ChatTemplateOptions options) {
    final String what = "applyChatTemplate";
    ChatTemplateOptions o = options == null ? new ChatTemplateOptions() : options;
    if (chatTemplate == null || chatTemplate.isEmpty())
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(),
          what + ": the chat template is empty (without a tokenizer there is no template of "
              + "its own; Tokenizer.applyChatTemplate uses the tokenizer's)");
    if (o.getChatTemplate() != null && !o.getChatTemplate().isEmpty())
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(),
          what + ": the template is given twice (as the argument and in the options)");
    java.nio.ByteBuffer m = ChatTemplateOptions.messages(what, messagesJson);
    java.nio.ByteBuffer t = ChatTemplateOptions.utf8(chatTemplate);
    java.nio.ByteBuffer v = ChatTemplateOptions.utf8(o.getVariablesJson());
    boolean agp = o.getAddGenerationPrompt();
    boolean cont = o.getContinueFinalMessage();
    return ChatTemplateOptions.sized(what,
        out -> capi.chat_template_apply(m, agp, t, v, cont, out));
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
