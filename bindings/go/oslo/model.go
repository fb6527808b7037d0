package oslo

import (
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/oslo/oslo/bindings/go/oslo/internal/capi"
)

// Model is a Hugging Face transformer (gpt2, bert, llama, mistral, qwen2)
// split over the tensor group (oslo_model). Forward, Embed, Generate and
// Save are collective: every rank of the tensor group calls them with the
// same arguments and gets the same result.
type Model struct {
	n    *node
	m    capi.Model
	ctx  *Context
	path string

	tokMu   sync.Mutex
	tok     *Tokenizer // the folder's, once loaded (closed with the model)
	userTok *Tokenizer // set by SetTokenizer (the caller's)
}

// ModelOutput is what Model.Forward returns.
type ModelOutput int

// The outputs of Model.Forward.
const (
	Logits ModelOutput = 0 // [batch, seq, vocab] (causal models)
	Hidden ModelOutput = 1 // [batch, seq, hidden], after the final norm
)

// ModelInfo holds the sizes of a loaded model, as in its config.json.
type ModelInfo struct {
	VocabSize    int64 // tokens in the vocabulary
	HiddenSize   int64 // width of the hidden states (and of Embed's vectors)
	NumLayers    int64 // transformer layers
	NumHeads     int64 // attention heads
	NumKVHeads   int64 // key/value heads (NumHeads without grouped-query attention)
	MaxPositions int64 // longest sequence
	IsCausal     bool  // a language model (Generate works), not an encoder
	DType        DType // of the weight matrices
	EOSTokenID   int64 // first EOS id of the config, -1 if none
	PadTokenID   int64 // -1 if none
}

// LoadModel loads the model at path (a Hugging Face folder or an oslo
// parallel checkpoint) into this rank's share of the tensor group, in the
// checkpoint's dtype. Collective over the world group.
func LoadModel(ctx *Context, path string) (*Model, error) {
	return loadModel(ctx, path, -1, 1, "")
}

// LoadModelAs is LoadModel with the weights converted to dtype (F32, F16
// or BF16).
func LoadModelAs(ctx *Context, path string, dtype DType) (*Model, error) {
	return loadModel(ctx, path, int(dtype), 1, "")
}

// ModelOptions are LoadModelWith's options beyond the path.
type ModelOptions struct {
	// DType converts the weight matrices (F32, F16 or BF16); nil keeps the
	// checkpoint's.
	DType *DType
	// PipelineVirtualStages is the number of model chunks per pipeline
	// rank (0 or 1: none; more: the interleaved schedule).
	PipelineVirtualStages int
	// PipelineLayers gives the blocks of each virtual stage in order (nil:
	// split evenly), e.g. {9, 3} to give the stage with the head fewer.
	PipelineLayers []int
}

// LoadModelWith is LoadModel with options: the dtype and how the blocks
// are cut into the context's pipeline stages. Collective.
func LoadModelWith(ctx *Context, path string, o ModelOptions) (*Model, error) {
	dt := -1
	if o.DType != nil {
		dt = int(*o.DType)
	}
	vs := o.PipelineVirtualStages
	if vs == 0 {
		vs = 1
	}
	counts := make([]string, len(o.PipelineLayers))
	for i, c := range o.PipelineLayers {
		counts[i] = strconv.Itoa(c)
	}
	return loadModel(ctx, path, dt, vs, strings.Join(counts, ","))
}

func loadModel(ctx *Context, path string, dtype, virtualStages int, layers string) (*Model, error) {
	if err := ctx.check(); err != nil {
		return nil, err
	}
	var m capi.Model
	err := call(func() { m = capi.NewModel(ctx.c, path, dtype, virtualStages, layers) })
	runtime.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	x := &Model{m: m, ctx: ctx, path: path}
	x.n = newNode(func() { capi.DeleteModel(m) }, ctx.n)
	runtime.SetFinalizer(x, (*Model).finalize)
	return x, nil
}

func (m *Model) finalize() { m.n.close() }

// Close frees the model (not collective). Idempotent.
func (m *Model) Close() error {
	if m == nil {
		return nil
	}
	m.n.close()
	runtime.SetFinalizer(m, nil)
	return nil
}

func (m *Model) check() error {
	if m == nil || !m.n.ok() {
		return errClosed("model")
	}
	return nil
}

// Info returns the model's sizes.
func (m *Model) Info() (ModelInfo, error) {
	var i ModelInfo
	if err := m.check(); err != nil {
		return i, err
	}
	err := call(func() {
		c := m.m.Info()
		defer capi.DeleteModelInfo(c)
		i = ModelInfo{
			VocabSize: c.GetVocab_size(), HiddenSize: c.GetHidden_size(),
			NumLayers: c.GetNum_layers(), NumHeads: c.GetNum_heads(),
			NumKVHeads: c.GetNum_kv_heads(), MaxPositions: c.GetMax_positions(),
			IsCausal: c.GetIs_causal() != 0, DType: DType(c.GetDtype()),
			EOSTokenID: c.GetEos_token_id(), PadTokenID: c.GetPad_token_id(),
		}
	})
	runtime.KeepAlive(m)
	return i, err
}

// Type is the model's model_type ("gpt2", "bert", ...).
func (m *Model) Type() (string, error) {
	if err := m.check(); err != nil {
		return "", err
	}
	var t string
	err := call(func() { t = m.m.Model_type() })
	runtime.KeepAlive(m)
	return t, err
}

// rect flattens rows of equal length; nil rows give nil.
func rect(what string, rows [][]int64, seq int) ([]int64, error) {
	if rows == nil {
		return nil, nil
	}
	flat := make([]int64, 0, len(rows)*seq)
	for i, r := range rows {
		if len(r) != seq {
			return nil, errorf(StatusShape, "%s: row %d has %d ids, row 0 %d", what, i, len(r), seq)
		}
		flat = append(flat, r...)
	}
	return flat, nil
}

// checkRows refuses no rows and empty rows.
func checkRows(what string, rows [][]int64) error {
	if len(rows) == 0 {
		return errorf(StatusInvalidArgument, "%s: no rows; pass at least one row of token ids", what)
	}
	for i, r := range rows {
		if len(r) == 0 {
			return errorf(StatusInvalidArgument, "%s: row %d has no tokens", what, i)
		}
	}
	return nil
}

// padID is the id under padding: the config's pad_token_id, else 0
// (masked out either way).
func (info ModelInfo) padID() int64 {
	if info.PadTokenID >= 0 && info.PadTokenID < info.VocabSize {
		return info.PadTokenID
	}
	return 0
}

// Forward runs the model on a batch of id rows; mask (1 for a real token,
// 0 for padding) and tokenTypeIDs (BERT's segments) may be nil (all 1, all
// 0). With a nil mask the rows may differ in length: they are padded on
// the right with the mask built, and row i's values are at its first
// len(ids[i]) positions (tokenTypeIDs, if given, has the rows' lengths).
// It returns the output as one slice, row-major [batch, seq, vocab] for
// Logits or [batch, seq, hidden] for Hidden, seq the longest row.
func (m *Model) Forward(ids, mask, tokenTypeIDs [][]int64, output ModelOutput) ([]float32, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if err := checkRows("forward", ids); err != nil {
		return nil, err
	}
	info, err := m.Info()
	if err != nil {
		return nil, err
	}
	var fi, fm, ft []int64
	seq := len(ids[0])
	if mask == nil {
		// Right padded by oslo_pad_batch.
		var p [2][]int64
		if p, seq, err = padFlat(ids, PadOptions{PadID: info.padID()}); err != nil {
			return nil, err
		}
		fi, fm = p[0], p[1]
		if tokenTypeIDs != nil {
			if len(tokenTypeIDs) != len(ids) {
				return nil, errorf(StatusShape, "forward: %d token_type_ids rows for %d rows of ids",
					len(tokenTypeIDs), len(ids))
			}
			for i, r := range tokenTypeIDs {
				if len(r) != len(ids[i]) {
					return nil, errorf(StatusShape, "forward: token_type_ids row %d has %d values, its ids %d",
						i, len(r), len(ids[i]))
				}
			}
			if p, _, err = padFlat(tokenTypeIDs, PadOptions{}); err != nil {
				return nil, err
			}
			ft = p[0]
		}
	} else {
		if fi, err = rect("forward: ids", ids, seq); err != nil {
			return nil, err
		}
		if fm, err = rect("forward: mask", mask, seq); err != nil {
			return nil, err
		}
		if ft, err = rect("forward: token_type_ids", tokenTypeIDs, seq); err != nil {
			return nil, err
		}
		if len(mask) != len(ids) || (tokenTypeIDs != nil && len(tokenTypeIDs) != len(ids)) {
			return nil, errorf(StatusShape, "forward: mask or token_type_ids rows differ from the %d ids rows",
				len(ids))
		}
	}
	w := info.HiddenSize
	if output == Logits {
		w = info.VocabSize
	}
	out := make([]float32, int64(len(ids)*seq)*w)
	err = call(func() {
		m.m.Forward(bytesOf(fi), bytesOf(fm), bytesOf(ft), int64(len(ids)), int64(seq),
			capi.Enum_SS_oslo_model_output(output), bytesOf(out))
	})
	runtime.KeepAlive(m)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Embed returns sentence embeddings as sentence-transformers computes them
// (the mean of the last hidden states over the real tokens, L2-normalised
// when normalize is set), one per row of ids. Rows may differ in length:
// they are padded on the right and masked.
func (m *Model) Embed(ids [][]int64, normalize bool) ([][]float32, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if err := checkRows("embed", ids); err != nil {
		return nil, err
	}
	info, err := m.Info()
	if err != nil {
		return nil, err
	}
	p, seq, err := padFlat(ids, PadOptions{PadID: info.padID()})
	if err != nil {
		return nil, err
	}
	return m.embedFlat(info, p[0], p[1], len(ids), seq, normalize)
}

func (m *Model) embedFlat(info ModelInfo, flat, mask []int64, rows, seq int, normalize bool) ([][]float32, error) {
	h := int(info.HiddenSize)
	out := make([]float32, rows*h)
	err := call(func() {
		m.m.Embed(bytesOf(flat), bytesOf(mask), int64(rows), int64(seq), b2i(normalize), bytesOf(out))
	})
	runtime.KeepAlive(m)
	if err != nil {
		return nil, err
	}
	res := make([][]float32, rows)
	for i := range res {
		res[i] = out[i*h : (i+1)*h : (i+1)*h]
	}
	return res, nil
}

// GenerateOptions configure Model.Generate. The zero value is greedy
// decoding of 20 tokens; every zero field means Hugging Face's default.
type GenerateOptions struct {
	MaxNewTokens  int64    // tokens to generate at most; 0: 20
	DoSample      bool     // sample instead of greedy or beam search
	Temperature   float32  // sampling temperature > 0; 0: 1
	TopK          int64    // keep the k most likely tokens; 0: 50, negative: off
	TopP          float32  // nucleus mass in (0, 1]; 0: 1 (off)
	Seed          uint64   // sampling seed: same seed, same tokens
	NumBeams      int64    // beam search when > 1; 0: 1
	LengthPenalty *float32 // beam score = logprob sum / length^penalty; nil: 1
	EarlyStopping int      // beams: 0 Hugging Face's False, 1 True, -1 "never"
	EOSTokenIDs   []int64  // a row stops after one of these; nil or empty: the config's
	PadTokenID    *int64   // fed after EOS and used for left padding; nil: the config's
	// RepetitionPenalty divides the score of every token already in the
	// row (multiplies a negative one), as Hugging Face's; 0: 1 (off).
	RepetitionPenalty float32
	// MinNewTokens keeps EOS from being chosen before this many new tokens.
	MinNewTokens int64
	// KVCacheInt8 keeps the KV cache in int8, one scale per token and KV
	// head (docs/QUANTIZATION.md); an Engine's requests use the engine's
	// EngineOptions.KVInt8 and refuse this on an f32 engine.
	KVCacheInt8 bool
}

// toC fills the C options (made and freed by the caller) with o's fields,
// maxNew new tokens at most. Runs inside call (the setters cannot fail).
func (o GenerateOptions) toC(c capi.GenerateOptions, maxNew int64) {
	c.SetMax_new_tokens(maxNew)
	c.SetDo_sample(b2i(o.DoSample))
	if o.Temperature != 0 {
		c.SetTemperature(o.Temperature)
	}
	if o.TopK > 0 {
		c.SetTop_k(o.TopK)
	} else if o.TopK < 0 {
		c.SetTop_k(0)
	}
	if o.TopP != 0 {
		c.SetTop_p(o.TopP)
	}
	c.SetSeed(o.Seed)
	if o.NumBeams != 0 {
		c.SetNum_beams(o.NumBeams)
	}
	if o.LengthPenalty != nil {
		c.SetLength_penalty(*o.LengthPenalty)
	}
	c.SetEarly_stopping(o.EarlyStopping)
	if o.PadTokenID != nil {
		c.SetPad_token_id(*o.PadTokenID)
	}
	if o.RepetitionPenalty != 0 {
		c.SetRepetition_penalty(o.RepetitionPenalty)
	}
	c.SetMin_new_tokens(o.MinNewTokens)
	if o.KVCacheInt8 {
		c.SetKv_cache_dtype(capi.OSLO_DTYPE_I8)
	}
}

// maxNewTokens is o.MaxNewTokens with its default (20 for 0).
func (o GenerateOptions) maxNewTokens(what string) (int64, error) {
	maxNew := o.MaxNewTokens
	if maxNew == 0 {
		maxNew = 20
	}
	if maxNew < 0 {
		return 0, errorf(StatusInvalidArgument, "%s: MaxNewTokens %d < 0", what, maxNew)
	}
	return maxNew, nil
}

// Generate continues each prompt (rows may differ in length) and returns
// each row's new tokens (ending with EOS if one was emitted).
func (m *Model) Generate(prompts [][]int64, o GenerateOptions) ([][]int64, error) {
	t, _, err := m.GenerateScores(prompts, o)
	return t, err
}

// GenerateScores is Generate that also returns each row's score: the beam
// score, or the sum of the chosen tokens' log-probabilities.
func (m *Model) GenerateScores(prompts [][]int64, o GenerateOptions) ([][]int64, []float32, error) {
	if err := m.check(); err != nil {
		return nil, nil, err
	}
	if len(prompts) == 0 {
		return nil, nil, errorf(StatusInvalidArgument, "generate: no prompts; pass at least one")
	}
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, nil, errorf(StatusInvalidArgument, "generate: prompt %d has no tokens", i)
		}
	}
	var ids []int64
	lens := make([]int64, len(prompts))
	for i, p := range prompts {
		ids = append(ids, p...)
		lens[i] = int64(len(p))
	}
	maxNew, err := o.maxNewTokens("generate")
	if err != nil {
		return nil, nil, err
	}
	b := len(prompts)
	tokens := make([]int64, int64(b)*maxNew)
	lengths := make([]int64, b)
	scores := make([]float32, b)
	err = call(func() {
		c := capi.NewGenerateOptions()
		defer capi.DeleteGenerateOptions(c)
		o.toC(c, maxNew)
		m.m.Generate(bytesOf(ids), bytesOf(lens), int64(b), c, bytesOf(o.EOSTokenIDs), bytesOf(tokens),
			bytesOf(lengths), bytesOf(scores))
	})
	runtime.KeepAlive(m)
	if err != nil {
		return nil, nil, err
	}
	out := make([][]int64, b)
	for i := range out {
		row := tokens[int64(i)*maxNew : int64(i+1)*maxNew]
		out[i] = append([]int64(nil), row[:lengths[i]]...)
	}
	return out, scores, nil
}

// Save writes the model as a parallel checkpoint in dir (each rank its
// slices). Collective over the world group.
func (m *Model) Save(dir string) error {
	if err := m.check(); err != nil {
		return err
	}
	err := call(func() { m.m.Save(dir) })
	runtime.KeepAlive(m)
	return err
}

// MergeOptions configure Merge. The zero value keeps the dtype, writes one
// model.safetensors and refuses an existing non-empty dst.
type MergeOptions struct {
	DType         *DType // the float dtype to write; nil: keep
	MaxShardBytes uint64 // 0: one file; else shards and an index
	Overwrite     bool   // replace an existing non-empty dst
}

// Merge writes the parallel checkpoint (or any Hugging Face folder) src as
// one ordinary Hugging Face folder dst. Needs no context.
func Merge(src, dst string, o MergeOptions) error {
	d := -1
	if o.DType != nil {
		d = int(*o.DType)
	}
	return call(func() { capi.Model_merge(src, dst, d, o.MaxShardBytes, b2i(o.Overwrite)) })
}

// Reshard rewrites the checkpoint or Hugging Face folder src as a parallel
// checkpoint dst for tensorParallelSize ranks, offline.
func Reshard(src, dst string, tensorParallelSize int) error {
	return call(func() { capi.Model_reshard(src, dst, tensorParallelSize) })
}

// Inspect describes any checkpoint (format, layout, config summary and
// tensors) as aligned text, or JSON if asJSON is set.
func Inspect(path string, asJSON bool) (string, error) {
	var s string
	err := call(func() { s = capi.Checkpoint_inspect(path, b2i(asJSON)) })
	return s, err
}

// Version is the run-time version of the library, e.g. "0.3.0".
func Version() string { return capi.Version_string() }
