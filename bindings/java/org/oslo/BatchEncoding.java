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

  @Override
  public String toString() {
    return "BatchEncoding(inputIds=" + java.util.Arrays.deepToString(inputIds) + ", attentionMask="
        + java.util.Arrays.deepToString(attentionMask) + ")";
  }
}
