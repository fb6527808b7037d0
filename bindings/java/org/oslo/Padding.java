package org.oslo;

/**
 * How {@link Tokenizer#encodeBatch(String[], Padding)} pads its rows: not
 * at all (rows keep their lengths), or to the longest row on the right
 * (Hugging Face's default, as encoders take it) or on the left (as
 * decoder-only generation takes it).
 */
public enum Padding {
  /** Rows keep their lengths; the masks are all 1. */
  NONE,
  /** Padded to the longest row after the tokens. */
  RIGHT,
  /** Padded to the longest row before the tokens. */
  LEFT
}
