package tests

// What users pass (issue 19): rows of token ids of any lengths, texts and
// the tokenizer's batch call, against independent references: Hugging
// Face's tokenizer output (tests/bindings/tokenizer_batch_reference.txt),
// transformers' greedy tokens (reference.json), each row alone, and
// sentence-transformers' MiniLM embeddings. ctest: go_users_*.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/oslo/oslo/bindings/go/oslo"
)

// tokCase is one case of tokenizer_batch_reference.txt.
type tokCase struct {
	fixture string
	padding oslo.Padding
	pad     *int64
	special bool
	texts   []string
	ids     [][]int64
	mask    [][]int64
}

func parseLongs(line string) ([]int64, error) {
	f := strings.Fields(line)
	v := make([]int64, 0, len(f))
	for _, w := range f[1:] {
		x, err := strconv.ParseInt(w, 10, 64)
		if err != nil {
			return nil, err
		}
		v = append(v, x)
	}
	return v, nil
}

func readTokReference(t *testing.T) []tokCase {
	t.Helper()
	var cases []tokCase
	// fixture side pad special n
	for _, r := range readRefCases(t, env(t, "OSLO_TOKREF"), 5, "text") {
		c := tokCase{fixture: r.head[0], padding: oslo.PadRight, special: r.head[3] == "1",
			texts: r.items, ids: r.ids, mask: r.mask}
		if r.head[1] == "left" {
			c.padding = oslo.PadLeft
		}
		if r.head[2] != "default" {
			p, err := strconv.ParseInt(r.head[2], 10, 64)
			must(t, err)
			c.pad = &p
		}
		cases = append(cases, c)
	}
	return cases
}

// refused checks that err is ErrInvalidArgument naming words.
func refused(t *testing.T, what string, err error, words string) {
	t.Helper()
	wantErr(t, what, err, oslo.ErrInvalidArgument)
	if !strings.Contains(err.Error(), words) {
		t.Fatalf("%s: %q not in %v", what, words, err)
	}
}

// same compares id rows, nil and empty alike.
func same(a, b []int64) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// users_tokenizer_batch: EncodeBatch equals Hugging Face's
// tokenizer(texts, padding=True) (GPT-2, BERT, LLaMA and the real MiniLM;
// both sides); PadNone keeps the rows; bad input is refused.
func TestUsersTokenizerBatch(t *testing.T) {
	done := 0
	for _, c := range readTokReference(t) {
		dir := filepath.Join(env(t, "OSLO_FIXTURES"), c.fixture)
		if c.fixture == "minilm" {
			dir = env(t, "OSLO_MINILM")
		}
		tok, err := oslo.LoadTokenizer(dir)
		must(t, err)
		what := fmt.Sprintf("%s padding %d", c.fixture, c.padding)
		b, err := tok.EncodeBatch(c.texts, oslo.EncodeOptions{Padding: c.padding,
			NoSpecialTokens: !c.special, PadID: c.pad})
		must(t, err)
		if !reflect.DeepEqual(b.InputIDs, c.ids) || !reflect.DeepEqual(b.AttentionMask, c.mask) {
			t.Fatalf("%s: %v / %v, transformers %v / %v", what, b.InputIDs, b.AttentionMask, c.ids, c.mask)
		}
		none, err := tok.EncodeBatch(c.texts, oslo.EncodeOptions{NoSpecialTokens: !c.special})
		must(t, err)
		for i, s := range c.texts {
			ids, err := tok.Encode(s, c.special)
			must(t, err)
			if !same(none.InputIDs[i], ids) || !same(b.Tokens(i), ids) {
				t.Fatalf("%s: row %d unpadded %v, Tokens %v, Encode %v", what, i, none.InputIDs[i], b.Tokens(i), ids)
			}
			for _, m := range none.AttentionMask[i] {
				if m != 1 {
					t.Fatalf("%s: unpadded mask %v", what, none.AttentionMask[i])
				}
			}
		}
		tok.Close()
		done++
	}
	if done != 7 {
		t.Fatalf("%d cases", done)
	}
	tok, err := oslo.LoadTokenizer(filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny"))
	must(t, err)
	defer tok.Close()
	b, err := tok.EncodeBatch([]string{"a b c d", "a"}, oslo.EncodeOptions{Padding: oslo.PadRight})
	must(t, err)
	for _, v := range b.InputIDs[1][1:] {
		if v != 0 {
			t.Fatalf("no padding token: 0 under padding, got %v", b.InputIDs)
		}
	}
	_, err = tok.EncodeBatch(nil, oslo.EncodeOptions{})
	refused(t, "no texts", err, "no texts")
	_, err = tok.EncodeBatch([]string{"a"}, oslo.EncodeOptions{Padding: 7})
	refused(t, "bad padding", err, "padding 7")
	neg := int64(-1)
	_, err = tok.EncodeBatch([]string{"a"}, oslo.EncodeOptions{PadID: &neg})
	refused(t, "negative pad", err, "PadID -1")
	var closed *oslo.Tokenizer
	_, err = closed.EncodeBatch([]string{"a"}, oslo.EncodeOptions{})
	refused(t, "nil tokenizer", err, "nil or closed")
}

// users_embed_ragged: BERT (bert-tiny) rows of different lengths, texts and
// a tokenizer's batch: a ragged batch equals each row alone (1e-5), texts
// equal their ids; Forward of ragged rows equals each row alone; bad input
// is refused, named.
func TestUsersEmbedRagged(t *testing.T) {
	dir := filepath.Join(env(t, "OSLO_FIXTURES"), "bert-tiny")
	texts := []string{"This License applies to any program or other work which contains a notice",
		"no warranty", "Hello world!", "THE QUICK BROWN FOX"}
	ctx, err := oslo.NewContext("")
	must(t, err)
	defer ctx.Close()
	m, err := oslo.LoadModel(ctx, dir)
	must(t, err)
	if m.Path() != dir {
		t.Fatalf("Path() = %q", m.Path())
	}
	tok, err := m.Tokenizer()
	must(t, err)
	if again, _ := m.Tokenizer(); again != tok {
		t.Fatal("the tokenizer is loaded once")
	}
	rows := make([][]int64, len(texts))
	for i, s := range texts {
		rows[i], err = tok.Encode(s, true)
		must(t, err)
	}
	e, err := m.Embed(rows, true)
	must(t, err)
	for i, r := range rows {
		alone, err := m.Embed([][]int64{r}, true)
		must(t, err)
		if d := maxDiff(e[i], alone[0]); d > 1e-5 {
			t.Fatalf("row %d: ragged batch vs alone max |diff| %g", i, d)
		}
	}
	et, err := m.EmbedTexts(texts, true)
	must(t, err)
	if !reflect.DeepEqual(et, e) {
		t.Fatal("texts differ from their ids")
	}
	b, err := tok.EncodeBatch(texts, oslo.EncodeOptions{Padding: oslo.PadRight})
	must(t, err)
	eb, err := m.EmbedBatch(b, true)
	must(t, err)
	for i := range e {
		if d := maxDiff(e[i], eb[i]); d > 1e-6 {
			t.Fatalf("row %d: batch encoding vs rows %g", i, d)
		}
	}
	h, err := m.Forward(rows, nil, nil, oslo.Hidden)
	must(t, err)
	seq := 0
	for _, r := range rows {
		if len(r) > seq {
			seq = len(r)
		}
	}
	for i, r := range rows {
		alone, err := m.Forward([][]int64{r}, nil, nil, oslo.Hidden)
		must(t, err)
		if d := maxDiff(h[i*seq*64:(i*seq+len(r))*64], alone); d > 1e-5 {
			t.Fatalf("forward row %d: batch vs alone %g", i, d)
		}
	}
	_, err = m.Embed(nil, true)
	refused(t, "Embed(nil)", err, "no rows")
	_, err = m.Embed([][]int64{{5}, {}}, true)
	refused(t, "an empty row", err, "row 1 has no tokens")
	_, err = m.EmbedTexts(nil, true)
	refused(t, "no texts", err, "no texts")
	_, err = m.Forward([][]int64{{}}, nil, nil, oslo.Hidden)
	refused(t, "Forward empty row", err, "row 0 has no tokens")
	_, err = m.Forward([][]int64{{5, 6}, {7}}, nil, [][]int64{{0}, {0}}, oslo.Hidden)
	wantErr(t, "ragged token types", err, oslo.ErrShape)
	_, err = m.EmbedBatch(oslo.BatchEncoding{InputIDs: [][]int64{{5, 6}, {7}},
		AttentionMask: [][]int64{{1, 1}, {1}}}, true)
	wantErr(t, "an unpadded batch", err, oslo.ErrShape)
	_, err = m.Embed([][]int64{{5, 1000000}}, true)
	refused(t, "an id outside the vocabulary", err, "outside")
	must(t, m.Close())
	_, err = tok.Encode("a", true)
	refused(t, "the model's tokenizer closes with it", err, "nil or closed")
	_, err = m.EmbedTexts(texts, true)
	refused(t, "a closed model", err, "nil or closed")
}

// users_generate_text: GPT-2 (gpt2-tiny): GenerateText's IDs equal
// Generate of the text's ids and transformers' greedy tokens
// (reference.json, for texts that encode to its prompts), its Text the
// decoded ids; several texts and a tokenizer's batch; bad input is refused.
func TestUsersGenerateText(t *testing.T) {
	dir := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	must(t, err)
	var ref struct {
		Prompts [][]int64 `json:"prompts"`
		Greedy  struct {
			Outputs map[string][]int64 `json:"outputs"`
		} `json:"greedy"`
	}
	must(t, json.Unmarshal(raw, &ref))
	ctx, err := oslo.NewContext("")
	must(t, err)
	defer ctx.Close()
	m, err := oslo.LoadModel(ctx, dir)
	must(t, err)
	defer m.Close()
	tok, err := m.Tokenizer()
	must(t, err)
	pad := int64(0)
	o := oslo.GenerateOptions{MaxNewTokens: 12, EOSTokenIDs: []int64{334}, PadTokenID: &pad}
	texts := make([]string, len(ref.Prompts))
	want := make([][]int64, len(ref.Prompts))
	for i, p := range ref.Prompts {
		texts[i], err = tok.Decode(p, false)
		must(t, err)
		back, err := tok.Encode(texts[i], true)
		must(t, err)
		if !reflect.DeepEqual(back, p) {
			t.Fatalf("prompt %d does not round trip: %v", i, back)
		}
		want[i] = ref.Greedy.Outputs[fmt.Sprintf("greedy_%d", i)][len(p):]
	}
	gens, err := m.GenerateTexts(texts, o)
	must(t, err)
	for i, g := range gens {
		if !reflect.DeepEqual(g.IDs, want[i]) {
			t.Fatalf("text %d: %v, transformers %v", i, g.IDs, want[i])
		}
		text, err := tok.Decode(want[i], true)
		must(t, err)
		one, err := m.GenerateText(texts[i], o)
		must(t, err)
		if g.Text != text || one.Text != text || !reflect.DeepEqual(one.IDs, want[i]) {
			t.Fatalf("text %d: %q / %q, want %q", i, g.Text, one.Text, text)
		}
	}
	rows, err := m.Generate(ref.Prompts, o)
	must(t, err)
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("ragged prompts %v", rows)
	}
	for _, p := range []oslo.Padding{oslo.PadLeft, oslo.PadRight} {
		b, err := tok.EncodeBatch(texts, oslo.EncodeOptions{Padding: p, PadID: &pad})
		must(t, err)
		got, err := m.GenerateBatch(b, o)
		must(t, err)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("GenerateBatch (padding %d) %v", p, got)
		}
	}
	story, err := m.GenerateText("Once upon a time", oslo.GenerateOptions{MaxNewTokens: 20})
	must(t, err)
	ids, err := tok.Encode("Once upon a time", true)
	must(t, err)
	direct, err := m.Generate([][]int64{ids}, oslo.GenerateOptions{MaxNewTokens: 20})
	must(t, err)
	if !reflect.DeepEqual(story.IDs, direct[0]) || len(story.IDs) == 0 {
		t.Fatalf("GenerateText %v != Generate(Encode) %v", story.IDs, direct[0])
	}
	_, err = m.Generate(nil, o)
	refused(t, "no prompts", err, "no prompts")
	_, err = m.Generate([][]int64{{52}, {}}, o)
	refused(t, "an empty prompt", err, "prompt 1 has no tokens")
	_, err = m.GenerateTexts(nil, o)
	refused(t, "no texts", err, "no texts")
	_, err = m.GenerateText("", o)
	refused(t, "an empty text", err, "has no tokens")
	_, err = m.GenerateBatch(oslo.BatchEncoding{InputIDs: [][]int64{{1}}}, o)
	wantErr(t, "a batch without its mask", err, oslo.ErrShape)
}

// users_no_tokenizer: a model folder without tokenizer files: ids work,
// texts fail naming the folder; SetTokenizer makes texts work.
func TestUsersNoTokenizer(t *testing.T) {
	fixture := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	dir := t.TempDir()
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(fixture, f))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	ctx, err := oslo.NewContext("")
	must(t, err)
	defer ctx.Close()
	m, err := oslo.LoadModel(ctx, dir)
	must(t, err)
	defer m.Close()
	o := oslo.GenerateOptions{MaxNewTokens: 4}
	ids, err := m.Generate([][]int64{{52, 441, 221}}, o)
	must(t, err)
	_, e1 := m.GenerateText("Hello", o)
	_, e2 := m.EmbedTexts([]string{"a"}, true)
	_, e3 := m.Tokenizer()
	for _, err := range []error{e1, e2, e3} {
		if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "has no tokenizer") ||
			!strings.Contains(err.Error(), "SetTokenizer") {
			t.Fatalf("want an error naming %s: %v", dir, err)
		}
		if e := wantStatus(err, oslo.ErrIO); e != nil {
			t.Fatal(e)
		}
	}
	tok, err := oslo.LoadTokenizer(fixture)
	must(t, err)
	defer tok.Close()
	m.SetTokenizer(tok)
	text, err := tok.Decode([]int64{52, 441, 221}, false)
	must(t, err)
	g, err := m.GenerateText(text, o)
	must(t, err)
	if !reflect.DeepEqual(g.IDs, ids[0]) {
		t.Fatalf("%v != %v", g.IDs, ids[0])
	}
}

// users_minilm_texts_tp2_w2: the real all-MiniLM-L6-v2 at TP=2, given texts,
// the tokenizer's rows and its batch: embeddings equal to
// sentence-transformers' (max |diff| 1e-5, cosine 0.99999); the padded batch
// equal to transformers' ids and mask.
func TestUsersMinilmTextsTp2W2(t *testing.T) {
	model := env(t, "OSLO_MINILM")
	sent, want, err := readReference(env(t, "OSLO_MINILM_REFERENCE"))
	must(t, err)
	var hf *tokCase
	for _, c := range readTokReference(t) {
		if c.fixture == "minilm" {
			c := c
			hf = &c
		}
	}
	if hf == nil || !reflect.DeepEqual(hf.texts, sent) {
		t.Fatal("the reference's MiniLM case has other sentences")
	}
	runRanksModel(t, model, func(r rank, ctx *oslo.Context, m *oslo.Model) error {
		tok, err := m.Tokenizer()
		if err != nil {
			return err
		}
		b, err := tok.EncodeBatch(sent, oslo.EncodeOptions{Padding: oslo.PadRight})
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(b.InputIDs, hf.ids) || !reflect.DeepEqual(b.AttentionMask, hf.mask) {
			return fmt.Errorf("batch %v differs from transformers' %v", b.InputIDs, hf.ids)
		}
		rows := make([][]int64, len(sent))
		for i, s := range sent {
			if rows[i], err = tok.Encode(s, true); err != nil {
				return err
			}
		}
		e1, err := m.EmbedTexts(sent, true)
		if err != nil {
			return err
		}
		e2, err := m.Embed(rows, true)
		if err != nil {
			return err
		}
		e3, err := m.EmbedBatch(b, true)
		if err != nil {
			return err
		}
		for k, e := range [][][]float32{e1, e2, e3} {
			for i := range sent {
				w := make([]float32, len(want[i]))
				for j, v := range want[i] {
					w[j] = float32(v)
				}
				if d, c := maxDiff(e[i], w), cosine(e[i], want[i]); d > 1e-5 || c < 0.99999 {
					return fmt.Errorf("form %d sentence %d: max |diff| %g, cosine %.7f", k, i, d, c)
				}
			}
		}
		return nil
	})
}
