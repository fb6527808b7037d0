package tests

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/oslo/oslo/bindings/go/oslo"
)

// gpt2Reference is what the cases read of reference.json.
type gpt2Reference struct {
	Prompts [][]int64 `json:"prompts"`
	Greedy  struct {
		MaxNewTokens int64              `json:"max_new_tokens"`
		EOSTokenID   int64              `json:"eos_token_id"`
		PadTokenID   int64              `json:"pad_token_id"`
		Outputs      map[string][]int64 `json:"outputs"`
	} `json:"greedy"`
}

func readGPT2Reference(dir string) (*gpt2Reference, error) {
	b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		return nil, err
	}
	var ref gpt2Reference
	return &ref, json.Unmarshal(b, &ref)
}

// model_gpt2_generate_tp2_w2
func TestModelGpt2GenerateTp2W2(t *testing.T) {
	dir := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	ref, err := readGPT2Reference(dir)
	if err != nil {
		t.Fatal(err)
	}
	runRanksModel(t, dir, func(r rank, ctx *oslo.Context, m *oslo.Model) error {
		pad := ref.Greedy.PadTokenID
		got, err := m.Generate(ref.Prompts, oslo.GenerateOptions{
			MaxNewTokens: ref.Greedy.MaxNewTokens,
			EOSTokenIDs:  []int64{ref.Greedy.EOSTokenID},
			PadTokenID:   &pad,
		})
		if err != nil {
			return err
		}
		for i, p := range ref.Prompts {
			want := ref.Greedy.Outputs[fmt.Sprintf("greedy_%d", i)][len(p):]
			if !reflect.DeepEqual(got[i], want) {
				return fmt.Errorf("greedy %d: %v, want transformers' %v", i, got[i], want)
			}
		}
		if tp, _ := ctx.Size(oslo.GroupTensor); tp != r.world {
			return fmt.Errorf("TP=%d", tp)
		}
		return nil
	})
}

// model_bert_minilm_embed_tp2_w2
func TestModelBertMinilmEmbedTp2W2(t *testing.T) {
	model := env(t, "OSLO_MINILM")
	sent, want, err := readReference(env(t, "OSLO_MINILM_REFERENCE"))
	if err != nil {
		t.Fatal(err)
	}
	runRanksModel(t, model, func(r rank, ctx *oslo.Context, m *oslo.Model) error {
		tok, err := oslo.LoadTokenizer(model)
		if err != nil {
			return err
		}
		defer tok.Close()
		ids := make([][]int64, len(sent))
		for i, s := range sent {
			if ids[i], err = tok.Encode(s, true); err != nil {
				return err
			}
		}
		emb, err := m.Embed(ids, true)
		if err != nil {
			return err
		}
		for i := range sent {
			if c := cosine(emb[i], want[i]); !(c >= 0.9999) {
				return fmt.Errorf("sentence %d %q: cosine %.7f with sentence-transformers", i, sent[i], c)
			}
		}
		return nil
	})
}

// checkpoint_save_tp2_load_tp1
func TestCheckpointSaveTp2LoadTp1(t *testing.T) {
	dir := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	ids := [][]int64{{52, 441, 221, 7}, {380, 406, 370, 306}}
	var ckpt string
	var sharded []float32
	runRanksModel(t, dir, func(r rank, ctx *oslo.Context, m *oslo.Model) error {
		logits, err := m.Forward(ids, nil, nil, oslo.Logits)
		if err != nil {
			return err
		}
		out := filepath.Join(r.dir, "ckpt")
		if err := m.Save(out); err != nil {
			return err
		}
		if !r.procs {
			if r.rank == 0 {
				ckpt, sharded = out, logits
			}
			return nil
		}
		if err := ctx.Barrier(oslo.GroupWorld); err != nil {
			return err
		}
		if r.rank == 0 {
			return compareTp1(out, ids, logits, r.dir)
		}
		return nil
	})
	if ckpt != "" {
		if err := compareTp1(ckpt, ids, sharded, t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
}

// compareTp1 loads the checkpoint alone at TP=1 and compares its logits.
func compareTp1(ckpt string, ids [][]int64, want []float32, dir string) error {
	ctx, err := oslo.NewContext(solo(dir))
	if err != nil {
		return err
	}
	defer ctx.Close()
	m, err := oslo.LoadModel(ctx, ckpt)
	if err != nil {
		return err
	}
	defer m.Close()
	got, err := m.Forward(ids, nil, nil, oslo.Logits)
	if err != nil {
		return err
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d logits at TP=1, %d at TP=2", len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > 1e-4*(1+math.Abs(float64(want[i]))) {
			return fmt.Errorf("logit %d: %g at TP=1, %g at TP=2", i, got[i], want[i])
		}
	}
	return nil
}
