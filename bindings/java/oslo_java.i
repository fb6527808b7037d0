/*
 * oslo_java.i - the Java part of the SWIG interface (bindings/oslo.i).
 *
 * Included by oslo.i before oslo.h (SWIGJAVA only): the %exception that
 * throws OsloException, the Java names, Javadoc, typemaps and the
 * hand-written methods of the generated classes (javacode).
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
%typemap(javacode) struct oslo_model_info %{
  /** Frees the handle; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** Whether the model is causal (a language model: generate works). */
  public boolean isCausal() {
    return getIsCausal() != 0;
  }
%}
%typemap(javacode) struct oslo_context %{
  /** Open handles made in this context. */
  private int children;
  /** The native context, once closed while children were open. */
  private long deferred;

  synchronized void retain() {
    ++children;
  }

  synchronized void release() {
    if (--children == 0 && deferred != 0) {
      long p = deferred;
      deferred = 0;
      capiJNI.delete_Context(p);
    }
  }

  /**
   * A context with every default: a single rank, or the ranks of the
   * launcher whose environment this process runs in (oslo-run, torchrun).
   */
  public Context() {
    this("");
  }

  /**
   * Closes the context; safe to call more than once. The native context is
   * destroyed now, or when the last open handle made in it is closed.
   */
  @Override
  public void close() {
    delete();
  }

  /** This rank in the world group. */
  public int rank() {
    return rank(Group.WORLD);
  }

  /** The number of ranks in the world group. */
  public int size() {
    return size(Group.WORLD);
  }

  /** Sums {@code tensor} over the world group, in place. */
  public void allReduce(Tensor tensor) {
    allReduce(Group.WORLD, ReduceOp.SUM, tensor);
  }

  /** Reduces {@code tensor} with {@code op} over the world group, in place. */
  public void allReduce(ReduceOp op, Tensor tensor) {
    allReduce(Group.WORLD, op, tensor);
  }

  /** Reduces {@code values} with {@code op} over {@code group}, in place (copied twice). */
  public void allReduce(Group group, ReduceOp op, float[] values) {
    try (Tensor t = Tensor.of(this, values, values.length)) {
      allReduce(group, op, t);
      t.copyToHost(values);
    }
  }

  /** Sums {@code values} over the world group, in place (copied twice). */
  public void allReduce(float[] values) {
    allReduce(Group.WORLD, ReduceOp.SUM, values);
  }

  /** Concatenates every world rank's {@code input} along dimension 0 into {@code output}. */
  public void allGather(Tensor input, Tensor output) {
    allGather(Group.WORLD, input, output);
  }

  /** Every rank's {@code values} of {@code group}, one after another in rank order. */
  public float[] allGather(Group group, float[] values) {
    float[] out = new float[values.length * size(group)];
    try (Tensor in = Tensor.of(this, values, values.length);
        Tensor o = new Tensor(this, DType.F32, out.length)) {
      allGather(group, in, o);
      o.copyToHost(out);
    }
    return out;
  }

  /** Every world rank's {@code values}, one after another in rank order. */
  public float[] allGather(float[] values) {
    return allGather(Group.WORLD, values);
  }

  /** Copies world rank {@code root}'s {@code tensor} to every rank. */
  public void broadcast(int root, Tensor tensor) {
    broadcast(Group.WORLD, root, tensor);
  }

  /** Waits until every rank of the world group has called it. */
  public void barrier() {
    barrier(Group.WORLD);
  }

  /** A new zero-filled tensor in this context. */
  public Tensor tensor(DType dtype, long... shape) {
    return new Tensor(this, dtype, shape);
  }
%}
%typemap(javacode) struct oslo_tensor %{
  private Object context;
  /** Memory this tensor uses in place (a wrapped direct buffer). */
  private Object memory;
  /** The layer a borrowed parameter tensor belongs to. */
  private Object owner;

  Tensor keep(Object ctx, Object mem, Object own) {
    context = ctx;
    memory = mem;
    owner = own;
    if (swigCMemOwn && ctx != null) ((Context) ctx).retain();
    return this;
  }

  /** The context this tensor was made in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the tensor (a layer's parameter is only let go); safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /**
   * A tensor over the memory of a direct buffer, used in place without a copy
   * (its whole capacity, native byte order). The tensor keeps the buffer alive.
   *
   * @throws IllegalArgumentException if the buffer is not direct
   * @throws OsloException if its size is not the shape's ({@link Status#SHAPE})
   */
  public static Tensor wrap(Context ctx, java.nio.Buffer buffer, DType dtype, long... shape) {
    return capi.tensor_wrap(ctx, buffer, dtype, shape);
  }

  /** A new f32 tensor holding a copy of {@code data}, of the given shape. */
  public static Tensor of(Context ctx, float[] data, long... shape) {
    Tensor t = new Tensor(ctx, DType.F32, shape);
    try {
      t.copyFromHost(data);
    } catch (RuntimeException e) {
      t.close();
      throw e;
    }
    return t;
  }

  /** The extents of the dimensions. */
  public long[] shape() {
    long[] s = new long[ndim()];
    for (int i = 0; i < s.length; ++i) s[i] = dim(i);
    return s;
  }

  private static java.nio.FloatBuffer directFloats(int n) {
    return java.nio.ByteBuffer.allocateDirect(n * 4).order(java.nio.ByteOrder.nativeOrder())
        .asFloatBuffer();
  }

  /** Copies {@code src} (numel elements) into this f32 tensor. */
  public void copyFromHost(float[] src) {
    java.nio.FloatBuffer b = directFloats(src.length);
    b.put(src);
    copyFromHost(b);
  }

  /** Copies this f32 tensor into {@code dst} (numel elements). */
  public void copyToHost(float[] dst) {
    java.nio.FloatBuffer b = directFloats(dst.length);
    copyToHost(b);
    b.get(dst);
  }

  /** This f32 tensor's elements as a new array. */
  public float[] toFloatArray() {
    float[] out = new float[Math.toIntExact(numel())];
    copyToHost(out);
    return out;
  }
%}
%typemap(javacode) struct oslo_parallel_linear %{
  private Object context;

  /** The context this layer was made in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the layer and its parameters; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** A column-parallel f32 layer with bias: each rank holds out/tp output features. */
  public static ParallelLinear column(Context ctx, long inFeatures, long outFeatures) {
    return column(ctx, inFeatures, outFeatures, true, false);
  }

  /** A column-parallel f32 layer; {@code gatherOutput}: all-gather the output. */
  public static ParallelLinear column(Context ctx, long inFeatures, long outFeatures,
      boolean bias, boolean gatherOutput) {
    return new ParallelLinear(ctx, LinearKind.COLUMN, inFeatures, outFeatures, bias,
        gatherOutput, true, DType.F32);
  }

  /** A row-parallel f32 layer with bias taking the column layer's split input. */
  public static ParallelLinear row(Context ctx, long inFeatures, long outFeatures) {
    return row(ctx, inFeatures, outFeatures, true, true);
  }

  /** A row-parallel f32 layer; {@code inputIsParallel}: the input is already split. */
  public static ParallelLinear row(Context ctx, long inFeatures, long outFeatures,
      boolean bias, boolean inputIsParallel) {
    return new ParallelLinear(ctx, LinearKind.ROW, inFeatures, outFeatures, bias, false,
        inputIsParallel, DType.F32);
  }

  private Tensor borrowed(int which) {
    Tensor t = param(which);
    return t == null ? null : t.keep(context, null, this);
  }

  /** This rank's slice of the weight (borrowed: valid while the layer lives). */
  public Tensor weight() {
    return borrowed(0);
  }

  /** This rank's slice of the bias, or null (borrowed). */
  public Tensor bias() {
    return borrowed(1);
  }

  /** The weight's gradient (borrowed). */
  public Tensor gradWeight() {
    return borrowed(2);
  }

  /** The bias's gradient, or null (borrowed). */
  public Tensor gradBias() {
    return borrowed(3);
  }

  /** The backward pass without the input gradient (the first layer's). */
  public void backward(Tensor input, Tensor gradOutput) {
    backward(input, gradOutput, null);
  }
%}
%typemap(javacode) struct oslo_parallel_embedding %{
  private Object context;

  /** The context this layer was made in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the layer and its table; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** An f32 vocabulary-parallel embedding. */
  public ParallelEmbedding(Context ctx, long vocabSize, long hiddenSize) {
    this(ctx, vocabSize, hiddenSize, DType.F32);
  }

  /** The first vocabulary row this rank holds. */
  public long vocabStart() {
    return vocabRange(0);
  }

  /** One past the last real vocabulary row this rank holds. */
  public long vocabEnd() {
    return vocabRange(1);
  }

  /** The rows this rank holds, padding included. */
  public long localRows() {
    return vocabRange(2);
  }

  /** This rank's rows of the table (borrowed: valid while the layer lives). */
  public Tensor weight() {
    Tensor t = param(0);
    return t == null ? null : t.keep(context, null, this);
  }

  /** The table's gradient (borrowed). */
  public Tensor gradWeight() {
    Tensor t = param(1);
    return t == null ? null : t.keep(context, null, this);
  }
%}
%typemap(javacode) struct oslo_param_set %{
  private Object context;
  /** What the set borrows, kept alive while it lives. */
  private final java.util.List<Object> held = new java.util.ArrayList<>();

  /** The context this set was made in. */
  public Context context() {
    return (Context) context;
  }

  /** Frees the set (not its tensors); safe to call more than once. */
  @Override
  public void close() {
    delete();
    held.clear();
  }

  /**
   * Adds {@code tensor} (and its gradient, or null) under {@code name};
   * {@code splitDim} is the dimension the tensor-parallel ranks split, or -1
   * when each holds all of it.
   */
  public void add(String name, Tensor tensor, Tensor grad, int splitDim) {
    nativeAdd(name, tensor, grad, splitDim);
    held.add(tensor);
    if (grad != null) held.add(grad);
  }

  /** Adds a linear layer's weight and bias as PREFIX.weight and PREFIX.bias. */
  public void addLinear(String prefix, ParallelLinear layer) {
    nativeAddLinear(prefix, layer);
    held.add(layer);
  }

  /** Adds an embedding's table as PREFIX.weight. */
  public void addEmbedding(String prefix, ParallelEmbedding embedding) {
    nativeAddEmbedding(prefix, embedding);
    held.add(embedding);
  }

  /** Clips the gradients to a global L2 norm of {@code maxNorm}; returns the norm before. */
  public double clipGradNorm(double maxNorm) {
    return clipGradNorm(maxNorm, 2.0);
  }

  /** The global L2 norm of the gradients over the tensor-parallel group. */
  public double gradNorm() {
    return clipGradNorm(0.0, 2.0);
  }
%}
%typemap(javacode) struct oslo_generate_options %{
  private long[] eosTokenIds;

  /** Frees the options; safe to call more than once. */
  @Override
  public void close() {
    delete();
  }

  /** Options for greedy generation of at most {@code maxNewTokens} tokens. */
  public GenerateOptions(long maxNewTokens) {
    this();
    setMaxNewTokens(maxNewTokens);
  }

  /** The ids that end a row (null: the model config's). */
  public void setEosTokenIds(long... ids) {
    eosTokenIds = ids == null ? null : ids.clone();
  }

  /** The ids that end a row, or null for the model config's. */
  public long[] getEosTokenIds() {
    return eosTokenIds == null ? null : eosTokenIds.clone();
  }
%}
%typemap(javacode) struct oslo_model %{
  private Object context;
  /** Open optimizers over this model. */
  private int children;
  /** The native model, once closed while optimizers were open. */
  private long deferred;

  synchronized void retain() {
    ++children;
  }

  synchronized void release() {
    if (--children == 0 && deferred != 0) {
      long p = deferred;
      deferred = 0;
      capiJNI.delete_Model(p);
      if (context != null) ((Context) context).release();
    }
  }

  /** The context this model was loaded in. */
  public Context context() {
    return (Context) context;
  }

  /** The folder (or checkpoint) this model was loaded from. */
  private String path;
  /** The tokenizer of that folder, once loaded (closed with the model). */
  private Tokenizer folderTokenizer;
  /** A tokenizer the caller set (the caller's: not closed with the model). */
  private Tokenizer userTokenizer;

  /** Frees the model and the tokenizer it loaded; safe to call more than once. */
  @Override
  public void close() {
    Tokenizer t;
    synchronized (this) {
      t = folderTokenizer;
      folderTokenizer = null;
    }
    if (t != null) t.close();
    delete();
  }

  /** The folder (or parallel checkpoint) this model was loaded from. */
  public String path() {
    return path;
  }

  /**
   * The tokenizer texts go through: the one given to
   * {@link #setTokenizer(Tokenizer)}, else the tokenizer of the model's
   * folder (tokenizer.json or tokenizer.model), loaded on first use and
   * closed with the model. A folder without one throws an OsloException
   * (the loader's status, IO for missing files) naming the folder.
   */
  public synchronized Tokenizer tokenizer() {
    if (userTokenizer != null) return userTokenizer;
    if (getCPtr(this) == 0)
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(), "the model is closed");
    if (folderTokenizer == null) {
      try {
        folderTokenizer = new Tokenizer(path);
      } catch (OsloException e) {
        throw new OsloException(e.statusCode(), "the model folder " + path
            + " has no tokenizer oslo can load (tokenizer.json or tokenizer.model): "
            + e.getMessage() + "; pass token ids, or call Model.setTokenizer");
      }
    }
    return folderTokenizer;
  }

  /**
   * Makes texts go through {@code tokenizer} (the caller keeps it and
   * closes it) instead of the folder's; null goes back to the folder's.
   */
  public synchronized void setTokenizer(Tokenizer tokenizer) {
    userTokenizer = tokenizer;
  }

  /** The id under padding: the config's pad_token_id, else 0 (masked out either way). */
  private long padId() {
    ModelInfo i = info();
    long p = i.getPadTokenId();
    long v = i.getVocabSize();
    i.close();
    return p >= 0 && p < v ? p : 0;
  }

  private static OsloException refuse(String what, String message) {
    return new OsloException(Status.INVALID_ARGUMENT.swigValue(), what + ": " + message);
  }

  /** Checks rows of token ids: non-null, non-empty, at least one row. */
  private static void checkRows(String what, long[][] ids) {
    if (ids == null) throw refuse(what, "the ids are null");
    if (ids.length == 0) throw refuse(what, "no rows; pass at least one row of token ids");
    for (int r = 0; r < ids.length; ++r) {
      if (ids[r] == null) throw refuse(what, "row " + r + " is null");
      if (ids[r].length == 0) throw refuse(what, "row " + r + " has no tokens");
    }
  }

  /** The token ids of texts, through {@link #tokenizer()}. */
  private long[][] encodeTexts(String what, java.util.List<String> texts) {
    if (texts == null) throw refuse(what, "the texts are null");
    if (texts.isEmpty()) throw refuse(what, "no texts; pass at least one");
    for (int i = 0; i < texts.size(); ++i)
      if (texts.get(i) == null) throw refuse(what, "text " + i + " is null");
    Tokenizer tok = tokenizer();
    long[][] ids = new long[texts.size()][];
    for (int i = 0; i < ids.length; ++i) {
      ids[i] = tok.encode(texts.get(i));
      if (ids[i].length == 0) throw refuse(what, "text " + i + " (\"" + texts.get(i)
          + "\") has no tokens");
    }
    return ids;
  }

  /** Loads a model keeping the checkpoint's dtype. Collective. */
  public Model(Context ctx, String path) {
    this(ctx, path, -1, 1, "");
  }

  /** Loads a model converting its weight matrices to {@code dtype}. Collective. */
  public Model(Context ctx, String path, DType dtype) {
    this(ctx, path, dtype.swigValue(), 1, "");
  }

  /**
   * Loads a model over the context's pipeline stages: {@code virtualStages}
   * model chunks per rank (1: none; the interleaved schedule otherwise) and
   * {@code layers} blocks per virtual stage, in order ({@code null}: split
   * evenly), e.g. {9, 3} to give the stage with the head fewer blocks.
   * {@code dtype} null keeps the checkpoint's. Collective.
   */
  public Model(Context ctx, String path, DType dtype, int virtualStages, int[] layers) {
    this(ctx, path, dtype == null ? -1 : dtype.swigValue(), virtualStages, joinCounts(layers));
  }

  private static String joinCounts(int[] layers) {
    if (layers == null) return "";
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < layers.length; ++i) b.append(i == 0 ? "" : ",").append(layers[i]);
    return b.toString();
  }

  static java.nio.LongBuffer directLongs(int n) {
    return java.nio.ByteBuffer.allocateDirect(n * 8).order(java.nio.ByteOrder.nativeOrder())
        .asLongBuffer();
  }

  static java.nio.FloatBuffer directFloats(long n) {
    return java.nio.ByteBuffer.allocateDirect(Math.toIntExact(n * 4))
        .order(java.nio.ByteOrder.nativeOrder()).asFloatBuffer();
  }

  /**
   * Runs one sequence of token ids: logits [seq, vocab] or hidden states
   * [seq, hidden], row-major. Collective.
   */
  public float[] forward(long[] ids, ModelOutput output) {
    if (ids == null) throw refuse("forward", "the ids are null");
    return forward(new long[][] {ids}, output)[0];
  }

  /**
   * Runs rows of token ids of any lengths (padded on the right inside, with
   * the attention mask built): row r's logits [len_r, vocab] or hidden
   * states [len_r, hidden], row-major, its real positions only (each as the
   * row alone gives them). Collective.
   */
  public float[][] forward(long[][] ids, ModelOutput output) {
    checkRows("forward", ids);
    if (output == null) throw refuse("forward", "the output kind is null");
    // Right padded by oslo_pad_batch.
    java.nio.LongBuffer[] padded = new java.nio.LongBuffer[2];
    int longest = BatchEncoding.padInto(ids, padId(), 0, 0, false, 0, false, padded);
    java.nio.LongBuffer flat = padded[0], mask = padded[1];
    ModelInfo i = info();
    int width = Math.toIntExact(output == ModelOutput.LOGITS ? i.getVocabSize() : i.getHiddenSize());
    i.close();
    java.nio.FloatBuffer out = directFloats((long) ids.length * longest * width);
    forward(flat, mask, null, ids.length, longest, output, out);
    float[][] result = new float[ids.length][];
    for (int r = 0; r < ids.length; ++r) {
      result[r] = new float[ids[r].length * width];
      out.position(r * longest * width);
      out.get(result[r]);
    }
    return result;
  }

  /** Normalised sentence embeddings of token-id rows of any lengths. Collective. */
  public float[][] embed(long[][] ids) {
    return embed(ids, true);
  }

  /**
   * Sentence embeddings (mean over the tokens, L2-normalised if
   * {@code normalize}) of token-id rows of any lengths (right padded). Collective.
   */
  public float[][] embed(long[][] ids, boolean normalize) {
    checkRows("embed", ids);
    java.nio.LongBuffer[] padded = new java.nio.LongBuffer[2];
    int longest = BatchEncoding.padInto(ids, padId(), 0, 0, false, 0, false, padded);
    return embedBuffers(padded[0], padded[1], ids.length, longest, normalize);
  }

  private float[][] embedBuffers(java.nio.LongBuffer flat, java.nio.LongBuffer mask, int rows,
      int seq, boolean normalize) {
    ModelInfo i = info();
    int hidden = Math.toIntExact(i.getHiddenSize());
    i.close();
    java.nio.FloatBuffer out = directFloats((long) rows * hidden);
    embed(flat, mask, rows, seq, normalize, out);
    float[][] result = new float[rows][hidden];
    for (float[] row : result) out.get(row);
    return result;
  }

  /**
   * Normalised sentence embeddings of texts, encoded by {@link #tokenizer()}
   * (the model folder's): {@code model.embed("A man is eating food.", "Hello!")}.
   * Collective.
   */
  public float[][] embed(String... texts) {
    return embed(texts == null ? null : java.util.Arrays.asList(texts), true);
  }

  /**
   * Sentence embeddings of texts, encoded by {@link #tokenizer()},
   * L2-normalised if {@code normalize}. Collective.
   */
  public float[][] embed(java.util.List<String> texts, boolean normalize) {
    if (texts == null) throw refuse("embed", "the texts are null");
    if (texts.isEmpty()) throw refuse("embed", "no texts; pass at least one");
    for (int i = 0; i < texts.size(); ++i)
      if (texts.get(i) == null) throw refuse("embed", "text " + i + " is null");
    // Encoded and right padded in one call (oslo_tokenizer_encode_batch).
    BatchEncoding b = tokenizer().encodeBatch(texts.toArray(new String[0]), Padding.RIGHT, true,
        padId());
    long[][] ids = b.getInputIds();
    long[][] mask = b.getAttentionMask();
    for (int i = 0; i < ids.length; ++i)
      if (ids[i].length == 0 || mask[i][0] == 0)
        throw refuse("embed", "text " + i + " (\"" + texts.get(i) + "\") has no tokens");
    int seq = ids[0].length;
    return embedBuffers(rows("embed: ids", ids, seq), rows("embed: mask", mask, seq), ids.length,
        seq, normalize);
  }

  /**
   * Normalised sentence embeddings of a tokenizer's padded batch
   * ({@link Tokenizer#encodeBatch(String[], Padding)}), over its mask. Collective.
   */
  public float[][] embed(BatchEncoding batch) {
    if (batch == null) throw refuse("embed", "the batch is null");
    long[][] ids = batch.getInputIds();
    long[][] mask = batch.getAttentionMask();
    checkRows("embed", ids);
    int seq = ids[0].length;
    for (int r = 0; r < ids.length; ++r)
      if (ids[r].length != seq)
        throw new OsloException(Status.SHAPE.swigValue(), "embed: the batch is not padded (row "
            + r + " has " + ids[r].length + " ids, row 0 " + seq + "); encode it with padding");
    return embedBuffers(rows("embed: ids", ids, seq), rows("embed: mask", mask, seq), ids.length,
        seq, true);
  }

  /** The new tokens of each prompt (EOS included when one was emitted). Collective. */
  public long[][] generate(long[][] prompts, GenerateOptions options) {
    return generateRows(prompts, options, null);
  }

  private long[][] generateRows(long[][] prompts, GenerateOptions options, float[] scores) {
    if (prompts == null) throw refuse("generate", "the prompts are null");
    if (prompts.length == 0) throw refuse("generate", "no prompts; pass at least one");
    for (int b = 0; b < prompts.length; ++b) {
      if (prompts[b] == null) throw refuse("generate", "prompt " + b + " is null");
      if (prompts[b].length == 0) throw refuse("generate", "prompt " + b + " has no tokens");
    }
    if (options == null) throw refuse("generate", "the options are null");
    int total = 0;
    for (long[] p : prompts) total += p.length;
    java.nio.LongBuffer ids = directLongs(total);
    java.nio.LongBuffer lengths = directLongs(prompts.length);
    for (int b = 0; b < prompts.length; ++b) {
      ids.put(prompts[b]);
      lengths.put(b, prompts[b].length);
    }
    long[] eos = options.getEosTokenIds();
    java.nio.LongBuffer eosBuf = null;
    if (eos != null) {
      eosBuf = directLongs(eos.length);
      eosBuf.put(eos);
    }
    int max = Math.toIntExact(options.getMaxNewTokens());
    if (max < 0) throw refuse("generate", "maxNewTokens " + max + " < 0");
    java.nio.LongBuffer out = directLongs(prompts.length * max);
    java.nio.LongBuffer outLengths = directLongs(prompts.length);
    java.nio.FloatBuffer outScores = scores == null ? null : directFloats(prompts.length);
    generate(ids, lengths, prompts.length, options, eosBuf, out, outLengths, outScores);
    long[][] result = new long[prompts.length][];
    for (int b = 0; b < prompts.length; ++b) {
      result[b] = new long[Math.toIntExact(outLengths.get(b))];
      out.position(b * max);
      out.get(result[b]);
      if (scores != null) scores[b] = outScores.get(b);
    }
    return result;
  }

  /** The new tokens of one prompt. Collective. */
  public long[] generate(long[] prompt, GenerateOptions options) {
    return generate(new long[][] {prompt}, options)[0];
  }

  /** At most {@code maxNewTokens} greedy new tokens of one prompt. Collective. */
  public long[] generate(long[] prompt, int maxNewTokens) {
    try (GenerateOptions o = new GenerateOptions(maxNewTokens)) {
      return generate(prompt, o);
    }
  }

  /**
   * Continues each text (encoded by {@link #tokenizer()}; prompts of
   * different lengths are batched with left padding inside): the new text
   * and ids of each. Collective.
   */
  public Generation[] generate(String[] prompts, GenerateOptions options) {
    long[][] ids = encodeTexts("generate", prompts == null ? null : java.util.Arrays.asList(prompts));
    float[] scores = new float[ids.length];
    long[][] out = generateRows(ids, options, scores);
    Tokenizer tok = tokenizer();
    Generation[] result = new Generation[out.length];
    for (int b = 0; b < out.length; ++b)
      result[b] = new Generation(tok.decode(out[b], true), out[b], scores[b]);
    return result;
  }

  /**
   * Continues one text: {@code model.generate("Once upon a time", o).getText()}.
   * Its ids equal {@code generate(tokenizer().encode(prompt), o)}. Collective.
   */
  public Generation generate(String prompt, GenerateOptions options) {
    return generate(new String[] {prompt}, options)[0];
  }

  /** At most {@code maxNewTokens} greedy new tokens of one text. Collective. */
  public Generation generate(String prompt, int maxNewTokens) {
    try (GenerateOptions o = new GenerateOptions(maxNewTokens)) {
      return generate(prompt, o);
    }
  }

  /**
   * Continues each row of a tokenizer's batch (its real tokens: the ids
   * where the mask is 1, whichever side it was padded on). Collective.
   */
  public long[][] generate(BatchEncoding batch, GenerateOptions options) {
    if (batch == null) throw refuse("generate", "the batch is null");
    long[][] rows = new long[batch.size()][];
    for (int r = 0; r < rows.length; ++r) rows[r] = batch.tokens(r);
    return generate(rows, options);
  }

  private static java.nio.LongBuffer rows(String what, long[][] rows, int seq) {
    if (rows == null) return null;
    java.nio.LongBuffer b = directLongs(rows.length * seq);
    for (int r = 0; r < rows.length; ++r) {
      if (rows[r].length != seq)
        throw new OsloException(Status.SHAPE.swigValue(), what + " row " + r
            + " has " + rows[r].length + " ids, ids rows " + seq);
      b.put(rows[r]);
    }
    return b;
  }

  /**
   * One micro-batch of causal-LM training on token-id rows of equal length
   * (see the buffer form): {@code labels} null are the ids with -100 where
   * the mask is 0, {@code mask} null is all 1, {@code optimizer} null only
   * accumulates the gradients. Collective.
   */
  public TrainStepResult trainStep(long[][] ids, long[][] labels, long[][] mask,
      Optimizer optimizer) {
    if (ids.length == 0)
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(), "trainStep: no rows");
    int seq = ids[0].length;
    if ((labels != null && labels.length != ids.length) || (mask != null && mask.length != ids.length))
      throw new OsloException(Status.SHAPE.swigValue(), "trainStep: labels or mask rows differ from ids rows");
    return trainStep(optimizer, rows("trainStep: ids", ids, seq),
        rows("trainStep: labels", labels, seq), rows("trainStep: mask", mask, seq), ids.length,
        seq);
  }

  /** One micro-batch with the labels made from the ids and mask. Collective. */
  public TrainStepResult trainStep(long[][] ids, long[][] mask, Optimizer optimizer) {
    return trainStep(ids, null, mask, optimizer);
  }

  /**
   * Backward from a loss on the last hidden states (an encoder's, or any
   * model's {@link ModelOutput#HIDDEN} output), on token-id rows of equal
   * length: {@code gradHidden} is d loss / d hidden states, row-major
   * [batch, seq, hidden] as {@link #forward(long[], ModelOutput)} returns
   * them; {@code mask} null is all 1, {@code tokenTypeIds} null all 0, and
   * {@code optimizer} null only accumulates the gradients (else it steps
   * after every gradAccumSteps micro-batches). The result's loss is 0.
   * Collective.
   */
  public TrainStepResult backward(long[][] ids, long[][] mask, long[][] tokenTypeIds,
      float[] gradHidden, Optimizer optimizer) {
    if (ids.length == 0)
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(), "backward: no rows");
    if (gradHidden == null)
      throw new OsloException(Status.INVALID_ARGUMENT.swigValue(), "backward: grad_hidden is null");
    int seq = ids[0].length;
    if ((mask != null && mask.length != ids.length)
        || (tokenTypeIds != null && tokenTypeIds.length != ids.length))
      throw new OsloException(Status.SHAPE.swigValue(),
          "backward: mask or token_type_ids rows differ from ids rows");
    java.nio.FloatBuffer grad = gradHidden.length == 0 ? null : directFloats(gradHidden.length);
    if (grad != null) grad.put(gradHidden);
    return backward(optimizer, rows("backward: ids", ids, seq), rows("backward: mask", mask, seq),
        rows("backward: token_type_ids", tokenTypeIds, seq), ids.length, seq, grad);
  }

  /**
   * Backward of one sequence of token ids from {@code gradHidden} [seq,
   * hidden] (row-major, as {@link #forward(long[], ModelOutput)} returns the
   * hidden states), mask all 1, token types all 0. Collective.
   */
  public TrainStepResult backward(long[] ids, float[] gradHidden, Optimizer optimizer) {
    return backward(new long[][] {ids}, null, null, gradHidden, optimizer);
  }

  /**
   * The pipeline schedule of this model's last trainStep: {this rank's
   * compute seconds, its wall seconds, the bubble over all stages} (1 - the
   * stages' compute summed / (stages x the longest wall time)); zeros
   * before a step and after one that ran no schedule (one stage,
   * microBatches 1). Not collective.
   */
  public double[] pipelineStats() {
    java.nio.DoubleBuffer out =
        java.nio.ByteBuffer.allocateDirect(24).order(java.nio.ByteOrder.nativeOrder()).asDoubleBuffer();
    pipelineStats(out);
    return new double[] {out.get(0), out.get(1), out.get(2)};
  }
%}
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

/* Java: the tensor keeps its context and the direct buffer alive. */
%typemap(javaout) oslo_tensor *bind_tensor_wrap {
    long cPtr = $jnicall;
    return (cPtr == 0) ? null : new Tensor(cPtr, $owner).keep(ctx, out, null);
  }

/* The tokenizer (with its chat templates, bindings/chat_template.i): its
   Javadoc, typemaps and methods. */
%include "java/oslo_java_tokenizer.i"

/* The serving engine (bindings/engine.i): its Java names, typemaps and methods. */
%include "java/oslo_java_engine.i"
