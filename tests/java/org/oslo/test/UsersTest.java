package org.oslo.test;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.oslo.BatchEncoding;
import org.oslo.Context;
import org.oslo.GenerateOptions;
import org.oslo.Generation;
import org.oslo.Group;
import org.oslo.Model;
import org.oslo.ModelOutput;
import org.oslo.OsloException;
import org.oslo.Padding;
import org.oslo.Status;
import org.oslo.Tokenizer;

/**
 * What users pass (issue 19): rows of token ids of any lengths, texts and
 * the tokenizer's batch call, against independent references: Hugging
 * Face's tokenizer output (tests/bindings/tokenizer_batch_reference.txt),
 * transformers' greedy tokens (reference.json), each row alone, and
 * sentence-transformers' MiniLM embeddings. ctest: java_users_*.
 */
public class UsersTest {
  static Path fixtures() {
    return Path.of(OsloTest.property("oslo.fixture")).getParent();
  }

  /** One case of tokenizer_batch_reference.txt. */
  static final class TokCase {
    String fixture;
    Padding side;
    long pad;
    boolean special;
    List<String> texts = new ArrayList<>();
    List<long[]> ids = new ArrayList<>();
    List<long[]> mask = new ArrayList<>();
  }

  static long[] longs(String line) {
    String[] f = line.trim().split(" ");
    long[] v = new long[f.length - 1];
    for (int i = 1; i < f.length; ++i) v[i - 1] = Long.parseLong(f[i]);
    return v;
  }

  static List<TokCase> readReference() throws Exception {
    List<TokCase> cases = new ArrayList<>();
    // fixture side pad special n
    for (OptionsTest.Case r : OptionsTest.read("oslo.tokref", 5, "text")) {
      TokCase c = new TokCase();
      c.fixture = r.head[0];
      c.side = r.head[1].equals("left") ? Padding.LEFT : Padding.RIGHT;
      c.pad = r.head[2].equals("default") ? -1 : Long.parseLong(r.head[2]);
      c.special = r.head[3].equals("1");
      c.texts = r.items;
      c.ids = r.ids;
      c.mask = r.mask;
      cases.add(c);
    }
    return cases;
  }

  static void refused(String words, Executable call) {
    OsloException e = assertThrows(OsloException.class, call);
    assertEquals(Status.INVALID_ARGUMENT, e.status(), e.toString());
    assertTrue(e.getMessage().contains(words), words + " in: " + e.getMessage());
  }

  static float maxDiff(float[] a, float[] b) {
    assertEquals(a.length, b.length);
    float d = 0;
    for (int i = 0; i < a.length; ++i) d = Math.max(d, Math.abs(a[i] - b[i]));
    return d;
  }

  /**
   * users_tokenizer_batch: encodeBatch equals Hugging Face's
   * tokenizer(texts, padding=True) (GPT-2, BERT, LLaMA and the real MiniLM;
   * both sides); Padding.NONE keeps the rows; bad input is refused.
   */
  @Test
  void usersTokenizerBatch() throws Exception {
    int done = 0;
    for (TokCase c : readReference()) {
      String folder = c.fixture.equals("minilm") ? OsloTest.property("oslo.minilm")
                                                 : fixtures().resolve(c.fixture).toString();
      try (Tokenizer tok = new Tokenizer(folder)) {
        String[] texts = c.texts.toArray(new String[0]);
        BatchEncoding b = tok.encodeBatch(texts, c.side, c.special, c.pad);
        String what = c.fixture + " " + c.side;
        assertEquals(texts.length, b.size());
        assertArrayEquals(c.ids.toArray(new long[0][]), b.getInputIds(), what);
        assertArrayEquals(c.mask.toArray(new long[0][]), b.getAttentionMask(), what);
        BatchEncoding none = tok.encodeBatch(texts, Padding.NONE, c.special, c.pad);
        for (int i = 0; i < texts.length; ++i) {
          assertArrayEquals(tok.encode(texts[i], c.special), none.getInputIds()[i], what);
          assertArrayEquals(b.tokens(i), none.getInputIds()[i], what);
          long[] ones = new long[none.getInputIds()[i].length];
          Arrays.fill(ones, 1);
          assertArrayEquals(ones, none.getAttentionMask()[i], what);
        }
        if (c.special && c.pad < 0 && c.side == Padding.RIGHT) {
          BatchEncoding d = tok.encodeBatch(c.texts, Padding.RIGHT); // the list form
          assertArrayEquals(b.getInputIds(), d.getInputIds(), what);
        }
        ++done;
      }
    }
    assertEquals(7, done);
    try (Tokenizer tok = new Tokenizer(fixtures().resolve("gpt2-tiny").toString())) {
      // No padding token: 0 under padding.
      long[][] ids = tok.encodeBatch(new String[] {"a b c d", "a"}, Padding.RIGHT).getInputIds();
      for (int t = 1; t < ids[0].length; ++t) assertEquals(0, ids[1][t]);
      refused("the texts are null", () -> tok.encodeBatch((String[]) null, Padding.RIGHT));
      refused("no texts", () -> tok.encodeBatch(new String[0], Padding.RIGHT));
      refused("text 1 is null", () -> tok.encodeBatch(new String[] {"a", null}, Padding.LEFT));
      refused("the padding is null", () -> tok.encodeBatch(new String[] {"a"}, null));
      refused("the text is null", () -> tok.encode(null));
      // The result is a copy: changing it changes nothing.
      BatchEncoding b = tok.encodeBatch(new String[] {"a b"}, Padding.RIGHT);
      b.getInputIds()[0][0] = -5;
      assertTrue(b.getInputIds()[0][0] != -5);
    }
  }

  /**
   * users_embed_ragged: BERT (bert-tiny) rows of different lengths, texts
   * and a tokenizer's batch: a ragged batch equals each row alone (1e-5),
   * texts equal their ids; forward of ragged rows equals each row alone;
   * bad input is refused, named.
   */
  @Test
  void usersEmbedRagged() throws Exception {
    String fixture = fixtures().resolve("bert-tiny").toString();
    String[] texts = {"This License applies to any program or other work which contains a notice",
        "no warranty", "Hello world!", "THE QUICK BROWN FOX"};
    Tokenizer tok;
    try (Context ctx = new Context(); Model m = new Model(ctx, fixture)) {
      assertEquals(fixture, m.path());
      tok = m.tokenizer();
      assertSame(tok, m.tokenizer());
      long[][] rows = new long[texts.length][];
      for (int i = 0; i < texts.length; ++i) rows[i] = tok.encode(texts[i]);
      float[][] e = m.embed(rows);
      for (int i = 0; i < rows.length; ++i) {
        float d = maxDiff(e[i], m.embed(new long[][] {rows[i]})[0]);
        assertTrue(d <= 1e-5, "row " + i + ": ragged batch vs alone " + d);
      }
      assertArrayEquals(e, m.embed(texts), "texts == their ids");
      assertArrayEquals(e, m.embed(Arrays.asList(texts), true), "a list of texts");
      float[][] fromBatch = m.embed(tok.encodeBatch(texts, Padding.RIGHT));
      for (int i = 0; i < rows.length; ++i) assertTrue(maxDiff(e[i], fromBatch[i]) <= 1e-6);
      float[][] h = m.forward(rows, ModelOutput.HIDDEN);
      for (int i = 0; i < rows.length; ++i) {
        assertEquals(rows[i].length * 64, h[i].length);
        float d = maxDiff(h[i], m.forward(rows[i], ModelOutput.HIDDEN));
        assertTrue(d <= 1e-5, "forward row " + i + ": batch vs alone " + d);
      }
      refused("the ids are null", () -> m.embed((long[][]) null));
      refused("no rows", () -> m.embed(new long[0][]));
      refused("row 1 is null", () -> m.embed(new long[][] {{5}, null}));
      refused("row 0 has no tokens", () -> m.embed(new long[][] {{}}));
      refused("the texts are null", () -> m.embed((String[]) null));
      refused("no texts", () -> m.embed(new String[0]));
      refused("text 1 is null", () -> m.embed("a", null));
      refused("the batch is null", () -> m.embed((BatchEncoding) null));
      refused("row 0 has no tokens", () -> m.forward(new long[][] {{}}, ModelOutput.HIDDEN));
      refused("the output kind is null", () -> m.forward(rows, null));
      OsloException x = assertThrows(OsloException.class, () -> m.embed(new long[][] {{5, 1000000}}));
      assertTrue(x.getMessage().contains("outside"), x.getMessage());
    }
    // The model's tokenizer is closed with the model.
    OsloException x = assertThrows(OsloException.class, () -> tok.encode("a"));
    assertEquals(Status.INVALID_ARGUMENT, x.status(), x.toString());
  }

  /**
   * users_generate_text: GPT-2 (gpt2-tiny): generate(text) gives a
   * Generation whose ids equal generate(tokenizer.encode(text)) and
   * transformers' greedy tokens (reference.json, for texts that encode to
   * its prompts), its text the decoded ids; arrays of texts and a
   * tokenizer's batch; bad input is refused.
   */
  @Test
  void usersGenerateText() throws Exception {
    Path fixture = fixtures().resolve("gpt2-tiny");
    String ref = Files.readString(fixture.resolve("reference.json"));
    long[] lengths = OsloTest.ints(ref, "prompt_lengths");
    try (Context ctx = new Context();
        Model m = new Model(ctx, fixture.toString());
        GenerateOptions o = new GenerateOptions(12)) {
      o.setPadTokenId(0);
      o.setEosTokenIds(334);
      Tokenizer tok = m.tokenizer();
      String[] texts = new String[lengths.length];
      long[][] prompts = new long[lengths.length][];
      long[][] want = new long[lengths.length][];
      for (int i = 0; i < texts.length; ++i) {
        long[] all = OsloTest.ints(ref, "greedy_" + i);
        prompts[i] = Arrays.copyOf(all, (int) lengths[i]);
        want[i] = Arrays.copyOfRange(all, (int) lengths[i], all.length);
        texts[i] = tok.decode(prompts[i]);
        assertArrayEquals(prompts[i], tok.encode(texts[i]), "prompt " + i + " round trip");
      }
      Generation[] g = m.generate(texts, o);
      for (int i = 0; i < texts.length; ++i) {
        assertArrayEquals(want[i], g[i].getIds(), "text " + i + " vs transformers");
        assertEquals(tok.decode(want[i], true), g[i].getText());
        Generation one = m.generate(texts[i], o);
        assertArrayEquals(want[i], one.getIds(), "text " + i + " alone");
        assertEquals(g[i].getText(), one.getText());
      }
      assertArrayEquals(want, m.generate(prompts, o), "ragged prompts");
      assertArrayEquals(want, m.generate(tok.encodeBatch(texts, Padding.LEFT, true, 0), o));
      assertArrayEquals(want, m.generate(tok.encodeBatch(texts, Padding.RIGHT), o));
      Generation story = m.generate("Once upon a time", 20);
      assertTrue(story.getIds().length >= 1 && story.getIds().length <= 20, story.toString());
      assertArrayEquals(m.generate(tok.encode("Once upon a time"), 20), story.getIds());
      refused("the prompts are null", () -> m.generate((long[][]) null, o));
      refused("no prompts", () -> m.generate(new long[0][], o));
      refused("prompt 0 has no tokens", () -> m.generate(new long[0], o));
      refused("prompt 1 is null", () -> m.generate(new long[][] {{52}, null}, o));
      refused("no texts", () -> m.generate(new String[0], o));
      refused("text 0 (\"\") has no tokens", () -> m.generate("", o));
      refused("text 0 is null", () -> m.generate((String) null, o));
      refused("the options are null", () -> m.generate(new long[] {52}, (GenerateOptions) null));
    }
  }

  /**
   * users_no_tokenizer: a model folder without tokenizer files: ids work,
   * texts fail naming the folder; setTokenizer makes texts work.
   */
  @Test
  void usersNoTokenizer() throws Exception {
    Path fixture = fixtures().resolve("gpt2-tiny");
    Path dir = Ranks.tempDir("oslo-java-notok-");
    for (String f : new String[] {"config.json", "generation_config.json", "model.safetensors"})
      Files.copy(fixture.resolve(f), dir.resolve(f));
    try (Context ctx = new Context(); Model m = new Model(ctx, dir.toString())) {
      long[] ids = m.generate(new long[] {52, 441, 221}, 4);
      assertEquals(4, ids.length);
      for (Executable call : new Executable[] {() -> m.generate("Hello", 2),
               () -> m.embed("a", "b"), () -> m.tokenizer()}) {
        OsloException e = assertThrows(OsloException.class, call);
        assertTrue(e.getMessage().contains(dir.toString())
                && e.getMessage().contains("has no tokenizer")
                && e.getMessage().contains("setTokenizer"),
            e.getMessage());
      }
      try (Tokenizer tok = new Tokenizer(fixture.toString())) {
        m.setTokenizer(tok);
        assertSame(tok, m.tokenizer());
        assertArrayEquals(ids, m.generate(tok.decode(52, 441, 221), 4).getIds());
        m.setTokenizer(null);
      }
      assertThrows(OsloException.class, () -> m.tokenizer());
    } finally {
      try (var files = Files.list(dir)) {
        for (Path p : files.toArray(Path[]::new)) Files.delete(p);
      }
      Files.delete(dir);
    }
  }

  /**
   * users_minilm_texts_tp2_w2: the real all-MiniLM-L6-v2 at TP=2, given
   * texts and the tokenizer's rows: embeddings equal to
   * sentence-transformers' (max |diff| 1e-5, cosine 0.99999); the padded
   * batch equal to transformers' ids and mask.
   */
  @Test
  void usersMinilmTextsTp2W2() throws Exception {
    String dir = OsloTest.property("oslo.minilm");
    OsloTest.Reference ref =
        new OsloTest.Reference(Path.of(OsloTest.property("oslo.minilm.reference")));
    TokCase hf = null;
    for (TokCase c : readReference())
      if (c.fixture.equals("minilm")) hf = c;
    assertEquals(Arrays.asList(ref.sentences), hf.texts);
    long[][] hfIds = hf.ids.toArray(new long[0][]);
    assertEquals(2, Ranks.world(), "runs on 2 ranks");
    Ranks.run(cfg -> {
      try (Context ctx = new Context(cfg); Model m = new Model(ctx, dir)) {
        assertEquals(2, ctx.size(Group.TENSOR));
        BatchEncoding b = m.tokenizer().encodeBatch(ref.sentences, Padding.RIGHT);
        assertArrayEquals(hfIds, b.getInputIds(), "ids as transformers");
        long[][] rows = new long[ref.sentences.length][];
        for (int i = 0; i < rows.length; ++i) rows[i] = m.tokenizer().encode(ref.sentences[i]);
        float[][][] all = {m.embed(ref.sentences), m.embed(rows), m.embed(b)};
        for (float[][] e : all) {
          for (int i = 0; i < e.length; ++i) {
            float d = maxDiff(e[i], ref.embeddings[i]);
            double cos = OsloTest.cosine(e[i], ref.embeddings[i]);
            assertTrue(d <= 1e-5 && cos >= 0.99999, "sentence " + i + ": " + d + " " + cos);
          }
        }
      }
    });
  }
}
