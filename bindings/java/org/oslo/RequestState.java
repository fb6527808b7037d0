package org.oslo;

/** Where a request is (oslo_request_state; {@link Request#state()}). */
public enum RequestState {
  /** Never added (or finished, read and forgotten by the engine). */
  UNKNOWN(0),
  /** Waiting for KV blocks or a place in a step. */
  WAITING(1),
  /** Its prompt is being computed or it is generating. */
  RUNNING(2),
  /** Finished. */
  FINISHED(3);

  private final int code;

  RequestState(int code) {
    this.code = code;
  }

  /** The C value (OSLO_REQUEST_*). */
  public int code() {
    return code;
  }

  /** The state of C value {@code code}. */
  public static RequestState of(int code) {
    for (RequestState s : values())
      if (s.code == code) return s;
    throw new IllegalArgumentException("no RequestState " + code);
  }
}
