package org.oslo;

/**
 * What one step by hand ({@link Engine#step()}) did for one request: its
 * new tokens and text, its finish reason (null while it runs) and, when it
 * finished with {@link FinishReason#ERROR}, the error. Immutable.
 */
public final class Event {
  private final long requestId;
  private final long[] tokens;
  private final String text;
  private final FinishReason finishReason;
  private final OsloException error;

  /**
   * An event.
   *
   * @param requestId the request's id ({@link Request#id()})
   * @param tokens its new token ids (copied)
   * @param text their text
   * @param finishReason why it finished, or null
   * @param error its failure, or null
   */
  public Event(long requestId, long[] tokens, String text, FinishReason finishReason,
               OsloException error) {
    this.requestId = requestId;
    this.tokens = tokens.clone();
    this.text = text;
    this.finishReason = finishReason;
    this.error = error;
  }

  /** The request's id. */
  public long getRequestId() {
    return requestId;
  }

  /** Its new token ids (a copy). */
  public long[] getTokens() {
    return tokens.clone();
  }

  /** Their text. */
  public String getText() {
    return text;
  }

  /** Why it finished, or null while it runs. */
  public FinishReason getFinishReason() {
    return finishReason;
  }

  /** Its failure when it finished with ERROR, else null. */
  public OsloException getError() {
    return error;
  }
}
