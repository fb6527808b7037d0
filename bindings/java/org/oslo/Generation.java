package org.oslo;

/**
 * What {@link Model#generate(String, GenerateOptions)} returns for a text
 * prompt: the new text (the new tokens decoded without special tokens), the
 * new token ids (ending with EOS if one was emitted, as for a prompt of
 * ids) and the row's score (the beam score, or the sum of the chosen
 * tokens' log-probabilities). Immutable.
 */
public final class Generation {
  private final String text;
  private final long[] ids;
  private final float score;

  /**
   * A generation result.
   *
   * @param text the new text
   * @param ids the new token ids (copied)
   * @param score the row's score
   */
  public Generation(String text, long[] ids, float score) {
    this.text = text;
    this.ids = ids.clone();
    this.score = score;
  }

  /** The new text, decoded without special tokens. */
  public String getText() {
    return text;
  }

  /** The new token ids (a copy), EOS included when one was emitted. */
  public long[] getIds() {
    return ids.clone();
  }

  /** The beam score, or the sum of the chosen tokens' log-probabilities. */
  public float getScore() {
    return score;
  }

  @Override
  public String toString() {
    return "Generation(text=\"" + text + "\", ids=" + java.util.Arrays.toString(ids) + ", score="
        + score + ")";
  }
}
