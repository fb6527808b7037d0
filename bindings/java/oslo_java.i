/*
 * oslo_java.i - the Java part of the SWIG interface (bindings/oslo.i).
 *
 * Included by oslo.i before oslo.h (SWIGJAVA only): the %exception that
 * throws OsloException, the Java names, Javadoc, typemaps and lifetimes of
 * the generated classes. Their hand-written methods (javacode) are in one
 * file per area, included at the end: java/oslo_java_tensor.i (Context,
 * Tensor), java/oslo_java_layers.i (ParallelLinear, ParallelEmbedding,
 * ParamSet), java/oslo_java_model.i (ModelInfo, GenerateOptions, Model),
 * java/oslo_java_train.i (Optimizer, its options, TrainStepResult),
 * java/oslo_java_tokenizer.i (Tokenizer) and java/oslo_java_engine.i
 * (Engine).
 */

/* Errors: the %exception of Java */
%{
/* Throws org.oslo.OsloException(status, message)
   (bindings/java/org/oslo/OsloException.java). */
static void oslo_bind_throw(JNIEnv *env, int status, const char *message) {
  jclass cls = (*env)->FindClass(env, "org/oslo/OsloException");
  jmethodID ctor = cls ? (*env)->GetMethodID(env, cls, "<init>", "(ILjava/lang/String;)V") : 0;
  jstring msg = ctor ? (*env)->NewStringUTF(env, message) : 0;
  jobject exc = msg ? (*env)->NewObject(env, cls, ctor, status, msg) : 0;
  if (exc) (*env)->Throw(env, (jthrowable)exc);
}
%}
%exception {
  oslo_bind_status = OSLO_OK;
  $action
  if (oslo_bind_status != OSLO_OK) {
    oslo_bind_throw(jenv, (int)oslo_bind_status, oslo_bind_error_message());
    return $null;
  }
}

/* Java names (package org.oslo): classes and enums in UpperCamelCase
   (Context, Tensor, DType, ReduceOp, Group, Status, ...), enum constants
   without their C prefix (DType.F32, ReduceOp.SUM, Group.TENSOR,
   Status.CONFIG: the same names as Python's oslo.Status), methods and the
   accessors of struct fields in lowerCamelCase (ctx.allReduce,
   opts.setMaxNewTokens). The module class capi (version, merge, reshard,
   inspect, tensor_wrap) and capiJNI are package-private: Oslo and
   Tensor.wrap are their public face. */
%include "enums.swg"
%javaconst(1);
%rename(Status) oslo_status;
%rename(DType) oslo_dtype;
%rename(ReduceOp) oslo_reduce_op;
%rename(Group) oslo_group;
%rename(LinearKind) oslo_linear_kind;
%rename(ModelOutput) oslo_model_output;
%rename(SpecialToken) oslo_special_token;
%rename(OptimizerKind) oslo_optimizer_kind;
%rename(LRSchedule) oslo_lr_schedule;
%rename("%(regex:/^OSLO_(ERR_|DTYPE_|REDUCE_|GROUP_|LINEAR_|MODEL_OUTPUT_|SPECIAL_TOKEN_|OPTIMIZER_|LR_)?(.*)$/\\2/)s",
        %$isenumitem, notregexmatch$name="_ENUM_M(IN|AX)_$") "";
%rename("%(lowercamelcase)s", %$ismember, %$isvariable) "";
%rename(allReduce) m_all_reduce;
%rename(allGather) m_all_gather;
%rename(reduceScatter) m_reduce_scatter;
%rename(vocabParallelCrossEntropy) m_vocab_parallel_cross_entropy;
%rename(dataPtr) m_data_ptr;
%rename(copyFromHost) m_copy_from_host;
%rename(copyToHost) m_copy_to_host;
%rename(loadFull) m_load_full;
%rename(loadShard) m_load_shard;
%rename(zeroGrad) m_zero_grad;
%rename(vocabRange) m_vocab_range;
%rename(nativeAdd) m_add;
%rename(nativeAddLinear) m_add_linear;
%rename(nativeAddEmbedding) m_add_embedding;
%rename(clipGradNorm) m_clip_grad_norm;
%rename(saveCheckpoint) m_save_checkpoint;
%rename(loadCheckpoint) m_load_checkpoint;
%rename(pipelineStats) m_pipeline_stats;
%rename(modelType) m_model_type;
%rename(vocabSize) m_vocab_size;
%rename(tokenToId) m_token_to_id;
%rename(idToToken) m_id_to_token;
%rename(specialId) m_special_id;
%rename(nativeEncodeBatch) m_encode_batch;
%rename(trainStep) m_train_step;
%rename(setActivationCheckpointing) m_set_activation_checkpointing;
/* ModelInfo is a result: getters only. */
%immutable oslo_model_info::vocab_size;
%immutable oslo_model_info::hidden_size;
%immutable oslo_model_info::num_layers;
%immutable oslo_model_info::num_heads;
%immutable oslo_model_info::num_kv_heads;
%immutable oslo_model_info::max_positions;
%immutable oslo_model_info::is_causal;
%immutable oslo_model_info::dtype;
%immutable oslo_model_info::eos_token_id;
%immutable oslo_model_info::pad_token_id;
/* Javadoc of the generated classes and methods (SWIG puts these strings
   where the modifiers go). */
%define OSLO_JDOC(NAME, TEXT)
%javamethodmodifiers NAME "/** " TEXT " */\n  public"
%enddef
%define OSLO_JCLASSDOC(TYPE, KIND, TEXT)
%typemap(javaclassmodifiers) TYPE "/** " TEXT " */\npublic " KIND
%enddef
OSLO_JCLASSDOC(struct oslo_context, "class", "A process group of the job (tensor, pipeline, data and world groups) and its collectives. Closing it while handles made in it are open destroys it when the last of them is closed.")
OSLO_JCLASSDOC(struct oslo_tensor, "class", "A tensor on the context's device: owned (new Tensor, Tensor.of), over a direct buffer's memory (Tensor.wrap), or a layer's borrowed parameter.")
OSLO_JCLASSDOC(struct oslo_model, "class", "A Hugging Face model (gpt2, bert, llama, mistral, qwen2) split over the tensor-parallel group; computing calls are collective.")
OSLO_JCLASSDOC(struct oslo_parallel_linear, "class", "A column- or row-parallel linear layer (Megatron-LM), parameters zero until loaded.")
OSLO_JCLASSDOC(struct oslo_parallel_embedding, "class", "A vocabulary-parallel embedding table.")
OSLO_JCLASSDOC(struct oslo_param_set, "class", "Named parameters for gradient clipping and checkpoints; it borrows (and keeps alive) what is added.")
OSLO_JCLASSDOC(struct oslo_generate_options, "class", "Options of Model.generate with Hugging Face's defaults (greedy, 20 new tokens).")
OSLO_JCLASSDOC(struct oslo_model_info, "class", "Sizes of a loaded model, as in its config.json.")
OSLO_JCLASSDOC(struct oslo_optimizer, "class", "An optimizer over every parameter of a Model (this rank's slices) with its learning-rate schedule, gradient clipping, accumulation and loss scaler; Model.trainStep steps it. It keeps its model: closing the model while the optimizer is open destroys the model when the optimizer is closed.")
OSLO_JCLASSDOC(struct oslo_optimizer_options, "class", "The update rule of an Optimizer with PyTorch's defaults (AdamW lr 1e-3, betas 0.9 0.999, eps 1e-8, no weight decay, constant schedule, no clipping, loss scaling for f16 models) and Hugging Face Trainer's (no weight decay for 1-D parameters unless decay1d). How the training runs is in TrainOptions.")
OSLO_JCLASSDOC(struct oslo_train_options, "class", "How Model.trainStep trains with an Optimizer, with the defaults of oslo_train_options_init: gradAccumSteps micro-batches per optimizer step (default 1). Data parallelism (a context whose data-parallel size is above 1) averages gradients over the data group as PyTorch's DDP, in buckets of bucketBytes (default 25 MiB); zeroStage 1 partitions optimizer state and f32 masters over the data group, 2 the gradients too, 3 the parameters too (DeepSpeed ZeRO). Pipeline parallelism: microBatches cuts each trainStep's batch into that many micro-batches (Megatron-LM's 1F1B through the stages); pipelineHeadSplit runs part of the tied head on the first stage (0 off, a fraction in (0, 1], -1 balanced).")
OSLO_JCLASSDOC(struct oslo_train_step_result, "class", "What Model.trainStep and Optimizer.step report; meanLoss, gradNorm and lr are meaningful when getStepped() (gradNorm is NaN when neither clipping nor loss scaling asked for it).")
OSLO_JCLASSDOC(oslo_optimizer_kind, "enum", "Update rules of an Optimizer: ADAMW (torch.optim.AdamW) or SGD (torch.optim.SGD: momentum, dampening, Nesterov).")
OSLO_JCLASSDOC(oslo_lr_schedule, "enum", "Learning-rate schedules as transformers' get_scheduler: CONSTANT, CONSTANT_WITH_WARMUP, LINEAR and COSINE (linear warmup, then decay to 0 at totalSteps).")
OSLO_JCLASSDOC(oslo_status, "enum", "The status of a failed call (OsloException.status()).")
OSLO_JCLASSDOC(oslo_dtype, "enum", "Element types; the CPU backend computes in F32, F16 and BF16 are storage.")
OSLO_JCLASSDOC(oslo_reduce_op, "enum", "Reductions of collectives, combined in group-rank order.")
OSLO_JCLASSDOC(oslo_group, "enum", "Process groups of a context (Megatron-LM order: tensor fastest, then data, then pipeline).")
OSLO_JCLASSDOC(oslo_linear_kind, "enum", "How a ParallelLinear is split: COLUMN (output features) or ROW (input features).")
OSLO_JCLASSDOC(oslo_model_output, "enum", "What Model.forward returns: LOGITS [batch, seq, vocab] or HIDDEN [batch, seq, hidden].")
OSLO_JCLASSDOC(oslo_special_token, "enum", "The special tokens Tokenizer.specialId returns.")
OSLO_JDOC(oslo_context::oslo_context, "Creates a context (collective over the job's ranks): config is JSON text, a JSON file path, or \"\" for the defaults.")
/* synchronized, as delete(): close() never destroys the native context
   while an abort from another thread is inside oslo_context_abort. */
%javamethodmodifiers oslo_context::m_abort "/** Ends every blocked or later collective of this context with Status.COMM; callable from any thread (after close() it throws Status.INVALID_ARGUMENT). */\n  public synchronized"
OSLO_JDOC(oslo_context::m_rank, "This rank in {@code group}.")
OSLO_JDOC(oslo_context::m_size, "The number of ranks in {@code group}.")
OSLO_JDOC(oslo_context::m_backend, "The compute backend (\"cpu\", \"torch\", ...).")
OSLO_JDOC(oslo_context::m_transport, "The transport of {@code group}'s communicator (\"shm\", \"gloo\", ...).")
OSLO_JDOC(oslo_context::m_all_reduce, "Reduces {@code tensor} with {@code op} over {@code group}, in place. Collective.")
OSLO_JDOC(oslo_context::m_all_gather, "Concatenates every rank's {@code input} along dimension 0 into {@code output}, in rank order. Collective.")
OSLO_JDOC(oslo_context::m_reduce_scatter, "Reduces {@code input} over {@code group}; each rank gets its slice along dimension 0 in {@code output}. Collective.")
OSLO_JDOC(oslo_context::m_broadcast, "Copies rank {@code root}'s {@code tensor} to every rank of {@code group}. Collective.")
OSLO_JDOC(oslo_context::m_send, "Sends {@code tensor} to rank {@code peer} of {@code group}.")
OSLO_JDOC(oslo_context::m_recv, "Receives {@code tensor} from rank {@code peer} of {@code group}.")
OSLO_JDOC(oslo_context::m_barrier, "Waits until every rank of {@code group} has called it.")
OSLO_JDOC(oslo_context::m_vocab_parallel_cross_entropy, "Cross-entropy of vocabulary-parallel logits; losses and grad_logits may be null; returns the mean loss. Collective.")
OSLO_JDOC(oslo_tensor::oslo_tensor, "A new zero-filled tensor of {@code dtype} and {@code shape} in {@code ctx}.")
OSLO_JDOC(oslo_tensor::m_ndim, "The number of dimensions.")
OSLO_JDOC(oslo_tensor::m_dim, "The extent of dimension {@code i}.")
OSLO_JDOC(oslo_tensor::m_dtype, "The element type.")
OSLO_JDOC(oslo_tensor::m_numel, "The number of elements.")
OSLO_JDOC(oslo_tensor::m_data_ptr, "The address of the data (valid while the tensor lives).")
OSLO_JDOC(oslo_tensor::m_copy_from_host, "Copies a direct buffer of exactly the tensor's size in bytes into the tensor.")
OSLO_JDOC(oslo_tensor::m_copy_to_host, "Copies the tensor into a direct buffer of exactly its size in bytes.")
OSLO_JDOC(oslo_parallel_linear::oslo_parallel_linear, "A layer with zero parameters (ParallelLinear.column and row are the usual forms).")
OSLO_JDOC(oslo_parallel_linear::m_load_full, "Loads the full weight [out, in] and bias [out] (or null); each rank keeps its slice.")
OSLO_JDOC(oslo_parallel_linear::m_load_shard, "Loads this rank's slices of the weight and bias (or null).")
OSLO_JDOC(oslo_parallel_linear::m_forward, "output = input weight^T + bias on this rank's slice; collective when it communicates (row, or column with gather).")
OSLO_JDOC(oslo_parallel_linear::m_backward, "Adds the weight and bias gradients; writes the input gradient into {@code grad_input} unless null. Collective.")
OSLO_JDOC(oslo_parallel_linear::m_zero_grad, "Zeroes the gradients.")
OSLO_JDOC(oslo_parallel_embedding::oslo_parallel_embedding, "A zero embedding table [vocab_size, hidden_size] split by vocabulary rows.")
OSLO_JDOC(oslo_parallel_embedding::m_load_full, "Loads the full table; each rank keeps its rows.")
OSLO_JDOC(oslo_parallel_embedding::m_load_shard, "Loads this rank's rows.")
OSLO_JDOC(oslo_parallel_embedding::m_forward, "Looks up {@code ids} (I32 or I64) into {@code output} [..., hidden]. Collective.")
OSLO_JDOC(oslo_parallel_embedding::m_backward, "Adds the table's gradient for {@code ids} and {@code grad_output}.")
OSLO_JDOC(oslo_parallel_embedding::m_zero_grad, "Zeroes the gradient.")
OSLO_JDOC(oslo_param_set::oslo_param_set, "An empty set of parameters in {@code ctx}.")
OSLO_JDOC(oslo_param_set::m_count, "The number of parameters.")
OSLO_JDOC(oslo_param_set::m_clip_grad_norm, "The global gradient norm of type {@code norm_type} (2, or infinity) over the tensor group, as torch computes it unsharded; scales the gradients when {@code max_norm} > 0 and the norm exceeds it. Collective.")
OSLO_JDOC(oslo_param_set::m_save_checkpoint, "Saves the set in a directory (atomic, one file per rank plus a manifest). Collective.")
OSLO_JDOC(oslo_param_set::m_load_checkpoint, "Loads the set from a checkpoint saved at any tensor-parallel size. Collective.")
OSLO_JDOC(oslo_generate_options::oslo_generate_options, "Hugging Face's defaults: greedy, 20 new tokens.")
OSLO_JDOC(oslo_model::oslo_model, "Loads a model folder or parallel checkpoint; {@code dtype} -1 keeps the checkpoint's (else a DType value). Collective.")
OSLO_JDOC(oslo_model::m_info, "The model's sizes (close it, or let the collector free it).")
OSLO_JDOC(oslo_model::m_model_type, "The config's model_type (\"gpt2\", \"bert\", ...).")
OSLO_JDOC(oslo_model::m_forward, "Runs [batch, seq] I64 ids (mask and token_type_ids may be null) into {@code out} [batch, seq, vocab or hidden] F32; direct buffers, no copy. Collective.")
OSLO_JDOC(oslo_model::m_embed, "Sentence embeddings of [batch, seq] I64 ids and mask (null: all 1) into {@code out} [batch, hidden] F32; direct buffers, no copy. Collective.")
OSLO_JDOC(oslo_model::m_generate, "Generates from {@code batch} prompts (ids one after another, I64 lengths) into out_tokens [batch, max_new_tokens] and out_lengths [batch] (I64); eos_token_ids and out_scores may be null; direct buffers, no copy. Collective.")
OSLO_JDOC(oslo_model::m_save, "Saves a parallel checkpoint in {@code dir}. Collective.")
OSLO_JDOC(oslo_model::m_train_step, "One micro-batch of causal-LM training on [batch, seq] I64 ids: forward, loss (labels shifted inside, -100 ignored; labels null: the ids with -100 where the mask is 0; mask null: all 1) and backward, adding to the gradients; with an optimizer (null: none) over this model it steps after every gradAccumSteps micro-batches. Direct buffers, no copy. Collective.")
OSLO_JDOC(oslo_model::m_backward, "Backward from a loss on the last hidden states: adds the parameter gradients of [batch, seq] I64 ids (mask null: all 1; token_type_ids null: all 0) for {@code grad_hidden} [batch, seq, hidden] F32 (d loss / d hidden states); with an optimizer (null: only accumulate) over this model it steps after every gradAccumSteps micro-batches. The result's loss is 0. Direct buffers, no copy. Collective.")
OSLO_JDOC(oslo_model::m_set_activation_checkpointing, "Recomputes each block in the backward of trainStep instead of keeping its activations (equal gradients, less memory).")
OSLO_JDOC(oslo_optimizer::oslo_optimizer, "An optimizer over every parameter of {@code model} with the update rule of {@code options} and the training settings of {@code train} (either null: its defaults); not collective.")
OSLO_JDOC(oslo_optimizer::m_step, "The optimizer step now from the gradients accumulated so far (however many micro-batches), then zeroes them. Collective.")
OSLO_JDOC(oslo_optimizer::m_zero_grad, "Zeroes the model's gradients and restarts the accumulation window.")
/* The train state travels as TrainState (Optimizer.saveCheckpoint and
   loadCheckpoint in the javacode below): the raw forms are private. */
%javamethodmodifiers oslo_optimizer::m_save_checkpoint "private";
%javamethodmodifiers oslo_optimizer::m_load_checkpoint "private";
%javamethodmodifiers oslo_model::m_pipeline_stats "private";
OSLO_JDOC(oslo_optimizer_options::oslo_optimizer_options, "PyTorch's and Hugging Face Trainer's defaults (AdamW, lr 1e-3).")
OSLO_JDOC(oslo_train_options::oslo_train_options, "The defaults: no accumulation, no ZeRO, DDP's 25 MiB buckets, one micro-batch, no head split.")
/* Raw forms the hand-written methods below build on. */
%javamethodmodifiers m_param "private";
%javamethodmodifiers m_vocab_range "private";
%javamethodmodifiers m_add "private";
%javamethodmodifiers m_add_linear "private";
%javamethodmodifiers m_add_embedding "private";
%pragma(java) moduleclassmodifiers="final class"
%pragma(java) jniclassclassmodifiers="final class"
/* The JNI library loads with the first class that needs it. */
%pragma(java) jniclasscode=%{
  static {
    Oslo.load();
  }
%}

/* -DSWIGWORDSIZE64 makes int64_t a C long, which SWIG maps to a Java int:
   use long long's typemaps (a Java long) for the fixed-width 64-bit types. */
%apply long long { int64_t };
%apply unsigned long long { uint64_t };
/* C ints that are flags: Java booleans. */
%typemap(jni) int normalize, int bias, int gather_output, int input_is_parallel,
    int add_special_tokens, int skip_special_tokens, int json, int overwrite,
    int do_sample, int enabled, int nesterov, int decay_1d, int truncation,
    int pad_to_max_length, int stepped, int skipped "jboolean"
%typemap(jtype) int normalize, int bias, int gather_output, int input_is_parallel,
    int add_special_tokens, int skip_special_tokens, int json, int overwrite,
    int do_sample, int enabled, int nesterov, int decay_1d, int truncation,
    int pad_to_max_length, int stepped, int skipped "boolean"
%typemap(jstype) int normalize, int bias, int gather_output, int input_is_parallel,
    int add_special_tokens, int skip_special_tokens, int json, int overwrite,
    int do_sample, int enabled, int nesterov, int decay_1d, int truncation,
    int pad_to_max_length, int stepped, int skipped "boolean"
%typemap(javain) int normalize, int bias, int gather_output, int input_is_parallel,
    int add_special_tokens, int skip_special_tokens, int json, int overwrite,
    int do_sample, int enabled, int nesterov, int decay_1d, int truncation,
    int pad_to_max_length, int stepped, int skipped "$javainput"
%typemap(in) int normalize, int bias, int gather_output, int input_is_parallel,
    int add_special_tokens, int skip_special_tokens, int json, int overwrite,
    int do_sample, int enabled, int nesterov, int decay_1d, int truncation,
    int pad_to_max_length, int stepped, int skipped "$1 = $input ? 1 : 0;"
/* GenerateOptions.getDoSample(), OptimizerOptions.getNesterov() and
   getDecay1d(), TrainStepResult.getStepped() and getSkipped(). */
%typemap(out) int do_sample, int nesterov, int decay_1d, int stepped, int skipped
    "$result = (jboolean)($1 != 0);"
%typemap(javaout) int do_sample, int nesterov, int decay_1d, int stepped, int skipped {
    return $jnicall;
  }
/* A closed handle (SWIG passes its cleared pointer as NULL) fails with
   INVALID_ARGUMENT before the call: struct accessors would dereference it. */
%typemap(check) SWIGTYPE *self %{
  if (!$1) {
    oslo_bind_throw(jenv, (int)OSLO_ERR_INVALID_ARGUMENT, "the handle is closed");
    return $null;
  }
%}
/* A shape: long... (always the last argument). */
%typemap(jni) (int ndim, const int64_t *shape) "jlongArray"
%typemap(jtype) (int ndim, const int64_t *shape) "long[]"
%typemap(jstype) (int ndim, const int64_t *shape) "long..."
%typemap(javain) (int ndim, const int64_t *shape) "$javainput"
%typemap(in) (int ndim, const int64_t *shape) (int64_t dims_[OSLO_MAX_DIMS]) {
  jsize n_ = $input ? (*jenv)->GetArrayLength(jenv, $input) : 0;
  if (n_ > OSLO_MAX_DIMS) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException, "too many dimensions");
    return $null;
  }
  if (n_ > 0) (*jenv)->GetLongArrayRegion(jenv, $input, 0, n_, (jlong *)dims_);
  $1 = (int)n_;
  $2 = dims_;
}
/* Memory: any direct java.nio buffer (ByteBuffer, FloatBuffer, IntBuffer,
   LongBuffer, ...; null is NULL), used in place without a copy: its whole
   capacity from its base address (position and limit are ignored). A
   non-direct (heap) buffer is refused with IllegalArgumentException. */
%{
/* Bytes per element of a direct buffer: capacity is counted in elements. */
static size_t oslo_bind_buffer_esize(JNIEnv *env, jobject buf) {
  static const struct { const char *cls; size_t size; } kinds[] = {
      {"java/nio/ByteBuffer", 1},  {"java/nio/FloatBuffer", 4}, {"java/nio/IntBuffer", 4},
      {"java/nio/LongBuffer", 8},  {"java/nio/DoubleBuffer", 8}, {"java/nio/ShortBuffer", 2},
      {"java/nio/CharBuffer", 2}};
  size_t i;
  for (i = 0; i < sizeof kinds / sizeof kinds[0]; ++i) {
    jclass c = (*env)->FindClass(env, kinds[i].cls);
    int is = c && (*env)->IsInstanceOf(env, buf, c);
    if (c) (*env)->DeleteLocalRef(env, c);
    if (is) return kinds[i].size;
  }
  return 1;
}
%}
%typemap(jni) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) "jobject"
%typemap(jtype) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) "java.nio.Buffer"
%typemap(jstype) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) "java.nio.Buffer"
%typemap(javain) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) "$javainput"
%typemap(in) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) {
  $1 = $input ? (*jenv)->GetDirectBufferAddress(jenv, $input) : NULL;
  $2 = $input ? (size_t)(*jenv)->GetDirectBufferCapacity(jenv, $input) *
                    oslo_bind_buffer_esize(jenv, $input)
              : 0;
  if ($input && !$1) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException,
                            "the buffer must be direct (ByteBuffer.allocateDirect)");
    return $null;
  }
}
/* Handles are AutoCloseable; close() is SWIG's delete(), idempotent (it
   clears the pointer). A tensor, layer, parameter set or model keeps its
   context in a field, a wrapped tensor its buffer, a borrowed parameter
   tensor its layer, and a parameter set what was added to it.
   Lifetimes: an owned handle made in a context (Tensor, Model,
   ParallelLinear, ParallelEmbedding, ParamSet) counts itself in the context
   while it is open; closing the context while some are open closes the
   Context object at once (its methods then fail) and destroys the native
   context when the last of them is closed, so a context never dies before
   its children. These handles have no finalizer: the finalizer thread
   would destroy them while the context's own thread uses it, which oslo
   forbids (one thread per context at a time); close them, with
   try-with-resources. Tokenizer, GenerateOptions and ModelInfo belong to
   no context and keep SWIG's finalizer. */
%typemap(javainterfaces) struct oslo_context, struct oslo_tensor, struct oslo_model,
    struct oslo_tokenizer, struct oslo_parallel_linear, struct oslo_parallel_embedding,
    struct oslo_param_set, struct oslo_generate_options, struct oslo_model_info,
    struct oslo_optimizer, struct oslo_optimizer_options, struct oslo_train_options,
    struct oslo_train_step_result
    "AutoCloseable"
%typemap(javafinalize) struct oslo_context, struct oslo_tensor, struct oslo_model,
    struct oslo_parallel_linear, struct oslo_parallel_embedding, struct oslo_param_set,
    struct oslo_optimizer ""
/* A closed Optimizer passed to trainStep would reach C as NULL (no
   optimizer: nothing steps): refused instead. */
%typemap(javain, pre="    if ($javainput != null && $javaclassname.getCPtr($javainput) == 0)\n      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(), \"the optimizer is closed\");")
    struct oslo_optimizer *optimizer "$javaclassname.getCPtr($javainput)"
/* An Optimizer counts itself in its model the same way (Model.retain): a
   model closed while its optimizer is open is destroyed, and releases its
   context, when the optimizer is closed. */
%typemap(javaconstruct) struct oslo_optimizer {
    this($imcall, true);
    this.model = model;
    model.retain();
  }
%typemap(javadestruct, methodname="delete", methodmodifiers="public synchronized",
         parameters="") struct oslo_optimizer {
    if (swigCPtr != 0) {
      if (swigCMemOwn) {
        swigCMemOwn = false;
        $jnicall;
        if (model != null) ((Model) model).release();
      }
      swigCPtr = 0;
    }
  }
%typemap(javadestruct, methodname="delete", methodmodifiers="public synchronized",
         parameters="") struct oslo_model {
    if (swigCPtr != 0) {
      if (swigCMemOwn) {
        swigCMemOwn = false;
        if (children > 0) {
          deferred = swigCPtr;
        } else {
          $jnicall;
          if (context != null) ((Context) context).release();
        }
      }
      swigCPtr = 0;
    }
  }
%typemap(javaconstruct) struct oslo_tensor, struct oslo_parallel_linear,
    struct oslo_parallel_embedding, struct oslo_param_set {
    this($imcall, true);
    this.context = ctx;
    ctx.retain();
  }
/* A model also keeps the folder it was loaded from: texts passed to it go
   through that folder's tokenizer (Model.tokenizer). */
%typemap(javaconstruct) struct oslo_model {
    this($imcall, true);
    this.context = ctx;
    this.path = path;
    ctx.retain();
  }
%typemap(javadestruct, methodname="delete", methodmodifiers="public synchronized",
         parameters="") struct oslo_context {
    if (swigCPtr != 0) {
      if (swigCMemOwn) {
        swigCMemOwn = false;
        if (children > 0) deferred = swigCPtr;
        else $jnicall;
      }
      swigCPtr = 0;
    }
  }
%typemap(javadestruct, methodname="delete", methodmodifiers="public synchronized",
         parameters="") struct oslo_tensor, struct oslo_parallel_linear,
    struct oslo_parallel_embedding, struct oslo_param_set {
    if (swigCPtr != 0) {
      if (swigCMemOwn) {
        swigCMemOwn = false;
        $jnicall;
        if (context != null) ((Context) context).release();
      }
      swigCPtr = 0;
    }
  }

/* The hand-written methods of the generated classes (javacode), one file
   per area of bindings/oslo.i. */
%include "java/oslo_java_tensor.i"
%include "java/oslo_java_layers.i"
%include "java/oslo_java_model.i"
%include "java/oslo_java_train.i"

/* The tokenizer (with its chat templates, bindings/chat_template.i): its
   Javadoc, typemaps and methods. */
%include "java/oslo_java_tokenizer.i"

/* The serving engine (bindings/engine.i): its Java names, typemaps and methods. */
%include "java/oslo_java_engine.i"
