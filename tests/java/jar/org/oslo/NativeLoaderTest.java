package org.oslo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The extraction of the jar's natives into the cache (NativeLoader.extract),
 * without loading them: the natives are this build's
 * ({@code native/linux-x86_64/} on the class path, as in oslo.jar), the
 * cache a fresh temporary folder per test.
 */
class NativeLoaderTest {
  private static final String PLATFORM = "linux-x86_64";
  private Path tmp;

  @BeforeEach
  void makeTmp() throws IOException {
    tmp = Files.createTempDirectory("oslo-native-loader-test");
  }

  @AfterEach
  void removeTmp() throws IOException {
    try (Stream<Path> w = Files.walk(tmp)) {
      for (Path p : (Iterable<Path>) w.sorted(Comparator.reverseOrder())::iterator) {
        p.toFile().setWritable(true);
        Files.delete(p);
      }
    }
  }

  private static ClassLoader jar() {
    return NativeLoader.class.getClassLoader();
  }

  /** The jar's SHA256SUMS as name -> digest. */
  private static Map<String, String> sums() throws IOException {
    Map<String, String> m = new LinkedHashMap<>();
    try (InputStream in = jar().getResourceAsStream("native/" + PLATFORM + "/SHA256SUMS")) {
      assertNotNull(in, "the class path has no native/" + PLATFORM + "/SHA256SUMS");
      for (String line : new String(in.readAllBytes(), StandardCharsets.UTF_8).split("\n")) {
        m.put(line.substring(66), line.substring(0, 64));
      }
    }
    return m;
  }

  /** Each cached file's inode and modification time. */
  private static Map<String, String> identities(Path dir) throws IOException {
    Map<String, String> m = new LinkedHashMap<>();
    for (String name : sums().keySet()) {
      BasicFileAttributes a = Files.readAttributes(dir.resolve(name), BasicFileAttributes.class);
      m.put(name, a.fileKey() + " " + a.lastModifiedTime().toMillis());
    }
    return m;
  }

  private static void assertVerified(Path dir) throws IOException {
    for (Map.Entry<String, String> e : sums().entrySet()) {
      assertEquals(e.getValue(), NativeLoader.fileSha256(dir.resolve(e.getKey())), e.getKey());
    }
  }

  /** The jar carries liboslo, the JNI library and the shim; extraction verifies them. */
  @Test
  void extractsIntoEmptyCache() throws IOException {
    Map<String, String> sums = sums();
    String[] carried = {"liboslo.so.0", "liboslo_jni.so", "liboslo_sentencepiece.so"};
    for (String name : carried) {
      assertTrue(sums.containsKey(name), "SHA256SUMS lists " + name + ": " + sums);
    }
    Path root = tmp.resolve("cache");
    Path dir = NativeLoader.extract(jar(), PLATFORM, root);
    assertEquals(root, dir.getParent());
    byte[] listed;
    try (InputStream in = jar().getResourceAsStream("native/" + PLATFORM + "/SHA256SUMS")) {
      listed = in.readAllBytes();
    }
    assertEquals(NativeLoader.hex(NativeLoader.sha256(listed)), dir.getFileName().toString(),
        "the folder is named by the SHA-256 of SHA256SUMS");
    assertVerified(dir);
    assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(root)));
    assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(dir)));
    try (Stream<Path> l = Files.list(dir)) {
      assertEquals(sums.size(), l.count(), "no temporary file is left");
    }
  }

  /** A second extraction keeps the verified files (same inode, same time). */
  @Test
  void secondLoadReusesCache() throws Exception {
    Path root = tmp.resolve("cache");
    Path dir = NativeLoader.extract(jar(), PLATFORM, root);
    Map<String, String> first = identities(dir);
    Thread.sleep(20);
    assertEquals(dir, NativeLoader.extract(jar(), PLATFORM, root));
    assertEquals(first, identities(dir));
  }

  /**
   * A cached library altered, cut short (as a half-written copy) or removed
   * is found by its digest and written again; the others are kept.
   */
  @Test
  void corruptedCachedFileIsReplaced() throws Exception {
    Path root = tmp.resolve("cache");
    Path dir = NativeLoader.extract(jar(), PLATFORM, root);
    Map<String, String> first = identities(dir);
    Path lib = dir.resolve("liboslo.so.0");
    byte[] bytes = Files.readAllBytes(lib);
    bytes[bytes.length / 2] ^= 1;
    Files.write(lib, bytes);
    Path jni = dir.resolve("liboslo_jni.so");
    byte[] half = Files.readAllBytes(jni);
    Files.write(jni, java.util.Arrays.copyOf(half, half.length / 2));
    Files.delete(dir.resolve("liboslo_sentencepiece.so"));
    // Restored: the digests are the listed ones again.
    assertEquals(dir, NativeLoader.extract(jar(), PLATFORM, root));
    assertVerified(dir);
    Map<String, String> again = identities(dir);
    assertNotEquals(first.get("liboslo.so.0"), again.get("liboslo.so.0"));
    assertNotEquals(first.get("liboslo_jni.so"), again.get("liboslo_jni.so"));
  }

  /** JVMs extracting at once (here threads, each with its own writes) all get whole files. */
  @Test
  void concurrentExtractionIsAtomic() throws Exception {
    Path root = tmp.resolve("cache");
    ExecutorService pool = Executors.newFixedThreadPool(4);
    try {
      List<Future<Path>> done = new ArrayList<>();
      for (int i = 0; i < 8; ++i) {
        Callable<Path> c = () -> NativeLoader.extract(jar(), PLATFORM, root);
        done.add(pool.submit(c));
      }
      Path dir = done.get(0).get();
      for (Future<Path> f : done) assertEquals(dir, f.get());
      assertVerified(dir);
      try (Stream<Path> l = Files.list(dir)) {
        assertEquals(sums().size(), l.count(), "no temporary file is left");
      }
    } finally {
      pool.shutdownNow();
    }
  }

  /** A dead JVM's temporary file is removed once old; one being written is kept. */
  @Test
  void staleTemporaryFilesAreRemoved() throws Exception {
    Path root = tmp.resolve("cache");
    Path dir = NativeLoader.extract(jar(), PLATFORM, root);
    Path stale = Files.writeString(dir.resolve(".liboslo.so.0.1234.tmp"), "half");
    Files.setLastModifiedTime(stale, java.nio.file.attribute.FileTime.fromMillis(
        System.currentTimeMillis() - NativeLoader.STALE_TEMPORARY_MILLIS - 1000));
    Path fresh = Files.writeString(dir.resolve(".liboslo_jni.so.5678.tmp"), "being written");
    NativeLoader.extract(jar(), PLATFORM, root);
    assertTrue(Files.notExists(stale), "the stale temporary file is left");
    assertTrue(Files.exists(fresh), "a fresh temporary file is removed");
  }

  /** A jar whose library is not what its SHA256SUMS says is refused, nothing cached. */
  @Test
  void tamperedJarIsRefused() throws Exception {
    Path fake = tmp.resolve("jar");
    Path nat = Files.createDirectories(fake.resolve("native/" + PLATFORM));
    String good = NativeLoader.hex(NativeLoader.sha256("liboslo".getBytes(StandardCharsets.UTF_8)));
    Files.writeString(nat.resolve("liboslo.so.0"), "altered");
    Files.writeString(nat.resolve("liboslo_jni.so"), "jni");
    String jni = NativeLoader.hex(NativeLoader.sha256("jni".getBytes(StandardCharsets.UTF_8)));
    Files.writeString(nat.resolve("SHA256SUMS"),
        good + "  liboslo.so.0\n" + jni + "  liboslo_jni.so\n");
    Path root = tmp.resolve("cache");
    try (URLClassLoader cl = new URLClassLoader(new URL[] {fake.toUri().toURL()}, null)) {
      OsloException e =
          assertThrows(OsloException.class, () -> NativeLoader.extract(cl, PLATFORM, root));
      assertEquals(Status.FORMAT, e.status(), e.toString());
      assertTrue(e.getMessage().contains("hash mismatch") && e.getMessage().contains(good),
          e.getMessage());
      try (Stream<Path> w = Files.walk(root)) {
        assertEquals(0, w.filter(Files::isRegularFile).count(), "nothing is left in the cache");
      }
      // A SHA256SUMS that leaves out liboslo_jni.so.
      Files.writeString(nat.resolve("SHA256SUMS"), good + "  liboslo.so.0\n");
      e = assertThrows(OsloException.class, () -> NativeLoader.extract(cl, PLATFORM, root));
      assertTrue(e.getMessage().contains("does not list liboslo_jni.so"), e.getMessage());
    }
  }

  /** A jar without natives for the platform says so. */
  @Test
  void jarWithoutNativesIsRefused() throws IOException {
    try (URLClassLoader empty = new URLClassLoader(new URL[] {tmp.toUri().toURL()}, null)) {
      OsloException e = assertThrows(OsloException.class,
          () -> NativeLoader.extract(empty, PLATFORM, tmp.resolve("cache")));
      assertEquals(Status.NOT_SUPPORTED, e.status());
      assertTrue(e.getMessage().contains("carries no native libraries for linux-x86_64"),
          e.getMessage());
    }
    OsloException e = assertThrows(OsloException.class,
        () -> NativeLoader.extract(jar(), "linux-aarch64", tmp.resolve("cache")));
    assertTrue(e.getMessage().contains("linux-aarch64"), e.getMessage());
  }

  /** Only linux-x86_64 has natives; others are named in the error. */
  @Test
  void unsupportedPlatformIsNamed() {
    assertEquals("linux-x86_64", NativeLoader.platform("Linux", "amd64"));
    assertEquals("linux-x86_64", NativeLoader.platform("Linux", "x86_64"));
    for (String[] p : new String[][] {{"Windows 11", "amd64"}, {"Mac OS X", "aarch64"},
             {"Linux", "aarch64"}}) {
      OsloException e =
          assertThrows(OsloException.class, () -> NativeLoader.platform(p[0], p[1]));
      assertEquals(Status.NOT_SUPPORTED, e.status());
      assertTrue(e.getMessage().contains(p[0] + " on " + p[1])
              && e.getMessage().contains("linux-x86_64"),
          e.getMessage());
    }
  }

  /** A cache that cannot be created (here below a regular file) is an IO error naming it. */
  @Test
  void unwritableCacheIsReported() throws IOException {
    Path file = Files.writeString(tmp.resolve("a-file"), "x");
    Path root = file.resolve("cache");
    OsloException e =
        assertThrows(OsloException.class, () -> NativeLoader.extract(jar(), PLATFORM, root));
    assertEquals(Status.IO, e.status());
    String m = e.getMessage();
    assertTrue(m.contains(root.toString()) && m.contains("oslo.cache.dir"), m);
  }

  /** A cache others may write to is not loaded from. */
  @Test
  void sharedCacheIsRefused() throws IOException {
    Path root = Files.createDirectory(tmp.resolve("shared"));
    Files.setPosixFilePermissions(root, PosixFilePermissions.fromString("rwxrwxrwx"));
    OsloException e =
        assertThrows(OsloException.class, () -> NativeLoader.extract(jar(), PLATFORM, root));
    assertEquals(Status.IO, e.status());
    assertTrue(e.getMessage().contains("not a private folder"), e.getMessage());
  }
}
