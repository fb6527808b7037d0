// Package tests holds the Go binding's tests: one Test per case of
// tests/bindings/cases.txt (TestContextFromConfig for context_from_config,
// ...) and the Go-specific ones. ctest runs each as go_<case> with the
// binary `go test -c` builds (tests/go/CMakeLists.txt); `go test ./...` in
// bindings/go runs them all. A case ending in _w2 runs on 2 ranks: as 2
// processes under oslo-run (WORLD_SIZE set), or as 2 goroutines of this
// process, each with its own context and a file:// rendezvous (otherwise).
package tests

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/oslo/oslo/bindings/go/oslo"
)

// sourceFixtures: where each fixture lies in a source checkout, relative
// to its root, for `go test ./...` in bindings/go (whose tests run in
// bindings/go/tests); ctest sets the variables instead.
var sourceFixtures = map[string]string{
	"OSLO_FIXTURES":         "tests/models/fixtures",
	"OSLO_MINILM":           "build/minilm",
	"OSLO_MINILM_REFERENCE": "examples/minilm/reference.txt",
	"OSLO_HEADER":           "include/oslo.h",
	"OSLO_TRAIN_CASE":       "tests/bindings/train_gpt2_tiny.txt",
	"OSLO_TOKREF":           "tests/bindings/tokenizer_batch_reference.txt",
	"OSLO_BATCHREF":         "tests/tokenizer/batch_reference.txt",
	"OSLO_PADREF":           "tests/tokenizer/pad_reference.txt",
	"OSLO_CHATREF":          "tests/bindings/chat_template_reference.txt",
	"OSLO_TEMPLATES":        "tests/template",
}

// fixture is the path the environment variable name gives, else the
// source checkout's (sourceFixtures) when it exists, else "".
func fixture(name string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	rel, ok := sourceFixtures[name]
	if !ok {
		return ""
	}
	p, err := filepath.Abs(filepath.Join("..", "..", "..", filepath.FromSlash(rel)))
	if err != nil {
		return ""
	}
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// env is a fixture path (fixture), or a skip.
func env(t *testing.T, name string) string {
	t.Helper()
	v := fixture(name)
	if v == "" {
		t.Skipf("%s is not set (ctest sets it) and not in this source checkout", name)
	}
	return v
}

// rank describes one rank of a _w2 case.
type rank struct {
	config string // the context's config
	rank   int    // global rank
	world  int
	procs  bool // one rank of several processes (oslo-run)
	dir    string
}

// runRanks runs body on every rank: once in this process under oslo-run,
// else as 2 goroutines (each on its own locked OS thread) with a file://
// rendezvous. dir is a folder shared by the ranks (OSLO_GO_OUT under
// oslo-run, a temporary one for goroutines).
func runRanks(t *testing.T, body func(r rank) error) {
	t.Helper()
	if ws := os.Getenv("WORLD_SIZE"); ws != "" {
		w, _ := strconv.Atoi(ws)
		g, _ := strconv.Atoi(os.Getenv("RANK"))
		dir := os.Getenv("OSLO_GO_OUT")
		if dir == "" {
			dir = t.TempDir()
		}
		cfg := fmt.Sprintf(`{"tensor_parallel_size": %d, "timeout_seconds": 120}`, w)
		if err := body(rank{config: cfg, rank: g, world: w, procs: true, dir: dir}); err != nil {
			t.Fatalf("[rank %d] %v", g, err)
		}
		return
	}
	const world = 2
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := 0; r < world; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cfg := fmt.Sprintf(`{"rank": %d, "world_size": %d, "tensor_parallel_size": %d, "init_method": "file://%s", "timeout_seconds": 120}`,
				r, world, world, store)
			errs[r] = body(rank{config: cfg, rank: r, world: world, dir: dir})
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("[goroutine rank %d] %v", r, err)
		}
	}
}

// runRanksCtx runs body on every rank (runRanks) with the rank's context,
// closed after body returns.
func runRanksCtx(t *testing.T, body func(r rank, ctx *oslo.Context) error) {
	t.Helper()
	runRanks(t, func(r rank) error {
		ctx, err := oslo.NewContext(r.config)
		if err != nil {
			return err
		}
		defer ctx.Close()
		return body(r, ctx)
	})
}

// runRanksModel runs body on every rank (runRanks) with the rank's context
// and the model of folder dir loaded in it, both closed after body returns.
func runRanksModel(t *testing.T, dir string, body func(r rank, ctx *oslo.Context, m *oslo.Model) error) {
	t.Helper()
	runRanksCtx(t, func(r rank, ctx *oslo.Context) error {
		m, err := oslo.LoadModel(ctx, dir)
		if err != nil {
			return err
		}
		defer m.Close()
		return body(r, ctx, m)
	})
}

// solo is the config of a context of its own at world size 1.
func solo(dir string) string {
	return fmt.Sprintf(`{"rank": 0, "world_size": 1, "init_method": "file://%s"}`,
		filepath.Join(dir, fmt.Sprintf("solo-store-%d", os.Getpid())))
}

// wantStatus checks that err is an *oslo.Error of status want (errors.Is
// and errors.As).
func wantStatus(err error, want *oslo.Error) error {
	var e *oslo.Error
	if !errors.As(err, &e) {
		return fmt.Errorf("want an *oslo.Error %v, got %v", want.Status, err)
	}
	if !errors.Is(err, want) || e.Status != want.Status {
		return fmt.Errorf("want %v, got %v", want.Status, err)
	}
	if e.Message == "" {
		return fmt.Errorf("%v without a message", e.Status)
	}
	return nil
}

func closeTo(what string, got []float32, want []float64, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i])-want[i]) > tol*(1+math.Abs(want[i])) {
			return fmt.Errorf("%s[%d] = %g, want %g", what, i, got[i], want[i])
		}
	}
	return nil
}

func cosine(a []float32, b []float64) float64 {
	var d, na, nb float64
	for i := range a {
		d += float64(a[i]) * b[i]
		na += float64(a[i]) * float64(a[i])
		nb += b[i] * b[i]
	}
	return d / math.Sqrt(na*nb)
}

// readReference reads examples/minilm/reference.txt: the sentences and
// sentence-transformers' embeddings.
func readReference(path string) ([]string, [][]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var n, dim int
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		if _, err := fmt.Sscanf(sc.Text(), "%d %d", &n, &dim); err != nil {
			return nil, nil, err
		}
		break
	}
	sent := make([]string, n)
	emb := make([][]float64, n)
	for i := 0; i < n; i++ {
		if !sc.Scan() {
			return nil, nil, fmt.Errorf("%s: short", path)
		}
		sent[i] = sc.Text()
		if !sc.Scan() {
			return nil, nil, fmt.Errorf("%s: short", path)
		}
		for _, w := range strings.Fields(sc.Text()) {
			v, err := strconv.ParseFloat(w, 64)
			if err != nil {
				return nil, nil, err
			}
			emb[i] = append(emb[i], v)
		}
		if len(emb[i]) != dim {
			return nil, nil, fmt.Errorf("%s: sentence %d has %d values", path, i, len(emb[i]))
		}
	}
	return sent, emb, nil
}
