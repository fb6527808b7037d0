package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/oslo/oslo/bindings/go/oslo"
)

// The message of a failure is the one of that call, whatever the OS thread
// the goroutine runs on and whatever fails on other threads meanwhile.
func TestErrorMessagePerCall(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				path := fmt.Sprintf("/nonexistent/oslo-go-%d-%d", g, i)
				_, err := oslo.LoadTokenizer(path)
				if err == nil || !strings.Contains(err.Error(), path) {
					errs <- fmt.Errorf("goroutine %d: loading %s gave %v", g, path, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The tokenizer of the GPT-2 fixture: reference.json's prompts are the
// first ids of its prompt texts.
func TestTokenizerGPT2(t *testing.T) {
	dir := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	must(t, err)
	var ref struct {
		Texts   []string  `json:"prompt_texts"`
		Prompts [][]int64 `json:"prompts"`
	}
	must(t, json.Unmarshal(b, &ref))
	tok, err := oslo.LoadTokenizer(dir)
	must(t, err)
	defer tok.Close()
	for i, text := range ref.Texts {
		ids, err := tok.Encode(text, true)
		must(t, err)
		if len(ids) < len(ref.Prompts[i]) || !reflect.DeepEqual(ids[:len(ref.Prompts[i])], ref.Prompts[i]) {
			t.Fatalf("Encode(%q) = %v, want a start of %v", text, ids, ref.Prompts[i])
		}
		back, err := tok.Decode(ids, true)
		must(t, err)
		if back != text {
			t.Fatalf("Decode(Encode(%q)) = %q", text, back)
		}
	}
	n, err := tok.VocabSize()
	must(t, err)
	if n < 500 {
		t.Fatalf("VocabSize() = %d", n)
	}
	s, err := tok.IDToToken(52)
	must(t, err)
	id, err := tok.TokenToID(s)
	must(t, err)
	if id != 52 {
		t.Fatalf("TokenToID(IDToToken(52) = %q) = %d", s, id)
	}
	if _, err := tok.SpecialID(oslo.TokenEOS); err != nil {
		t.Fatal(err)
	}
	_, err = tok.IDToToken(1 << 40)
	wantErr(t, "IDToToken out of range", err, oslo.ErrInvalidArgument)
	must(t, tok.Close())
	_, err = tok.Encode("x", true)
	wantErr(t, "closed tokenizer", err, oslo.ErrInvalidArgument)
}

// Reshard, Inspect and Merge: the merged folder gives the logits of the
// original.
func TestCheckpointTools(t *testing.T) {
	dir := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	tmp := t.TempDir()
	tp2 := filepath.Join(tmp, "tp2")
	merged := filepath.Join(tmp, "merged")
	must(t, oslo.Reshard(dir, tp2, 2))
	js, err := oslo.Inspect(tp2, true)
	must(t, err)
	var parsed map[string]interface{}
	if err := json.Unmarshal([]byte(js), &parsed); err != nil {
		t.Fatalf("Inspect JSON: %v: %.200s", err, js)
	}
	txt, err := oslo.Inspect(tp2, false)
	must(t, err)
	if !strings.Contains(txt, "wte") {
		t.Fatalf("Inspect text names no wte: %.300s", txt)
	}
	must(t, oslo.Merge(tp2, merged, oslo.MergeOptions{}))
	wantErr(t, "merge onto a non-empty folder", oslo.Merge(tp2, merged, oslo.MergeOptions{}), oslo.ErrInvalidArgument)
	must(t, oslo.Merge(tp2, merged, oslo.MergeOptions{Overwrite: true}))
	_, err = oslo.Inspect("/nonexistent/ckpt", false)
	if err == nil {
		t.Fatal("Inspect of a missing path")
	}

	ctx := soloContext(t)
	ids := [][]int64{{52, 441, 221}}
	logits := func(path string) []float32 {
		m, err := oslo.LoadModel(ctx, path)
		must(t, err)
		defer m.Close()
		info, err := m.Info()
		must(t, err)
		if typ, _ := m.Type(); typ != "gpt2" || !info.IsCausal || info.VocabSize != 515 {
			t.Fatalf("model %q %+v", typ, info)
		}
		v, err := m.Forward(ids, nil, nil, oslo.Logits)
		must(t, err)
		return v
	}
	a, b := logits(dir), logits(merged)
	want := make([]float64, len(a))
	for i := range a {
		want[i] = float64(a[i])
	}
	if err := closeTo("merged logits", b, want, 1e-5); err != nil {
		t.Fatal(err)
	}
}
