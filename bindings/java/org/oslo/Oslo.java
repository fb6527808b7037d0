package org.oslo;

/** Loads liboslo_jni (java.library.path, or the path in OSLO_JNI_LIBRARY). */
public final class Oslo {
  private static boolean loaded;

  private Oslo() {}

  /** Loads the JNI library once; call before any other class of org.oslo. */
  public static synchronized void load() {
    if (loaded) return;
    String path = System.getenv("OSLO_JNI_LIBRARY");
    if (path != null && !path.isEmpty()) System.load(path);
    else System.loadLibrary("oslo_jni");
    loaded = true;
  }

  /** The library's version ("0.2.0"). */
  public static String version() {
    load();
    return capi.version_string();
  }
}
