package oslo

import (
	"runtime"

	"github.com/oslo/oslo/bindings/go/oslo/internal/capi"
)

// SpecialToken names a special token of a tokenizer.
type SpecialToken int

// The special tokens (oslo_special_token).
const (
	TokenBOS  SpecialToken = 0
	TokenEOS  SpecialToken = 1
	TokenPAD  SpecialToken = 2
	TokenUNK  SpecialToken = 3
	TokenCLS  SpecialToken = 4
	TokenSEP  SpecialToken = 5
	TokenMASK SpecialToken = 6
)

// Tokenizer is a Hugging Face tokenizer (tokenizer.json, or GPT-2's
// vocab.json and merges.txt, or BERT's vocab.txt) of a model folder
// (oslo_tokenizer). It needs no context and may be used by several
// goroutines at once.
type Tokenizer struct {
	n *node
	t capi.Tokenizer
}

// LoadTokenizer loads the tokenizer of the model folder path.
func LoadTokenizer(path string) (*Tokenizer, error) {
	var t capi.Tokenizer
	if err := call(func() { t = capi.NewTokenizer(path) }); err != nil {
		return nil, err
	}
	x := &Tokenizer{t: t}
	x.n = newNode(func() { capi.DeleteTokenizer(t) })
	runtime.SetFinalizer(x, (*Tokenizer).finalize)
	return x, nil
}

func (t *Tokenizer) finalize() { t.n.close() }

// Close frees the tokenizer. Idempotent.
func (t *Tokenizer) Close() error {
	if t == nil {
		return nil
	}
	t.n.close()
	runtime.SetFinalizer(t, nil)
	return nil
}

func (t *Tokenizer) check() error {
	if t == nil || !t.n.ok() {
		return errClosed("tokenizer")
	}
	return nil
}

// Encode returns the ids of text (UTF-8), with the model's special tokens
// ([CLS] ... [SEP] for BERT) when addSpecialTokens is set.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) ([]int64, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	b := []byte(text)
	var ids []int64
	err := call(func() {
		n := t.t.Encode(b, b2i(addSpecialTokens), nil)
		ids = make([]int64, n)
		if n > 0 {
			t.t.Encode(b, b2i(addSpecialTokens), bytesOf(ids))
		}
	})
	runtime.KeepAlive(t)
	return ids, err
}

// Decode returns the text of ids, without special tokens when
// skipSpecialTokens is set.
func (t *Tokenizer) Decode(ids []int64, skipSpecialTokens bool) (string, error) {
	if err := t.check(); err != nil {
		return "", err
	}
	var s string
	err := call(func() {
		n := t.t.Decode(bytesOf(ids), b2i(skipSpecialTokens), nil)
		buf := make([]byte, n+1)
		t.t.Decode(bytesOf(ids), b2i(skipSpecialTokens), buf)
		s = string(buf[:n])
	})
	runtime.KeepAlive(t)
	return s, err
}

// VocabSize is the number of tokens in the vocabulary.
func (t *Tokenizer) VocabSize() (int, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	var n int64
	err := call(func() { n = t.t.Vocab_size() })
	runtime.KeepAlive(t)
	return int(n), err
}

// TokenToID is the id of the vocabulary entry token, or -1 if it has none.
func (t *Tokenizer) TokenToID(token string) (int64, error) {
	if err := t.check(); err != nil {
		return -1, err
	}
	var id int64
	err := call(func() { id = t.t.Token_to_id([]byte(token)) })
	runtime.KeepAlive(t)
	return id, err
}

// IDToToken is the vocabulary's spelling of token id.
func (t *Tokenizer) IDToToken(id int64) (string, error) {
	if err := t.check(); err != nil {
		return "", err
	}
	var s string
	err := call(func() {
		n := t.t.Id_to_token(id, nil)
		buf := make([]byte, n+1)
		t.t.Id_to_token(id, buf)
		s = string(buf[:n])
	})
	runtime.KeepAlive(t)
	return s, err
}

// SpecialID is the id of a special token, or -1 if the tokenizer defines
// none.
func (t *Tokenizer) SpecialID(which SpecialToken) (int64, error) {
	if err := t.check(); err != nil {
		return -1, err
	}
	var id int64
	err := call(func() { id = t.t.Special_id(capi.Enum_SS_oslo_special_token(which)) })
	runtime.KeepAlive(t)
	return id, err
}
