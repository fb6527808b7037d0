/*
 * oslo_java_tokenizer.i - the tokenizer's Java part (bindings/oslo.i's
 * Tokenizer and bindings/chat_template.i).
 *
 * Included by java/oslo_java.i, before oslo.h: the Javadoc and typemaps of
 * Tokenizer and its hand-written methods (javacode): encode, encodeBatch,
 * decode, and the chat templates (hasChatTemplate, getChatTemplate,
 * applyChatTemplate, with org.oslo.ChatTemplateOptions). The raw chat
 * methods of chat_template.i are private here; strings travel to them as
 * UTF-8 in direct ByteBuffers (never JNI's modified UTF-8), the text comes
 * back sized by a first call (ChatTemplateOptions.sized). The tokenizer
 * belongs to no context and keeps SWIG's finalizer.
 */

OSLO_JCLASSDOC(struct oslo_tokenizer, "class", "A Hugging Face tokenizer (tokenizer.json, vocab.txt or .model files of a model folder).")
OSLO_JDOC(oslo_tokenizer::oslo_tokenizer, "Loads the tokenizer of a model folder.")
OSLO_JDOC(oslo_tokenizer::m_encode, "Encodes UTF-8 text (a direct buffer) into {@code out} (I64, null: only count); returns the full count.")
OSLO_JDOC(oslo_tokenizer::m_decode, "Decodes I64 ids into UTF-8 bytes in {@code out} (null: only size); returns the full length in bytes.")
OSLO_JDOC(oslo_tokenizer::m_vocab_size, "The size of the vocabulary.")
OSLO_JDOC(oslo_tokenizer::m_token_to_id, "The id of a token spelled in UTF-8 (a direct buffer).")
OSLO_JDOC(oslo_tokenizer::m_id_to_token, "Writes token {@code id}'s spelling into {@code out} (null: only size); returns its length in bytes.")
OSLO_JDOC(oslo_tokenizer::m_special_id, "The id of a special token, or -1.")
%javamethodmodifiers oslo_tokenizer::m_encode_batch "private";

/* The chat templates' raw methods (chat_template.i); the public ones are
   below. chat_template_apply (the module function) is Oslo.applyChatTemplate's. */
%rename(nativeHasChatTemplate) oslo_tokenizer::m_has_chat_template;
%rename(nativeGetChatTemplate) oslo_tokenizer::m_get_chat_template;
%rename(nativeApplyChatTemplate) oslo_tokenizer::m_apply_chat_template;
%javamethodmodifiers oslo_tokenizer::m_has_chat_template "private";
%javamethodmodifiers oslo_tokenizer::m_get_chat_template "private";
%javamethodmodifiers oslo_tokenizer::m_apply_chat_template "private";
/* Their flags: Java booleans. */
%typemap(jni) int add_generation_prompt, int continue_final_message "jboolean"
%typemap(jtype) int add_generation_prompt, int continue_final_message "boolean"
%typemap(jstype) int add_generation_prompt, int continue_final_message "boolean"
%typemap(javain) int add_generation_prompt, int continue_final_message "$javainput"
%typemap(in) int add_generation_prompt, int continue_final_message "$1 = $input ? 1 : 0;"

%typemap(javacode) struct oslo_tokenizer %{
  /** Frees the tokenizer; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  private static java.nio.ByteBuffer utf8(String s) {
    if (s == null)
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(), "the text is null");
    byte[] b = s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    java.nio.ByteBuffer buf = java.nio.ByteBuffer.allocateDirect(Math.max(1, b.length));
    buf.put(b);
    return b.length == 0 ? null : buf;
  }

  private static String string(java.nio.ByteBuffer buf, long n) {
    byte[] b = new byte[Math.toIntExact(n)];
    buf.position(0);
    buf.get(b);
    return new String(b, java.nio.charset.StandardCharsets.UTF_8);
  }

  /** The token ids of {@code text} with the tokenizer's special tokens ([CLS] ... [SEP]). */
  public long[] encode(String text) {
    return encode(text, true);
  }

  /** The token ids of {@code text}; {@code addSpecialTokens}: BOS, [CLS] ... [SEP]. */
  public long[] encode(String text, boolean addSpecialTokens) {
    java.nio.ByteBuffer t = utf8(text);
    long n = encode(t, addSpecialTokens, null);
    long[] ids = new long[Math.toIntExact(n)];
    if (n > 0) {
      java.nio.LongBuffer out = Model.directLongs(ids.length);
      encode(t, addSpecialTokens, out);
      out.get(ids);
    }
    return ids;
  }

  private static OsloException refuse(String message) {
    return new OsloException(Status.INVALID_ARGUMENT.swigValue(), "encodeBatch: " + message);
  }

  /**
   * Encodes texts as Hugging Face's {@code tokenizer(texts, padding=True)}
   * does (special tokens added; padded with the tokenizer's padding token,
   * else 0): {@code tok.encodeBatch(texts, Padding.RIGHT).getInputIds()}
   * and {@code getAttentionMask()}.
   */
  public BatchEncoding encodeBatch(String[] texts, Padding padding) {
    return encodeBatch(texts, padding, true, -1);
  }

  /** {@link #encodeBatch(String[], Padding)} of a list of texts. */
  public BatchEncoding encodeBatch(java.util.List<String> texts, Padding padding) {
    return encodeBatch(texts == null ? null : texts.toArray(new String[0]), padding, true, -1);
  }

  /**
   * Encodes texts into rows of token ids and their attention masks (1 on
   * real tokens, 0 on padding), as Hugging Face's tokenizer call:
   * {@code padding} NONE (rows keep their lengths), RIGHT or LEFT (padded
   * to the longest row on that side); {@code addSpecialTokens} adds the
   * tokenizer's own ([CLS] ... [SEP], BOS); {@code padId} is the id under
   * padding (negative: the tokenizer's padding token, else 0).
   */
  public BatchEncoding encodeBatch(String[] texts, Padding padding, boolean addSpecialTokens,
      long padId) {
    return encodeBatch(texts, padding, addSpecialTokens, padId, 0, false, Side.RIGHT, false);
  }

  /**
   * {@link #encodeBatch(String[], Padding, boolean, long)} with Hugging
   * Face's {@code max_length}, {@code truncation}, {@code truncation_side}
   * and {@code padding="max_length"}: {@code maxLength} (0: no limit) is
   * the most ids a row may hold; a longer row's text ids are cut from
   * {@code truncationSide} with {@code truncation} (its special tokens
   * kept) and refused without it; {@code padToMaxLength} pads every row to
   * {@code maxLength} (padding RIGHT or LEFT). Each text is encoded once.
   */
  public BatchEncoding encodeBatch(String[] texts, Padding padding, boolean addSpecialTokens,
      long padId, long maxLength, boolean truncation, Side truncationSide,
      boolean padToMaxLength) {
    if (texts == null) throw refuse("the texts are null");
    if (texts.length == 0) throw refuse("no texts; pass at least one");
    if (padding == null) throw refuse("the padding is null");
    if (truncationSide == null) throw refuse("the truncation side is null");
    if (maxLength < 0) throw refuse("maxLength " + maxLength + " is negative");
    if (padToMaxLength && padding == Padding.NONE)
      throw refuse("padToMaxLength needs padding RIGHT or LEFT");
    for (int i = 0; i < texts.length; ++i)
      if (texts[i] == null) throw refuse("text " + i + " is null");
    long pad = padId;
    if (pad < 0) {
      pad = specialId(SpecialToken.PAD);
      if (pad < 0) pad = 0;
    }
    // One call of oslo_tokenizer_encode_batch pads them (right padding for
    // NONE: each row is then cut to its real tokens), its capacity enough
    // for every row a text's bytes make; a second only when a row is longer.
    byte[][] bytes = new byte[texts.length][];
    java.nio.LongBuffer lengths = Model.directLongs(texts.length);
    long total = 0;
    int guess = 0;
    for (int i = 0; i < texts.length; ++i) {
      bytes[i] = texts[i].getBytes(java.nio.charset.StandardCharsets.UTF_8);
      lengths.put(i, bytes[i].length);
      total += bytes[i].length;
      guess = Math.max(guess, bytes[i].length + 8);
    }
    if (padToMaxLength) guess = Math.toIntExact(maxLength);
    else if (maxLength > 0) guess = (int) Math.min(guess, maxLength);
    java.nio.ByteBuffer text = null;
    if (total > 0) {
      text = java.nio.ByteBuffer.allocateDirect(Math.toIntExact(total));
      for (byte[] b : bytes) text.put(b);
    }
    int side = padding == Padding.LEFT ? 1 : 0;
    int tside = truncationSide.ordinal();
    int cells = Math.multiplyExact(texts.length, guess);
    java.nio.LongBuffer flat = Model.directLongs(cells);
    java.nio.LongBuffer flatMask = Model.directLongs(cells);
    int width = Math.toIntExact(nativeEncodeBatch(text, lengths, addSpecialTokens, side, pad,
        maxLength, truncation, tside, padToMaxLength, flat, flatMask));
    if (Math.multiplyExact(texts.length, width) > cells) {
      cells = Math.multiplyExact(texts.length, width);
      flat = Model.directLongs(cells);
      flatMask = Model.directLongs(cells);
      nativeEncodeBatch(text, lengths, addSpecialTokens, side, pad, maxLength, truncation, tside,
          padToMaxLength, flat, flatMask);
    }
    long[][] ids = new long[texts.length][];
    long[][] mask = new long[texts.length][];
    for (int i = 0; i < texts.length; ++i) {
      int n = width;
      if (padding == Padding.NONE) {
        n = 0;
        while (n < width && flatMask.get(i * width + n) != 0) ++n;
      }
      ids[i] = new long[n];
      mask[i] = new long[n];
      flat.position(i * width);
      flat.get(ids[i]);
      flatMask.position(i * width);
      flatMask.get(mask[i]);
    }
    return new BatchEncoding(ids, mask);
  }

  /** The text of {@code ids}, special tokens included. */
  public String decode(long... ids) {
    return decode(ids, false);
  }

  /** The text of {@code ids}; {@code skipSpecialTokens}: leave special tokens out. */
  public String decode(long[] ids, boolean skipSpecialTokens) {
    java.nio.LongBuffer in = null;
    if (ids.length > 0) {
      in = Model.directLongs(ids.length);
      in.put(ids);
    }
    long n = decode(in, skipSpecialTokens, null);
    java.nio.ByteBuffer out = java.nio.ByteBuffer.allocateDirect(Math.toIntExact(n + 1));
    decode(in, skipSpecialTokens, out);
    return string(out, n);
  }

  /** The id of the token spelled {@code token}. */
  public long tokenToId(String token) {
    return tokenToId(utf8(token));
  }

  /** The vocabulary's spelling of token {@code id}. */
  public String idToToken(long id) {
    long n = idToToken(id, null);
    java.nio.ByteBuffer out = java.nio.ByteBuffer.allocateDirect(Math.toIntExact(n + 1));
    idToToken(id, out);
    return string(out, n);
  }

  /**
   * Whether the tokenizer's folder came with a chat template
   * (chat_template.jinja, additional_chat_templates/ or
   * tokenizer_config.json's "chat_template").
   */
  public boolean hasChatTemplate() {
    return nativeHasChatTemplate() != 0;
  }

  /** The source text of the chat template {@link #applyChatTemplate} uses. */
  public String getChatTemplate() {
    return getChatTemplate(null);
  }

  /**
   * The source text of the chat template {@code name} ("default",
   * "tool_use", ...; null: the one {@link #applyChatTemplate} uses).
   *
   * @throws OsloException INVALID_ARGUMENT when there is no template of
   *     that name (or none at all)
   */
  public String getChatTemplate(String name) {
    java.nio.ByteBuffer n = ChatTemplateOptions.utf8(name);
    return ChatTemplateOptions.sized("getChatTemplate", out -> nativeGetChatTemplate(n, out));
  }

  /**
   * The prompt text of a conversation, exactly as transformers'
   * {@code tokenizer.apply_chat_template(messages, tokenize=False,
   * add_generation_prompt=...)} renders it.
   *
   * @param messagesJson a JSON array of message objects, such as
   *     {@code [{"role": "user", "content": "Hi"}]} (other keys are passed
   *     on; those whose value is null are dropped)
   * @param addGenerationPrompt end with the assistant's header, so the
   *     model answers next
   * @throws OsloException INVALID_ARGUMENT (no chat template, messages
   *     that are not a non-empty JSON array of objects, the template's
   *     raise_exception with its text, an undefined value), FORMAT (a
   *     template that does not parse: its line and column), NOT_SUPPORTED
   */
  public String applyChatTemplate(String messagesJson, boolean addGenerationPrompt) {
    return applyChatTemplate(messagesJson,
        new ChatTemplateOptions().setAddGenerationPrompt(addGenerationPrompt));
  }

  /**
   * {@link #applyChatTemplate(String, boolean)} with options: a template
   * of the tokenizer's by name or one's own source text, more template
   * variables ({@code {"tools": [...]}}, ...), continueFinalMessage.
   *
   * @param options null: the defaults
   * @throws OsloException as {@link #applyChatTemplate(String, boolean)},
   *     and INVALID_ARGUMENT for variables that are not a JSON object or
   *     set messages or add_generation_prompt, continueFinalMessage with
   *     addGenerationPrompt, an unknown template name
   */
  public String applyChatTemplate(String messagesJson, ChatTemplateOptions options) {
    ChatTemplateOptions o = options == null ? new ChatTemplateOptions() : options;
    java.nio.ByteBuffer m = ChatTemplateOptions.messages("applyChatTemplate", messagesJson);
    java.nio.ByteBuffer t = ChatTemplateOptions.utf8(o.getChatTemplate());
    java.nio.ByteBuffer v = ChatTemplateOptions.utf8(o.getVariablesJson());
    boolean agp = o.getAddGenerationPrompt();
    boolean cont = o.getContinueFinalMessage();
    return ChatTemplateOptions.sized("applyChatTemplate",
        out -> nativeApplyChatTemplate(m, agp, t, v, cont, out));
  }
%}
