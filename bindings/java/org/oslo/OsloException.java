package org.oslo;

/**
 * A failed oslo call: its {@link Status} and message ({@code oslo_last_error()}
 * or the binding's own), both read in the same JNI call that failed, on the
 * same thread. Thrown by every method of org.oslo that calls into oslo
 * (bindings/oslo.i, the SWIGJAVA {@code %exception}).
 */
public class OsloException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final int status;

  /**
   * Called from the JNI wrapper.
   *
   * @param status the {@code oslo_status} value of the failed call
   * @param message what went wrong
   */
  public OsloException(int status, String message) {
    super(message);
    this.status = status;
  }

  /**
   * The status of the failed call.
   *
   * @return {@link Status#CONFIG}, {@link Status#SHAPE}, ...
   */
  public Status status() {
    return Status.swigToEnum(status);
  }

  /**
   * The status as its C value.
   *
   * @return the {@code oslo_status} value
   */
  public int statusCode() {
    return status;
  }

  @Override
  public String toString() {
    return "OsloException(" + status() + "): " + getMessage();
  }
}
