/*
 * train.i - training for every language: the optimizer of include/oslo.h
 * (oslo_optimizer_*), its options, the train options, the step's result
 * and the training checkpoints (oslo_checkpoint_save/load with the train
 * state).
 *
 * Included by bindings/oslo.i after model.i (Model.train_step and
 * backward take an optimizer and return a train step result).
 */

/* ------------------------------------------------------------------------ */
/* Training: Optimizer, its options, the train options, the step's result   */
/* ------------------------------------------------------------------------ */

/* Options of the optimizer with PyTorch's and Hugging Face Trainer's
   defaults (oslo_optimizer_options_init). */
%extend oslo_optimizer_options {
  oslo_optimizer_options() {
    oslo_optimizer_options *o = (oslo_optimizer_options *)calloc(1, sizeof *o);
    if (!o) {
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "OptimizerOptions: %llu bytes",
                     (unsigned long long)sizeof *o);
      return NULL;
    }
    if (!oslo_bind_check(oslo_optimizer_options_init(o, OSLO_OPTIMIZER_OPTIONS_VERSION))) {
      free(o);
      return NULL;
    }
    return o;
  }
  ~oslo_optimizer_options() { free($self); }
}

/* How the training runs (accumulation, ZeRO, DDP buckets, pipeline
   micro-batches), with its defaults (oslo_train_options_init). */
%extend oslo_train_options {
  oslo_train_options() {
    oslo_train_options *o = (oslo_train_options *)calloc(1, sizeof *o);
    if (!o) {
      oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "TrainOptions: %llu bytes",
                     (unsigned long long)sizeof *o);
      return NULL;
    }
    if (!oslo_bind_check(oslo_train_options_init(o, OSLO_TRAIN_OPTIONS_VERSION))) {
      free(o);
      return NULL;
    }
    return o;
  }
  ~oslo_train_options() { free($self); }
}

%extend oslo_train_step_result {
  ~oslo_train_step_result() { free($self); }
}

/* An optimizer over a model's parameters. It must not outlive its model:
   the language layers keep the model open while the optimizer is (Python:
   _Handle dependency; Java: Model.retain; Go: a child node of the model).
   Training checkpoints (optimizer state plus the train state) are methods
   of this class (save_checkpoint / load_checkpoint). */
%newobject oslo_optimizer::m_step;
%extend oslo_optimizer {
  /* oslo_optimizer_create; options, train NULL: their defaults. Not
     collective. */
  oslo_optimizer(oslo_model *model, const oslo_optimizer_options *options,
                 const oslo_train_options *train) {
    oslo_optimizer *o = NULL;
    oslo_optimizer_options c;
    oslo_train_options t;
    /* The structs were made by OptimizerOptions() and TrainOptions(): their
       versions are ours. */
    if (options) {
      c = *options;
      c.version = OSLO_OPTIMIZER_OPTIONS_VERSION;
      options = &c;
    }
    if (train) {
      t = *train;
      t.version = OSLO_TRAIN_OPTIONS_VERSION;
      train = &t;
    }
    oslo_bind_check(oslo_optimizer_create(model, options, train, &o));
    return o;
  }
  ~oslo_optimizer() { oslo_optimizer_destroy($self); }
  /* oslo_optimizer_step: a step now from the gradients accumulated so far.
     Collective. */
  oslo_train_step_result *m_step() {
    oslo_train_step_result *r = oslo_bind_train_step_result();
    if (!r) return NULL;
    if (!oslo_bind_check(oslo_optimizer_step($self, r))) {
      free(r);
      return NULL;
    }
    return r;
  }
  /* oslo_optimizer_zero_grad. Not collective. */
  void m_zero_grad() { oslo_bind_check(oslo_optimizer_zero_grad($self)); }
  /* oslo_checkpoint_save with the train state (seed, epoch, data
     position). Collective over the world group. */
  void m_save_checkpoint(const char *dir, int64_t seed, int64_t epoch, int64_t data_position) {
    oslo_train_state s;
    s.seed = (uint64_t)seed;
    s.epoch = epoch;
    s.data_position = data_position;
    oslo_bind_check(oslo_checkpoint_save($self, dir, &s));
  }
  /* oslo_checkpoint_load; out: int64 [3], the saved seed, epoch and data
     position. Collective over the world group. */
  void m_load_checkpoint(const char *dir, void *out, size_t out_bytes) {
    oslo_train_state s;
    if (!oslo_bind_bytes("load_checkpoint: out", out_bytes, 3 * 8)) return;
    if (!oslo_bind_check(oslo_checkpoint_load($self, dir, &s))) return;
    ((int64_t *)out)[0] = (int64_t)s.seed;
    ((int64_t *)out)[1] = s.epoch;
    ((int64_t *)out)[2] = s.data_position;
  }
}
