package tests

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/oslo/oslo/bindings/go/oslo"
)

// engineSpec is one request of the engine cases: a prompt and its options.
type engineSpec struct {
	prompt []int64
	opts   oslo.GenerateOptions
}

// engineSpecs are four requests of different prompts, lengths and sampling.
func engineSpecs(ref *gpt2Reference) []engineSpec {
	p := ref.Prompts
	eos := []int64{ref.Greedy.EOSTokenID}
	long := append(append([]int64{}, p[0][:3]...), p[2]...)
	return []engineSpec{
		{p[0], oslo.GenerateOptions{MaxNewTokens: 12, EOSTokenIDs: eos}},
		{p[1], oslo.GenerateOptions{MaxNewTokens: 7, EOSTokenIDs: eos, DoSample: true, Seed: 11, TopK: 20,
			Temperature: 0.8}},
		{p[2], oslo.GenerateOptions{MaxNewTokens: 12, EOSTokenIDs: eos}},
		{long, oslo.GenerateOptions{MaxNewTokens: 9, EOSTokenIDs: eos, DoSample: true, Seed: 3, TopP: 0.9,
			RepetitionPenalty: 1.3}},
	}
}

// engineWants are Generate's tokens of each spec's prompt alone.
func engineWants(m *oslo.Model, specs []engineSpec) ([][]int64, error) {
	want := make([][]int64, len(specs))
	for i, s := range specs {
		got, err := m.Generate([][]int64{s.prompt}, s.opts)
		if err != nil {
			return nil, err
		}
		want[i] = got[0]
	}
	return want, nil
}

// streamAll reads every request's Stream concurrently (a goroutine each).
func streamAll(reqs []*oslo.Request) ([][]oslo.Output, error) {
	outs := make([][]oslo.Output, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func(i int, r *oslo.Request) {
			defer wg.Done()
			for o := range r.Stream() {
				outs[i] = append(outs[i], o)
			}
		}(i, r)
	}
	wg.Wait()
	for i, o := range outs {
		if len(o) == 0 {
			return nil, fmt.Errorf("request %d: no output", i)
		}
		if last := o[len(o)-1]; last.Err != nil {
			return nil, fmt.Errorf("request %d: %v", i, last.Err)
		}
	}
	return outs, nil
}

func checkPieces(what string, pieces []oslo.Output, want []int64, eos int64, tok *oslo.Tokenizer) error {
	var tokens []int64
	var text strings.Builder
	for i, p := range pieces {
		tokens = append(tokens, p.Tokens...)
		text.WriteString(p.Text)
		if i < len(pieces)-1 && p.Finish != oslo.FinishNone {
			return fmt.Errorf("%s: finished early at piece %d", what, i)
		}
	}
	if !reflect.DeepEqual(tokens, want) {
		return fmt.Errorf("%s: engine tokens %v, Generate's %v", what, tokens, want)
	}
	fin := pieces[len(pieces)-1].Finish
	wantFin := oslo.FinishLength
	if want[len(want)-1] == eos {
		wantFin = oslo.FinishEOS
	}
	if fin != wantFin {
		return fmt.Errorf("%s: finish %v, want %v", what, fin, wantFin)
	}
	if tok != nil {
		full, err := tok.Decode(tokens, true) // as the engine decodes
		if err != nil {
			return err
		}
		alt := full
		if fin == oslo.FinishEOS {
			if alt, err = tok.Decode(tokens[:len(tokens)-1], true); err != nil {
				return err
			}
		}
		if s := text.String(); s != full && s != alt {
			return fmt.Errorf("%s: text %q, decoded %q", what, s, full)
		}
	}
	return nil
}

// engine_stream_gpt2
func TestEngineStreamGpt2(t *testing.T) {
	dir := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	ref, err := readGPT2Reference(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := oslo.NewContext(solo(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	m, err := oslo.LoadModel(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	specs := engineSpecs(ref)
	want, err := engineWants(m, specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		tw := ref.Greedy.Outputs[fmt.Sprintf("greedy_%d", i)][len(specs[i].prompt):]
		if !reflect.DeepEqual(want[i], tw) {
			t.Fatalf("Generate greedy %d %v, transformers' %v", i, want[i], tw)
		}
	}
	// Generate's options version 2: MinNewTokens holds EOS back (greedy 0
	// ends with EOS after 4 tokens), RepetitionPenalty changes greedy 2.
	held, err := m.Generate([][]int64{specs[0].prompt}, oslo.GenerateOptions{MaxNewTokens: 12,
		EOSTokenIDs: specs[0].opts.EOSTokenIDs, MinNewTokens: 6})
	if err != nil || len(held[0]) < 6 || len(want[0]) >= 6 {
		t.Fatalf("MinNewTokens 6: %v %v (without: %v)", held, err, want[0])
	}
	rep, err := m.Generate([][]int64{specs[2].prompt}, oslo.GenerateOptions{MaxNewTokens: 12,
		EOSTokenIDs: specs[2].opts.EOSTokenIDs, RepetitionPenalty: 3})
	if err != nil || reflect.DeepEqual(rep[0], want[2]) {
		t.Fatalf("RepetitionPenalty 3 changes nothing: %v %v", rep, err)
	}
	// Generate's options version 3 and EngineOptions version 2: the int8 KV
	// cache gives the same tokens from Generate and from an Engine (the same
	// int8 bytes through two attention paths).
	g8 := oslo.GenerateOptions{MaxNewTokens: 10, KVCacheInt8: true}
	w8, err := m.Generate([][]int64{specs[0].prompt}, g8)
	if err != nil {
		t.Fatal(err)
	}
	e8, err := oslo.NewEngine(m, oslo.EngineOptions{NumBlocks: 64, KVInt8: true})
	if err != nil {
		t.Fatal(err)
	}
	r8, err := e8.Add(specs[0].prompt, g8)
	if err != nil {
		t.Fatal(err)
	}
	o8, err := r8.Result()
	e8.Close()
	if err != nil || !reflect.DeepEqual(o8.Tokens, w8[0]) {
		t.Fatalf("int8 KV cache: engine %v %v, Generate %v", o8.Tokens, err, w8[0])
	}
	tok, err := m.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	e, err := oslo.NewEngine(m, oslo.EngineOptions{BlockSize: 4, NumBlocks: 96, MaxSeqs: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	reqs := make([]*oslo.Request, len(specs))
	for i, s := range specs {
		if reqs[i], err = e.Add(s.prompt, s.opts); err != nil {
			t.Fatal(err)
		}
	}
	outs, err := streamAll(reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range specs {
		if err := checkPieces(fmt.Sprintf("request %d", i), outs[i], want[i], ref.Greedy.EOSTokenID, tok); err != nil {
			t.Error(err)
		}
		if s, err := reqs[i].State(); err != nil || s != oslo.RequestUnknown {
			t.Errorf("request %d after its last output: %v %v (forgotten: unknown)", i, s, err)
		}
	}
	// A text prompt with a stop string inside its greedy text.
	text := "The quick brown fox jumps over the lazy dog"
	full, err := e.AddText(text, oslo.GenerateOptions{MaxNewTokens: 12, EOSTokenIDs: []int64{ref.Greedy.EOSTokenID}})
	if err != nil {
		t.Fatal(err)
	}
	all, err := full.Result()
	if err != nil {
		t.Fatal(err)
	}
	chars := []rune(all.Text)
	if len(chars) < 7 {
		t.Fatalf("greedy text %q too short for a stop", all.Text)
	}
	stop := string(chars[3:6]) // three characters from the fourth
	r, err := e.AddText(text, oslo.GenerateOptions{MaxNewTokens: 12, EOSTokenIDs: []int64{ref.Greedy.EOSTokenID}}, stop)
	if err != nil {
		t.Fatal(err)
	}
	cut, err := r.Result()
	if err != nil {
		t.Fatal(err)
	}
	if cut.Finish != oslo.FinishStop || cut.Text != all.Text[:strings.Index(all.Text, stop)] {
		t.Errorf("stop %q: %v %q, want stop %q", stop, cut.Finish, cut.Text, all.Text[:strings.Index(all.Text, stop)])
	}
	st, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.BlockSize != 4 || st.BlocksTotal != 96 || st.Steps == 0 || st.Running != 0 {
		t.Errorf("stats %+v", st)
	}
}

// engine_cancel_and_errors
func TestEngineCancelAndErrors(t *testing.T) {
	dir := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	ref, err := readGPT2Reference(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := oslo.NewContext(solo(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	m, err := oslo.LoadModel(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := ref.Prompts
	eos := []int64{ref.Greedy.EOSTokenID}
	alone, err := m.Generate([][]int64{p[1]}, oslo.GenerateOptions{MaxNewTokens: 6, EOSTokenIDs: eos})
	if err != nil {
		t.Fatal(err)
	}
	e, err := oslo.NewEngine(m, oslo.EngineOptions{NumBlocks: 256})
	if err != nil {
		t.Fatal(err)
	}
	// Cancel mid-stream.
	r, err := e.Add(p[0], oslo.GenerateOptions{MaxNewTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	ch := r.Stream()
	first := <-ch
	if first.Finish != oslo.FinishNone || len(first.Tokens) == 0 {
		t.Fatalf("first piece %+v", first)
	}
	if found, err := r.Cancel(); err != nil || !found {
		t.Fatalf("cancel a live request: %v %v", found, err)
	}
	n, last := len(first.Tokens), first
	for o := range ch {
		n += len(o.Tokens)
		last = o
	}
	if last.Finish != oslo.FinishCancelled || n >= 100 {
		t.Errorf("after cancel: %v after %d tokens", last.Finish, n)
	}
	if found, _ := r.Cancel(); found {
		t.Error("cancel again finds it")
	}
	// Bad requests: the named error, and the engine goes on.
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		what   string
		prompt []int64
		o      oslo.GenerateOptions
		stop   []string
	}{
		{"empty prompt", nil, oslo.GenerateOptions{}, nil},
		{"token outside the vocabulary", []int64{1, info.VocabSize + 5}, oslo.GenerateOptions{}, nil},
		{"beyond the positions", p[0], oslo.GenerateOptions{MaxNewTokens: 500}, nil},
		{"temperature 0 sampling", p[0], oslo.GenerateOptions{DoSample: true, Temperature: -1}, nil},
		{"beams", p[0], oslo.GenerateOptions{NumBeams: 2}, nil},
		{"empty stop string", p[0], oslo.GenerateOptions{}, []string{""}},
	}
	for _, b := range bad {
		if _, err := e.Add(b.prompt, b.o, b.stop...); wantStatus(err, oslo.ErrInvalidArgument) != nil {
			t.Errorf("%s: %v", b.what, wantStatus(err, oslo.ErrInvalidArgument))
		}
	}
	ok, err := e.Add(p[1], oslo.GenerateOptions{MaxNewTokens: 6, EOSTokenIDs: eos})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ok.Result()
	if err != nil || !reflect.DeepEqual(res.Tokens, alone[0]) {
		t.Errorf("after the errors: %v %v, want %v", res.Tokens, err, alone[0])
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Add(p[0], oslo.GenerateOptions{}); wantStatus(err, oslo.ErrInvalidArgument) != nil {
		t.Errorf("a closed engine: %v", err)
	}
	// Bad options; no tokenizer.
	if _, err := oslo.NewEngine(m, oslo.EngineOptions{BlockSize: -1}); wantStatus(err, oslo.ErrInvalidArgument) != nil {
		t.Errorf("block size -1: %v", err)
	}
	ids, err := oslo.NewEngine(m, oslo.EngineOptions{NoTokenizer: true, NumBlocks: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer ids.Close()
	if _, err := ids.AddText("Hello", oslo.GenerateOptions{}); wantStatus(err, oslo.ErrInvalidArgument) != nil ||
		!strings.Contains(err.Error(), "tokenizer") {
		t.Errorf("a text prompt without a tokenizer: %v", err)
	}
	// Stepping by hand: events; streams of such an engine fail.
	h, err := oslo.NewEngine(m, oslo.EngineOptions{NoTokenizer: true, NumBlocks: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	a, err := h.Add(p[1], oslo.GenerateOptions{MaxNewTokens: 6, EOSTokenIDs: eos})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for i := 0; i < 200; i++ {
		evs, err := h.Step()
		if err != nil {
			t.Fatal(err)
		}
		done := false
		for _, ev := range evs {
			if ev.RequestID == a.ID() {
				got = append(got, ev.Tokens...)
				done = done || ev.Finish != oslo.FinishNone
			}
		}
		if done {
			break
		}
	}
	if !reflect.DeepEqual(got, alone[0]) {
		t.Errorf("hand-stepped %v, want %v", got, alone[0])
	}
	b, err := h.Add(p[0], oslo.GenerateOptions{MaxNewTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	o := <-b.Stream()
	if o.Finish != oslo.FinishError || wantStatus(o.Err, oslo.ErrInvalidArgument) != nil {
		t.Errorf("streaming a hand-stepped engine: %+v", o)
	}
}

// engine_tp2_w2
func TestEngineTp2W2(t *testing.T) {
	dir := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	ref, err := readGPT2Reference(dir)
	if err != nil {
		t.Fatal(err)
	}
	specs := engineSpecs(ref)
	runRanksModel(t, dir, func(r rank, ctx *oslo.Context, m *oslo.Model) error {
		want, err := engineWants(m, specs)
		if err != nil {
			return err
		}
		e, err := oslo.NewEngine(m, oslo.EngineOptions{NumBlocks: 256})
		if err != nil {
			return err
		}
		defer e.Close()
		if r.rank != 0 {
			return e.Run() // until rank 0 shuts the engine down
		}
		reqs := make([]*oslo.Request, len(specs))
		for i, s := range specs {
			if reqs[i], err = e.Add(s.prompt, s.opts); err != nil {
				return err
			}
		}
		outs, err := streamAll(reqs)
		if err != nil {
			return err
		}
		for i := range specs {
			if err := checkPieces(fmt.Sprintf("TP=2 request %d", i), outs[i], want[i], ref.Greedy.EOSTokenID, nil); err != nil {
				return err
			}
		}
		return e.Shutdown()
	})
}
