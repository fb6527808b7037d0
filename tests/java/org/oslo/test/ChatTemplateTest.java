package org.oslo.test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.oslo.ChatTemplateOptions;
import org.oslo.Oslo;
import org.oslo.OsloException;
import org.oslo.Status;
import org.oslo.Tokenizer;

/**
 * Chat templates (Tokenizer.hasChatTemplate, getChatTemplate,
 * applyChatTemplate, Oslo.applyChatTemplate): the chat_template_* cases of
 * tests/bindings/cases.txt against transformers' renders
 * (tests/bindings/chat_template_reference.txt, its format in
 * make_chat_template_reference.py; -Doslo.chatref), the tokenizer folders
 * and template files of tests/template (-Doslo.templates). ctest:
 * java_chat_template_folder, java_chat_template_options,
 * java_chat_template_errors.
 */
public class ChatTemplateTest {
  static String unescape(String s) {
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < s.length(); ++i) {
      char c = s.charAt(i);
      if (c != '\\') {
        b.append(c);
        continue;
      }
      char e = s.charAt(++i);
      switch (e) {
        case 'n': b.append('\n'); break;
        case 't': b.append('\t'); break;
        case 'r': b.append('\r'); break;
        case 's': b.append(' '); break;
        case '\\': b.append('\\'); break;
        default: throw new IllegalArgumentException("unknown escape \\" + e);
      }
    }
    return b.toString();
  }

  /** The records of case {@code which} (folder, options or errors). */
  static List<Map<String, String>> records(String which) throws Exception {
    List<Map<String, String>> all = new ArrayList<>();
    Map<String, String> cur = new HashMap<>();
    for (String line : Files.readAllLines(Path.of(OsloTest.property("oslo.chatref")),
             StandardCharsets.UTF_8)) {
      if (line.isEmpty() || line.startsWith("#")) continue;
      if (line.equals("end")) {
        if (which.equals(cur.get("case"))) all.add(cur);
        cur = new HashMap<>();
        continue;
      }
      int sp = line.indexOf(' ');
      cur.put(sp < 0 ? line : line.substring(0, sp), sp < 0 ? "" : line.substring(sp + 1));
    }
    assertFalse(all.isEmpty(), "no records of case " + which);
    return all;
  }

  /** The folders' tokenizers, loaded once each. */
  static final class Tokenizers implements AutoCloseable {
    final Path dir = Path.of(OsloTest.property("oslo.templates"));
    final Map<String, Tokenizer> loaded = new HashMap<>();

    Tokenizer get(String folder) {
      if (folder.equals("-")) return null;
      return loaded.computeIfAbsent(folder,
          f -> new Tokenizer(dir.resolve("folders").resolve(f).toString()));
    }

    String template(String spec) throws Exception {
      if (spec.equals("-")) return null;
      int sp = spec.indexOf(' ');
      String kind = spec.substring(0, sp);
      String v = spec.substring(sp + 1);
      if (kind.equals("name")) return v;
      if (kind.equals("text")) return unescape(v);
      assertEquals("file", kind, spec);
      return Files.readString(dir.resolve("fixtures").resolve(v), StandardCharsets.UTF_8);
    }

    @Override
    public void close() {
      for (Tokenizer t : loaded.values()) t.close();
    }
  }

  /** What the record's call returns (or throws). */
  static String run(Tokenizers toks, Map<String, String> r) throws Exception {
    Tokenizer tok = toks.get(r.get("folder"));
    if (r.get("kind").equals("has")) return tok.hasChatTemplate() ? "1" : "0";
    if (r.get("kind").equals("source"))
      return r.get("name").equals("-") ? tok.getChatTemplate() : tok.getChatTemplate(r.get("name"));
    String messages = r.get("messages");
    String variables = r.get("variables").equals("{}") ? null : r.get("variables");
    boolean agp = r.get("add_generation_prompt").equals("1");
    boolean cont = r.get("continue_final_message").equals("1");
    String tmpl = toks.template(r.get("template"));
    if (tok == null) {
      return Oslo.applyChatTemplate(tmpl, messages, new ChatTemplateOptions()
          .setAddGenerationPrompt(agp).setVariablesJson(variables).setContinueFinalMessage(cont));
    }
    if (tmpl == null && variables == null && !cont) return tok.applyChatTemplate(messages, agp);
    return tok.applyChatTemplate(messages, new ChatTemplateOptions().setAddGenerationPrompt(agp)
        .setChatTemplate(tmpl).setVariablesJson(variables).setContinueFinalMessage(cont));
  }

  static void check(Tokenizers toks, Map<String, String> r) throws Exception {
    String label = r.get("label");
    if (r.containsKey("error")) {
      String e = r.get("error");
      int sp = e.indexOf(' ');
      Status want = Status.valueOf(e.substring(0, sp));
      String sub = unescape(e.substring(sp + 1));
      OsloException x = assertThrows(OsloException.class, () -> run(toks, r), label);
      assertEquals(want, x.status(), label + ": " + x.getMessage());
      assertTrue(x.getMessage().contains(sub), label + ": '" + x.getMessage() + "' lacks '" + sub + "'");
      return;
    }
    String want = r.get("kind").equals("has") ? r.get("expected") : unescape(r.get("expected"));
    assertEquals(want, run(toks, r), label);
  }

  static Tokenizers checkCase(String which) throws Exception {
    Tokenizers toks = new Tokenizers();
    List<Map<String, String>> recs = records(which);
    for (Map<String, String> r : recs) check(toks, r);
    System.out.println(recs.size() + " records of case " + which + " checked");
    return toks;
  }

  /** A folder's own template: has, its source by name, renders, tools choosing tool_use. */
  @Test
  public void chatTemplateFolder() throws Exception {
    try (Tokenizers toks = checkCase("folder")) {
      assertEquals(toks.get("cfg_list").getChatTemplate(),
          toks.get("cfg_list").getChatTemplate("default"));
    }
  }

  /**
   * A template by name, one's own (with a tokenizer and without:
   * Oslo.applyChatTemplate), variables, continueFinalMessage; null options
   * are the defaults.
   */
  @Test
  public void chatTemplateOptions() throws Exception {
    try (Tokenizers toks = checkCase("options")) {
      Tokenizer t = toks.get("cfg_list");
      String m = "[{\"role\": \"user\", \"content\": \"x\"}]";
      assertEquals(t.applyChatTemplate(m, false), t.applyChatTemplate(m, (ChatTemplateOptions) null));
      assertEquals("1", Oslo.applyChatTemplate("{{ messages | length }}", m, null));
      // The options are read at the call: one object serves several calls.
      ChatTemplateOptions o = new ChatTemplateOptions().setAddGenerationPrompt(true);
      assertEquals("[user] x\n[assistant] ", t.applyChatTemplate(m, o));
      assertEquals("[user] x\n", t.applyChatTemplate(m, o.setAddGenerationPrompt(false)));
    }
  }

  /** The named OsloException with oslo's message; then what Java refuses itself. */
  @Test
  public void chatTemplateErrors() throws Exception {
    try (Tokenizers toks = checkCase("errors")) {
      Tokenizer t = toks.get("cfg_list");
      String m = "[{\"role\": \"user\", \"content\": \"x\"}]";
      OsloException e = assertThrows(OsloException.class, () -> t.applyChatTemplate(null, true));
      assertEquals(Status.INVALID_ARGUMENT, e.status());
      assertTrue(e.getMessage().contains("the messages are null"), e.getMessage());
      e = assertThrows(OsloException.class, () -> t.applyChatTemplate("", true));
      assertTrue(e.getMessage().contains("not valid JSON"), e.getMessage());
      e = assertThrows(OsloException.class, () -> t.applyChatTemplate(m,
          new ChatTemplateOptions().setChatTemplate("{{ 1 }}\0")));
      assertTrue(e.getMessage().contains("holds a NUL byte (at byte 7 of 8)"), e.getMessage());
      e = assertThrows(OsloException.class, () -> Oslo.applyChatTemplate("", m, null));
      assertTrue(e.getMessage().contains("the chat template is empty"), e.getMessage());
      e = assertThrows(OsloException.class, () -> Oslo.applyChatTemplate("x", m,
          new ChatTemplateOptions().setChatTemplate("y")));
      assertTrue(e.getMessage().contains("given twice"), e.getMessage());
      e = assertThrows(OsloException.class, () -> t.applyChatTemplate(m,
          new ChatTemplateOptions().setVariablesJson("[1]")));
      assertEquals(Status.INVALID_ARGUMENT, e.status());
      Tokenizer no = toks.get("no_template");
      e = assertThrows(OsloException.class, () -> no.getChatTemplate());
      assertTrue(e.getMessage().contains("has no chat template"), e.getMessage());
      no.close();
      e = assertThrows(OsloException.class, () -> no.hasChatTemplate());
      assertTrue(e.getMessage().contains("closed"), e.getMessage());
    }
  }
}
