package org.oslo;

/**
 * Which end of a row padding fills or truncation cuts (oslo_side), for
 * {@link BatchEncoding#pad} and the truncation of
 * {@link Tokenizer#encodeBatch(String[], Padding, boolean, long, long, boolean, Side, boolean)}.
 */
public enum Side {
  /** After the tokens; truncation drops the last ids. */
  RIGHT,
  /** Before the tokens; truncation drops the first ids. */
  LEFT
}
