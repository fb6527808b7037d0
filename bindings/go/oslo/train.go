package oslo

import (
	"math"
	"runtime"

	"github.com/oslo/oslo/bindings/go/oslo/internal/capi"
)

// OptimizerKind is the update rule of an Optimizer.
type OptimizerKind int

// The update rules.
const (
	AdamW OptimizerKind = 0 // torch.optim.AdamW: decoupled weight decay, bias correction
	SGD   OptimizerKind = 1 // torch.optim.SGD: momentum, dampening, Nesterov
)

// LRSchedule is a learning-rate schedule, as transformers' get_scheduler.
type LRSchedule int

// The schedules.
const (
	LRConstant           LRSchedule = 0 // lr throughout (warmup ignored)
	LRConstantWithWarmup LRSchedule = 1 // linear warmup, then lr
	LRLinear             LRSchedule = 2 // linear warmup, then linear decay to 0 at TotalSteps
	LRCosine             LRSchedule = 3 // linear warmup, then half a cosine to 0 at TotalSteps
)

// LossScaling says whether an Optimizer scales the loss dynamically
// (torch.amp.GradScaler).
type LossScaling int

// The loss-scaling modes.
const (
	LossScalingAuto LossScaling = 0 // on for f16 models, off otherwise
	LossScalingOff  LossScaling = 1
	LossScalingOn   LossScaling = 2
)

// OptimizerOptions configure the update rule of NewOptimizer. The zero
// value is AdamW with PyTorch's defaults (lr 1e-3, betas 0.9 and 0.999,
// eps 1e-8, no weight decay), a constant learning rate and no clipping;
// every zero field means the C default (oslo_optimizer_options_init), and
// the pointer fields are those whose zero is a value of its own. How the
// training runs (accumulation, ZeRO, pipeline micro-batches) is in
// TrainOptions.
type OptimizerOptions struct {
	Kind        OptimizerKind // AdamW (default) or SGD
	LR          float64       // base learning rate; 0: 1e-3
	WeightDecay float64       // decoupled (AdamW) or L2 (SGD) weight decay
	Beta1       *float64      // AdamW; nil: 0.9
	Beta2       *float64      // AdamW; nil: 0.999
	Eps         *float64      // AdamW; nil: 1e-8
	Momentum    float64       // SGD
	Dampening   float64       // SGD
	Nesterov    bool          // SGD: Nesterov momentum
	// Decay1D applies the weight decay to 1-D parameters (norm weights,
	// biases) too; false: none for them, as Hugging Face's Trainer groups them.
	Decay1D        bool
	Schedule       LRSchedule  // LRConstant (default), ...
	WarmupSteps    int64       // optimizer steps of linear warmup
	TotalSteps     int64       // the schedule's length (LRLinear, LRCosine need > 0)
	MaxGradNorm    float64     // > 0: clip the global gradient norm to it; 0: off
	LossScaling    LossScaling // LossScalingAuto (default), LossScalingOff, LossScalingOn
	InitScale      float64     // initial loss scale; 0: 65536
	GrowthFactor   float64     // 0: 2
	BackoffFactor  float64     // 0: 0.5
	GrowthInterval int64       // 0: 2000
}

// TrainOptions configure how Model.TrainStep trains with an Optimizer
// (oslo_train_options): the zero value is one micro-batch per optimizer
// step, no ZeRO, DDP's 25 MiB buckets and one pipeline micro-batch; every
// zero field means the C default (oslo_train_options_init).
type TrainOptions struct {
	GradAccumSteps int64 // micro-batches (TrainStep calls) per optimizer step; 0: 1
	// Data parallelism (a context whose data-parallel size is above 1):
	// the gradients are averaged over the data group as PyTorch's DDP does,
	// in buckets of BucketBytes of f32 gradient (0: 25 MiB). ZeroStage
	// (DeepSpeed ZeRO): 0 none; 1 optimizer state and f32 master weights
	// partitioned over the data group; 2 the gradients too; 3 the
	// parameters too.
	ZeroStage   int
	BucketBytes int64
	// Pipeline parallelism: each TrainStep's rows are cut
	// into MicroBatches micro-batches (0: 1; it must divide the rows), run
	// through the pipeline stages in 1F1B order (one after the other on
	// one stage); ZeroStage 0 or 1 when above 1 or with stages.
	MicroBatches int64
	// The pipeline's head split (tied word embeddings, one
	// model chunk per rank): 0 off; a fraction in (0, 1] of each
	// micro-batch's tokens whose head and loss the first stage runs with
	// its token table; -1 the share that equalises the first and last
	// stage's products.
	PipelineHeadSplit float64
}

// fill writes the fields set in o over c (made with the C defaults).
func (o *OptimizerOptions) fill(c capi.OptimizerOptions) {
	c.SetKind(capi.Enum_SS_oslo_optimizer_kind(o.Kind))
	if o.LR != 0 {
		c.SetLr(o.LR)
	}
	c.SetWeight_decay(o.WeightDecay)
	if o.Beta1 != nil {
		c.SetBeta1(*o.Beta1)
	}
	if o.Beta2 != nil {
		c.SetBeta2(*o.Beta2)
	}
	if o.Eps != nil {
		c.SetEps(*o.Eps)
	}
	c.SetMomentum(o.Momentum)
	c.SetDampening(o.Dampening)
	c.SetNesterov(b2i(o.Nesterov))
	c.SetDecay_1d(b2i(o.Decay1D))
	c.SetSchedule(capi.Enum_SS_oslo_lr_schedule(o.Schedule))
	c.SetWarmup_steps(o.WarmupSteps)
	c.SetTotal_steps(o.TotalSteps)
	c.SetMax_grad_norm(o.MaxGradNorm)
	c.SetLoss_scaling(map[LossScaling]int{LossScalingAuto: -1, LossScalingOff: 0, LossScalingOn: 1}[o.LossScaling])
	if o.InitScale != 0 {
		c.SetInit_scale(o.InitScale)
	}
	if o.GrowthFactor != 0 {
		c.SetGrowth_factor(o.GrowthFactor)
	}
	if o.BackoffFactor != 0 {
		c.SetBackoff_factor(o.BackoffFactor)
	}
	if o.GrowthInterval != 0 {
		c.SetGrowth_interval(o.GrowthInterval)
	}
}

// fill writes the fields set in t over c (made with the C defaults).
func (t *TrainOptions) fill(c capi.TrainOptions) {
	if t.GradAccumSteps != 0 {
		c.SetGrad_accum_steps(t.GradAccumSteps)
	}
	c.SetZero_stage(t.ZeroStage)
	if t.BucketBytes != 0 {
		c.SetBucket_bytes(t.BucketBytes)
	}
	if t.MicroBatches != 0 {
		c.SetMicro_batches(t.MicroBatches)
	}
	c.SetPipeline_head_split(t.PipelineHeadSplit)
}

// TrainStepResult is what Model.TrainStep and Optimizer.Step report.
// MeanLoss, GradNorm and LR are meaningful when Stepped.
type TrainStepResult struct {
	Loss      float64 // this micro-batch's loss (TrainStep only); the same on every rank
	Stepped   bool    // an optimizer step ran (applied or skipped)
	Skipped   bool    // that step was skipped: non-finite gradients
	MeanLoss  float64 // the mean loss of the accumulated micro-batches
	GradNorm  float64 // the global gradient norm before clipping (NaN unless clipping or loss scaling asked for it)
	LR        float64 // the learning rate applied (0 when skipped)
	LossScale float64 // the loss scale in force afterwards (1 without scaling)
	Step      int64   // optimizer updates applied so far
}

// result copies and frees a C result.
func result(c capi.TrainStepResult) TrainStepResult {
	defer capi.DeleteTrainStepResult(c)
	return TrainStepResult{
		Loss: c.GetLoss(), Stepped: c.GetStepped() != 0, Skipped: c.GetSkipped() != 0,
		MeanLoss: c.GetMean_loss(), GradNorm: c.GetGrad_norm(), LR: c.GetLr(),
		LossScale: c.GetLoss_scale(), Step: c.GetStep(),
	}
}

// Optimizer updates every parameter of a Model (this rank's slices), with
// its learning-rate schedule, gradient clipping and loss scaler, and runs
// the train steps with its TrainOptions (oslo_optimizer). It depends on its model: the model stays alive
// while the optimizer is reachable, and Model.Close closes the optimizer
// first.
type Optimizer struct {
	n     *node
	o     capi.Optimizer
	model *Model
}

// NewOptimizer creates an optimizer over the parameters of m with the
// update rule o and the training settings t, and makes the model's
// gradients (zero). Not collective.
func NewOptimizer(m *Model, o OptimizerOptions, t TrainOptions) (*Optimizer, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if o.LossScaling < LossScalingAuto || o.LossScaling > LossScalingOn {
		return nil, errorf(StatusInvalidArgument,
			"optimizer: LossScaling %d is not LossScalingAuto, LossScalingOff or LossScalingOn", o.LossScaling)
	}
	var c capi.Optimizer
	err := call(func() {
		opts := capi.NewOptimizerOptions()
		defer capi.DeleteOptimizerOptions(opts)
		o.fill(opts)
		topts := capi.NewTrainOptions()
		defer capi.DeleteTrainOptions(topts)
		t.fill(topts)
		c = capi.NewOptimizer(m.m, opts, topts)
	})
	runtime.KeepAlive(m)
	if err != nil {
		return nil, err
	}
	x := &Optimizer{o: c, model: m}
	x.n = newNode(func() { capi.DeleteOptimizer(c) }, m.n)
	runtime.SetFinalizer(x, (*Optimizer).finalize)
	return x, nil
}

func (o *Optimizer) finalize() { o.n.close() }

// Close frees the optimizer; the model keeps its parameters and gradients.
// Not collective. Idempotent.
func (o *Optimizer) Close() error {
	if o == nil {
		return nil
	}
	o.n.close()
	runtime.SetFinalizer(o, nil)
	return nil
}

func (o *Optimizer) check() error {
	if o == nil || !o.n.ok() {
		return errClosed("optimizer")
	}
	return nil
}

// Model is the model this optimizer updates.
func (o *Optimizer) Model() *Model { return o.model }

// Step takes the optimizer step now, from the gradients accumulated so far
// (however many micro-batches), then zeroes them. Collective over the
// tensor group.
func (o *Optimizer) Step() (TrainStepResult, error) {
	var r TrainStepResult
	if err := o.check(); err != nil {
		return r, err
	}
	err := call(func() { r = result(o.o.Step()) })
	runtime.KeepAlive(o)
	return r, err
}

// ZeroGrad zeroes the model's gradients and restarts the accumulation
// window. Not collective.
func (o *Optimizer) ZeroGrad() error {
	if err := o.check(); err != nil {
		return err
	}
	err := call(func() { o.o.Zero_grad() })
	runtime.KeepAlive(o)
	return err
}

// PipelineStats returns the pipeline schedule of the model's last
// TrainStep (oslo_model_pipeline_stats): this rank's compute and wall
// seconds and the bubble over all stages, 1 - (the stages' compute summed)
// / (stages x the longest wall time); zeros before a step and after one
// that ran no schedule (one stage, MicroBatches 1). Not collective.
func (m *Model) PipelineStats() (computeS, wallS, bubble float64, err error) {
	if err = m.check(); err != nil {
		return
	}
	out := make([]int64, 3) // three float64, as their bits
	err = call(func() { m.m.Pipeline_stats(bytesOf(out)) })
	runtime.KeepAlive(m)
	f := func(i int) float64 { return math.Float64frombits(uint64(out[i])) }
	return f(0), f(1), f(2), err
}

// TrainState is where a training loop's data stands (oslo_train_state):
// saved in a training checkpoint by Optimizer.SaveCheckpoint and returned
// by Optimizer.LoadCheckpoint. oslo itself draws no random numbers in
// training.
type TrainState struct {
	Seed         uint64 // the seed the data order derives from
	Epoch        int64  // passes over the data completed
	DataPosition int64  // samples consumed in the current epoch
}

// SaveCheckpoint saves a training checkpoint in dir (oslo_checkpoint_save):
// the model's weights as Model.Save writes them (so LoadModel reads it as
// a model checkpoint), the optimizer's state, step count, schedule and loss
// scaler, and s, atomically: the previous checkpoint in dir stays loadable
// until the new one is complete. Call it after an optimizer step (no
// micro-batch pending). Collective over the world group.
func (o *Optimizer) SaveCheckpoint(dir string, s TrainState) error {
	if err := o.check(); err != nil {
		return err
	}
	err := call(func() { o.o.Save_checkpoint(dir, int64(s.Seed), s.Epoch, s.DataPosition) })
	runtime.KeepAlive(o)
	return err
}

// LoadCheckpoint restores a training checkpoint of dir
// (oslo_checkpoint_load) into the model (weights) and the optimizer
// (state, step count, loss scaler) and returns the saved train state. At
// the tensor-parallel size it was saved at, training resumes bit-exactly;
// at another size the weights and optimizer state are re-sliced. A folder
// that is not a training checkpoint is an ErrFormat error. Collective over
// the world group: if it fails on any rank, every rank gets the error and
// the optimizer must not be used further.
func (o *Optimizer) LoadCheckpoint(dir string) (TrainState, error) {
	var s TrainState
	if err := o.check(); err != nil {
		return s, err
	}
	out := make([]int64, 3)
	err := call(func() { o.o.Load_checkpoint(dir, bytesOf(out)) })
	runtime.KeepAlive(o)
	if err != nil {
		return s, err
	}
	return TrainState{Seed: uint64(out[0]), Epoch: out[1], DataPosition: out[2]}, nil
}

// Backward runs the backward pass from a loss on the model's last hidden
// states (oslo_model_backward), adding to the model's gradients: an
// encoder (BERT) trained from an embedding loss, or any model's Hidden
// output. ids, mask and tokenTypeIDs are rows of equal length as for
// Forward (mask nil is all 1, tokenTypeIDs nil all 0); gradHidden is
// d loss / d hidden states, row-major [batch, seq, hidden] as Forward
// returns the Hidden output. With an optimizer (nil: none) over this
// model, it steps after every GradAccumSteps micro-batches. The result's
// Loss is 0. Collective over the tensor group: every rank passes the same
// batch.
func (m *Model) Backward(ids, mask, tokenTypeIDs [][]int64, gradHidden []float32, opt *Optimizer) (TrainStepResult, error) {
	var r TrainStepResult
	co, flat, err := m.batchArgs("backward", opt, ids, []string{"mask", "token_type_ids"}, mask, tokenTypeIDs)
	if err != nil {
		return r, err
	}
	fi, fm, ft, seq := flat[0], flat[1], flat[2], len(ids[0])
	err = call(func() {
		r = result(m.m.Backward(co, bytesOf(fi), bytesOf(fm), bytesOf(ft), int64(len(ids)),
			int64(seq), bytesOf(gradHidden)))
	})
	runtime.KeepAlive(m)
	runtime.KeepAlive(opt)
	return r, err
}

// TrainStep runs one micro-batch of causal-LM training: forward, the loss
// as transformers computes it (labels shifted inside, -100 ignored) and
// backward, adding to the model's gradients. ids, labels and mask are rows
// of equal length; labels nil are the ids with -100 where the mask is 0,
// mask nil is all 1. With an optimizer (nil: none) over this model, it
// steps after every GradAccumSteps micro-batches. Collective over the
// tensor group: every rank passes the same batch.
func (m *Model) TrainStep(ids, labels, mask [][]int64, opt *Optimizer) (TrainStepResult, error) {
	var r TrainStepResult
	co, flat, err := m.batchArgs("train_step", opt, ids, []string{"labels", "mask"}, labels, mask)
	if err != nil {
		return r, err
	}
	fi, fl, fm, seq := flat[0], flat[1], flat[2], len(ids[0])
	err = call(func() {
		r = result(m.m.Train_step(co, bytesOf(fi), bytesOf(fl), bytesOf(fm), int64(len(ids)),
			int64(seq)))
	})
	runtime.KeepAlive(m)
	runtime.KeepAlive(opt)
	return r, err
}

// SetActivationCheckpointing makes TrainStep recompute each block in the
// backward instead of keeping its activations (equal gradients, less
// memory). Not collective.
func (m *Model) SetActivationCheckpointing(enabled bool) error {
	if err := m.check(); err != nil {
		return err
	}
	err := call(func() { m.m.Set_activation_checkpointing(b2i(enabled)) })
	runtime.KeepAlive(m)
	return err
}

// batchArgs checks the model and the optimizer (nil: none) of a training
// call named what, and flattens ids and the optional per-token arrays
// (each nil, or one row per row of ids, every row as long as ids'):
// flat[0] is ids, flat[1+i] extra[i] (nil when extra[i] is nil).
func (m *Model) batchArgs(what string, opt *Optimizer, ids [][]int64, names []string, extra ...[][]int64) (capi.Optimizer, [][]int64, error) {
	var co capi.Optimizer
	if err := m.check(); err != nil {
		return co, nil, err
	}
	if opt != nil {
		if err := opt.check(); err != nil {
			return co, nil, err
		}
		co = opt.o
	}
	if len(ids) == 0 {
		return co, nil, errorf(StatusInvalidArgument, "%s: no rows", what)
	}
	seq := len(ids[0])
	flat := make([][]int64, 0, 1+len(extra))
	fi, err := rect(what+": ids", ids, seq)
	if err != nil {
		return co, nil, err
	}
	flat = append(flat, fi)
	for i, e := range extra {
		if e != nil && len(e) != len(ids) {
			return co, nil, errorf(StatusShape, "%s: %d rows of ids, %d of %s", what, len(ids),
				len(e), names[i])
		}
		f, err := rect(what+": "+names[i], e, seq)
		if err != nil {
			return co, nil, err
		}
		flat = append(flat, f)
	}
	return co, flat, nil
}
