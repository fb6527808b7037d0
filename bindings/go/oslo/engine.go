package oslo

import (
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/oslo/oslo/bindings/go/oslo/internal/capi"
)

// Engine is a serving engine over a loaded causal Model (oslo_engine):
// requests added at any time run together, one model step at a time
// (continuous batching over a paged KV cache with prefix reuse), and each
// streams back as it is generated (docs/SERVING.md).
//
// Create one on every rank of the model's context. On world rank 0, Add
// requests and read each one's Stream (a channel fed by a goroutine that
// calls oslo_engine_next, which also steps the engine when no goroutine
// runs it); every other rank calls Run, which returns when rank 0 shuts
// the engine down or closes it. Closing the model closes the engine.
type Engine struct {
	n     *node
	s     *engineState
	e     capi.Engine
	model *Model
}

// engineState counts the calls in flight of an engine; the node's destroy
// holds it (not the *Engine, whose finalizer must be able to run).
type engineState struct {
	e        capi.Engine
	mu       sync.Mutex
	busy     int  // calls in flight
	closing  bool // Close ran: destroyed when busy drops to 0
	released bool
}

// EngineOptions are the limits of an Engine. Every zero field means the
// default of oslo_engine_options_init.
type EngineOptions struct {
	NumBlocks     int64 // KV blocks per rank; 0: what KVMemoryBytes holds
	KVMemoryBytes int64 // KV memory per rank when NumBlocks is 0; 0: 1 GiB
	BlockSize     int64 // tokens per KV block; 0: 16
	MaxSeqs       int64 // running requests at most; 0: 64
	MaxStepTokens int64 // tokens per step (decode and prompt chunks); 0: 512
	// NoPrefixCaching turns off sharing the full blocks of equal prompt
	// prefixes.
	NoPrefixCaching bool
	IdleWaitMs      int64 // how long a step with nothing to do waits for work; 0: 20
	// KVInt8 stores the paged KV cache as int8 with one scale per token and
	// KV head: 3-4x the tokens in the same memory.
	KVInt8 bool
	// Tokenizer decodes the output to text and enables text prompts and
	// stop strings; nil: the model folder's when it has one. NoTokenizer:
	// token ids only.
	Tokenizer   *Tokenizer
	NoTokenizer bool
}

// FinishReason is why a request finished (oslo_finish_reason).
type FinishReason int

// The finish reasons; FinishNone while a request runs.
const (
	FinishNone      FinishReason = 0
	FinishLength    FinishReason = 1 // MaxNewTokens generated
	FinishEOS       FinishReason = 2 // an EOS id was generated (the last token)
	FinishStop      FinishReason = 3 // a stop string appeared (the text ends before it)
	FinishCancelled FinishReason = 4 // Cancel, Shutdown or Close
	FinishError     FinishReason = 5 // the step failed (Output.Err)
)

var finishNames = [...]string{"none", "length", "eos", "stop", "cancelled", "error"}

// String returns "length", "eos", "stop", "cancelled", "error" or "none".
func (f FinishReason) String() string {
	if f >= 0 && int(f) < len(finishNames) {
		return finishNames[f]
	}
	return "FinishReason(" + strconv.Itoa(int(f)) + ")"
}

// RequestState is where a request is (oslo_request_state).
type RequestState int

// The request states.
const (
	RequestUnknown  RequestState = 0 // never added, or finished and forgotten
	RequestWaiting  RequestState = 1 // waiting for KV blocks or a place in a step
	RequestRunning  RequestState = 2 // its prompt is computed or it generates
	RequestFinished RequestState = 3 // finished
)

// Output is one piece of a request's output: its new token ids, their text
// (whole UTF-8 characters; "" without a tokenizer) and, on the last piece,
// why it finished. A failed request's last piece has Finish FinishError and
// Err its error.
type Output struct {
	Tokens []int64
	Text   string
	Finish FinishReason
	Err    error
}

// Event is what one Step did for one request.
type Event struct {
	RequestID int64
	Tokens    []int64
	Text      string
	Finish    FinishReason
	Err       error // FinishError: the failure
}

// EngineStats are an engine's numbers at the end of its last step (KV
// numbers are this rank's).
type EngineStats struct {
	Running, Waiting                     int64
	BlocksUsed, BlocksTotal, BlockSize   int64
	CachedTokens, KVBytesUsed            int64
	Steps, PromptTokens, GeneratedTokens int64
	PrefixQueries, PrefixHits            int64
}

// NewEngine creates an engine over model (not collective).
func NewEngine(model *Model, o EngineOptions) (*Engine, error) {
	if err := model.check(); err != nil {
		return nil, err
	}
	tok := o.Tokenizer
	if tok == nil && !o.NoTokenizer {
		if t, err := model.Tokenizer(); err == nil {
			tok = t
		}
	}
	if tok != nil {
		if err := tok.check(); err != nil {
			return nil, err
		}
	}
	var e capi.Engine
	err := call(func() {
		c := capi.NewEngineOptions()
		defer capi.DeleteEngineOptions(c)
		if o.NumBlocks != 0 {
			c.SetNum_blocks(o.NumBlocks)
		}
		if o.KVMemoryBytes != 0 {
			c.SetKv_memory_bytes(o.KVMemoryBytes)
		}
		if o.BlockSize != 0 {
			c.SetBlock_size(o.BlockSize)
		}
		if o.MaxSeqs != 0 {
			c.SetMax_seqs(o.MaxSeqs)
		}
		if o.MaxStepTokens != 0 {
			c.SetMax_step_tokens(o.MaxStepTokens)
		}
		c.SetPrefix_caching(b2i(!o.NoPrefixCaching))
		if o.IdleWaitMs != 0 {
			c.SetIdle_wait_ms(o.IdleWaitMs)
		}
		if o.KVInt8 {
			c.SetKv_dtype(capi.OSLO_DTYPE_I8)
		}
		var t capi.Tokenizer = capi.SwigcptrTokenizer(0)
		if tok != nil {
			t = tok.t
		}
		e = capi.NewEngine(model.m, c, t)
	})
	runtime.KeepAlive(model)
	runtime.KeepAlive(tok)
	if err != nil {
		return nil, err
	}
	st := &engineState{e: e}
	x := &Engine{s: st, e: e, model: model}
	x.n = newNode(st.release, model.n)
	runtime.SetFinalizer(x, (*Engine).finalize)
	return x, nil
}

func (e *Engine) finalize() { e.n.close() }

// release is the node's destroy (Close, or the model's Close): shut down on
// rank 0, destroy once no call is in flight.
func (s *engineState) release() {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	s.busy++
	s.mu.Unlock()
	_ = call(func() { s.e.Shutdown() }) // not rank 0 (its Run ends with rank 0's), or shut down
	s.leave()
}

func (s *engineState) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.released {
		return errClosed("engine")
	}
	s.busy++
	return nil
}

func (s *engineState) leave() {
	s.mu.Lock()
	s.busy--
	last := s.busy == 0 && s.closing && !s.released
	if last {
		s.released = true
	}
	s.mu.Unlock()
	if last {
		capi.DeleteEngine(s.e)
	}
}

// use runs f, calls of the generated package on the engine, counted as in
// flight, and turns their failure into an *Error.
func (e *Engine) use(f func()) error {
	if e == nil {
		return errClosed("engine")
	}
	if err := e.s.enter(); err != nil {
		return err
	}
	defer e.s.leave()
	err := call(f)
	runtime.KeepAlive(e)
	return err
}

// Close shuts the engine down (world rank 0; elsewhere it only closes) and
// destroys it once no call of another goroutine is in flight. Idempotent.
func (e *Engine) Close() error {
	if e == nil {
		return nil
	}
	e.n.close()
	runtime.SetFinalizer(e, nil)
	return nil
}

// Model returns the model the engine serves.
func (e *Engine) Model() *Model { return e.model }

// Request is a request added to an Engine.
type Request struct {
	engine *Engine
	id     int64

	once   sync.Once
	stream chan Output
}

// ID returns the request's id (1, 2, ...).
func (r *Request) ID() int64 { return r.id }

// packStops returns the stop strings back to back and their byte lengths.
func packStops(stop []string) ([]byte, []int64) {
	if len(stop) == 0 {
		return nil, nil
	}
	var b []byte
	lens := make([]int64, len(stop))
	for i, s := range stop {
		b = append(b, s...)
		lens[i] = int64(len(s))
	}
	if len(b) == 0 {
		b = []byte{0} // a buffer for the (empty, refused) strings to point into
	}
	return b, lens
}

func (e *Engine) add(prompt []int64, text *string, o GenerateOptions, stop []string) (*Request, error) {
	maxNew, err := o.maxNewTokens("add")
	if err != nil {
		return nil, err
	}
	if text == nil && len(prompt) == 0 {
		return nil, errorf(StatusInvalidArgument, "add: the prompt is empty; pass at least one token id")
	}
	sb, sl := packStops(stop)
	var id int64
	err = e.use(func() {
		c := capi.NewGenerateOptions()
		defer capi.DeleteGenerateOptions(c)
		o.toC(c, maxNew)
		if text != nil {
			t := []byte(*text)
			if len(t) == 0 {
				t = nil
			}
			id = e.e.Add_text(t, 1, c, bytesOf(o.EOSTokenIDs), sb, bytesOf(sl))
		} else {
			id = e.e.Add(bytesOf(prompt), c, bytesOf(o.EOSTokenIDs), sb, bytesOf(sl))
		}
	})
	runtime.KeepAlive(prompt)
	if err != nil {
		return nil, err
	}
	return &Request{engine: e, id: id}, nil
}

// Add queues a request of token ids continued as o says (Generate's
// options; the tokens are those Generate gives the prompt alone), stopped
// early by any of stop (needs a tokenizer). Safe for concurrent use; world
// rank 0 only.
func (e *Engine) Add(prompt []int64, o GenerateOptions, stop ...string) (*Request, error) {
	return e.add(prompt, nil, o, stop)
}

// AddText queues a text prompt, encoded by the engine's tokenizer with its
// special tokens; otherwise as Add.
func (e *Engine) AddText(prompt string, o GenerateOptions, stop ...string) (*Request, error) {
	return e.add(nil, &prompt, o, stop)
}

// Cancel cancels the request: its stream ends with an Output whose Finish
// is FinishCancelled. It reports whether the request was still live. Safe
// for concurrent use.
func (r *Request) Cancel() (bool, error) {
	var found int
	err := r.engine.use(func() { found = r.engine.e.Cancel(r.id) })
	return found != 0, err
}

// State returns where the request is (RequestUnknown once its last output
// was read: the engine forgets it).
func (r *Request) State() (RequestState, error) {
	var s int
	err := r.engine.use(func() { s = r.engine.e.State(r.id) })
	return RequestState(s), err
}

// What one oslo_engine_next takes at most, and how long it waits before
// the goroutine looks again.
const (
	nextTokens = 1024
	nextText   = 16384
	nextWait   = 200 * time.Millisecond
)

// Stream returns the request's output: a channel of Output pieces, closed
// after the piece that carries the finish reason (FinishError with Err set
// for a failed request, or when the engine is closed under it). A goroutine
// reads them (oslo_engine_next) as they come; read the channel to its end,
// or Cancel and read on (it ends soon). Every call returns the same
// channel.
func (r *Request) Stream() <-chan Output {
	r.once.Do(func() {
		r.stream = make(chan Output, 16)
		go r.pump()
	})
	return r.stream
}

func (r *Request) pump() {
	defer close(r.stream)
	info := make([]int64, 3)
	tokens := make([]int64, nextTokens)
	text := make([]byte, nextText)
	for {
		var got int
		info[0], info[1], info[2] = 0, 0, 0
		err := r.engine.use(func() {
			got = r.engine.e.Next(r.id, int64(nextWait/time.Millisecond), bytesOf(info),
				bytesOf(tokens), text)
		})
		if err != nil {
			r.stream <- Output{Finish: FinishError, Err: err}
			return
		}
		n, nb, f := info[0], info[1], FinishReason(info[2])
		if got == 0 || (n == 0 && nb == 0 && f == FinishNone) {
			continue
		}
		out := Output{Tokens: append([]int64(nil), tokens[:n]...), Text: string(text[:nb]), Finish: f}
		r.stream <- out
		if f != FinishNone {
			return
		}
	}
}

// Result reads the whole output (from the start of Stream): every token,
// the whole text and the finish reason; a failed request's error.
func (r *Request) Result() (Output, error) {
	var all Output
	for o := range r.Stream() {
		all.Tokens = append(all.Tokens, o.Tokens...)
		all.Text += o.Text
		all.Finish = o.Finish
		if o.Err != nil {
			all.Err = o.Err
			return all, o.Err
		}
	}
	if all.Tokens == nil {
		all.Tokens = []int64{}
	}
	return all, nil
}

// Step runs one step by hand (oslo_engine_step) and returns its events.
// An engine stepped by hand is neither Run nor read through Stream. A
// failed step returns its error (every live request finished FinishError).
func (e *Engine) Step() ([]Event, error) {
	var events []Event
	err := e.use(func() {
		n := e.e.Step()
		info := make([]int64, 5)
		for i := int64(0); i < n; i++ {
			e.e.Event(i, bytesOf(info), nil, nil)
			toks := make([]int64, info[1])
			text := make([]byte, info[2])
			e.e.Event(i, bytesOf(info), bytesOf(toks), text)
			ev := Event{RequestID: info[0], Tokens: toks, Text: string(text),
				Finish: FinishReason(info[3])}
			if ev.Finish == FinishError {
				ev.Err = &Error{Status: Status(info[4]), Message: e.e.Event_error(i)}
			}
			events = append(events, ev)
		}
	})
	return events, err
}

// Run steps the engine until it is shut down (oslo_engine_run): what every
// rank other than 0 calls, and rank 0 from a goroutine of its own. A
// failed step returns its error (every live request finished FinishError);
// call it again to go on.
func (e *Engine) Run() error {
	return e.use(func() { e.e.Run() })
}

// Shutdown shuts the engine down on every rank at the next step: live
// requests finish FinishCancelled, Run returns, later Adds are refused.
// World rank 0 only; safe for concurrent use.
func (e *Engine) Shutdown() error {
	return e.use(func() { e.e.Shutdown() })
}

// Stats returns the engine's numbers now. Safe for concurrent use.
func (e *Engine) Stats() (EngineStats, error) {
	var s EngineStats
	err := e.use(func() {
		c := e.e.Stats()
		defer capi.DeleteEngineStats(c)
		s = EngineStats{
			Running: c.GetRunning(), Waiting: c.GetWaiting(), BlocksUsed: c.GetBlocks_used(),
			BlocksTotal: c.GetBlocks_total(), BlockSize: c.GetBlock_size(),
			CachedTokens: c.GetCached_tokens(), KVBytesUsed: c.GetKv_bytes_used(),
			Steps: c.GetSteps(), PromptTokens: c.GetPrompt_tokens(),
			GeneratedTokens: c.GetGenerated_tokens(), PrefixQueries: c.GetPrefix_queries(),
			PrefixHits: c.GetPrefix_hits(),
		}
	})
	return s, err
}
