package oslo

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/oslo/oslo/bindings/go/oslo/internal/capi"
)

// Padding says how Tokenizer.EncodeBatch pads its rows.
type Padding int

// The paddings of EncodeBatch.
const (
	PadNone  Padding = 0 // rows keep their lengths; masks all 1
	PadRight Padding = 1 // padded to the longest row after the tokens (encoders)
	PadLeft  Padding = 2 // padded to the longest row before the tokens (decoder-only generation)
)

// Side is the end of a row that truncation cuts (oslo_side).
type Side int

// The sides of EncodeOptions.TruncationSide and PadOptions.
const (
	SideRight Side = 0 // drop the last ids
	SideLeft  Side = 1 // drop the first ids
)

// EncodeOptions configure Tokenizer.EncodeBatch. The zero value adds the
// tokenizer's special tokens, does not pad and does not truncate.
type EncodeOptions struct {
	Padding         Padding // PadNone, PadRight or PadLeft
	NoSpecialTokens bool    // leave out [CLS] ... [SEP], BOS
	PadID           *int64  // the id under padding; nil: the tokenizer's PAD, else 0
	// MaxLength (0: no limit) is the most ids a row may hold, as Hugging
	// Face's max_length: a longer row is cut with Truncation, else refused.
	MaxLength int
	// Truncation cuts a row longer than MaxLength from TruncationSide,
	// keeping its special tokens (Hugging Face's truncation=True).
	Truncation     bool
	TruncationSide Side // SideRight (default) or SideLeft
	// PadToMaxLength pads every row to MaxLength (padding="max_length";
	// Padding PadRight or PadLeft).
	PadToMaxLength bool
}

// BatchEncoding is what Tokenizer.EncodeBatch returns, as Hugging Face's
// tokenizer(texts, padding=True): one row of token ids per text and its
// attention mask (1 on real tokens, 0 on padding). Model.EmbedBatch and
// Model.GenerateBatch take it as it is.
type BatchEncoding struct {
	InputIDs      [][]int64 // Hugging Face's input_ids
	AttentionMask [][]int64 // Hugging Face's attention_mask
}

// Tokens returns row i's real tokens: its ids where the mask is 1.
func (b BatchEncoding) Tokens(i int) []int64 {
	var t []int64
	for k, m := range b.AttentionMask[i] {
		if m != 0 {
			t = append(t, b.InputIDs[i][k])
		}
	}
	return t
}

// EncodeBatch encodes texts into rows of token ids and their attention
// masks, as Hugging Face's tokenizer(texts, padding=True) does with
// Padding PadRight (or padding_side="left" with PadLeft).
func (t *Tokenizer) EncodeBatch(texts []string, o EncodeOptions) (BatchEncoding, error) {
	var b BatchEncoding
	if err := t.check(); err != nil {
		return b, err
	}
	if len(texts) == 0 {
		return b, errorf(StatusInvalidArgument, "encode batch: no texts; pass at least one")
	}
	if o.Padding < PadNone || o.Padding > PadLeft {
		return b, errorf(StatusInvalidArgument, "encode batch: padding %d is not PadNone, PadRight or PadLeft",
			o.Padding)
	}
	pad := int64(0)
	if o.PadID != nil {
		if *o.PadID < 0 {
			return b, errorf(StatusInvalidArgument, "encode batch: PadID %d < 0", *o.PadID)
		}
		pad = *o.PadID
	} else {
		p, err := t.SpecialID(TokenPAD)
		if err != nil {
			return b, err
		}
		if p >= 0 {
			pad = p
		}
	}
	if o.MaxLength < 0 {
		return b, errorf(StatusInvalidArgument, "encode batch: MaxLength %d < 0", o.MaxLength)
	}
	if o.TruncationSide != SideRight && o.TruncationSide != SideLeft {
		return b, errorf(StatusInvalidArgument, "encode batch: TruncationSide %d is not SideRight or SideLeft",
			o.TruncationSide)
	}
	if o.PadToMaxLength && o.Padding == PadNone {
		return b, errorf(StatusInvalidArgument, "encode batch: PadToMaxLength needs Padding PadRight or PadLeft")
	}
	// One call of oslo_tokenizer_encode_batch pads them (right padding for
	// PadNone: each row is then cut to its real tokens), its capacity
	// enough for every row a text's bytes make; a second call only when a
	// row comes out longer.
	var text []byte
	lengths := make([]int64, len(texts))
	guess := 0
	for i, s := range texts {
		text = append(text, s...)
		lengths[i] = int64(len(s))
		if len(s)+8 > guess {
			guess = len(s) + 8
		}
	}
	if o.PadToMaxLength || (o.MaxLength > 0 && o.MaxLength < guess) {
		guess = o.MaxLength
	}
	side := 0
	if o.Padding == PadLeft {
		side = 1
	}
	special := b2i(!o.NoSpecialTokens)
	encode := func(ids, mask []int64) int {
		return int(t.t.Encode_batch(text, bytesOf(lengths), special, side, pad, int64(o.MaxLength),
			b2i(o.Truncation), int(o.TruncationSide), b2i(o.PadToMaxLength), bytesOf(ids), bytesOf(mask)))
	}
	var width int
	flat := make([]int64, len(texts)*guess)
	flatMask := make([]int64, len(texts)*guess)
	err := call(func() {
		width = encode(flat, flatMask)
		if len(texts)*width > len(flat) {
			flat = make([]int64, len(texts)*width)
			flatMask = make([]int64, len(texts)*width)
			encode(flat, flatMask)
		}
	})
	runtime.KeepAlive(t)
	if err != nil {
		return b, err
	}
	b.InputIDs = make([][]int64, len(texts))
	b.AttentionMask = make([][]int64, len(texts))
	for i := range texts {
		row, mask := flat[i*width:(i+1)*width:(i+1)*width], flatMask[i*width:(i+1)*width:(i+1)*width]
		if o.Padding == PadNone {
			n := 0
			for n < width && mask[n] != 0 {
				n++
			}
			row, mask = row[:n:n], mask[:n:n]
		}
		b.InputIDs[i], b.AttentionMask[i] = row, mask
	}
	return b, nil
}

// Path is the folder (or parallel checkpoint) the model was loaded from.
func (m *Model) Path() string { return m.path }

// Tokenizer returns the tokenizer texts go through: the one given to
// SetTokenizer, else the tokenizer of the model's folder (tokenizer.json
// or tokenizer.model), loaded on first use and closed with the model. A
// folder without one gives the loader's error (ErrIO for missing files)
// with a message naming the folder.
func (m *Model) Tokenizer() (*Tokenizer, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	m.tokMu.Lock()
	defer m.tokMu.Unlock()
	if m.userTok != nil {
		return m.userTok, nil
	}
	if m.tok != nil && m.tok.n.ok() {
		return m.tok, nil
	}
	t, err := LoadTokenizer(m.path)
	if err != nil {
		e := &Error{Status: StatusInvalidArgument}
		msg := err.Error()
		var oe *Error
		if errors.As(err, &oe) {
			e.Status, msg = oe.Status, oe.Message
		}
		e.Message = fmt.Sprintf("the model folder %s has no tokenizer oslo can load "+
			"(tokenizer.json or tokenizer.model): %s; pass token ids, or call Model.SetTokenizer",
			m.path, msg)
		return nil, e
	}
	t.n.dependOn(m.n)
	m.tok = t
	return t, nil
}

// SetTokenizer makes texts go through t (the caller's: it is not closed
// with the model) instead of the folder's; nil goes back to the folder's.
func (m *Model) SetTokenizer(t *Tokenizer) {
	m.tokMu.Lock()
	defer m.tokMu.Unlock()
	m.userTok = t
}

// encodeTexts returns the token ids of texts through m.Tokenizer().
func (m *Model) encodeTexts(what string, texts []string) ([][]int64, *Tokenizer, error) {
	if err := m.check(); err != nil {
		return nil, nil, err
	}
	if len(texts) == 0 {
		return nil, nil, errorf(StatusInvalidArgument, "%s: no texts; pass at least one", what)
	}
	tok, err := m.Tokenizer()
	if err != nil {
		return nil, nil, err
	}
	rows := make([][]int64, len(texts))
	for i, s := range texts {
		if rows[i], err = tok.Encode(s, true); err != nil {
			return nil, nil, err
		}
		if len(rows[i]) == 0 {
			return nil, nil, errorf(StatusInvalidArgument, "%s: text %d (%q) has no tokens", what, i, s)
		}
	}
	return rows, tok, nil
}

// EmbedTexts returns the sentence embeddings of texts, encoded by the
// model's tokenizer (Tokenizer), as Embed computes them:
// m.EmbedTexts([]string{"A man is eating food.", "Hello!"}, true).
func (m *Model) EmbedTexts(texts []string, normalize bool) ([][]float32, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if len(texts) == 0 {
		return nil, errorf(StatusInvalidArgument, "embed: no texts; pass at least one")
	}
	tok, err := m.Tokenizer()
	if err != nil {
		return nil, err
	}
	info, err := m.Info()
	if err != nil {
		return nil, err
	}
	// Encoded and right padded in one call (oslo_tokenizer_encode_batch).
	pad := info.padID()
	b, err := tok.EncodeBatch(texts, EncodeOptions{Padding: PadRight, PadID: &pad})
	if err != nil {
		return nil, err
	}
	for i, mask := range b.AttentionMask {
		if len(mask) == 0 || mask[0] == 0 {
			return nil, errorf(StatusInvalidArgument, "embed: text %d (%q) has no tokens", i, texts[i])
		}
	}
	return m.EmbedBatch(b, normalize)
}

// EmbedBatch returns the sentence embeddings of a tokenizer's padded batch
// (Tokenizer.EncodeBatch with PadRight or PadLeft), over its mask.
func (m *Model) EmbedBatch(b BatchEncoding, normalize bool) ([][]float32, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if err := checkRows("embed", b.InputIDs); err != nil {
		return nil, err
	}
	seq := len(b.InputIDs[0])
	flat, err := rect("embed: ids", b.InputIDs, seq)
	if err != nil {
		return nil, err
	}
	if len(b.AttentionMask) != len(b.InputIDs) {
		return nil, errorf(StatusShape, "embed: %d mask rows for %d rows of ids", len(b.AttentionMask),
			len(b.InputIDs))
	}
	mask, err := rect("embed: mask", b.AttentionMask, seq)
	if err != nil {
		return nil, err
	}
	info, err := m.Info()
	if err != nil {
		return nil, err
	}
	return m.embedFlat(info, flat, mask, len(b.InputIDs), seq, normalize)
}

// Generation is what GenerateText returns: the new text (the new tokens
// decoded without special tokens), the new token ids (ending with EOS if
// one was emitted, as Generate returns them) and the row's score (the beam
// score, or the sum of the chosen tokens' log-probabilities).
type Generation struct {
	Text  string
	IDs   []int64
	Score float32
}

// GenerateTexts continues each text, encoded by the model's tokenizer
// (prompts of different lengths are batched with left padding inside),
// and returns the new text and ids of each.
func (m *Model) GenerateTexts(prompts []string, o GenerateOptions) ([]Generation, error) {
	rows, tok, err := m.encodeTexts("generate", prompts)
	if err != nil {
		return nil, err
	}
	ids, scores, err := m.GenerateScores(rows, o)
	if err != nil {
		return nil, err
	}
	out := make([]Generation, len(ids))
	for i, r := range ids {
		text, err := tok.Decode(r, true)
		if err != nil {
			return nil, err
		}
		out[i] = Generation{Text: text, IDs: r, Score: scores[i]}
	}
	return out, nil
}

// GenerateText continues one text: m.GenerateText("Once upon a time",
// oslo.GenerateOptions{MaxNewTokens: 20}). Its IDs equal Generate's for
// the text's token ids.
func (m *Model) GenerateText(prompt string, o GenerateOptions) (Generation, error) {
	g, err := m.GenerateTexts([]string{prompt}, o)
	if err != nil {
		return Generation{}, err
	}
	return g[0], nil
}

// GenerateBatch continues each row of a tokenizer's batch (its real
// tokens: the ids where the mask is 1, whichever side it was padded on).
func (m *Model) GenerateBatch(b BatchEncoding, o GenerateOptions) ([][]int64, error) {
	if len(b.AttentionMask) != len(b.InputIDs) {
		return nil, errorf(StatusShape, "generate: %d mask rows for %d rows of ids", len(b.AttentionMask),
			len(b.InputIDs))
	}
	rows := make([][]int64, len(b.InputIDs))
	for i := range rows {
		if len(b.AttentionMask[i]) != len(b.InputIDs[i]) {
			return nil, errorf(StatusShape, "generate: mask row %d has %d values, its ids %d", i,
				len(b.AttentionMask[i]), len(b.InputIDs[i]))
		}
		rows[i] = b.Tokens(i)
	}
	return m.Generate(rows, o)
}

// PadOptions configure PadBatch, as Hugging Face's tokenizer.pad: the zero
// value pads on the right to the longest row with id 0 and cuts nothing.
type PadOptions struct {
	PadID   int64 // the id under padding (>= 0)
	PadLeft bool  // pad before the tokens (decoder-only generation)
	// MaxLength (0: no limit) is the most ids a row may hold: a longer row
	// is cut from TruncationSide with Truncation, else refused.
	MaxLength      int
	Truncation     bool
	TruncationSide Side // SideRight (default) or SideLeft
	PadToMaxLength bool // pad every row to MaxLength (padding="max_length")
}

// PadBatch pads rows of token ids of any lengths into a BatchEncoding
// whose rows all have one length, with their attention masks (1 on real
// tokens, 0 on padding), as Hugging Face's tokenizer.pad
// (DataCollatorWithPadding) does (oslo_pad_batch). Rows may be empty.
func PadBatch(rows [][]int64, o PadOptions) (BatchEncoding, error) {
	var b BatchEncoding
	flat, width, err := padFlat(rows, o)
	if err != nil {
		return b, err
	}
	b.InputIDs = make([][]int64, len(rows))
	b.AttentionMask = make([][]int64, len(rows))
	for i := range rows {
		b.InputIDs[i] = flat[0][i*width : (i+1)*width : (i+1)*width]
		b.AttentionMask[i] = flat[1][i*width : (i+1)*width : (i+1)*width]
	}
	return b, nil
}

// padFlat is oslo_pad_batch of rows: the flat [rows, L] ids and mask, and L.
func padFlat(rows [][]int64, o PadOptions) ([2][]int64, int, error) {
	var out [2][]int64
	if len(rows) == 0 {
		return out, 0, errorf(StatusInvalidArgument, "pad batch: no rows; pass at least one")
	}
	if o.MaxLength < 0 {
		return out, 0, errorf(StatusInvalidArgument, "pad batch: MaxLength %d < 0", o.MaxLength)
	}
	var ids []int64
	lengths := make([]int64, len(rows))
	for i, r := range rows {
		ids = append(ids, r...)
		lengths[i] = int64(len(r))
	}
	var width int
	err := call(func() {
		pad := func(flat, mask []int64) int {
			return int(capi.Pad_batch(bytesOf(ids), bytesOf(lengths), b2i(o.PadLeft), o.PadID,
				int64(o.MaxLength), b2i(o.Truncation), int(o.TruncationSide), b2i(o.PadToMaxLength),
				bytesOf(flat), bytesOf(mask)))
		}
		width = pad(nil, nil)
		out[0] = make([]int64, len(rows)*width)
		out[1] = make([]int64, len(rows)*width)
		if width > 0 {
			pad(out[0], out[1])
		}
	})
	return out, width, err
}
