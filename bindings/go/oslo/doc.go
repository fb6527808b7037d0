// Package oslo is the Go binding of oslo, tensor- and pipeline-parallel
// transformer layers and models behind a C ABI (include/oslo.h).
//
//	ctx, err := oslo.NewContext(`{"tensor_parallel_size": 2}`)
//	if err != nil { ... }
//	defer ctx.Close()
//	m, err := oslo.LoadModel(ctx, "gpt2-tiny")
//	tokens, err := m.Generate([][]int64{{52, 441, 221}}, oslo.GenerateOptions{MaxNewTokens: 12})
//	g, err := m.GenerateText("Once upon a time", oslo.GenerateOptions{MaxNewTokens: 20}) // g.Text, g.IDs
//
// What users pass: Embed, Forward (nil mask) and Generate take rows of
// token ids of different lengths (padded inside, the mask built);
// EmbedTexts, GenerateText and GenerateTexts take texts, encoded by the
// model folder's tokenizer (Model.Tokenizer, loaded on first use); and
// Tokenizer.EncodeBatch returns ids and attention mask as Hugging Face's
// tokenizer(texts, padding=True) does, which EmbedBatch and GenerateBatch
// take as they are.
//
// Chat templates: Tokenizer.ApplyChatTemplate renders a conversation with
// the tokenizer folder's chat template into the prompt text, as
// transformers' apply_chat_template(messages, tokenize=False) does
// (ChatTemplateOptions: a template by name or source, Tools, Variables,
// ContinueFinalMessage); ApplyChatTemplate renders a template of one's own
// without a tokenizer.
//
// Errors: every failing call returns an *Error (Status and Message); use
// errors.Is with the sentinels (ErrConfig, ErrShape, ...) or errors.As. No
// call panics on bad input: a nil or closed handle, a slice of the wrong
// size, a wrong dtype or an unknown config key are errors.
//
// Lifetimes: every handle has Close (idempotent); a finalizer is only a
// safety net. Tensors, layers, parameter sets and models keep their
// Context alive, and Context.Close closes those still open first; an
// Optimizer keeps its Model alive the same way (Model.Close closes it).
//
// Training: NewOptimizer(m, OptimizerOptions{...}, TrainOptions{...}) over
// a model (the update rule, then how the training runs: accumulation,
// ZeRO, pipeline micro-batches), then Model.TrainStep per micro-batch (it
// steps the optimizer after every GradAccumSteps of them), or
// Optimizer.Step and ZeroGrad by hand; Model.PipelineStats reports the
// last step's pipeline schedule;
// Model.Backward trains from a loss on the hidden states (an encoder's).
// Optimizer.SaveCheckpoint and LoadCheckpoint save and resume training
// (weights, optimizer state and a TrainState) bit-exactly.
//
// Memory: oslo never keeps a pointer to Go memory after a call returns.
// Go slices are copied into tensors (TensorOf, Write) and out of them
// (Read, Values); oslo_tensor_wrap over Go memory is not offered. View
// gives a []float32 (or []int32, []int64) over a tensor's C memory,
// valid while the tensor is open.
//
// The package is cgo over the SWIG-generated internal/capi, which finds
// oslo with pkg-config (`#cgo pkg-config: oslo`): against an installed
// oslo it builds with no CGO_CFLAGS or CGO_LDFLAGS, given PKG_CONFIG_PATH
// for a prefix of one's own (bindings/README.md, docs/PACKAGING.md).
package oslo
