package oslo

import (
	"runtime"
	"sync"

	"github.com/oslo/oslo/bindings/go/oslo/internal/capi"
)

// Group names a process group of a context (oslo_group). Ranks are ordered
// as in Megatron-LM: tensor parallel fastest, then data, then pipeline.
type Group int

// The groups of a context.
const (
	GroupWorld    Group = 0
	GroupTensor   Group = 1
	GroupPipeline Group = 2
	GroupData     Group = 3
)

// ReduceOp is the reduction of AllReduce and ReduceScatter (oslo_reduce_op).
type ReduceOp int

// The reductions. Results are combined in group-rank order, so every rank
// gets the same bits.
const (
	ReduceSum ReduceOp = 0
	ReduceAvg ReduceOp = 1
	ReduceMax ReduceOp = 2
	ReduceMin ReduceOp = 3
)

// Context is one rank's membership of a job: its tensor, pipeline, data
// and world groups and their communicators (oslo_context). Every tensor,
// layer, parameter set and model is made from a context and keeps it alive;
// Close closes those first.
//
// A context is used by one goroutine at a time, except Abort, which any
// goroutine may call at any time.
type Context struct {
	n *node
	c capi.Context
	// aborts keeps Close from destroying the context while an Abort from
	// another goroutine is inside oslo_context_abort: Abort holds it shared
	// for its C call (a short one: it sets flags and wakes waiters), Close
	// exclusively.
	aborts sync.RWMutex
}

// NewContext joins the job's rendezvous and creates a context. config is
// JSON text, the path of a JSON file, or "" for all defaults, e.g.
//
//	ctx, err := oslo.NewContext(`{"tensor_parallel_size": 2}`)
//
// (keys: include/oslo.h, oslo_context_create). It is collective: every rank
// of the job calls it, and it blocks until all have joined or the config's
// timeout_seconds passed. A bad config is an error with Status StatusConfig
// naming the key.
func NewContext(config string) (*Context, error) {
	var c capi.Context
	if err := call(func() { c = capi.NewContext(config) }); err != nil {
		return nil, err
	}
	ctx := &Context{c: c}
	ctx.n = newNode(func() { capi.DeleteContext(c) })
	runtime.SetFinalizer(ctx, (*Context).finalize)
	return ctx, nil
}

func (ctx *Context) finalize() { ctx.n.close() }

// Close closes every object still open that was made from the context
// (tensors, layers, parameter sets, models), then destroys the context.
// Closing twice, or a nil context, does nothing. Close is not collective,
// but closing a context while another rank still waits in a collective on
// it makes that rank fail.
func (ctx *Context) Close() error {
	if ctx == nil {
		return nil
	}
	ctx.aborts.Lock()
	ctx.n.close()
	ctx.aborts.Unlock()
	runtime.SetFinalizer(ctx, nil)
	return nil
}

// OpenChildren is the number of objects made from the context (directly:
// tensors, layers, parameter sets, models) that are still open.
func (ctx *Context) OpenChildren() int {
	if ctx == nil {
		return 0
	}
	return ctx.n.openChildren()
}

func (ctx *Context) check() error {
	if ctx == nil || !ctx.n.ok() {
		return errClosed("context")
	}
	return nil
}

// Rank is this process's rank in group g.
func (ctx *Context) Rank(g Group) (int, error) {
	if err := ctx.check(); err != nil {
		return -1, err
	}
	r := -1
	err := call(func() { r = ctx.c.Rank(capi.Enum_SS_oslo_group(g)) })
	runtime.KeepAlive(ctx)
	return r, err
}

// Size is the number of ranks in group g.
func (ctx *Context) Size(g Group) (int, error) {
	if err := ctx.check(); err != nil {
		return 0, err
	}
	s := 0
	err := call(func() { s = ctx.c.Size(capi.Enum_SS_oslo_group(g)) })
	runtime.KeepAlive(ctx)
	return s, err
}

// Backend is the name of the compute backend ("cpu", "torch", ...).
func (ctx *Context) Backend() (string, error) {
	if err := ctx.check(); err != nil {
		return "", err
	}
	var b string
	err := call(func() { b = ctx.c.Backend() })
	runtime.KeepAlive(ctx)
	return b, err
}

// Transport is the name of the transport group g communicates over.
func (ctx *Context) Transport(g Group) (string, error) {
	if err := ctx.check(); err != nil {
		return "", err
	}
	var t string
	err := call(func() { t = ctx.c.Transport(capi.Enum_SS_oslo_group(g)) })
	runtime.KeepAlive(ctx)
	return t, err
}

// Abort makes every blocked or later collective of the context fail with
// StatusComm, on this rank. Any goroutine may call it at any time, also
// while another goroutine is blocked in a call on the context.
//
// Close waits for an Abort in progress; an Abort after Close returns
// ErrInvalidArgument (closed), never touches freed memory.
func (ctx *Context) Abort() error {
	if ctx == nil {
		return errClosed("context")
	}
	ctx.aborts.RLock()
	defer ctx.aborts.RUnlock()
	if err := ctx.check(); err != nil {
		return err
	}
	err := call(func() { ctx.c.Abort() })
	runtime.KeepAlive(ctx)
	return err
}

// tensors checks that the tensors are open (a nil *Tensor is allowed only
// where nilOK says so) and returns their low-level handles.
func tensorHandles(ts ...*Tensor) ([]capi.Tensor, error) {
	h := make([]capi.Tensor, len(ts))
	for i, t := range ts {
		if err := t.check(); err != nil {
			return nil, err
		}
		h[i] = t.t
	}
	return h, nil
}

// collective runs a call on the context with tensor arguments.
func (ctx *Context) collective(f func() error) error {
	if err := ctx.check(); err != nil {
		return err
	}
	err := f()
	runtime.KeepAlive(ctx)
	return err
}

// AllReduce reduces t over group g in place: every rank gets the result.
func (ctx *Context) AllReduce(g Group, op ReduceOp, t *Tensor) error {
	return ctx.collective(func() error {
		if err := t.check(); err != nil {
			return err
		}
		err := call(func() {
			ctx.c.All_reduce(capi.Enum_SS_oslo_group(g), capi.Enum_SS_oslo_reduce_op(op), t.t)
		})
		runtime.KeepAlive(t)
		return err
	})
}

// AllGather concatenates every rank's input along the first dimension into
// output (size(g) times as large) on every rank.
func (ctx *Context) AllGather(g Group, input, output *Tensor) error {
	return ctx.collective(func() error {
		h, err := tensorHandles(input, output)
		if err != nil {
			return err
		}
		err = call(func() { ctx.c.All_gather(capi.Enum_SS_oslo_group(g), h[0], h[1]) })
		runtime.KeepAlive(input)
		runtime.KeepAlive(output)
		return err
	})
}

// ReduceScatter reduces input over g and leaves rank r the r-th slice of
// the result (along the first dimension) in output.
func (ctx *Context) ReduceScatter(g Group, op ReduceOp, input, output *Tensor) error {
	return ctx.collective(func() error {
		h, err := tensorHandles(input, output)
		if err != nil {
			return err
		}
		err = call(func() {
			ctx.c.Reduce_scatter(capi.Enum_SS_oslo_group(g), capi.Enum_SS_oslo_reduce_op(op), h[0], h[1])
		})
		runtime.KeepAlive(input)
		runtime.KeepAlive(output)
		return err
	})
}

// Broadcast copies t of group rank root to t of every rank of g.
func (ctx *Context) Broadcast(g Group, root int, t *Tensor) error {
	return ctx.collective(func() error {
		if err := t.check(); err != nil {
			return err
		}
		err := call(func() { ctx.c.Broadcast(capi.Enum_SS_oslo_group(g), root, t.t) })
		runtime.KeepAlive(t)
		return err
	})
}

// Send sends t to group rank peer of g (which calls Recv).
func (ctx *Context) Send(g Group, peer int, t *Tensor) error {
	return ctx.collective(func() error {
		if err := t.check(); err != nil {
			return err
		}
		err := call(func() { ctx.c.Send(capi.Enum_SS_oslo_group(g), peer, t.t) })
		runtime.KeepAlive(t)
		return err
	})
}

// Recv receives into t what group rank peer of g sends.
func (ctx *Context) Recv(g Group, peer int, t *Tensor) error {
	return ctx.collective(func() error {
		if err := t.check(); err != nil {
			return err
		}
		err := call(func() { ctx.c.Recv(capi.Enum_SS_oslo_group(g), peer, t.t) })
		runtime.KeepAlive(t)
		return err
	})
}

// Barrier returns once every rank of g has called it.
func (ctx *Context) Barrier(g Group) error {
	return ctx.collective(func() error {
		return call(func() { ctx.c.Barrier(capi.Enum_SS_oslo_group(g)) })
	})
}

// VocabParallelCrossEntropy is the cross-entropy of logits split over the
// tensor group by vocabulary (logits [n, vocab/tp] f32, labels [n] i64),
// as if computed on the full logits; it returns the mean loss over the
// labels that are not ignoreIndex. losses ([n]) and gradLogits (as logits)
// may be nil.
func (ctx *Context) VocabParallelCrossEntropy(logits, labels *Tensor, vocabSize, ignoreIndex int64, losses, gradLogits *Tensor) (float32, error) {
	var mean float32
	err := ctx.collective(func() error {
		h, err := tensorHandles(logits, labels)
		if err != nil {
			return err
		}
		var lh, gh capi.Tensor
		if losses != nil {
			if err := losses.check(); err != nil {
				return err
			}
			lh = losses.t
		}
		if gradLogits != nil {
			if err := gradLogits.check(); err != nil {
				return err
			}
			gh = gradLogits.t
		}
		err = call(func() {
			mean = ctx.c.Vocab_parallel_cross_entropy(h[0], h[1], vocabSize, ignoreIndex, lh, gh)
		})
		runtime.KeepAlive(logits)
		runtime.KeepAlive(labels)
		runtime.KeepAlive(losses)
		runtime.KeepAlive(gradLogits)
		return err
	})
	return mean, err
}
