package oslo

import (
	"errors"
	"fmt"
	"runtime"
)

// Padding says how Tokenizer.EncodeBatch pads its rows.
type Padding int

// The paddings of EncodeBatch.
const (
	PadNone  Padding = 0 // rows keep their lengths; masks all 1
	PadRight Padding = 1 // padded to the longest row after the tokens (encoders)
	PadLeft  Padding = 2 // padded to the longest row before the tokens (decoder-only generation)
)

// EncodeOptions configure Tokenizer.EncodeBatch. The zero value adds the
// tokenizer's special tokens and does not pad.
type EncodeOptions struct {
	Padding         Padding // PadNone, PadRight or PadLeft
	NoSpecialTokens bool    // leave out [CLS] ... [SEP], BOS
	PadID           *int64  // the id under padding; nil: the tokenizer's PAD, else 0
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
	// One call of oslo_tokenizer_encode_batch pads them (right padding for
	// PadNone: each row is then cut to its real tokens).
	var text []byte
	lengths := make([]int64, len(texts))
	for i, s := range texts {
		text = append(text, s...)
		lengths[i] = int64(len(s))
	}
	side := 0
	if o.Padding == PadLeft {
		side = 1
	}
	special := b2i(!o.NoSpecialTokens)
	var width int
	var flat, flatMask []int64
	err := call(func() {
		width = int(t.t.Encode_batch(text, bytesOf(lengths), special, side, pad, 0, 0, 0, 0, nil, nil))
		flat = make([]int64, len(texts)*width)
		flatMask = make([]int64, len(texts)*width)
		if len(flat) > 0 {
			t.t.Encode_batch(text, bytesOf(lengths), special, side, pad, 0, 0, 0, 0, bytesOf(flat),
				bytesOf(flatMask))
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
