package org.oslo;

/**
 * A failed oslo call: the {@code oslo_status} of the call and its message
 * ({@code oslo_last_error()}), both read in the same JNI call that failed, on
 * the same thread. Thrown by every wrapped method (bindings/oslo.i, the
 * SWIGJAVA %exception).
 */
public class OsloException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final int status;

  /** Called from the JNI wrapper: status is an oslo_status value. */
  public OsloException(int status, String message) {
    super(message);
    this.status = status;
  }

  /** The status as the generated enum ({@code oslo_status.OSLO_ERR_CONFIG}, ...). */
  public oslo_status status() {
    return oslo_status.swigToEnum(status);
  }

  /** The status as its C value. */
  public int statusCode() {
    return status;
  }

  @Override
  public String toString() {
    return "OsloException(" + status() + "): " + getMessage();
  }
}
