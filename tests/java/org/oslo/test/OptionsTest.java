package org.oslo.test;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.oslo.BatchEncoding;
import org.oslo.Padding;
import org.oslo.Side;
import org.oslo.Tokenizer;

/**
 * Truncation, maxLength and padToMaxLength of Tokenizer.encodeBatch, and
 * BatchEncoding.pad of rows of ids (oslo_pad_batch), against Hugging
 * Face's tokenizer(texts, truncation=True, max_length=..., padding=...) and
 * tokenizer.pad (tests/tokenizer/batch_reference.txt and pad_reference.txt,
 * written by the make_*_reference.py next to them). ctest:
 * java_users_tokenizer_options.
 */
public class OptionsTest {
  /** A case: its head fields, and per row the text or row and the padded ids and mask. */
  static final class Case {
    String[] head;
    List<String> items = new ArrayList<>();
    List<long[]> ids = new ArrayList<>();
    List<long[]> mask = new ArrayList<>();
  }

  static List<Case> read(String property, int headFields, String item) throws Exception {
    List<String> lines = Files.readAllLines(Path.of(OsloTest.property(property)));
    lines.removeIf(l -> l.startsWith("#"));
    List<Case> cases = new ArrayList<>();
    for (int i = 0; i < lines.size();) {
      String[] h = lines.get(i).split(" ");
      assertTrue(h[0].equals("case") && h.length == headFields + 1, lines.get(i));
      Case c = new Case();
      c.head = java.util.Arrays.copyOfRange(h, 1, h.length);
      int n = Integer.parseInt(h[headFields]);
      for (int k = 0; k < n; ++k) {
        String t = lines.get(i + 1 + 3 * k);
        assertTrue(t.equals(item) || t.startsWith(item + " "), t);
        c.items.add(t.equals(item) ? "" : t.substring(item.length() + 1));
        c.ids.add(UsersTest.longs(lines.get(i + 2 + 3 * k)));
        c.mask.add(UsersTest.longs(lines.get(i + 3 + 3 * k)));
      }
      cases.add(c);
      i += 1 + 3 * n;
    }
    return cases;
  }

  static Side side(String s) {
    return s.equals("left") ? Side.LEFT : Side.RIGHT;
  }

  /** java_users_tokenizer_options: both references, and bad options named. */
  @Test
  void usersTokenizerOptions() throws Exception {
    List<Case> cases = read("oslo.batchref", 8, "text");
    assertTrue(cases.size() >= 10, cases.size() + " batch cases");
    for (Case c : cases) {
      // fixture side pad special max_length trunc_side padding n
      try (Tokenizer tok = new Tokenizer(UsersTest.fixtures().resolve(c.head[0]).toString())) {
        long maxLength = Long.parseLong(c.head[4]);
        BatchEncoding b = tok.encodeBatch(c.items.toArray(new String[0]),
            c.head[1].equals("left") ? Padding.LEFT : Padding.RIGHT, c.head[3].equals("1"),
            c.head[2].equals("default") ? -1 : Long.parseLong(c.head[2]), maxLength,
            maxLength > 0, side(c.head[5]), c.head[6].equals("max_length"));
        String what = String.join(" ", c.head);
        assertArrayEquals(c.ids.toArray(new long[0][]), b.getInputIds(), what);
        assertArrayEquals(c.mask.toArray(new long[0][]), b.getAttentionMask(), what);
      }
    }
    cases = read("oslo.padref", 7, "row");
    assertTrue(cases.size() >= 9, cases.size() + " pad cases");
    for (Case c : cases) {
      // side pad max_length truncation trunc_side padding n
      long[][] rows = new long[c.items.size()][];
      for (int i = 0; i < rows.length; ++i) rows[i] = UsersTest.longs("row " + c.items.get(i));
      BatchEncoding b = BatchEncoding.pad(rows, Long.parseLong(c.head[1]), side(c.head[0]),
          Long.parseLong(c.head[2]), c.head[3].equals("1"), side(c.head[4]),
          c.head[5].equals("max_length"));
      String what = "pad " + String.join(" ", c.head);
      assertArrayEquals(c.ids.toArray(new long[0][]), b.getInputIds(), what);
      assertArrayEquals(c.mask.toArray(new long[0][]), b.getAttentionMask(), what);
    }
    // The short form: right padding to the longest.
    BatchEncoding p = BatchEncoding.pad(new long[][] {{5, 6}, {}, {7}}, 9);
    assertArrayEquals(new long[][] {{5, 6}, {9, 9}, {7, 9}}, p.getInputIds());
    assertArrayEquals(new long[][] {{1, 1}, {0, 0}, {1, 0}}, p.getAttentionMask());
    assertEquals(3, p.size());
    // Bad input: named errors, never a crash.
    UsersTest.refused("n is 0", () -> BatchEncoding.pad(new long[0][], 0));
    UsersTest.refused("rows are null", () -> BatchEncoding.pad(null, 0));
    UsersTest.refused("row 1 is null", () -> BatchEncoding.pad(new long[][] {{1}, null}, 0));
    UsersTest.refused("pad_id -1", () -> BatchEncoding.pad(new long[][] {{1}}, -1));
    UsersTest.refused("row 0 has 3 ids, more than max_length 2", () -> BatchEncoding.pad(
        new long[][] {{1, 2, 3}, {4}}, 0, Side.RIGHT, 2, false, Side.RIGHT, false));
    UsersTest.refused("max_length is 0 but pad_to_max_length", () -> BatchEncoding.pad(
        new long[][] {{1}}, 0, Side.RIGHT, 0, false, Side.RIGHT, true));
    UsersTest.refused("side is null", () -> BatchEncoding.pad(
        new long[][] {{1}}, 0, null, 0, false, Side.RIGHT, false));
    try (Tokenizer tok = new Tokenizer(UsersTest.fixtures().resolve("bert-tiny").toString())) {
      String[] texts = {"a b c d e", "f"};
      UsersTest.refused("text 0 has", () -> tok.encodeBatch(texts, Padding.RIGHT, true, -1, 3,
          false, Side.RIGHT, false));
      UsersTest.refused("shorter than its 2 special tokens", () -> tok.encodeBatch(texts,
          Padding.RIGHT, true, -1, 1, true, Side.RIGHT, false));
      UsersTest.refused("max_length is 0 but truncation", () -> tok.encodeBatch(texts,
          Padding.RIGHT, true, -1, 0, true, Side.RIGHT, false));
      UsersTest.refused("padToMaxLength needs", () -> tok.encodeBatch(texts, Padding.NONE, true,
          -1, 4, false, Side.RIGHT, true));
      UsersTest.refused("maxLength -1", () -> tok.encodeBatch(texts, Padding.RIGHT, true, -1, -1,
          false, Side.RIGHT, false));
      // Padding.NONE with truncation: each row cut, unpadded.
      BatchEncoding b = tok.encodeBatch(texts, Padding.NONE, true, -1, 3, true, Side.LEFT, false);
      long[] full = tok.encode(texts[0]);
      assertArrayEquals(new long[] {full[0], full[full.length - 2], full[full.length - 1]},
          b.getInputIds()[0]);
      assertArrayEquals(tok.encode(texts[1]), b.getInputIds()[1]);
    }
  }
}
