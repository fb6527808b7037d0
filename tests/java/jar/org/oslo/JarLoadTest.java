package org.oslo;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * oslo loaded from the jar's natives alone: no {@code java.library.path}
 * holding liboslo_jni, no {@code oslo.library.path}, no
 * {@code OSLO_JNI_LIBRARY}, a fresh empty cache ({@code oslo.cache.dir}).
 * Then real work through the loaded libraries, against the references the
 * other Java tests use. (Its own JVM: pom.xml forks one per test class.)
 */
class JarLoadTest {
  private static Path cache;

  @BeforeAll
  static void loadFromJar() throws IOException {
    assertNull(System.getenv("OSLO_JNI_LIBRARY"), "OSLO_JNI_LIBRARY must not be set");
    assertNull(System.getProperty("oslo.library.path"), "oslo.library.path must not be set");
    for (String d : System.getProperty("java.library.path", "").split(File.pathSeparator)) {
      assertFalse(!d.isEmpty() && Files.exists(Paths.get(d, "liboslo_jni.so")),
          "java.library.path holds liboslo_jni.so: " + d);
    }
    cache = Files.createTempDirectory("oslo-jar-load-test").resolve("cache");
    System.setProperty("oslo.cache.dir", cache.toString());
    Oslo.load();
  }

  /** The libraries this JVM mapped whose name starts with liboslo. */
  private static Set<String> mappedOsloLibraries() throws IOException {
    try (Stream<String> maps = Files.lines(Paths.get("/proc/self/maps"))) {
      return maps.map(l -> l.replaceAll("^(\\S+\\s+){5}", "").trim())
          .filter(p -> Paths.get(p).getFileName() != null
              && Paths.get(p).getFileName().toString().startsWith("liboslo"))
          .collect(Collectors.toCollection(TreeSet::new));
    }
  }

  /** liboslo and liboslo_jni come from the cache, extracted and verified. */
  @Test
  void loadedFromFreshCache() throws IOException {
    List<Path> dirs;
    try (Stream<Path> l = Files.list(cache)) {
      dirs = l.collect(Collectors.toList());
    }
    assertEquals(1, dirs.size(), "one folder in the fresh cache: " + dirs);
    Path dir = dirs.get(0).toRealPath();
    Set<String> mapped = mappedOsloLibraries();
    for (String name : NativeLoader.LOAD_ORDER) {
      String want = dir.resolve(name).toString();
      assertTrue(mapped.contains(want), want + " is not mapped; liboslo* mapped: " + mapped);
    }
    for (String m : mapped) assertTrue(m.startsWith(dir.toString()), m + " is outside " + dir);
    assertEquals(System.getProperty("oslo.expected.version"), Oslo.version());
  }

  /** GPT-2 tiny generates transformers' greedy tokens (reference.json), as OsloTest's. */
  @Test
  void generateGpt2Tiny() throws IOException {
    String fixture = Paths.get(System.getProperty("oslo.fixtures"), "gpt2-tiny").toString();
    String ref = Files.readString(Paths.get(fixture, "reference.json"));
    long[] lengths = ints(ref, "prompt_lengths");
    try (Context ctx = new Context("{\"tensor_parallel_size\": 1, \"timeout_seconds\": 30}");
        Model m = new Model(ctx, fixture);
        GenerateOptions o = new GenerateOptions(12)) {
      o.setPadTokenId(0);
      o.setEosTokenIds(334);
      for (int i = 0; i < lengths.length; ++i) {
        long[] want = ints(ref, "greedy_" + i);
        int len = (int) lengths[i];
        long[] got = m.generate(Arrays.copyOf(want, len), o);
        assertArrayEquals(Arrays.copyOfRange(want, len, want.length), got, "greedy " + i);
      }
    }
  }

  /**
   * A SentencePiece model: liboslo opens the shim from its own folder, the
   * cache; the ids are transformers' (llama-tiny-gqa's reference.json).
   */
  @Test
  void sentencePieceThroughCachedShim() throws IOException {
    Path fixture = Paths.get(System.getProperty("oslo.fixtures"), "llama-tiny-gqa");
    String ref = Files.readString(fixture.resolve("reference.json"));
    Matcher texts = Pattern.compile("\"prompt_texts\"\\s*:\\s*\\[\\s*\"([^\"]*)\"").matcher(ref);
    assertTrue(texts.find(), "prompt_texts");
    Matcher prompts =
        Pattern.compile("\"prompts\"\\s*:\\s*\\[\\s*\\[([^\\]]*)\\]").matcher(ref);
    assertTrue(prompts.find(), "prompts");
    long[] want = Arrays.stream(prompts.group(1).split(","))
                      .mapToLong(s -> Long.parseLong(s.trim()))
                      .toArray();
    try (Tokenizer tok = new Tokenizer(fixture.resolve("tokenizer.model").toString())) {
      long[] ids = tok.encode(texts.group(1));
      assertArrayEquals(want, Arrays.copyOf(ids, want.length), "ids of " + texts.group(1));
    }
    Path dir;
    try (Stream<Path> l = Files.list(cache)) {
      dir = l.findFirst().get().toRealPath();
    }
    String shim = dir.resolve("liboslo_sentencepiece.so").toString();
    assertTrue(mappedOsloLibraries().contains(shim), shim + " is not mapped");
  }

  private static long[] ints(String json, String key) {
    Matcher m = Pattern.compile("\"" + key + "\"\\s*:\\s*\\[([^\\]]*)\\]").matcher(json);
    assertTrue(m.find(), key);
    return Arrays.stream(m.group(1).split(",")).mapToLong(s -> Long.parseLong(s.trim())).toArray();
  }
}
