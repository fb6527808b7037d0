package oslo

import (
	"runtime"
	"strconv"
	"unsafe"

	"github.com/oslo/oslo/bindings/go/oslo/internal/capi"
)

// DType is a tensor element type (oslo_dtype).
type DType int

// The element types. The CPU backend computes in f32; F16 and BF16 are
// storage types.
const (
	F32  DType = 0
	F16  DType = 1
	BF16 DType = 2
	I32  DType = 3
	I64  DType = 4
)

// Size is the size of one element in bytes (0 for an unknown DType).
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case F16, BF16:
		return 2
	case I64:
		return 8
	}
	return 0
}

// String returns the name of the dtype: "f32", "f16", "bf16", "i32", "i64".
func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	case I32:
		return "i32"
	case I64:
		return "i64"
	}
	return "dtype(" + strconv.Itoa(int(d)) + ")"
}

// Element is a Go type with an oslo dtype: float32 (F32), int32 (I32) and
// int64 (I64).
type Element interface {
	float32 | int32 | int64
}

// DTypeOf is the dtype of the Element type T.
func DTypeOf[T Element]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return F32
	case int32:
		return I32
	default:
		return I64
	}
}

// Tensor is an n-dimensional array in memory oslo owns (oslo_tensor), on
// the context's device. Go memory is never wrapped: TensorOf, Write and
// Read copy between Go slices and the tensor, and View gives a Go slice
// over the tensor's own (C) memory.
//
// The parameter tensors of a layer (ParallelLinear.Weight, ...) are
// borrowed: they stay the layer's, close when it closes, and their Close
// only forgets them.
type Tensor struct {
	n     *node
	t     capi.Tensor
	ctx   *Context    // keeps the context alive
	owner interface{} // a borrowed tensor's layer, kept alive
}

// NewTensor creates a zero-filled tensor of the given dtype and shape
// (at most 8 dimensions; none for a scalar).
func NewTensor(ctx *Context, dtype DType, shape ...int64) (*Tensor, error) {
	if err := ctx.check(); err != nil {
		return nil, err
	}
	if shape == nil {
		shape = []int64{}
	}
	var t capi.Tensor
	err := call(func() { t = capi.NewTensor(ctx.c, capi.Enum_SS_oslo_dtype(dtype), shape) })
	runtime.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	return ctx.ownTensor(t), nil
}

func (ctx *Context) ownTensor(t capi.Tensor) *Tensor {
	x := &Tensor{t: t, ctx: ctx}
	x.n = newNode(func() { capi.DeleteTensor(t) }, ctx.n)
	runtime.SetFinalizer(x, (*Tensor).finalize)
	return x
}

// borrowed makes the Tensor of a layer's parameter: it depends on the layer
// (owner, whose node is on) and never destroys the C tensor.
func borrowed(t capi.Tensor, ctx *Context, owner interface{}, on *node) *Tensor {
	if t == nil || t.Swigcptr() == 0 {
		return nil
	}
	return &Tensor{t: t, ctx: ctx, owner: owner, n: newNode(nil, on)}
}

// TensorOf creates a tensor of T's dtype holding a copy of data, with the
// given shape (none: a vector of len(data)). The tensor never refers to
// data afterwards.
func TensorOf[T Element](ctx *Context, data []T, shape ...int64) (*Tensor, error) {
	if len(shape) == 0 {
		shape = []int64{int64(len(data))}
	}
	t, err := NewTensor(ctx, DTypeOf[T](), shape...)
	if err != nil {
		return nil, err
	}
	if err := Write(t, data); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *Tensor) finalize() { t.n.close() }

// Close frees the tensor (a borrowed one is only forgotten). Closing twice,
// or a nil tensor, does nothing.
func (t *Tensor) Close() error {
	if t == nil {
		return nil
	}
	t.n.close()
	runtime.SetFinalizer(t, nil)
	return nil
}

func (t *Tensor) check() error {
	if t == nil || !t.n.ok() {
		return errClosed("tensor")
	}
	return nil
}

// Context is the context the tensor was made from (nil for a nil tensor).
func (t *Tensor) Context() *Context {
	if t == nil {
		return nil
	}
	return t.ctx
}

// Shape is the tensor's shape.
func (t *Tensor) Shape() ([]int64, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	var s []int64
	err := call(func() {
		n := t.t.Ndim()
		s = make([]int64, n)
		for i := range s {
			s[i] = t.t.Dim(i)
		}
	})
	runtime.KeepAlive(t)
	return s, err
}

// DType is the tensor's element type.
func (t *Tensor) DType() (DType, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	var d DType
	err := call(func() { d = DType(t.t.Dtype()) })
	runtime.KeepAlive(t)
	return d, err
}

// Numel is the number of elements.
func (t *Tensor) Numel() (int64, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	var n int64
	err := call(func() { n = t.t.Numel() })
	runtime.KeepAlive(t)
	return n, err
}

// CopyFromHost copies src into the tensor; len(src) must be its size in
// bytes (else StatusShape).
func (t *Tensor) CopyFromHost(src []byte) error {
	if err := t.check(); err != nil {
		return err
	}
	err := call(func() { t.t.Copy_from_host(src) })
	runtime.KeepAlive(t)
	return err
}

// CopyToHost copies the tensor into dst; len(dst) must be its size in
// bytes (else StatusShape).
func (t *Tensor) CopyToHost(dst []byte) error {
	if err := t.check(); err != nil {
		return err
	}
	err := call(func() { t.t.Copy_to_host(dst) })
	runtime.KeepAlive(t)
	return err
}

// bytesOf is the memory of a slice of elements, for one C call (cgo may
// pass it: it holds no Go pointers, and C does not keep it).
func bytesOf[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

func (t *Tensor) checkDType(want DType) error {
	d, err := t.DType()
	if err != nil {
		return err
	}
	if d != want {
		return errorf(StatusDType, "the tensor is %v, the Go slice %v", d, want)
	}
	return nil
}

// Write copies src into t: its dtype must be T's (else StatusDType) and
// len(src) its number of elements (else StatusShape).
func Write[T Element](t *Tensor, src []T) error {
	if err := t.checkDType(DTypeOf[T]()); err != nil {
		return err
	}
	return t.CopyFromHost(bytesOf(src))
}

// Read copies t into dst: its dtype must be T's (else StatusDType) and
// len(dst) its number of elements (else StatusShape).
func Read[T Element](t *Tensor, dst []T) error {
	if err := t.checkDType(DTypeOf[T]()); err != nil {
		return err
	}
	return t.CopyToHost(bytesOf(dst))
}

// Values returns a new Go slice with a copy of t's elements (T must be its
// dtype).
func Values[T Element](t *Tensor) ([]T, error) {
	n, err := t.Numel()
	if err != nil {
		return nil, err
	}
	v := make([]T, n)
	if err := Read(t, v); err != nil {
		return nil, err
	}
	return v, nil
}

// View returns a Go slice over the tensor's own memory, without a copy:
// writes through it change the tensor and the tensor's changes show in it.
// Go may hold pointers to C memory, so this follows cgo's rules; the slice
// is valid only while the tensor is open (using it after Close, or after
// its context or layer closed, is a use after free). T must be the
// tensor's dtype (else StatusDType); the memory must be host memory (the
// cpu backend; any other is StatusNotSupported).
func View[T Element](t *Tensor) ([]T, error) {
	if err := t.checkDType(DTypeOf[T]()); err != nil {
		return nil, err
	}
	b, err := t.ctx.Backend()
	if err != nil {
		return nil, err
	}
	if b != "cpu" {
		return nil, errorf(StatusNotSupported, "View: the %q backend's memory may not be host memory", b)
	}
	var (
		n    int64
		addr uint64
	)
	err = call(func() {
		n = t.t.Numel()
		addr = t.t.Data_ptr()
	})
	runtime.KeepAlive(t)
	if err != nil {
		return nil, err
	}
	if n == 0 || addr == 0 {
		return []T{}, nil
	}
	// addr is C memory (never Go's): reinterpret the integer as a pointer
	// without a uintptr -> unsafe.Pointer conversion.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*T)(p), n), nil
}
