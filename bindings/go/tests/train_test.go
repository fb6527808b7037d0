package tests

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/oslo/oslo/bindings/go/oslo"
)

// trainCase is tests/bindings/train_gpt2_tiny.txt
// (tests/bindings/make_train_case.py): the micro-batches and the loss of
// every optimizer step of PyTorch's loop.
type trainCase struct {
	ids, mask [][][]int64
	losses    []float64
	accum     int
}

func readTrainCase(path string) (*trainCase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	if !sc.Scan() {
		return nil, fmt.Errorf("%s: empty", path)
	}
	var n, batch, seq, steps, accum int
	if _, err := fmt.Sscanf(sc.Text(), "micro_batches %d batch %d seq %d steps %d accum %d",
		&n, &batch, &seq, &steps, &accum); err != nil {
		return nil, fmt.Errorf("%s: line 1: %v", path, err)
	}
	c := &trainCase{accum: accum}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == "loss" {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return nil, err
			}
			c.losses = append(c.losses, v)
			continue
		}
		if len(f) != 1+batch*seq {
			return nil, fmt.Errorf("%s: %s row of %d values", path, f[0], len(f)-1)
		}
		rows := make([][]int64, batch)
		for b := range rows {
			rows[b] = make([]int64, seq)
			for t := range rows[b] {
				v, err := strconv.ParseInt(f[1+b*seq+t], 10, 64)
				if err != nil {
					return nil, err
				}
				rows[b][t] = v
			}
		}
		if f[0] == "ids" {
			c.ids = append(c.ids, rows)
		} else {
			c.mask = append(c.mask, rows)
		}
	}
	if len(c.ids) != n || len(c.mask) != n || len(c.losses) != steps {
		return nil, fmt.Errorf("%s: %d ids, %d masks, %d losses", path, len(c.ids), len(c.mask), len(c.losses))
	}
	return c, sc.Err()
}

// train_gpt2_tiny_tp2_w2: GPT-2 tiny at TP=2 trained 20 AdamW steps
// (cosine, warmup 3, accumulation 2, clipping 1.0): every step's mean loss
// within 1e-4 (relative) of PyTorch's loop on every rank; a token outside
// the vocabulary is an ErrInvalidArgument naming it.
func TestTrainGpt2TinyTp2W2(t *testing.T) {
	dir := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	c, err := readTrainCase(env(t, "OSLO_TRAIN_CASE"))
	if err != nil {
		t.Fatal(err)
	}
	runRanksCtx(t, func(r rank, ctx *oslo.Context) error {
		m, err := oslo.LoadModelAs(ctx, dir, oslo.F32)
		if err != nil {
			return err
		}
		defer m.Close()
		opt, err := oslo.NewOptimizer(m, oslo.OptimizerOptions{
			Kind: oslo.AdamW, LR: 2e-3, WeightDecay: 0.01, Schedule: oslo.LRCosine,
			WarmupSteps: 3, TotalSteps: int64(len(c.losses)), MaxGradNorm: 1.0,
		}, oslo.TrainOptions{GradAccumSteps: int64(c.accum)})
		if err != nil {
			return err
		}
		defer opt.Close()
		for i := range c.ids {
			res, err := m.TrainStep(c.ids[i], nil, c.mask[i], opt)
			if err != nil {
				return fmt.Errorf("micro-batch %d: %v", i, err)
			}
			if (i+1)%c.accum != 0 {
				if res.Stepped {
					return fmt.Errorf("micro-batch %d: stepped inside the window: %+v", i, res)
				}
				continue
			}
			k := i / c.accum
			if !res.Stepped || res.Skipped || res.Step != int64(k+1) {
				return fmt.Errorf("step %d: %+v", k, res)
			}
			if e := math.Abs(res.MeanLoss-c.losses[k]) / math.Abs(c.losses[k]); !(e < 1e-4) {
				return fmt.Errorf("step %d: loss %v vs PyTorch %v (relative error %.3g)", k, res.MeanLoss, c.losses[k], e)
			}
		}
		info, err := m.Info()
		if err != nil {
			return err
		}
		bad := [][]int64{append([]int64(nil), c.ids[0][0]...), c.ids[0][1]}
		bad[0][1] = info.VocabSize + 7
		_, err = m.TrainStep(bad, nil, c.mask[0], opt)
		if e := wantStatus(err, oslo.ErrInvalidArgument); e != nil {
			return e
		}
		if !strings.Contains(err.Error(), strconv.FormatInt(info.VocabSize+7, 10)) {
			return fmt.Errorf("the error does not name the token: %v", err)
		}
		return nil
	})
}

// An optimizer depends on its model: closing the model closes it first. A
// bad option is an error naming it; TrainStep without an optimizer only
// accumulates; Step and ZeroGrad; activation checkpointing gives the same
// loss.
func TestOptimizerDependsOnModel(t *testing.T) {
	ctx := soloContext(t)
	defer ctx.Close()
	m, err := oslo.LoadModel(ctx, filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny"))
	must(t, err)
	_, err = oslo.NewOptimizer(m, oslo.OptimizerOptions{Schedule: oslo.LRLinear}, oslo.TrainOptions{})
	wantErr(t, "a linear schedule without TotalSteps", err, oslo.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "total_steps") {
		t.Fatalf("the error does not name total_steps: %v", err)
	}
	_, err = oslo.NewOptimizer(m, oslo.OptimizerOptions{LossScaling: 7}, oslo.TrainOptions{})
	wantErr(t, "LossScaling 7", err, oslo.ErrInvalidArgument)
	opt, err := oslo.NewOptimizer(m, oslo.OptimizerOptions{Kind: oslo.SGD, LR: 0.1, MaxGradNorm: 1}, oslo.TrainOptions{})
	must(t, err)
	if opt.Model() != m {
		t.Fatal("Model() is not the model")
	}
	ids := [][]int64{{5, 9, 14, 3}}
	r0, err := m.TrainStep(ids, nil, nil, nil)
	must(t, err)
	if r0.Stepped || !(r0.Loss > 0) {
		t.Fatalf("without an optimizer: %+v", r0)
	}
	must(t, m.SetActivationCheckpointing(true))
	r1, err := m.TrainStep(ids, ids, nil, nil)
	must(t, err)
	if r1.Loss != r0.Loss {
		t.Fatalf("with activation checkpointing: loss %v, without %v", r1.Loss, r0.Loss)
	}
	s, err := opt.Step()
	must(t, err)
	if !s.Stepped || s.Step != 1 || math.Abs(s.LR-0.1) > 1e-12 || !(s.GradNorm > 0) {
		t.Fatalf("Step: %+v", s)
	}
	must(t, opt.ZeroGrad())
	_, err = m.TrainStep(ids, [][]int64{{1, 2}}, nil, opt)
	wantErr(t, "labels of another length", err, oslo.ErrShape)
	must(t, m.Close())
	_, err = opt.Step()
	wantErr(t, "Step after the model closed", err, oslo.ErrInvalidArgument)
	must(t, opt.Close()) // still idempotent
}

// The data-parallel options (C ABI version 2): on a TP=1 context ZeRO
// stages 1, 2 and 3 with a small BucketBytes train (SGD lowers the loss)
// with the losses of stage 0; stage 7 and a 2-byte bucket are
// ErrInvalidArgument, each named.
func TestOptimizerDataParallelOptions(t *testing.T) {
	ctx := soloContext(t)
	defer ctx.Close()
	m, err := oslo.LoadModel(ctx, filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny"))
	must(t, err)
	defer m.Close()
	_, err = oslo.NewOptimizer(m, oslo.OptimizerOptions{}, oslo.TrainOptions{ZeroStage: 7})
	wantErr(t, "ZeroStage 7", err, oslo.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "zero_stage") {
		t.Fatalf("the error does not name zero_stage: %v", err)
	}
	_, err = oslo.NewOptimizer(m, oslo.OptimizerOptions{}, oslo.TrainOptions{BucketBytes: 2})
	wantErr(t, "BucketBytes 2", err, oslo.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "bucket_bytes") {
		t.Fatalf("the error does not name bucket_bytes: %v", err)
	}
	ids := [][]int64{{5, 9, 14, 3}}
	var losses [4][3]float64
	for stage := 0; stage <= 3; stage++ { // a fresh model each
		mz, err := oslo.LoadModel(ctx, filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny"))
		must(t, err)
		opt, err := oslo.NewOptimizer(mz, oslo.OptimizerOptions{Kind: oslo.SGD, LR: 0.1},
			oslo.TrainOptions{ZeroStage: stage, BucketBytes: 4096})
		must(t, err)
		for i := 0; i < 3; i++ {
			r, err := mz.TrainStep(ids, nil, nil, opt)
			must(t, err)
			if !r.Stepped || r.Step != int64(i+1) {
				t.Fatalf("ZeRO-%d step %d: %+v", stage, i+1, r)
			}
			losses[stage][i] = r.Loss
		}
		must(t, mz.Close())
		l := losses[stage]
		if !(l[2] < l[1] && l[1] < l[0]) {
			t.Fatalf("ZeRO-%d: SGD does not lower the loss: %v", stage, l)
		}
		for i := range l { // at DP=1 the stages agree
			if math.Abs(l[i]-losses[0][i]) > 1e-6*math.Abs(losses[0][i]) {
				t.Fatalf("ZeRO-%d losses %v, ZeRO-0 %v", stage, l, losses[0])
			}
		}
	}
}

// The pipeline training options (TrainOptions): MicroBatches 2 over 2 rows
// on one stage trains with the loss of one 2-row batch and
// Model.PipelineStats reports its schedule's times (zeros before a step
// and after a step without one); 3 micro-batches of 2 rows and ZeroStage 2
// with micro-batches are errors naming the cause.
func TestOptimizerPipelineOptions(t *testing.T) {
	ctx := soloContext(t)
	defer ctx.Close()
	fixture := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	ids := [][]int64{{5, 9, 14, 3}, {7, 8, 21, 40}}
	var losses [2]float64
	for k, micro := range []int64{1, 2} {
		m, err := oslo.LoadModel(ctx, fixture)
		must(t, err)
		opt, err := oslo.NewOptimizer(m, oslo.OptimizerOptions{Kind: oslo.SGD, LR: 0.1},
			oslo.TrainOptions{MicroBatches: micro})
		must(t, err)
		c, w, b, err := m.PipelineStats()
		must(t, err)
		if c != 0 || w != 0 || b != 0 {
			t.Fatalf("PipelineStats before a step: %v %v %v", c, w, b)
		}
		r, err := m.TrainStep(ids, nil, nil, opt)
		must(t, err)
		losses[k] = r.Loss
		c, w, b, err = m.PipelineStats()
		must(t, err)
		if micro == 2 && !(c > 0 && c <= w && b >= 0 && b < 1) {
			t.Fatalf("PipelineStats after a 2-micro-batch step: %v %v %v", c, w, b)
		}
		if micro == 1 && (c != 0 || w != 0 || b != 0) {
			t.Fatalf("PipelineStats after a step without schedule: %v %v %v", c, w, b)
		}
		if micro == 2 {
			bad, err := oslo.NewOptimizer(m, oslo.OptimizerOptions{}, oslo.TrainOptions{MicroBatches: 3})
			must(t, err)
			_, err = m.TrainStep(ids, nil, nil, bad)
			wantErr(t, "3 micro-batches of 2 rows", err, oslo.ErrInvalidArgument)
			if !strings.Contains(err.Error(), "micro-batches") {
				t.Fatalf("the error does not name the micro-batches: %v", err)
			}
			must(t, bad.Close())
			_, err = oslo.NewOptimizer(m, oslo.OptimizerOptions{}, oslo.TrainOptions{MicroBatches: 2, ZeroStage: 2})
			wantErr(t, "ZeroStage 2 with micro-batches", err, oslo.ErrNotSupported)
			// The head split reaches the C train options: a bad value and
			// one stage are refused naming it.
			_, err = oslo.NewOptimizer(m, oslo.OptimizerOptions{}, oslo.TrainOptions{PipelineHeadSplit: 2})
			wantErr(t, "PipelineHeadSplit 2", err, oslo.ErrInvalidArgument)
			if !strings.Contains(err.Error(), "pipeline_head_split") {
				t.Fatalf("the error does not name pipeline_head_split: %v", err)
			}
			_, err = oslo.NewOptimizer(m, oslo.OptimizerOptions{}, oslo.TrainOptions{PipelineHeadSplit: -1})
			wantErr(t, "PipelineHeadSplit on one stage", err, oslo.ErrNotSupported)
		}
		must(t, opt.Close())
		must(t, m.Close())
	}
	if math.Abs(losses[1]-losses[0]) > 1e-5*math.Abs(losses[0]) {
		t.Fatalf("2 micro-batches: loss %v, one batch %v", losses[1], losses[0])
	}
}

// LoadModelWith's pipeline options reach oslo_model_load: on one stage,
// PipelineLayers {2} (all of gpt2-tiny's blocks) with DType F32 generates
// what LoadModel generates, and {1} is ErrInvalidArgument naming the sum.
func TestLoadModelWithPipelineLayers(t *testing.T) {
	ctx := soloContext(t)
	defer ctx.Close()
	fixture := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	prompt := [][]int64{{5, 9, 14, 3}}
	o := oslo.GenerateOptions{MaxNewTokens: 6}
	m, err := oslo.LoadModel(ctx, fixture)
	must(t, err)
	want, err := m.Generate(prompt, o)
	must(t, err)
	must(t, m.Close())
	f32 := oslo.F32
	m, err = oslo.LoadModelWith(ctx, fixture, oslo.ModelOptions{DType: &f32, PipelineLayers: []int{2}})
	must(t, err)
	got, err := m.Generate(prompt, o)
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("with PipelineLayers {2}: %v, plain: %v", got, want)
	}
	must(t, m.Close())
	_, err = oslo.LoadModelWith(ctx, fixture, oslo.ModelOptions{PipelineLayers: []int{1}})
	wantErr(t, "PipelineLayers {1}", err, oslo.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "sum to 1") {
		t.Fatalf("the error does not name the sum: %v", err)
	}
}

// Optimizer.SaveCheckpoint / LoadCheckpoint: resuming from a training
// checkpoint in a new model and optimizer gives bitwise the losses of the
// uninterrupted run and the saved TrainState; a model folder is not a
// training checkpoint (ErrFormat naming it).
func TestTrainingCheckpointResume(t *testing.T) {
	ctx := soloContext(t)
	defer ctx.Close()
	fixture := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	dir := filepath.Join(t.TempDir(), "train-ckpt")
	opts := oslo.OptimizerOptions{Kind: oslo.AdamW, LR: 2e-3}
	ids := [][]int64{{5, 9, 14, 3, 77, 2}, {40, 41, 42, 43, 44, 45}}
	var want [2]float64
	func() {
		m, err := oslo.LoadModel(ctx, fixture)
		must(t, err)
		defer m.Close()
		opt, err := oslo.NewOptimizer(m, opts, oslo.TrainOptions{})
		must(t, err)
		defer opt.Close()
		for i := 0; i < 2; i++ {
			r, err := m.TrainStep(ids, nil, nil, opt)
			must(t, err)
			if !r.Stepped {
				t.Fatalf("step %d: %+v", i, r)
			}
		}
		must(t, opt.SaveCheckpoint(dir, oslo.TrainState{Seed: 7, Epoch: 1, DataPosition: 42}))
		for i := range want {
			r, err := m.TrainStep(ids, nil, nil, opt)
			must(t, err)
			want[i] = r.Loss
		}
	}()
	m, err := oslo.LoadModel(ctx, dir)
	must(t, err)
	defer m.Close()
	opt, err := oslo.NewOptimizer(m, opts, oslo.TrainOptions{})
	must(t, err)
	defer opt.Close()
	s, err := opt.LoadCheckpoint(dir)
	must(t, err)
	if s != (oslo.TrainState{Seed: 7, Epoch: 1, DataPosition: 42}) {
		t.Fatalf("LoadCheckpoint: %+v", s)
	}
	for i := range want {
		r, err := m.TrainStep(ids, nil, nil, opt)
		must(t, err)
		if math.Float64bits(r.Loss) != math.Float64bits(want[i]) || r.Step != int64(3+i) {
			t.Fatalf("step %d: resumed %+v, uninterrupted loss %v", i, r, want[i])
		}
	}
	m2, err := oslo.LoadModel(ctx, fixture)
	must(t, err)
	defer m2.Close()
	opt2, err := oslo.NewOptimizer(m2, opts, oslo.TrainOptions{})
	must(t, err)
	defer opt2.Close()
	_, err = opt2.LoadCheckpoint(fixture)
	wantErr(t, "LoadCheckpoint of a model folder", err, oslo.ErrFormat)
	if !strings.Contains(err.Error(), "training checkpoint") {
		t.Fatalf("the error does not name a training checkpoint: %v", err)
	}
}

// Model.Backward trains an encoder from a loss on its hidden states: with
// gradHidden = h (the gradient of sum(h^2)/2) one SGD step lowers
// sum(h^2); a gradient of the wrong size is refused by name.
func TestEncoderBackward(t *testing.T) {
	ctx := soloContext(t)
	defer ctx.Close()
	m, err := oslo.LoadModel(ctx, filepath.Join(env(t, "OSLO_FIXTURES"), "bert-tiny"))
	must(t, err)
	defer m.Close()
	ids := [][]int64{{2, 40, 41}, {7, 99, 3}}
	types := [][]int64{{0, 0, 1}, {0, 1, 1}}
	h, err := m.Forward(ids, nil, types, oslo.Hidden)
	must(t, err)
	opt, err := oslo.NewOptimizer(m, oslo.OptimizerOptions{Kind: oslo.SGD, LR: 0.05}, oslo.TrainOptions{})
	must(t, err)
	defer opt.Close()
	_, err = m.Backward(ids, nil, types, h[:len(h)-1], opt)
	wantErr(t, "a short gradient", err, oslo.ErrShape)
	if !strings.Contains(err.Error(), "grad_hidden") {
		t.Fatalf("the error does not name grad_hidden: %v", err)
	}
	r, err := m.Backward(ids, nil, types, h, opt)
	must(t, err)
	if !r.Stepped || r.Step != 1 || r.Loss != 0 {
		t.Fatalf("Backward: %+v", r)
	}
	h2, err := m.Forward(ids, nil, types, oslo.Hidden)
	must(t, err)
	var before, after float64
	for _, x := range h {
		before += float64(x) * float64(x)
	}
	for _, x := range h2 {
		after += float64(x) * float64(x)
	}
	if !(after < before) {
		t.Fatalf("sum(h^2) %v -> %v", before, after)
	}
}

// train_error_in_flight: a ZeRO-3 train step with a label outside the
// vocabulary fails; its error unwinds as a panic through the deferred
// ctx.Close(), which closes the context with the model and the optimizer
// still open (the Go form of an exception in flight while the context
// closes); they are closed after it, optimizer last. The expected error;
// the closed optimizer refuses a step; the process exits cleanly.
func TestTrainErrorInFlight(t *testing.T) {
	dir := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	if err := trainErrorInFlight(`{"timeout_seconds": 120}`, 1, dir); err != nil {
		t.Fatal(err)
	}
}

// train_error_in_flight_w2: the same on 2 data-parallel ranks (ZeRO-3
// partitions over them).
func TestTrainErrorInFlightW2(t *testing.T) {
	dir := filepath.Join(env(t, "OSLO_FIXTURES"), "gpt2-tiny")
	runRanks(t, func(r rank) error {
		cfg := strings.Replace(r.config, fmt.Sprintf(`"tensor_parallel_size": %d`, r.world),
			`"tensor_parallel_size": 1`, 1)
		return trainErrorInFlight(cfg, r.world, dir)
	})
}

func trainErrorInFlight(cfg string, world int, dir string) error {
	ids := [][]int64{{5, 9, 14, 3}, {7, 1, 2, 8}}
	bad := [][]int64{{5, 9, 1000000000, 3}, {7, 1, 2, 8}}
	var m *oslo.Model
	var opt *oslo.Optimizer
	var inFlight error
	func() {
		defer func() {
			if r := recover(); r != nil {
				e, ok := r.(error)
				if !ok {
					panic(r)
				}
				inFlight = e
			}
		}()
		must := func(err error) {
			if err != nil {
				panic(fmt.Errorf("setup: %w", err))
			}
		}
		ctx, err := oslo.NewContext(cfg)
		must(err)
		defer ctx.Close() // runs while the failed step's panic unwinds
		if n, err := ctx.Size(oslo.GroupData); err != nil || n != world {
			must(fmt.Errorf("DP %d (%v), want %d", n, err, world))
		}
		m, err = oslo.LoadModel(ctx, dir)
		must(err)
		opt, err = oslo.NewOptimizer(m, oslo.OptimizerOptions{Kind: oslo.SGD, LR: 0.1},
			oslo.TrainOptions{ZeroStage: 3})
		must(err)
		res, err := m.TrainStep(ids, nil, nil, opt)
		must(err)
		if !res.Stepped {
			must(fmt.Errorf("the good ZeRO-3 step did not step: %+v", res))
		}
		if _, err := m.TrainStep(ids, bad, nil, opt); err != nil {
			panic(err)
		}
	}()
	if e := wantStatus(inFlight, oslo.ErrInvalidArgument); e != nil {
		return e
	}
	if !strings.Contains(inFlight.Error(), "outside the vocabulary") {
		return fmt.Errorf("the error does not name the label: %v", inFlight)
	}
	if m == nil || opt == nil {
		return fmt.Errorf("no model or optimizer made")
	}
	m.Close()
	if _, err := opt.Step(); wantStatus(err, oslo.ErrInvalidArgument) != nil {
		return fmt.Errorf("a step of the closed optimizer: %v", err)
	}
	opt.Close()
	return opt.Close()
}
