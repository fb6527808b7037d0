package tests

import (
	"errors"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/oslo/oslo/bindings/go/oslo"
)

func soloContext(t *testing.T) *oslo.Context {
	t.Helper()
	ctx, err := oslo.NewContext(solo(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, what string, err error, want *oslo.Error) {
	t.Helper()
	if e := wantStatus(err, want); e != nil {
		t.Fatalf("%s: %v", what, e)
	}
	t.Logf("%s -> %v", what, err)
}

// Bad input gives an *oslo.Error, never a panic: nil and closed handles,
// buffers of the wrong size, wrong dtypes, unknown keys and bad values.
func TestBadInputReturnsErrors(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic: %v", r)
		}
	}()
	var nilCtx *oslo.Context
	_, err := nilCtx.Rank(oslo.GroupWorld)
	wantErr(t, "nil context", err, oslo.ErrInvalidArgument)
	_, err = oslo.NewTensor(nil, oslo.F32, 2)
	wantErr(t, "tensor of a nil context", err, oslo.ErrInvalidArgument)
	must(t, nilCtx.Close())

	ctx := soloContext(t)
	_, err = oslo.NewTensor(ctx, oslo.F32, 2, -3)
	wantErr(t, "negative dimension", err, oslo.ErrInvalidArgument)
	_, err = oslo.NewTensor(ctx, oslo.DType(42), 2)
	if err == nil {
		t.Fatal("dtype 42 accepted")
	}
	t.Logf("dtype 42 -> %v", err)
	_, err = oslo.NewTensor(ctx, oslo.F32, 1, 1, 1, 1, 1, 1, 1, 1, 1)
	if err == nil {
		t.Fatal("9 dimensions accepted")
	}

	x, err := oslo.NewTensor(ctx, oslo.F32, 2, 3)
	must(t, err)
	wantErr(t, "short buffer", x.CopyFromHost(make([]byte, 5)), oslo.ErrShape)
	wantErr(t, "long buffer", x.CopyToHost(make([]byte, 100)), oslo.ErrShape)
	wantErr(t, "nil buffer", x.CopyToHost(nil), oslo.ErrShape)
	wantErr(t, "wrong length", oslo.Write(x, []float32{1, 2}), oslo.ErrShape)
	wantErr(t, "wrong dtype", oslo.Write(x, []int64{1, 2, 3, 4, 5, 6}), oslo.ErrDType)
	_, err = oslo.View[int32](x)
	wantErr(t, "view of the wrong dtype", err, oslo.ErrDType)

	i, err := oslo.TensorOf(ctx, []int64{1, 2, 3})
	must(t, err)
	y, err := oslo.NewTensor(ctx, oslo.F32, 3)
	must(t, err)
	wantErr(t, "all_reduce shapes", ctx.AllGather(oslo.GroupWorld, x, y), oslo.ErrShape)

	lin, err := oslo.NewParallelLinear(ctx, oslo.LinearOptions{InFeatures: 3, OutFeatures: 4, Bias: true})
	must(t, err)
	out, err := oslo.NewTensor(ctx, oslo.F32, 2, 4)
	must(t, err)
	must(t, lin.Forward(x, out))
	wantErr(t, "forward of i64", lin.Forward(i, out), oslo.ErrDType)
	wantErr(t, "forward shapes", lin.Forward(out, x), oslo.ErrShape)
	wantErr(t, "forward nil input", lin.Forward(nil, out), oslo.ErrInvalidArgument)
	_, err = oslo.NewParallelLinear(ctx, oslo.LinearOptions{InFeatures: 0, OutFeatures: 4})
	wantErr(t, "in_features 0", err, oslo.ErrInvalidArgument)

	must(t, x.Close())
	must(t, x.Close()) // idempotent
	wantErr(t, "closed tensor", lin.Forward(x, out), oslo.ErrInvalidArgument)
	_, err = x.Shape()
	wantErr(t, "shape of a closed tensor", err, oslo.ErrInvalidArgument)
	must(t, lin.Close())
	wantErr(t, "closed layer", lin.Forward(x, out), oslo.ErrInvalidArgument)

	_, err = oslo.LoadModel(ctx, "/nonexistent/model")
	wantErr(t, "missing model", err, oslo.ErrIO)
	_, err = oslo.LoadTokenizer("/nonexistent/model")
	if err == nil {
		t.Fatal("tokenizer of a missing folder")
	}
	must(t, ctx.Close())
	_, err = ctx.Size(oslo.GroupWorld)
	wantErr(t, "closed context", err, oslo.ErrInvalidArgument)
	wantErr(t, "all_reduce on a closed context", ctx.AllReduce(oslo.GroupWorld, oslo.ReduceSum, y), oslo.ErrInvalidArgument)
	var e *oslo.Error
	if !errors.As(err, &e) || e.Status != oslo.StatusInvalidArgument || e.Status.String() != "OSLO_ERR_INVALID_ARGUMENT" {
		t.Fatalf("errors.As: %#v", err)
	}
}

// Go memory is copied, never wrapped: a tensor made from a slice does not
// see later writes to the slice, and Values returns a fresh copy.
func TestGoMemoryIsCopied(t *testing.T) {
	ctx := soloContext(t)
	src := []float32{1, 2, 3, 4}
	x, err := oslo.TensorOf(ctx, src, 2, 2)
	must(t, err)
	src[0] = 100
	runtime.GC()
	v, err := oslo.Values[float32](x)
	must(t, err)
	if v[0] != 1 || v[3] != 4 {
		t.Fatalf("the tensor changed with the Go slice: %v", v)
	}
	v[1] = 50
	w, _ := oslo.Values[float32](x)
	if w[1] != 2 {
		t.Fatalf("Values is not a copy: %v", w)
	}
	if s, _ := x.Shape(); len(s) != 2 || s[0] != 2 || s[1] != 2 {
		t.Fatalf("shape %v", s)
	}
	dst := make([]float32, 4)
	must(t, oslo.Read(x, dst))
	if dst[2] != 3 {
		t.Fatalf("Read: %v", dst)
	}
}

// View is a []T over the tensor's C memory: no copy in either direction.
func TestTensorViewsAndCopies(t *testing.T) {
	ctx := soloContext(t)
	x, err := oslo.NewTensor(ctx, oslo.F32, 4)
	must(t, err)
	view, err := oslo.View[float32](x)
	must(t, err)
	if len(view) != 4 {
		t.Fatalf("view of %d", len(view))
	}
	view[2] = 7 // write through the view
	v, _ := oslo.Values[float32](x)
	if v[2] != 7 {
		t.Fatalf("the view's write is not in the tensor: %v", v)
	}
	must(t, oslo.Write(x, []float32{1, 2, 3, 4})) // the tensor's write shows in the view
	if view[0] != 1 || view[3] != 4 {
		t.Fatalf("the view does not see the tensor: %v", view)
	}
	must(t, ctx.AllReduce(oslo.GroupWorld, oslo.ReduceSum, x))
	if view[1] != 2 {
		t.Fatalf("after all_reduce: %v", view)
	}
	ids, err := oslo.TensorOf(ctx, []int64{5, 6})
	must(t, err)
	iv, err := oslo.View[int64](ids)
	must(t, err)
	if iv[1] != 6 {
		t.Fatalf("int64 view %v", iv)
	}
	// A layer's borrowed parameters are views too.
	lin, err := oslo.NewParallelLinear(ctx, oslo.LinearOptions{InFeatures: 4, OutFeatures: 2})
	must(t, err)
	wt, err := lin.Weight()
	must(t, err)
	if b, err := lin.Bias(); b != nil || err != nil {
		t.Fatalf("bias of a layer without one: %v, %v", b, err)
	}
	wv, err := oslo.View[float32](wt)
	must(t, err)
	copy(wv, []float32{1, 0, 0, 0, 0, 1, 0, 0})
	y, _ := oslo.NewTensor(ctx, oslo.F32, 1, 2)
	x2, _ := oslo.TensorOf(ctx, []float32{3, 4, 5, 6}, 1, 4)
	must(t, lin.Forward(x2, y))
	if r, _ := oslo.Values[float32](y); r[0] != 3 || r[1] != 4 {
		t.Fatalf("forward with the weights written through a view: %v", r)
	}
	must(t, lin.Close())
	_, err = wt.Shape()
	wantErr(t, "borrowed tensor of a closed layer", err, oslo.ErrInvalidArgument)
}

// Context.Close closes its open children first; the children then report
// closed handles instead of using freed memory.
func TestCloseContextClosesChildren(t *testing.T) {
	ctx, err := oslo.NewContext(solo(t.TempDir()))
	must(t, err)
	x, err := oslo.TensorOf(ctx, []float32{1, 2})
	must(t, err)
	lin, err := oslo.NewParallelLinear(ctx, oslo.LinearOptions{InFeatures: 2, OutFeatures: 2, Bias: true})
	must(t, err)
	w, err := lin.Weight()
	must(t, err)
	ps, err := oslo.NewParamSet(ctx)
	must(t, err)
	must(t, ps.AddLinear("l", lin))
	if n := ctx.OpenChildren(); n != 3 {
		t.Fatalf("OpenChildren() = %d, want 3", n)
	}
	must(t, x.Close())
	if n := ctx.OpenChildren(); n != 2 {
		t.Fatalf("OpenChildren() = %d after closing a tensor, want 2", n)
	}
	must(t, ctx.Close())
	for what, err := range map[string]error{
		"layer":     lin.ZeroGrad(),
		"param set": func() error { _, err := ps.Len(); return err }(),
		"weight":    func() error { _, err := w.Numel(); return err }(),
	} {
		wantErr(t, what+" after its context closed", err, oslo.ErrInvalidArgument)
	}
	must(t, lin.Close()) // still idempotent
}

// Closing what a parameter set holds closes the set first.
func TestParamSetDependsOnWhatItHolds(t *testing.T) {
	ctx := soloContext(t)
	p, _ := oslo.NewTensor(ctx, oslo.F32, 2)
	g, _ := oslo.NewTensor(ctx, oslo.F32, 2)
	ps, err := oslo.NewParamSet(ctx)
	must(t, err)
	must(t, ps.Add("p", p, g, -1))
	must(t, g.Close())
	_, err = ps.Len()
	wantErr(t, "set after closing a gradient it holds", err, oslo.ErrInvalidArgument)
}

// Finalizers only as a safety net: handles dropped without Close, in any
// order, are freed without using a freed context.
func TestFinalizersAnyOrder(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 20; i++ {
		ctx, err := oslo.NewContext(solo(dir))
		must(t, err)
		for k := 0; k < 5; k++ {
			x, err := oslo.TensorOf(ctx, []float32{1, 2, 3})
			must(t, err)
			lin, err := oslo.NewParallelLinear(ctx, oslo.LinearOptions{InFeatures: 3, OutFeatures: 3})
			must(t, err)
			_, _ = lin.Weight()
			_ = x
		}
		runtime.GC()
	}
	for i := 0; i < 5; i++ {
		runtime.GC()
	}
}

// TestStatusMirrorsHeader: the Status constants and their names are
// oslo_status of include/oslo.h (OSLO_HEADER), value for value, and no
// more: a status added to the header fails here until Go has it.
func TestStatusMirrorsHeader(t *testing.T) {
	path := fixture("OSLO_HEADER")
	if path == "" {
		t.Fatal("OSLO_HEADER (the path of include/oslo.h) is not set")
	}
	text, err := os.ReadFile(path)
	must(t, err)
	re := regexp.MustCompile(`(?m)^\s*(OSLO_(?:OK|ERR_[A-Z_]+))\s*=\s*([0-9]+),`)
	found := re.FindAllSubmatch(text, -1)
	if len(found) < 13 {
		t.Fatalf("%s: %d statuses found, expected at least 13", path, len(found))
	}
	for _, m := range found {
		v, err := strconv.Atoi(string(m[2]))
		must(t, err)
		if got := oslo.Status(v).String(); got != string(m[1]) {
			t.Errorf("status %d: Go says %s, oslo.h %s", v, got, m[1])
		}
	}
	if s := oslo.Status(len(found)).String(); !strings.HasPrefix(s, "OSLO_STATUS(") {
		t.Errorf("Go knows status %d (%s), oslo.h does not", len(found), s)
	}
}

// TestAbortAndClose: Aborts from other goroutines while the context is
// closed either run before Close (nil) or find it closed
// (ErrInvalidArgument), and an Abort after Close is refused without a C
// call. (The crash this guards against, an Abort inside oslo_context_abort
// while Close destroys the context, was seen once in CI in
// abort_from_thread_w2; Context.aborts excludes it. Its window is too
// narrow for this test to hit reliably without the lock.)
func TestAbortAndClose(t *testing.T) {
	for i := 0; i < 50; i++ {
		ctx := soloContext(t)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < 20; k++ {
					if err := ctx.Abort(); err != nil && !errors.Is(err, oslo.ErrInvalidArgument) {
						errs <- err
						return
					}
				}
			}()
		}
		must(t, ctx.Close())
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("abort racing close: %v", err)
		}
		if err := ctx.Abort(); !errors.Is(err, oslo.ErrInvalidArgument) {
			t.Fatalf("abort after close: %v", err)
		}
	}
}
