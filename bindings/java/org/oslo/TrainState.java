package org.oslo;

/**
 * Where a training loop's data stands (oslo_train_state): the seed its data
 * order derives from, the passes over the data completed and the samples
 * consumed in the current epoch. Saved in a training checkpoint by
 * {@link Optimizer#saveCheckpoint(String, TrainState)} and returned by
 * {@link Optimizer#loadCheckpoint(String)}; oslo itself draws no random
 * numbers in training. Immutable.
 */
public final class TrainState {
  private final long seed;
  private final long epoch;
  private final long dataPosition;

  /**
   * A train state; {@code seed} is an unsigned 64-bit value in C (use
   * {@link Long#toUnsignedString(long)} to print one above
   * {@link Long#MAX_VALUE}).
   */
  public TrainState(long seed, long epoch, long dataPosition) {
    this.seed = seed;
    this.epoch = epoch;
    this.dataPosition = dataPosition;
  }

  /** The seed the data order derives from (unsigned 64 bits). */
  public long getSeed() {
    return seed;
  }

  /** The passes over the data completed. */
  public long getEpoch() {
    return epoch;
  }

  /** The samples consumed in the current epoch. */
  public long getDataPosition() {
    return dataPosition;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof TrainState)) return false;
    TrainState s = (TrainState) o;
    return seed == s.seed && epoch == s.epoch && dataPosition == s.dataPosition;
  }

  @Override
  public int hashCode() {
    return Long.hashCode(seed) * 961 + Long.hashCode(epoch) * 31 + Long.hashCode(dataPosition);
  }

  @Override
  public String toString() {
    return "TrainState(seed=" + Long.toUnsignedString(seed) + ", epoch=" + epoch
        + ", dataPosition=" + dataPosition + ")";
  }
}
