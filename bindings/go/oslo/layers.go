package oslo

import (
	"runtime"

	"github.com/oslo/oslo/bindings/go/oslo/internal/capi"
)

// LinearKind says how a ParallelLinear is split over the tensor group.
type LinearKind int

// The kinds of parallel linear layer.
const (
	// Column splits the output features: rank r holds rows
	// [r*out/tp, (r+1)*out/tp) of W.
	Column LinearKind = 0
	// Row splits the input features: rank r holds columns
	// [r*in/tp, (r+1)*in/tp) of W.
	Row LinearKind = 1
)

// LinearOptions configure NewParallelLinear. The zero value of every field
// but the sizes is a valid choice; booleans are false unless set.
type LinearOptions struct {
	Kind            LinearKind // Column (zero value) or Row
	InFeatures      int64      // required, > 0
	OutFeatures     int64      // required, > 0
	Bias            bool       // the layer has a bias
	GatherOutput    bool       // Column only: all-gather the output
	InputIsParallel bool       // Row only: the input is already split along features
	DType           DType      // parameter dtype: F32 (zero value), F16 or BF16
}

// ParallelLinear is a tensor-parallel linear layer y = x W^T + b, W being
// [out, in] as in nn.Linear (oslo_parallel_linear).
type ParallelLinear struct {
	n   *node
	l   capi.ParallelLinear
	ctx *Context
}

// NewParallelLinear creates this rank's shard of a linear layer (zero
// weights; load them with LoadFull or LoadShard).
func NewParallelLinear(ctx *Context, o LinearOptions) (*ParallelLinear, error) {
	if err := ctx.check(); err != nil {
		return nil, err
	}
	var l capi.ParallelLinear
	err := call(func() {
		l = capi.NewParallelLinear(ctx.c, capi.Enum_SS_oslo_linear_kind(o.Kind), o.InFeatures,
			o.OutFeatures, b2i(o.Bias), b2i(o.GatherOutput), b2i(o.InputIsParallel),
			capi.Enum_SS_oslo_dtype(o.DType))
	})
	runtime.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	x := &ParallelLinear{l: l, ctx: ctx}
	x.n = newNode(func() { capi.DeleteParallelLinear(l) }, ctx.n)
	runtime.SetFinalizer(x, (*ParallelLinear).finalize)
	return x, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (l *ParallelLinear) finalize() { l.n.close() }

// Close frees the layer, closing its parameter tensors and any parameter
// set holding it first. Idempotent.
func (l *ParallelLinear) Close() error {
	if l == nil {
		return nil
	}
	l.n.close()
	runtime.SetFinalizer(l, nil)
	return nil
}

func (l *ParallelLinear) check() error {
	if l == nil || !l.n.ok() {
		return errClosed("parallel linear layer")
	}
	return nil
}

// LoadFull loads the full (unsharded) weight [out, in] and bias [out] (nil
// for a layer without bias); each rank keeps its slice.
func (l *ParallelLinear) LoadFull(weight, bias *Tensor) error {
	return l.load(weight, bias, false)
}

// LoadShard loads this rank's slices of the weight and bias as they are.
func (l *ParallelLinear) LoadShard(weight, bias *Tensor) error {
	return l.load(weight, bias, true)
}

func (l *ParallelLinear) load(weight, bias *Tensor, shard bool) error {
	if err := l.check(); err != nil {
		return err
	}
	if err := weight.check(); err != nil {
		return err
	}
	var bh capi.Tensor
	if bias != nil {
		if err := bias.check(); err != nil {
			return err
		}
		bh = bias.t
	}
	err := call(func() {
		if shard {
			l.l.Load_shard(weight.t, bh)
		} else {
			l.l.Load_full(weight.t, bh)
		}
	})
	runtime.KeepAlive(l)
	runtime.KeepAlive(weight)
	runtime.KeepAlive(bias)
	return err
}

func (l *ParallelLinear) param(which int) (*Tensor, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	var t capi.Tensor
	err := call(func() { t = l.l.Param(which) })
	if err != nil {
		return nil, err
	}
	return borrowed(t, l.ctx, l, l.n), nil
}

// Weight is this rank's weight shard (borrowed: valid while the layer is
// open).
func (l *ParallelLinear) Weight() (*Tensor, error) { return l.param(0) }

// Bias is this rank's bias shard (nil for a layer without bias; borrowed).
func (l *ParallelLinear) Bias() (*Tensor, error) { return l.param(1) }

// GradWeight is the gradient of Weight (borrowed).
func (l *ParallelLinear) GradWeight() (*Tensor, error) { return l.param(2) }

// GradBias is the gradient of Bias (nil without bias; borrowed).
func (l *ParallelLinear) GradBias() (*Tensor, error) { return l.param(3) }

// Forward computes y from x (collective over the tensor group when the
// layer communicates).
func (l *ParallelLinear) Forward(x, y *Tensor) error {
	if l == nil || !l.n.ok() {
		return errClosed("parallel linear layer")
	}
	if x == nil || !x.n.ok() || y == nil || !y.n.ok() {
		return errClosed("tensor")
	}
	err := call(func() { l.l.Forward(x.t, y.t) })
	runtime.KeepAlive(l)
	runtime.KeepAlive(x)
	runtime.KeepAlive(y)
	return err
}

// Backward computes the input gradient gradX from x and gradY and adds the
// weight and bias gradients to GradWeight and GradBias.
func (l *ParallelLinear) Backward(x, gradY, gradX *Tensor) error {
	if err := l.check(); err != nil {
		return err
	}
	h, err := tensorHandles(x, gradY, gradX)
	if err != nil {
		return err
	}
	err = call(func() { l.l.Backward(h[0], h[1], h[2]) })
	runtime.KeepAlive(l)
	runtime.KeepAlive(x)
	runtime.KeepAlive(gradY)
	runtime.KeepAlive(gradX)
	return err
}

// ZeroGrad sets the gradients to zero.
func (l *ParallelLinear) ZeroGrad() error {
	if err := l.check(); err != nil {
		return err
	}
	err := call(func() { l.l.Zero_grad() })
	runtime.KeepAlive(l)
	return err
}

// ParallelEmbedding is an embedding table split over the tensor group by
// vocabulary rows (oslo_parallel_embedding).
type ParallelEmbedding struct {
	n   *node
	e   capi.ParallelEmbedding
	ctx *Context
}

// NewParallelEmbedding creates this rank's shard of a vocabSize x
// hiddenSize table of the given dtype.
func NewParallelEmbedding(ctx *Context, vocabSize, hiddenSize int64, dtype DType) (*ParallelEmbedding, error) {
	if err := ctx.check(); err != nil {
		return nil, err
	}
	var e capi.ParallelEmbedding
	err := call(func() {
		e = capi.NewParallelEmbedding(ctx.c, vocabSize, hiddenSize, capi.Enum_SS_oslo_dtype(dtype))
	})
	runtime.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	x := &ParallelEmbedding{e: e, ctx: ctx}
	x.n = newNode(func() { capi.DeleteParallelEmbedding(e) }, ctx.n)
	runtime.SetFinalizer(x, (*ParallelEmbedding).finalize)
	return x, nil
}

func (e *ParallelEmbedding) finalize() { e.n.close() }

// Close frees the table (its parameter tensors and parameter sets holding
// it close first). Idempotent.
func (e *ParallelEmbedding) Close() error {
	if e == nil {
		return nil
	}
	e.n.close()
	runtime.SetFinalizer(e, nil)
	return nil
}

func (e *ParallelEmbedding) check() error {
	if e == nil || !e.n.ok() {
		return errClosed("parallel embedding")
	}
	return nil
}

// VocabRange is this rank's rows: [start, end) of the real vocabulary and
// the number of local rows including padding.
func (e *ParallelEmbedding) VocabRange() (start, end, localRows int64, err error) {
	if err = e.check(); err != nil {
		return
	}
	err = call(func() {
		start = e.e.Vocab_range(0)
		end = e.e.Vocab_range(1)
		localRows = e.e.Vocab_range(2)
	})
	runtime.KeepAlive(e)
	return
}

// LoadFull loads the full table [vocab, hidden]; each rank keeps its rows.
func (e *ParallelEmbedding) LoadFull(weight *Tensor) error { return e.load(weight, false) }

// LoadShard loads this rank's rows as they are.
func (e *ParallelEmbedding) LoadShard(weight *Tensor) error { return e.load(weight, true) }

func (e *ParallelEmbedding) load(w *Tensor, shard bool) error {
	if err := e.check(); err != nil {
		return err
	}
	if err := w.check(); err != nil {
		return err
	}
	err := call(func() {
		if shard {
			e.e.Load_shard(w.t)
		} else {
			e.e.Load_full(w.t)
		}
	})
	runtime.KeepAlive(e)
	runtime.KeepAlive(w)
	return err
}

// Weight is this rank's rows of the table (borrowed).
func (e *ParallelEmbedding) Weight() (*Tensor, error) { return e.param(0) }

// GradWeight is the gradient of Weight (borrowed).
func (e *ParallelEmbedding) GradWeight() (*Tensor, error) { return e.param(1) }

func (e *ParallelEmbedding) param(which int) (*Tensor, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	var t capi.Tensor
	if err := call(func() { t = e.e.Param(which) }); err != nil {
		return nil, err
	}
	return borrowed(t, e.ctx, e, e.n), nil
}

// Forward looks up ids (I32 or I64) into output [ids..., hidden]
// (collective over the tensor group).
func (e *ParallelEmbedding) Forward(ids, output *Tensor) error {
	if err := e.check(); err != nil {
		return err
	}
	h, err := tensorHandles(ids, output)
	if err != nil {
		return err
	}
	err = call(func() { e.e.Forward(h[0], h[1]) })
	runtime.KeepAlive(e)
	runtime.KeepAlive(ids)
	runtime.KeepAlive(output)
	return err
}

// Backward adds the gradient of the rows of ids to GradWeight.
func (e *ParallelEmbedding) Backward(ids, gradOutput *Tensor) error {
	if err := e.check(); err != nil {
		return err
	}
	h, err := tensorHandles(ids, gradOutput)
	if err != nil {
		return err
	}
	err = call(func() { e.e.Backward(h[0], h[1]) })
	runtime.KeepAlive(e)
	runtime.KeepAlive(ids)
	runtime.KeepAlive(gradOutput)
	return err
}

// ZeroGrad sets GradWeight to zero.
func (e *ParallelEmbedding) ZeroGrad() error {
	if err := e.check(); err != nil {
		return err
	}
	err := call(func() { e.e.Zero_grad() })
	runtime.KeepAlive(e)
	return err
}

// ParamSet is a set of named parameters for gradient clipping and
// checkpoints (oslo_param_set). It borrows what is added to it: it keeps
// those alive, and closing one of them closes the set first.
type ParamSet struct {
	n    *node
	s    capi.ParamSet
	ctx  *Context
	keep []interface{}
}

// NewParamSet creates an empty parameter set.
func NewParamSet(ctx *Context) (*ParamSet, error) {
	if err := ctx.check(); err != nil {
		return nil, err
	}
	var s capi.ParamSet
	err := call(func() { s = capi.NewParamSet(ctx.c) })
	runtime.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	x := &ParamSet{s: s, ctx: ctx}
	x.n = newNode(func() { capi.DeleteParamSet(s) }, ctx.n)
	runtime.SetFinalizer(x, (*ParamSet).finalize)
	return x, nil
}

func (p *ParamSet) finalize() { p.n.close() }

// Close frees the set (not what it holds). Idempotent.
func (p *ParamSet) Close() error {
	if p == nil {
		return nil
	}
	p.n.close()
	runtime.SetFinalizer(p, nil)
	return nil
}

func (p *ParamSet) check() error {
	if p == nil || !p.n.ok() {
		return errClosed("parameter set")
	}
	return nil
}

// Add adds tensor under a unique name, with its gradient grad (may be nil)
// and splitDim, the dimension along which the tensor-parallel ranks hold
// consecutive slices of the global tensor (-1: replicated).
func (p *ParamSet) Add(name string, tensor, grad *Tensor, splitDim int) error {
	if err := p.check(); err != nil {
		return err
	}
	if err := tensor.check(); err != nil {
		return err
	}
	var gh capi.Tensor
	if grad != nil {
		if err := grad.check(); err != nil {
			return err
		}
		gh = grad.t
	}
	err := call(func() { p.s.Add(name, tensor.t, gh, splitDim) })
	if err == nil {
		p.depend(tensor, tensor.n)
		if grad != nil {
			p.depend(grad, grad.n)
		}
	}
	runtime.KeepAlive(p)
	return err
}

func (p *ParamSet) depend(v interface{}, n *node) {
	p.keep = append(p.keep, v)
	p.n.dependOn(n)
}

// AddLinear adds a layer's parameters as "<prefix>.weight" and
// "<prefix>.bias" with their gradients.
func (p *ParamSet) AddLinear(prefix string, l *ParallelLinear) error {
	if err := p.check(); err != nil {
		return err
	}
	if err := l.check(); err != nil {
		return err
	}
	err := call(func() { p.s.Add_linear(prefix, l.l) })
	if err == nil {
		p.depend(l, l.n)
	}
	runtime.KeepAlive(p)
	return err
}

// AddEmbedding adds a table as "<prefix>.weight".
func (p *ParamSet) AddEmbedding(prefix string, e *ParallelEmbedding) error {
	if err := p.check(); err != nil {
		return err
	}
	if err := e.check(); err != nil {
		return err
	}
	err := call(func() { p.s.Add_embedding(prefix, e.e) })
	if err == nil {
		p.depend(e, e.n)
	}
	runtime.KeepAlive(p)
	return err
}

// Len is the number of parameters in the set.
func (p *ParamSet) Len() (int, error) {
	if err := p.check(); err != nil {
		return 0, err
	}
	var n int64
	err := call(func() { n = p.s.Count() })
	runtime.KeepAlive(p)
	return int(n), err
}

// ClipGradNorm returns the global gradient norm over the tensor group (as
// torch's clip_grad_norm_ on the unsharded model; normType p >= 1 or
// math.Inf(1)) and, when maxNorm > 0 and the norm exceeds it, scales every
// gradient by maxNorm / (norm + 1e-6). Collective.
func (p *ParamSet) ClipGradNorm(maxNorm, normType float64) (float64, error) {
	if err := p.check(); err != nil {
		return 0, err
	}
	var n float64
	err := call(func() { n = p.s.Clip_grad_norm(maxNorm, normType) })
	runtime.KeepAlive(p)
	return n, err
}

// SaveCheckpoint writes the set's parameters as a parallel checkpoint in
// dir. Collective.
func (p *ParamSet) SaveCheckpoint(dir string) error {
	if err := p.check(); err != nil {
		return err
	}
	err := call(func() { p.s.Save_checkpoint(dir) })
	runtime.KeepAlive(p)
	return err
}

// LoadCheckpoint reads the set's parameters from a checkpoint in dir (any
// tensor-parallel size). Collective.
func (p *ParamSet) LoadCheckpoint(dir string) error {
	if err := p.check(); err != nil {
		return err
	}
	err := call(func() { p.s.Load_checkpoint(dir) })
	runtime.KeepAlive(p)
	return err
}
