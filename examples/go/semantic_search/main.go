// Command semantic_search is the Go version of the C main job
// (examples/minilm/semantic_search.c): the real all-MiniLM-L6-v2 sharded
// over the ranks of the job (tensor parallelism), a small semantic search
// over the sentences of reference.txt, and its agreement with the
// unsharded model (rank 0 also loads it alone) and with
// sentence-transformers. It prints exactly what the C example prints.
//
//	oslo-run --nproc-per-node 2 semantic_search [--device cpu|cuda[:N]] MODEL_DIR reference.txt
//
// --device picks the backend as `oslo generate --device` does (default cpu;
// cuda[:N] is the CUDA backend plugin on device N, else each rank's local
// device). Exits 0 when every embedding matches both references (cosine >= 0.9999).
package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/oslo/oslo/bindings/go/oslo"
)

var rank int

func check(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "[rank %d] %s: %v\n", rank, what, err)
		os.Exit(1)
	}
}

// readReference reads the sentences and sentence-transformers' embeddings.
func readReference(path string) ([]string, [][]float32) {
	f, err := os.Open(path)
	check(err, "reference")
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var n, dim int
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "#") {
			_, err := fmt.Sscanf(sc.Text(), "%d %d", &n, &dim)
			check(err, "reference")
			break
		}
	}
	if n < 1 || n > 32 || dim < 1 {
		check(fmt.Errorf("%s: bad header", path), "reference")
	}
	sent := make([]string, n)
	emb := make([][]float32, n)
	for i := 0; i < n; i++ {
		if !sc.Scan() {
			check(fmt.Errorf("%s: short", path), "reference")
		}
		sent[i] = sc.Text()
		if !sc.Scan() {
			check(fmt.Errorf("%s: short", path), "reference")
		}
		for _, w := range strings.Fields(sc.Text()) {
			v, err := strconv.ParseFloat(w, 32)
			check(err, "reference")
			emb[i] = append(emb[i], float32(v))
		}
		if len(emb[i]) != dim {
			check(fmt.Errorf("%s: sentence %d has %d values", path, i, len(emb[i])), "reference")
		}
	}
	return sent, emb
}

func cosine(a, b []float32) float64 {
	var d, na, nb float64
	for i := range a {
		d += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return d / math.Sqrt(na*nb)
}

// embed embeds the sentences, normalized: texts straight in, the model
// folder's tokenizer encodes them ([CLS] ... [SEP]) and the rows of
// different lengths are padded with a mask inside.
func embed(m *oslo.Model, sent []string) [][]float32 {
	e, err := m.EmbedTexts(sent, true)
	check(err, "embed")
	return e
}

// first40 is C's "%.40s": at most the first 40 bytes.
func first40(s string) string {
	if len(s) > 40 {
		return s[:40]
	}
	return s
}

// deviceConfig is the context config members for --device (cpu, cuda or
// cuda:N, mapped as the oslo command line maps them); ok is false for any
// other value.
func deviceConfig(device string) (members string, ok bool) {
	switch {
	case device == "cpu":
		return `"backend": "cpu"`, true
	case device == "cuda":
		return `"backend": "cuda"`, true
	case strings.HasPrefix(device, "cuda:") && len(device) > 5 && len(device) <= 9:
		for _, c := range device[5:] {
			if c < '0' || c > '9' {
				return "", false
			}
		}
		n, _ := strconv.Atoi(device[5:])
		return fmt.Sprintf(`"backend": "cuda", "backend_options": {"device": %d}`, n), true
	}
	return "", false
}

func main() {
	var args []string
	device := "cpu"
	for i := 1; i < len(os.Args); i++ {
		if os.Args[i] != "--device" {
			args = append(args, os.Args[i])
		} else if i+1 < len(os.Args) {
			i++
			device = os.Args[i]
		} else {
			fmt.Fprintln(os.Stderr, "--device needs a value")
			os.Exit(2)
		}
	}
	dev, known := deviceConfig(device)
	if !known {
		fmt.Fprintf(os.Stderr, "--device must be cpu, cuda or cuda:N (N a device index), got %q\n", device)
		os.Exit(2)
	}
	if len(args) != 2 {
		fmt.Fprintf(os.Stderr, "usage: %s [--device cpu|cuda[:N]] MODEL_DIR reference.txt\n", os.Args[0])
		os.Exit(2)
	}
	modelDir := args[0]
	sent, st := readReference(args[1])
	n, dim := len(sent), len(st[0])

	// One context over the job's ranks (oslo-run's environment): all of
	// them form the tensor-parallel group.
	config := "{" + dev + "}"
	if ws := os.Getenv("WORLD_SIZE"); ws != "" {
		w, _ := strconv.Atoi(ws)
		config = fmt.Sprintf(`{"tensor_parallel_size": %d, "timeout_seconds": 120, %s}`, w, dev)
	}
	ctx, err := oslo.NewContext(config)
	check(err, "context")
	defer ctx.Close()
	rank, err = ctx.Rank(oslo.GroupWorld)
	check(err, "rank")
	tp, err := ctx.Size(oslo.GroupTensor)
	check(err, "size")

	model, err := oslo.LoadModel(ctx, modelDir)
	check(err, "load")
	info, err := model.Info()
	check(err, "info")
	if int(info.HiddenSize) != dim {
		fmt.Fprintf(os.Stderr, "reference has %d values per sentence, the model %d\n", dim, info.HiddenSize)
		os.Exit(1)
	}
	e := embed(model, sent)

	ok := true
	if rank == 0 {
		// The unsharded model, on rank 0 alone (a context of its own).
		store := filepath.Join(os.TempDir(), fmt.Sprintf("oslo-semantic-search-go-%d", os.Getpid()))
		solo, err := oslo.NewContext(fmt.Sprintf(`{"rank": 0, "world_size": 1, "init_method": "file://%s", %s}`, store, dev))
		check(err, "unsharded context")
		full, err := oslo.LoadModel(solo, modelDir)
		check(err, "unsharded load")
		u := embed(full, sent)
		full.Close()
		solo.Close()
		os.Remove(store)

		fmt.Printf("all-MiniLM-L6-v2 split over %d ranks (tensor parallel)\n\n", tp)
		fmt.Printf("query: \"%s\"\n", sent[0])
		order := make([]int, n-1)
		for i := 1; i < n; i++ {
			order[i-1] = i
		}
		for i := 0; i < n-1; i++ { // rank the others by similarity (as the C example)
			for j := i + 1; j < n-1; j++ {
				if cosine(e[0], e[order[j]]) > cosine(e[0], e[order[i]]) {
					order[i], order[j] = order[j], order[i]
				}
			}
		}
		for i := 0; i < n-1; i++ {
			fmt.Printf("  %.4f  \"%s\"\n", cosine(e[0], e[order[i]]), sent[order[i]])
		}

		fmt.Printf("\ncosine similarity (TP=%d)\n     ", tp)
		for j := 0; j < n; j++ {
			fmt.Printf("  [%d] ", j)
		}
		fmt.Printf("\n")
		for i := 0; i < n; i++ {
			fmt.Printf("[%d] ", i)
			for j := 0; j < n; j++ {
				fmt.Printf(" %5.2f ", cosine(e[i], e[j]))
			}
			fmt.Printf("  %s\n", first40(sent[i]))
		}

		worstST, worstU, maxDiff := 1.0, 1.0, 0.0
		for i := 0; i < n; i++ {
			cs := cosine(e[i], st[i])
			cu := cosine(e[i], u[i])
			worstST = math.Min(worstST, cs)
			worstU = math.Min(worstU, cu)
			for k := 0; k < dim; k++ {
				maxDiff = math.Max(maxDiff, math.Abs(float64(e[i][k])-float64(u[i][k])))
			}
		}
		ok = worstST >= 0.9999 && worstU >= 0.9999
		fmt.Printf("\nagreement of the TP=%d embeddings (%d sentences x %d values):\n", tp, n, dim)
		fmt.Printf("  vs the unsharded model (TP=1):  min cosine %.7f, max |diff| %.2e\n", worstU, maxDiff)
		fmt.Printf("  vs sentence-transformers:       min cosine %.7f\n", worstST)
		if ok {
			fmt.Println("MATCH")
		} else {
			fmt.Println("MISMATCH")
		}
	}
	model.Close()
	// Every rank exits with rank 0's verdict.
	verdict := int32(0)
	if ok {
		verdict = 1
	}
	t, err := oslo.TensorOf(ctx, []int32{verdict})
	check(err, "tensor")
	check(ctx.Broadcast(oslo.GroupWorld, 0, t), "broadcast")
	v, err := oslo.Values[int32](t)
	check(err, "copy")
	t.Close()
	ctx.Close()
	if v[0] == 0 {
		os.Exit(1)
	}
}
