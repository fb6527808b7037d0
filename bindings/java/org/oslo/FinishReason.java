package org.oslo;

/** Why a request finished (oslo_finish_reason; {@link Output#getFinishReason()}). */
public enum FinishReason {
  /** max_new_tokens generated. */
  LENGTH(1),
  /** An EOS id was generated (it is the last token). */
  EOS(2),
  /** A stop string appeared (the text ends before it). */
  STOP(3),
  /** {@link Request#cancel()}, {@link Engine#shutdown()} or close. */
  CANCELLED(4),
  /** The step failed (reading the request throws its error). */
  ERROR(5);

  private final int code;

  FinishReason(int code) {
    this.code = code;
  }

  /** The C value (OSLO_FINISH_*). */
  public int code() {
    return code;
  }

  /** The reason of C value {@code code}, or null for OSLO_FINISH_NONE (0: not finished). */
  public static FinishReason of(int code) {
    if (code == 0) return null;
    for (FinishReason r : values())
      if (r.code == code) return r;
    throw new IllegalArgumentException("no FinishReason " + code);
  }
}
