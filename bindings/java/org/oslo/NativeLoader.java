package org.oslo;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Loads the native libraries oslo.jar carries: {@code /native/<os>-<arch>/}
 * holds liboslo_jni.so, liboslo.so.0, the SentencePiece shim liboslo opens
 * from its own folder (liboslo_sentencepiece.so) and {@code SHA256SUMS}, the
 * SHA-256 of each (written at build time, cmake/OsloJavaNatives.cmake).
 *
 * <p>They are copied into a per-user cache folder,
 * {@code <cache>/<sha256 of SHA256SUMS>/}, where {@code <cache>} is the
 * system property {@code oslo.cache.dir}, else {@code $XDG_CACHE_HOME/oslo},
 * else {@code ~/.cache/oslo}. A file already there is used when its SHA-256
 * is the listed one; a missing, truncated or altered one is written again
 * (to a temporary file in the same folder, renamed over it: another JVM
 * extracting at the same time never sees a partial file). The folders are
 * created private (rwx------) and refused when another user owns them or
 * they are writable by group or others. Then liboslo.so.0 and liboslo_jni.so
 * are loaded with {@link System#load}, in that order (liboslo_jni.so needs
 * liboslo.so.0; its RUNPATH {@code $ORIGIN} finds it in the same folder too).
 *
 * <p>Used by {@link Oslo#load()} when no library path names oslo_jni.
 */
final class NativeLoader {
  /** The folder of the jar's natives, below which one folder per platform. */
  static final String RESOURCE_ROOT = "native/";
  /** The list of the natives and their SHA-256, in sha256sum's format. */
  static final String SUMS = "SHA256SUMS";
  /** What is loaded, in dependency order; the rest is only extracted. */
  static final String[] LOAD_ORDER = {"liboslo.so.0", "liboslo_jni.so"};
  /** The platforms oslo.jar is built with natives for. */
  static final String[] PLATFORMS = {"linux-x86_64"};

  private static final Pattern SUM_LINE = Pattern.compile("([0-9a-f]{64}) [ *]([A-Za-z0-9._+-]+)");
  private static final Set<PosixFilePermission> PRIVATE_DIR =
      PosixFilePermissions.fromString("rwx------");
  private static final Set<PosixFilePermission> PRIVATE_FILE =
      PosixFilePermissions.fromString("rwx------");

  private NativeLoader() {}

  /**
   * The platform folder for a Java {@code os.name} and {@code os.arch}.
   *
   * @param osName e.g. "Linux"
   * @param osArch e.g. "amd64"
   * @return e.g. "linux-x86_64"
   * @throws OsloException {@link Status#NOT_SUPPORTED} for a platform oslo.jar
   *     has no natives for
   */
  static String platform(String osName, String osArch) {
    String os = osName == null ? "" : osName.toLowerCase(java.util.Locale.ROOT);
    String arch = osArch == null ? "" : osArch.toLowerCase(java.util.Locale.ROOT);
    if (arch.equals("amd64") || arch.equals("x86_64")) arch = "x86_64";
    String p = os + "-" + arch;
    for (String known : PLATFORMS) {
      if (known.equals(p)) return p;
    }
    throw new OsloException(Status.NOT_SUPPORTED.swigValue(),
        "oslo.jar has no native libraries for " + osName + " on " + osArch + " (it carries "
            + String.join(", ", PLATFORMS) + "); build oslo on this platform and run with "
            + "-Doslo.library.path=<the folder of liboslo_jni>");
  }

  /**
   * The cache folder: the system property {@code oslo.cache.dir}, else
   * {@code $XDG_CACHE_HOME/oslo} (when absolute), else {@code ~/.cache/oslo}.
   *
   * @return the folder (not created)
   */
  static Path cacheRoot() {
    String dir = System.getProperty("oslo.cache.dir");
    if (dir != null && !dir.isEmpty()) return Paths.get(dir).toAbsolutePath();
    String xdg = System.getenv("XDG_CACHE_HOME");
    if (xdg != null && Paths.get(xdg).isAbsolute()) return Paths.get(xdg, "oslo");
    return Paths.get(System.getProperty("user.home"), ".cache", "oslo");
  }

  /** Extracts this JVM's platform's natives into {@link #cacheRoot()} and loads them. */
  static void loadFromJar() {
    String p = platform(System.getProperty("os.name"), System.getProperty("os.arch"));
    Path dir = extract(NativeLoader.class.getClassLoader(), p, cacheRoot());
    for (String name : LOAD_ORDER) {
      Path lib = dir.resolve(name);
      try {
        System.load(lib.toString());
      } catch (UnsatisfiedLinkError e) {
        throw new OsloException(Status.BACKEND_UNAVAILABLE.swigValue(),
            "cannot load " + lib + " (extracted from oslo.jar): " + e.getMessage()
                + "; liboslo needs the libraries it was built with (on Debian 12 oneDNN, Gloo, "
                + "PCRE2, utf8proc, libgomp: what liboslo0 depends on)");
      }
    }
  }

  /**
   * Makes {@code root/<sha256 of SHA256SUMS>/} hold the natives of a
   * platform, verified: a file whose SHA-256 is the listed one is kept, any
   * other is replaced atomically by the jar's.
   *
   * @param loader where the {@code native/<platform>/} resources are
   * @param platform e.g. "linux-x86_64"
   * @param root the cache folder (created private when missing)
   * @return the folder holding the natives
   * @throws OsloException {@link Status#NOT_SUPPORTED} when the jar has no
   *     natives for the platform, {@link Status#FORMAT} when a native differs
   *     from its SHA256SUMS (a corrupt jar), {@link Status#IO} when the cache
   *     cannot be written or is not private
   */
  static Path extract(ClassLoader loader, String platform, Path root) {
    String base = RESOURCE_ROOT + platform + "/";
    byte[] sums = readResource(loader, base + SUMS);
    if (sums == null) {
      throw new OsloException(Status.NOT_SUPPORTED.swigValue(),
          "this oslo.jar carries no native libraries for " + platform + " (no /" + base + SUMS
              + "); use a jar built with them (mvn package in bindings/java, docs/PACKAGING.md) "
              + "or run with -Doslo.library.path=<the folder of liboslo_jni>");
    }
    Map<String, String> want = parseSums(sums, base + SUMS);
    Path dir = root.resolve(hex(sha256(sums)));
    makePrivateDir(root);
    makePrivateDir(dir);
    removeStaleTemporaries(dir);
    for (Map.Entry<String, String> e : want.entrySet()) {
      Path file = dir.resolve(e.getKey());
      if (e.getValue().equals(fileSha256(file))) continue;
      writeAtomically(loader, base + e.getKey(), e.getValue(), file);
    }
    return dir;
  }

  /** How old a temporary file must be to be taken for a dead JVM's. */
  static final long STALE_TEMPORARY_MILLIS = 10 * 60 * 1000;

  /**
   * Removes the temporary files ({@code .<name>.<random>.tmp}) a JVM that
   * died while extracting left, once older than {@link #STALE_TEMPORARY_MILLIS}
   * (one being written now is seconds old).
   */
  private static void removeStaleTemporaries(Path dir) {
    long before = System.currentTimeMillis() - STALE_TEMPORARY_MILLIS;
    try (java.util.stream.Stream<Path> files = Files.list(dir)) {
      for (Path f : (Iterable<Path>) files::iterator) {
        String n = f.getFileName().toString();
        if (!n.startsWith(".") || !n.endsWith(".tmp")) continue;
        try {
          if (Files.getLastModifiedTime(f, LinkOption.NOFOLLOW_LINKS).toMillis() < before) {
            Files.deleteIfExists(f);
          }
        } catch (IOException ignored) {
          // another JVM removed or replaced it
        }
      }
    } catch (IOException ignored) {
      // left for the next start; the libraries themselves are checked below
    }
  }

  /** The files of SHA256SUMS and their digests, checked for what must be loaded. */
  private static Map<String, String> parseSums(byte[] sums, String what) {
    Map<String, String> want = new LinkedHashMap<>();
    for (String line : new String(sums, StandardCharsets.UTF_8).split("\n")) {
      if (line.isEmpty()) continue;
      Matcher m = SUM_LINE.matcher(line);
      if (!m.matches()) {
        throw new OsloException(Status.FORMAT.swigValue(),
            "oslo.jar's " + what + " has a malformed line: \"" + line + "\"");
      }
      want.put(m.group(2), m.group(1));
    }
    for (String name : LOAD_ORDER) {
      if (!want.containsKey(name)) {
        throw new OsloException(Status.FORMAT.swigValue(),
            "oslo.jar's " + what + " does not list " + name);
      }
    }
    return want;
  }

  /** Creates a folder rwx------ (or checks an existing one is private to this user). */
  private static void makePrivateDir(Path dir) {
    try {
      if (!Files.isDirectory(dir)) {
        Files.createDirectories(dir.getParent());
        try {
          Files.createDirectory(dir, PosixFilePermissions.asFileAttribute(PRIVATE_DIR));
        } catch (FileAlreadyExistsException raced) {
          // another JVM made it: checked below like any existing folder
        }
      }
      PosixFileAttributes a =
          Files.readAttributes(dir, PosixFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
      String me = System.getProperty("user.name");
      Set<PosixFilePermission> p = a.permissions();
      if (!a.isDirectory() || !ownedByMe(dir, a, me) || p.contains(PosixFilePermission.GROUP_WRITE)
          || p.contains(PosixFilePermission.OTHERS_WRITE)) {
        throw new OsloException(Status.IO.swigValue(),
            "oslo's native-library cache " + dir + " is not a private folder (owner "
                + a.owner().getName() + ", mode " + PosixFilePermissions.toString(p)
                + "; it must be " + me + "'s and writable by nobody else): oslo does not load "
                + "libraries from it; set -Doslo.cache.dir to a private folder");
      }
    } catch (IOException | UnsupportedOperationException e) {
      throw new OsloException(Status.IO.swigValue(),
          "cannot create oslo's native-library cache " + dir + " (" + e
              + "); set -Doslo.cache.dir (or XDG_CACHE_HOME) to a writable folder");
    }
  }

  /**
   * Whether this process's user owns a file: its uid against the one of
   * /proc/self (Linux), else its owner's name against {@code user.name}.
   */
  private static boolean ownedByMe(Path file, PosixFileAttributes a, String me) {
    try {
      Object mine = Files.getAttribute(Paths.get("/proc/self"), "unix:uid");
      return mine.equals(Files.getAttribute(file, "unix:uid", LinkOption.NOFOLLOW_LINKS));
    } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
      return a.owner().getName().equals(me);
    }
  }

  /** Copies a resource next to its destination, checks its digest, renames it over. */
  private static void writeAtomically(ClassLoader loader, String resource, String sha256,
      Path file) {
    Path tmp = null;
    try {
      tmp = Files.createTempFile(file.getParent(), "." + file.getFileName() + ".", ".tmp",
          PosixFilePermissions.asFileAttribute(PRIVATE_FILE));
      MessageDigest md = newSha256();
      try (InputStream in = loader.getResourceAsStream(resource);
          OutputStream out = Files.newOutputStream(tmp)) {
        if (in == null) {
          throw new OsloException(Status.FORMAT.swigValue(),
              "oslo.jar lacks /" + resource + ", which its SHA256SUMS lists");
        }
        byte[] buf = new byte[1 << 16];
        for (int n; (n = in.read(buf)) > 0;) {
          md.update(buf, 0, n);
          out.write(buf, 0, n);
        }
      }
      String got = hex(md.digest());
      if (!got.equals(sha256)) {
        throw new OsloException(Status.FORMAT.swigValue(),
            "hash mismatch: /" + resource + " in oslo.jar has SHA-256 " + got
                + ", its SHA256SUMS says " + sha256 + " (a corrupt or altered jar)");
      }
      try {
        Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
      } catch (AtomicMoveNotSupportedException e) {
        throw new IOException("the file system cannot rename atomically", e);
      }
      tmp = null;
    } catch (IOException e) {
      throw new OsloException(Status.IO.swigValue(),
          "cannot write " + file + " in oslo's native-library cache (" + e
              + "); set -Doslo.cache.dir (or XDG_CACHE_HOME) to a writable folder");
    } finally {
      if (tmp != null) {
        try {
          Files.deleteIfExists(tmp);
        } catch (IOException ignored) {
          // the error being thrown says more
        }
      }
    }
  }

  /** A resource's bytes, or null when there is none. */
  private static byte[] readResource(ClassLoader loader, String name) {
    try (InputStream in = loader.getResourceAsStream(name)) {
      return in == null ? null : in.readAllBytes();
    } catch (IOException e) {
      throw new OsloException(Status.IO.swigValue(),
          "cannot read /" + name + " from oslo.jar: " + e);
    }
  }

  /**
   * The SHA-256 of a regular file (not followed through a link), as hex.
   *
   * @param file the file
   * @return its digest, or null when it is missing, not a regular file or unreadable
   */
  static String fileSha256(Path file) {
    if (!Files.isRegularFile(file, LinkOption.NOFOLLOW_LINKS)) return null;
    MessageDigest md = newSha256();
    try (InputStream in = Files.newInputStream(file)) {
      byte[] buf = new byte[1 << 16];
      for (int n; (n = in.read(buf)) > 0;) md.update(buf, 0, n);
    } catch (IOException e) {
      return null;
    }
    return hex(md.digest());
  }

  /**
   * The SHA-256 of bytes.
   *
   * @param data the bytes
   * @return the digest
   */
  static byte[] sha256(byte[] data) {
    return newSha256().digest(data);
  }

  private static MessageDigest newSha256() {
    try {
      return MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("every JVM has SHA-256", e);
    }
  }

  /**
   * Lower-case hexadecimal.
   *
   * @param bytes the bytes
   * @return two digits per byte
   */
  static String hex(byte[] bytes) {
    StringBuilder s = new StringBuilder(bytes.length * 2);
    for (byte b : bytes) {
      s.append(Character.forDigit((b >> 4) & 15, 16)).append(Character.forDigit(b & 15, 16));
    }
    return s.toString();
  }
}
