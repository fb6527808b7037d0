package tests

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/oslo/oslo/bindings/go/oslo"
)

// context_from_config
func TestContextFromConfig(t *testing.T) {
	ctx, err := oslo.NewContext(`{"tensor_parallel_size": 1, "timeout_seconds": 60}`)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	checkSolo(t, ctx)
}

func checkSolo(t *testing.T, ctx *oslo.Context) {
	t.Helper()
	for _, g := range []oslo.Group{oslo.GroupWorld, oslo.GroupTensor, oslo.GroupPipeline, oslo.GroupData} {
		r, err := ctx.Rank(g)
		if err != nil || r != 0 {
			t.Fatalf("Rank(%v) = %d, %v", g, r, err)
		}
		s, err := ctx.Size(g)
		if err != nil || s != 1 {
			t.Fatalf("Size(%v) = %d, %v", g, s, err)
		}
	}
	if b, err := ctx.Backend(); err != nil || b != "cpu" {
		t.Fatalf("Backend() = %q, %v", b, err)
	}
}

// context_from_json_file
func TestContextFromJSONFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oslo.json")
	if err := os.WriteFile(path, []byte(`{"model_parallelism": {"tensor_parallel_size": 1}, "timeout_seconds": 60}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, err := oslo.NewContext(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	checkSolo(t, ctx)
}

// context_bad_config
func TestContextBadConfig(t *testing.T) {
	for _, c := range []struct {
		config string
		want   *oslo.Error
		names  string
	}{
		{`{"tensor_paralel_size": 2}`, oslo.ErrConfig, "tensor_paralel_size"},
		{`{"tensor_parallel_size": 0}`, oslo.ErrConfig, "tensor_parallel_size"},
		{`{"tensor_parallel_size": 2}`, oslo.ErrConfig, "tensor_parallel_size"}, // world is 1
		{`{"timeout_seconds": "soon"}`, oslo.ErrConfig, "timeout_seconds"},
		{`{"backend": "no such backend!"}`, oslo.ErrConfig, "backend"},
		{`{"tensor_parallel_size": `, oslo.ErrFormat, ""},
	} {
		ctx, err := oslo.NewContext(c.config)
		if ctx != nil {
			t.Fatalf("%s: a context", c.config)
		}
		if e := wantStatus(err, c.want); e != nil {
			t.Fatalf("%s: %v", c.config, e)
		}
		var oe *oslo.Error
		errors.As(err, &oe)
		if !strings.Contains(oe.Message, c.names) {
			t.Fatalf("%s: the message %q does not name %q", c.config, oe.Message, c.names)
		}
		if errors.Is(err, oslo.ErrTimeout) {
			t.Fatalf("%v is ErrTimeout", err)
		}
		t.Logf("%s -> %v", c.config, err)
	}
	// The message was read in the failing call: a later success on this
	// or any thread changes nothing.
	_, err := oslo.NewContext(`{"backend": "no such backend!"}`)
	ok, err2 := oslo.NewContext("")
	if err2 != nil {
		t.Fatal(err2)
	}
	ok.Close()
	if !strings.Contains(err.Error(), "backend") {
		t.Fatalf("message changed: %v", err)
	}
}

// collectives_w2
func TestCollectivesW2(t *testing.T) {
	runRanksCtx(t, func(r rank, ctx *oslo.Context) error {
		w := r.world
		x, err := oslo.TensorOf(ctx, []float32{float32(r.rank + 1), float32(-r.rank), 10 * float32(r.rank)}, 3)
		if err != nil {
			return err
		}
		if err := ctx.AllReduce(oslo.GroupWorld, oslo.ReduceSum, x); err != nil {
			return err
		}
		got, err := oslo.Values[float32](x)
		if err != nil {
			return err
		}
		var want []float64
		s0, s1, s2 := 0.0, 0.0, 0.0
		for q := 0; q < w; q++ {
			s0 += float64(q + 1)
			s1 += float64(-q)
			s2 += 10 * float64(q)
		}
		want = []float64{s0, s1, s2}
		if err := closeTo("all_reduce sum", got, want, 0); err != nil {
			return err
		}
		m, err := oslo.TensorOf(ctx, []float32{float32(r.rank), -float32(r.rank)})
		if err != nil {
			return err
		}
		if err := ctx.AllReduce(oslo.GroupWorld, oslo.ReduceMax, m); err != nil {
			return err
		}
		gm, _ := oslo.Values[float32](m)
		if err := closeTo("all_reduce max", gm, []float64{float64(w - 1), 0}, 0); err != nil {
			return err
		}
		in, err := oslo.TensorOf(ctx, []int64{int64(r.rank), int64(100 + r.rank)}, 1, 2)
		if err != nil {
			return err
		}
		out, err := oslo.NewTensor(ctx, oslo.I64, int64(w), 2)
		if err != nil {
			return err
		}
		if err := ctx.AllGather(oslo.GroupWorld, in, out); err != nil {
			return err
		}
		ga, err := oslo.Values[int64](out)
		if err != nil {
			return err
		}
		for q := 0; q < w; q++ {
			if ga[2*q] != int64(q) || ga[2*q+1] != int64(100+q) {
				return fmt.Errorf("all_gather: %v", ga)
			}
		}
		return nil
	})
}

// mlp is a column -> row MLP (8 -> 16 -> 8, bias) with its full weights.
type mlp struct {
	w1, b1, w2, b2 []float64 // [16,8], [16], [8,16], [8]
}

const (
	mlpIn, mlpHidden, mlpOut, mlpBatch = 8, 16, 8, 3
)

func newMLP() mlp {
	f := func(n int, k float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(float32(0.3 * math.Sin(k*float64(i+1)+0.1)))
		}
		return v
	}
	return mlp{w1: f(mlpHidden*mlpIn, 0.7), b1: f(mlpHidden, 1.3), w2: f(mlpOut*mlpHidden, 0.9), b2: f(mlpOut, 2.1)}
}

func f32(v []float64) []float32 {
	o := make([]float32, len(v))
	for i := range v {
		o[i] = float32(v[i])
	}
	return o
}

// linear is y[b,o] = sum_i x[b,i] w[o,i] + bias[o] in f64.
func linear(x []float64, w []float64, bias []float64, in, out int) []float64 {
	n := len(x) / in
	y := make([]float64, n*out)
	for b := 0; b < n; b++ {
		for o := 0; o < out; o++ {
			s := bias[o]
			for i := 0; i < in; i++ {
				s += x[b*in+i] * w[o*in+i]
			}
			y[b*out+o] = s
		}
	}
	return y
}

// linearBackward is the backward of linear in float64: the gradients of its
// input, weight [out, in] and bias for the gradient gy of its output.
func linearBackward(x, w, gy []float64, in, out int) (gx, gw, gb []float64) {
	n := len(x) / in
	gx = make([]float64, n*in)
	gw = make([]float64, out*in)
	gb = make([]float64, out)
	for b := 0; b < n; b++ {
		for o := 0; o < out; o++ {
			g := gy[b*out+o]
			gb[o] += g
			for i := 0; i < in; i++ {
				gx[b*in+i] += g * w[o*in+i]
				gw[o*in+i] += g * x[b*in+i]
			}
		}
	}
	return gx, gw, gb
}

// mlpLayers builds the two sharded layers from the full weights, runs the
// forward and backward pass and returns the layers (for the gradients).
type mlpRun struct {
	fc1, fc2                        *oslo.ParallelLinear
	y, gx                           []float32
	x, gy, h, gh                    []float64
	refY, refGx, gW1, gb1, gW2, gb2 []float64
}

func runMLP(ctx *oslo.Context) (*mlpRun, error) {
	m := newMLP()
	run := &mlpRun{}
	var err error
	run.fc1, err = oslo.NewParallelLinear(ctx, oslo.LinearOptions{Kind: oslo.Column, InFeatures: mlpIn, OutFeatures: mlpHidden, Bias: true})
	if err != nil {
		return nil, err
	}
	run.fc2, err = oslo.NewParallelLinear(ctx, oslo.LinearOptions{Kind: oslo.Row, InFeatures: mlpHidden, OutFeatures: mlpOut, Bias: true, InputIsParallel: true})
	if err != nil {
		return nil, err
	}
	load := func(l *oslo.ParallelLinear, w, b []float64, out, in int) error {
		wt, err := oslo.TensorOf(ctx, f32(w), int64(out), int64(in))
		if err != nil {
			return err
		}
		defer wt.Close()
		bt, err := oslo.TensorOf(ctx, f32(b), int64(out))
		if err != nil {
			return err
		}
		defer bt.Close()
		return l.LoadFull(wt, bt)
	}
	if err := load(run.fc1, m.w1, m.b1, mlpHidden, mlpIn); err != nil {
		return nil, err
	}
	if err := load(run.fc2, m.w2, m.b2, mlpOut, mlpHidden); err != nil {
		return nil, err
	}
	tp, err := ctx.Size(oslo.GroupTensor)
	if err != nil {
		return nil, err
	}
	local := int64(mlpHidden / tp)
	run.x = make([]float64, mlpBatch*mlpIn)
	run.gy = make([]float64, mlpBatch*mlpOut)
	for i := range run.x {
		run.x[i] = float64(float32(math.Cos(0.37 * float64(i))))
	}
	for i := range run.gy {
		run.gy[i] = float64(float32(math.Sin(0.53*float64(i) + 0.2)))
	}
	x, err := oslo.TensorOf(ctx, f32(run.x), mlpBatch, mlpIn)
	if err != nil {
		return nil, err
	}
	h, _ := oslo.NewTensor(ctx, oslo.F32, mlpBatch, local)
	y, _ := oslo.NewTensor(ctx, oslo.F32, mlpBatch, mlpOut)
	if err := run.fc1.Forward(x, h); err != nil {
		return nil, err
	}
	if err := run.fc2.Forward(h, y); err != nil {
		return nil, err
	}
	if run.y, err = oslo.Values[float32](y); err != nil {
		return nil, err
	}
	gy, _ := oslo.TensorOf(ctx, f32(run.gy), mlpBatch, mlpOut)
	gh, _ := oslo.NewTensor(ctx, oslo.F32, mlpBatch, local)
	gx, _ := oslo.NewTensor(ctx, oslo.F32, mlpBatch, mlpIn)
	if err := run.fc2.Backward(h, gy, gh); err != nil {
		return nil, err
	}
	if err := run.fc1.Backward(x, gh, gx); err != nil {
		return nil, err
	}
	if run.gx, err = oslo.Values[float32](gx); err != nil {
		return nil, err
	}
	for _, tt := range []*oslo.Tensor{x, h, y, gy, gh, gx} {
		tt.Close()
	}
	// The unsharded computation in float64.
	run.h = linear(run.x, m.w1, m.b1, mlpIn, mlpHidden)
	run.refY = linear(run.h, m.w2, m.b2, mlpHidden, mlpOut)
	run.gh, run.gW2, run.gb2 = linearBackward(run.h, m.w2, run.gy, mlpHidden, mlpOut)
	run.refGx, run.gW1, run.gb1 = linearBackward(run.x, m.w1, run.gh, mlpIn, mlpHidden)
	return run, nil
}

// checkGrads compares this rank's gradient shards of fc1 and fc2 with the
// reference's times scale (within 1e-4); what prefixes the error's names.
func (run *mlpRun) checkGrads(ctx *oslo.Context, what string, scale float64) error {
	gW1, gb1, gW2, gb2, err := run.grads()
	if err != nil {
		return err
	}
	tr, _ := ctx.Rank(oslo.GroupTensor)
	tp, _ := ctx.Size(oslo.GroupTensor)
	rW1, rb1, rW2 := run.shards(tr, tp)
	sc := func(v []float64) []float64 {
		o := make([]float64, len(v))
		for i := range v {
			o[i] = v[i] * scale
		}
		return o
	}
	for _, c := range []struct {
		what string
		got  []float32
		want []float64
	}{{"fc1 grad weight", gW1, sc(rW1)}, {"fc1 grad bias", gb1, sc(rb1)}, {"fc2 grad weight", gW2, sc(rW2)}, {"fc2 grad bias", gb2, sc(run.gb2)}} {
		if err := closeTo(what+c.what, c.got, c.want, 1e-4); err != nil {
			return err
		}
	}
	return nil
}

// grads returns this rank's gradient shards of fc1 (rows of W1, b1) and
// fc2 (columns of W2, the full b2).
func (run *mlpRun) grads() (gW1, gb1, gW2, gb2 []float32, err error) {
	get := func(l *oslo.ParallelLinear, weight bool) []float32 {
		if err != nil {
			return nil
		}
		var t *oslo.Tensor
		if weight {
			t, err = l.GradWeight()
		} else {
			t, err = l.GradBias()
		}
		if err != nil {
			return nil
		}
		var v []float32
		v, err = oslo.Values[float32](t)
		return v
	}
	return get(run.fc1, true), get(run.fc1, false), get(run.fc2, true), get(run.fc2, false), err
}

// shards are the f64 references of this tensor rank's gradient shards.
func (run *mlpRun) shards(tr, tp int) (gW1, gb1, gW2 []float64) {
	loc := mlpHidden / tp
	gW1 = run.gW1[tr*loc*mlpIn : (tr+1)*loc*mlpIn]
	gb1 = run.gb1[tr*loc : (tr+1)*loc]
	for o := 0; o < mlpOut; o++ {
		gW2 = append(gW2, run.gW2[o*mlpHidden+tr*loc:o*mlpHidden+(tr+1)*loc]...)
	}
	return
}

// mlp_tp2_forward_backward_w2
func TestMlpTp2ForwardBackwardW2(t *testing.T) {
	runRanksCtx(t, func(r rank, ctx *oslo.Context) error {
		run, err := runMLP(ctx)
		if err != nil {
			return err
		}
		if err := closeTo("output", run.y, run.refY, 1e-4); err != nil {
			return err
		}
		if err := closeTo("input gradient", run.gx, run.refGx, 1e-4); err != nil {
			return err
		}
		return run.checkGrads(ctx, "", 1)
	})
}

// clip_grad_norm_w2
func TestClipGradNormW2(t *testing.T) {
	runRanksCtx(t, func(r rank, ctx *oslo.Context) error {
		run, err := runMLP(ctx)
		if err != nil {
			return err
		}
		ps, err := oslo.NewParamSet(ctx)
		if err != nil {
			return err
		}
		defer ps.Close()
		if err := ps.AddLinear("fc1", run.fc1); err != nil {
			return err
		}
		if err := ps.AddLinear("fc2", run.fc2); err != nil {
			return err
		}
		if n, err := ps.Len(); err != nil || n != 4 {
			return fmt.Errorf("Len() = %d, %v", n, err)
		}
		var sq float64
		for _, g := range [][]float64{run.gW1, run.gb1, run.gW2, run.gb2} {
			for _, v := range g {
				sq += v * v
			}
		}
		want := math.Sqrt(sq)
		norm, err := ps.ClipGradNorm(0, 2)
		if err != nil {
			return err
		}
		if math.Abs(norm-want) > 1e-4*want {
			return fmt.Errorf("norm %g, want the unsharded %g", norm, want)
		}
		maxNorm := want / 2
		if _, err := ps.ClipGradNorm(maxNorm, 2); err != nil {
			return err
		}
		scale := maxNorm / (norm + 1e-6)
		if err := run.checkGrads(ctx, "clipped ", scale); err != nil {
			return err
		}
		if n2, err := ps.ClipGradNorm(0, 2); err != nil || math.Abs(n2-maxNorm) > 1e-3*maxNorm {
			return fmt.Errorf("norm after clipping %g (%v), want %g", n2, err, maxNorm)
		}
		return nil
	})
}

// abort_from_thread_w2
func TestAbortFromThreadW2(t *testing.T) {
	runRanksCtx(t, func(r rank, ctx *oslo.Context) error {
		if r.rank != 0 {
			// Never joins the all-reduce; stays until long after rank 0's
			// abort so that only the abort can end rank 0's wait.
			time.Sleep(4 * time.Second)
			return nil
		}
		x, err := oslo.TensorOf(ctx, []float32{1, 2, 3})
		if err != nil {
			return err
		}
		defer x.Close()
		start := time.Now()
		aborted := make(chan error, 1)
		go func() {
			time.Sleep(300 * time.Millisecond)
			aborted <- ctx.Abort()
		}()
		err = ctx.AllReduce(oslo.GroupWorld, oslo.ReduceSum, x)
		took := time.Since(start)
		if e := <-aborted; e != nil { // the watchdog is done before Close
			return fmt.Errorf("abort: %v", e)
		}
		if e := wantStatus(err, oslo.ErrComm); e != nil {
			return e
		}
		if took > 3*time.Second {
			return fmt.Errorf("the abort took %v (timeout 120 s)", took)
		}
		runtime.KeepAlive(x)
		return nil
	})
}
