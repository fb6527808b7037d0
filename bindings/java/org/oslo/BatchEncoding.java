package org.oslo;

/**
 * What {@link Tokenizer#encodeBatch(String[], Padding)} returns, as Hugging
 * Face's {@code tokenizer(texts, padding=True)}: one row of token ids per
 * text ({@code input_ids}) and its attention mask (1 on real tokens, 0 on
 * padding). {@link Model#embed(BatchEncoding)} and
 * {@link Model#generate(BatchEncoding, GenerateOptions)} take it as it is.
 * Immutable: the getters return copies.
 */
public final class BatchEncoding {
  private final long[][] inputIds;
  private final long[][] attentionMask;

  /**
   * A batch of rows and their masks (copied; rows of equal lengths pairwise).
   *
   * @param inputIds one row of token ids per text
   * @param attentionMask 1 on real tokens, 0 on padding, the rows' shape
   */
  public BatchEncoding(long[][] inputIds, long[][] attentionMask) {
    if (inputIds == null || attentionMask == null || inputIds.length != attentionMask.length)
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(),
          "BatchEncoding: input ids and attention mask must be non-null with as many rows");
    this.inputIds = deepCopy(inputIds);
    this.attentionMask = deepCopy(attentionMask);
    for (int r = 0; r < inputIds.length; ++r)
      if (this.inputIds[r].length != this.attentionMask[r].length)
        throw new OsloException(Status.SHAPE.swigValue(), "BatchEncoding: row " + r + " has "
            + this.inputIds[r].length + " ids and " + this.attentionMask[r].length + " mask values");
  }

  private static long[][] deepCopy(long[][] rows) {
    long[][] c = new long[rows.length][];
    for (int r = 0; r < rows.length; ++r) {
      if (rows[r] == null)
        throw new OsloException(Status.INVALID_ARGUMENT.swigValue(), "BatchEncoding: row " + r
            + " is null");
      c[r] = rows[r].clone();
    }
    return c;
  }

  /** The rows of token ids (a copy; Hugging Face's {@code input_ids}). */
  public long[][] getInputIds() {
    return deepCopy(inputIds);
  }

  /** The attention mask (a copy; Hugging Face's {@code attention_mask}). */
  public long[][] getAttentionMask() {
    return deepCopy(attentionMask);
  }

  /** The number of rows. */
  public int size() {
    return inputIds.length;
  }

  /** Row {@code r}'s real tokens: its ids where the mask is 1. */
  public long[] tokens(int r) {
    int n = 0;
    for (long m : attentionMask[r]) if (m != 0) ++n;
    long[] t = new long[n];
    int k = 0;
    for (int i = 0; i < inputIds[r].length; ++i)
      if (attentionMask[r][i] != 0) t[k++] = inputIds[r][i];
    return t;
  }

  /**
   * Rows of token ids of any lengths padded on the right to the longest with
   * {@code padId}, as Hugging Face's {@code tokenizer.pad(rows)}.
   */
  public static BatchEncoding pad(long[][] rows, long padId) {
    return pad(rows, padId, Side.RIGHT, 0, false, Side.RIGHT, false);
  }

  /**
   * Rows of token ids of any lengths padded into one batch (oslo_pad_batch),
   * as Hugging Face's {@code tokenizer.pad} (DataCollatorWithPadding):
   * {@code padId} (&gt;= 0) under the padding, on {@code side}; to the
   * longest row, or to {@code maxLength} with {@code padToMaxLength}.
   * {@code maxLength} (0: no limit) is the most ids a row may hold: a
   * longer row is cut from {@code truncationSide} with {@code truncation},
   * refused without it.
   */
  public static BatchEncoding pad(long[][] rows, long padId, Side side, long maxLength,
      boolean truncation, Side truncationSide, boolean padToMaxLength) {
    if (rows == null) throw refuse("pad: the rows are null");
    if (side == null || truncationSide == null) throw refuse("pad: a side is null");
    java.nio.LongBuffer[] flat = new java.nio.LongBuffer[2];
    int width = padInto(rows, padId, side.ordinal(), maxLength, truncation,
        truncationSide.ordinal(), padToMaxLength, flat);
    long[][] ids = new long[rows.length][width];
    long[][] mask = new long[rows.length][width];
    for (int r = 0; r < rows.length; ++r) {
      flat[0].position(r * width);
      flat[0].get(ids[r]);
      flat[1].position(r * width);
      flat[1].get(mask[r]);
    }
    return new BatchEncoding(ids, mask);
  }

  /**
   * oslo_pad_batch of rows into direct buffers: out[0] the ids, out[1] the
   * mask, both [rows, L] row-major; returns L. Sides: 0 right, 1 left.
   */
  static int padInto(long[][] rows, long padId, int side, long maxLength, boolean truncation,
      int truncationSide, boolean padToMaxLength, java.nio.LongBuffer[] out) {
    if (rows == null) throw refuse("pad: the rows are null");
    long total = 0;
    for (int r = 0; r < rows.length; ++r) {
      if (rows[r] == null) throw refuse("pad: row " + r + " is null");
      total += rows[r].length;
    }
    java.nio.LongBuffer lengths = rows.length > 0 ? Model.directLongs(rows.length) : null;
    java.nio.LongBuffer flat = total > 0 ? Model.directLongs(Math.toIntExact(total)) : null;
    for (int r = 0; r < rows.length; ++r) {
      lengths.put(r, rows[r].length);
      if (flat != null) flat.put(rows[r]);
    }
    int width = Math.toIntExact(capi.pad_batch(flat, lengths, side, padId, maxLength, truncation,
        truncationSide, padToMaxLength, null, null));
    int cells = Math.multiplyExact(rows.length, width);
    out[0] = Model.directLongs(cells);
    out[1] = Model.directLongs(cells);
    if (cells > 0)
      capi.pad_batch(flat, lengths, side, padId, maxLength, truncation, truncationSide,
          padToMaxLength, out[0], out[1]);
    return width;
  }

  private static OsloException refuse(String message) {
    return new OsloException(Status.INVALID_ARGUMENT.swigValue(), message);
  }

  @Override
  public String toString() {
    return "BatchEncoding(inputIds=" + java.util.Arrays.deepToString(inputIds) + ", attentionMask="
        + java.util.Arrays.deepToString(attentionMask) + ")";
  }
}
