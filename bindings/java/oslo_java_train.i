/*
 * oslo_java_train.i - the Java part of training (bindings/train.i).
 *
 * Included by java/oslo_java.i, before oslo.h: the hand-written methods
 * (javacode) of Optimizer (training checkpoints with org.oslo.TrainState),
 * OptimizerOptions, TrainOptions and TrainStepResult.
 */

%typemap(javacode) struct oslo_optimizer %{
  private Object model;

  /** The model this optimizer updates. */
  public Model model() {
    return (Model) model;
  }

  /** An optimizer with the default options (AdamW, lr 1e-3) and training settings. */
  public Optimizer(Model model) {
    this(model, null, null);
  }

  /** An optimizer with {@code options} (null: the defaults) and the default training settings. */
  public Optimizer(Model model, OptimizerOptions options) {
    this(model, options, null);
  }

  /** Frees the optimizer (the model keeps its parameters); safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /**
   * Saves a training checkpoint in {@code dir}: the model's weights (as
   * Model.save writes them, so Model loads it too), this optimizer's state,
   * step count, schedule and loss scaler, and {@code state} (null: zeros),
   * atomically. Call it after an optimizer step (no micro-batch pending).
   * Collective over the world group.
   */
  public void saveCheckpoint(String dir, TrainState state) {
    if (state == null) state = new TrainState(0, 0, 0);
    saveCheckpoint(dir, state.getSeed(), state.getEpoch(), state.getDataPosition());
  }

  /**
   * Restores a training checkpoint of {@code dir} into the model (weights)
   * and this optimizer (state, step count, loss scaler) and returns the
   * saved train state; at the tensor-parallel size it was saved at,
   * training resumes bit-exactly. A folder that is not a training
   * checkpoint is a FORMAT error. Collective over the world group: if it
   * fails on any rank, do not use the optimizer further.
   */
  public TrainState loadCheckpoint(String dir) {
    java.nio.LongBuffer out = Model.directLongs(3);
    loadCheckpoint(dir, out);
    return new TrainState(out.get(0), out.get(1), out.get(2));
  }
%}
%typemap(javacode) struct oslo_optimizer_options %{
  /** Frees the options; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }
%}
%typemap(javacode) struct oslo_train_options %{
  /** Frees the options; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }
%}
%typemap(javacode) struct oslo_train_step_result %{
  /** Frees the result; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  @Override
  public String toString() {
    return "TrainStepResult(loss=" + getLoss() + ", stepped=" + getStepped() + ", skipped="
        + getSkipped() + ", meanLoss=" + getMeanLoss() + ", gradNorm=" + getGradNorm()
        + ", lr=" + getLr() + ", lossScale=" + getLossScale() + ", step=" + getStep() + ")";
  }
%}
