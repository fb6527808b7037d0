package org.oslo;

/**
 * One piece of a request's output ({@link Request}): its new token ids,
 * their text (whole UTF-8 characters; "" without a tokenizer) and, on the
 * last piece, why the request finished (null before). {@link
 * Request#result()} returns the whole output in one. Immutable.
 */
public final class Output {
  private final long[] tokens;
  private final String text;
  private final FinishReason finishReason;

  /**
   * A piece of output.
   *
   * @param tokens the new token ids (copied)
   * @param text their text
   * @param finishReason why the request finished, or null
   */
  public Output(long[] tokens, String text, FinishReason finishReason) {
    this.tokens = tokens.clone();
    this.text = text;
    this.finishReason = finishReason;
  }

  /** The new token ids (a copy). */
  public long[] getTokens() {
    return tokens.clone();
  }

  /** Their text. */
  public String getText() {
    return text;
  }

  /** Why the request finished (on its last piece), else null. */
  public FinishReason getFinishReason() {
    return finishReason;
  }

  /** Whether this is the request's last piece. */
  public boolean isFinished() {
    return finishReason != null;
  }

  @Override
  public String toString() {
    return "Output(tokens=" + java.util.Arrays.toString(tokens) + ", text=\"" + text
        + "\", finish=" + finishReason + ")";
  }
}
