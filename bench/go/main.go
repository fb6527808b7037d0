// Command bench measures the per-call overhead of the Go binding on a small
// forward: a column-parallel linear layer in=64 out=64 with bias (f32) at
// world size 1, input [1,64] and output [1,64] made once, timing
// lin.Forward(x, y): 2000 warm-up calls, then 7 repetitions of 20000 calls;
// it prints the median. A second line times the []float32 path: Write of
// the input slice, Forward, Read of the output slice (two copies).
//
//	BENCH lang=go case=forward_1x64x64 ns_per_call=<median> calls=20000 reps=7
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/oslo/oslo/bindings/go/oslo"
)

const (
	warmup = 2000
	calls  = 20000
	reps   = 7
)

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func median(f func()) float64 {
	for i := 0; i < warmup; i++ {
		f()
	}
	ns := make([]float64, reps)
	for r := range ns {
		start := time.Now()
		for i := 0; i < calls; i++ {
			f()
		}
		ns[r] = float64(time.Since(start).Nanoseconds()) / calls
	}
	sort.Float64s(ns)
	return ns[reps/2]
}

func main() {
	dir, err := os.MkdirTemp("", "oslo-go-bench-")
	check(err)
	defer os.RemoveAll(dir)
	ctx, err := oslo.NewContext(fmt.Sprintf(`{"rank": 0, "world_size": 1, "num_threads": 1, "init_method": "file://%s"}`,
		filepath.Join(dir, "store")))
	check(err)
	defer ctx.Close()
	lin, err := oslo.NewParallelLinear(ctx, oslo.LinearOptions{Kind: oslo.Column, InFeatures: 64, OutFeatures: 64, Bias: true, DType: oslo.F32})
	check(err)
	x, err := oslo.NewTensor(ctx, oslo.F32, 1, 64)
	check(err)
	y, err := oslo.NewTensor(ctx, oslo.F32, 1, 64)
	check(err)
	in := make([]float32, 64)
	for i := range in {
		in[i] = float32(i) / 64
	}
	check(oslo.Write(x, in))
	var failed error
	ns := median(func() {
		if err := lin.Forward(x, y); err != nil {
			failed = err
		}
	})
	check(failed)
	fmt.Printf("BENCH lang=go case=forward_1x64x64 ns_per_call=%.1f calls=%d reps=%d\n", ns, calls, reps)
	out := make([]float32, 64)
	ns = median(func() {
		if err := oslo.Write(x, in); err != nil {
			failed = err
		}
		if err := lin.Forward(x, y); err != nil {
			failed = err
		}
		if err := oslo.Read(y, out); err != nil {
			failed = err
		}
	})
	check(failed)
	fmt.Printf("BENCH lang=go case=forward_1x64x64_slices ns_per_call=%.1f calls=%d reps=%d\n", ns, calls, reps)
}
