package org.oslo;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.function.ToLongFunction;

/**
 * Options of {@link Tokenizer#applyChatTemplate(String, ChatTemplateOptions)}
 * and {@link Oslo#applyChatTemplate(String, String, ChatTemplateOptions)}
 * (oslo_chat_template_options), as transformers' arguments of
 * {@code apply_chat_template}. The setters return the options, so they
 * chain:
 *
 * <pre>{@code
 * String prompt = tok.applyChatTemplate(messagesJson, new ChatTemplateOptions()
 *     .setAddGenerationPrompt(true)
 *     .setVariablesJson("{\"tools\": [" + weatherToolSchema + "]}"));
 * }</pre>
 *
 * Not thread-safe; a call reads the options once, at its start.
 */
public final class ChatTemplateOptions {
  private boolean addGenerationPrompt;
  private String chatTemplate;
  private String variablesJson;
  private boolean continueFinalMessage;

  /** The defaults: no generation prompt, the tokenizer's template, no variables. */
  public ChatTemplateOptions() {}

  /**
   * End with the assistant's header, so the model answers next (default
   * false).
   */
  public ChatTemplateOptions setAddGenerationPrompt(boolean addGenerationPrompt) {
    this.addGenerationPrompt = addGenerationPrompt;
    return this;
  }

  /** Whether the render ends with the assistant's header. */
  public boolean getAddGenerationPrompt() {
    return addGenerationPrompt;
  }

  /**
   * The template: null or empty (default) for the tokenizer's ("tool_use"
   * when the variables hold tools and it has one, else its default), the
   * name of one of the tokenizer's templates, or a template's own source
   * text (transformers' {@code chat_template=}).
   */
  public ChatTemplateOptions setChatTemplate(String chatTemplate) {
    this.chatTemplate = chatTemplate;
    return this;
  }

  /** The template's name or source text, or null. */
  public String getChatTemplate() {
    return chatTemplate;
  }

  /**
   * More template variables as one JSON object: {@code "tools"} (a list of
   * JSON schemas), {@code "documents"}, or anything the template reads
   * ({@code date_string}, {@code enable_thinking}, ...), as transformers'
   * keyword arguments; they replace the special tokens of the same name.
   * Null or empty (default): none. It may not set {@code messages} or
   * {@code add_generation_prompt}.
   */
  public ChatTemplateOptions setVariablesJson(String variablesJson) {
    this.variablesJson = variablesJson;
    return this;
  }

  /** The template variables as a JSON object, or null. */
  public String getVariablesJson() {
    return variablesJson;
  }

  /**
   * End the render inside the last message, so the model continues it (a
   * prefilled assistant answer), as transformers'
   * {@code continue_final_message=True}. Not with addGenerationPrompt.
   * Default false.
   */
  public ChatTemplateOptions setContinueFinalMessage(boolean continueFinalMessage) {
    this.continueFinalMessage = continueFinalMessage;
    return this;
  }

  /** Whether the render ends inside the last message. */
  public boolean getContinueFinalMessage() {
    return continueFinalMessage;
  }

  @Override
  public String toString() {
    return "ChatTemplateOptions(addGenerationPrompt=" + addGenerationPrompt + ", chatTemplate="
        + (chatTemplate == null ? "null" : chatTemplate.length() + " chars") + ", variablesJson="
        + variablesJson + ", continueFinalMessage=" + continueFinalMessage + ")";
  }

  // The calls' support (Tokenizer and Oslo).

  /** UTF-8 bytes of {@code s} in a direct buffer; null for null or "" (the default). */
  static ByteBuffer utf8(String s) {
    if (s == null || s.isEmpty()) return null;
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    ByteBuffer buf = ByteBuffer.allocateDirect(b.length);
    buf.put(b);
    return buf;
  }

  /** The messages as UTF-8; null is refused with INVALID_ARGUMENT. */
  static ByteBuffer messages(String what, String messagesJson) {
    if (messagesJson == null)
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(),
          what + ": the messages are null (pass a JSON array of message objects)");
    return utf8(messagesJson);
  }

  /**
   * The text {@code call} writes into a direct buffer (null: only sizes),
   * returning its full length in bytes: a first call sizes the buffer.
   */
  static String sized(String what, ToLongFunction<ByteBuffer> call) {
    long n = call.applyAsLong(null);
    ByteBuffer out = ByteBuffer.allocateDirect(Math.toIntExact(n + 1));
    long n2 = call.applyAsLong(out);
    if (n2 != n)
      throw new OsloException(Status.INTERNAL.swigValue(),
          what + ": " + n2 + " bytes after sizing " + n);
    byte[] b = new byte[Math.toIntExact(n)];
    out.position(0);
    out.get(b);
    return new String(b, StandardCharsets.UTF_8);
  }
}
