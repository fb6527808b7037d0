package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/oslo/oslo/bindings/go/oslo"
)

// refCase is a case of tests/tokenizer/batch_reference.txt or
// pad_reference.txt (written by the make_*_reference.py next to them from
// Hugging Face's tokenizer(texts, truncation=..., max_length=...) and
// tokenizer.pad): its head fields and, per row, the text or row line's rest
// and the padded ids and mask.
type refCase struct {
	head  []string
	items []string
	ids   [][]int64
	mask  [][]int64
}

func readRefCases(t *testing.T, path string, headFields int, item string) []refCase {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	var cases []refCase
	for i := 0; i < len(lines); {
		h := strings.Split(lines[i], " ")
		if h[0] != "case" || len(h) != headFields+1 {
			t.Fatalf("bad line %q", lines[i])
		}
		n, err := strconv.Atoi(h[headFields])
		must(t, err)
		c := refCase{head: h[1:]}
		for k := 0; k < n; k++ {
			it := lines[i+1+3*k]
			if it != item && !strings.HasPrefix(it, item+" ") {
				t.Fatalf("bad line %q", it)
			}
			c.items = append(c.items, strings.TrimPrefix(strings.TrimPrefix(it, item), " "))
			ids, err := parseLongs(lines[i+2+3*k])
			must(t, err)
			mask, err := parseLongs(lines[i+3+3*k])
			must(t, err)
			c.ids, c.mask = append(c.ids, ids), append(c.mask, mask)
		}
		cases = append(cases, c)
		i += 1 + 3*n
	}
	return cases
}

func side(s string) oslo.Side {
	if s == "left" {
		return oslo.SideLeft
	}
	return oslo.SideRight
}

// users_tokenizer_options: EncodeBatch with MaxLength, Truncation,
// TruncationSide and PadToMaxLength equals transformers' tokenizer(texts,
// truncation=True, max_length=..., padding=...); PadBatch of rows of ids
// equals tokenizer.pad (after the tokenizer's truncation); bad options are
// refused, named.
func TestUsersTokenizerOptions(t *testing.T) {
	cases := readRefCases(t, env(t, "OSLO_BATCHREF"), 8, "text")
	if len(cases) < 10 {
		t.Fatalf("%d batch cases", len(cases))
	}
	for _, c := range cases {
		// fixture side pad special max_length trunc_side padding n
		tok, err := oslo.LoadTokenizer(filepath.Join(env(t, "OSLO_FIXTURES"), c.head[0]))
		must(t, err)
		o := oslo.EncodeOptions{Padding: oslo.PadRight, NoSpecialTokens: c.head[3] != "1",
			TruncationSide: side(c.head[5]), PadToMaxLength: c.head[6] == "max_length"}
		if c.head[1] == "left" {
			o.Padding = oslo.PadLeft
		}
		if c.head[2] != "default" {
			p, err := strconv.ParseInt(c.head[2], 10, 64)
			must(t, err)
			o.PadID = &p
		}
		o.MaxLength, err = strconv.Atoi(c.head[4])
		must(t, err)
		o.Truncation = o.MaxLength > 0
		b, err := tok.EncodeBatch(c.items, o)
		must(t, err)
		if !reflect.DeepEqual(b.InputIDs, c.ids) || !reflect.DeepEqual(b.AttentionMask, c.mask) {
			t.Fatalf("%v: %v / %v, transformers %v / %v", c.head, b.InputIDs, b.AttentionMask, c.ids, c.mask)
		}
		tok.Close()
	}
	cases = readRefCases(t, env(t, "OSLO_PADREF"), 7, "row")
	if len(cases) < 9 {
		t.Fatalf("%d pad cases", len(cases))
	}
	for _, c := range cases {
		// side pad max_length truncation trunc_side padding n
		pad, err := strconv.ParseInt(c.head[1], 10, 64)
		must(t, err)
		ml, err := strconv.Atoi(c.head[2])
		must(t, err)
		rows := make([][]int64, len(c.items))
		for i, it := range c.items {
			rows[i], err = parseLongs("row " + it)
			must(t, err)
		}
		b, err := oslo.PadBatch(rows, oslo.PadOptions{PadID: pad, PadLeft: c.head[0] == "left",
			MaxLength: ml, Truncation: c.head[3] == "1", TruncationSide: side(c.head[4]),
			PadToMaxLength: c.head[5] == "max_length"})
		must(t, err)
		if fmt.Sprint(b.InputIDs) != fmt.Sprint(c.ids) || fmt.Sprint(b.AttentionMask) != fmt.Sprint(c.mask) {
			t.Fatalf("pad %v: %v / %v, transformers %v / %v", c.head, b.InputIDs, b.AttentionMask, c.ids, c.mask)
		}
	}
	// Bad input: named errors.
	_, err := oslo.PadBatch(nil, oslo.PadOptions{})
	refused(t, "no rows", err, "no rows")
	_, err = oslo.PadBatch([][]int64{{1}}, oslo.PadOptions{PadID: -1})
	refused(t, "negative pad", err, "pad_id -1")
	_, err = oslo.PadBatch([][]int64{{1, 2, 3}, {4}}, oslo.PadOptions{MaxLength: 2})
	refused(t, "too long", err, "row 0 has 3 ids, more than max_length 2")
	_, err = oslo.PadBatch([][]int64{{1}}, oslo.PadOptions{TruncationSide: 5})
	refused(t, "bad side", err, "truncation_side is 5")
	_, err = oslo.PadBatch([][]int64{{1}}, oslo.PadOptions{PadToMaxLength: true})
	refused(t, "no max length", err, "max_length is 0 but pad_to_max_length")
	tok, err := oslo.LoadTokenizer(filepath.Join(env(t, "OSLO_FIXTURES"), "bert-tiny"))
	must(t, err)
	defer tok.Close()
	texts := []string{"a b c d e", "f"}
	_, err = tok.EncodeBatch(texts, oslo.EncodeOptions{Padding: oslo.PadRight, MaxLength: 3})
	refused(t, "too long text", err, "text 0 has")
	_, err = tok.EncodeBatch(texts, oslo.EncodeOptions{Padding: oslo.PadRight, MaxLength: 1, Truncation: true})
	refused(t, "shorter than special", err, "shorter than its 2 special tokens")
	_, err = tok.EncodeBatch(texts, oslo.EncodeOptions{Padding: oslo.PadRight, Truncation: true})
	refused(t, "truncation without max length", err, "max_length is 0 but truncation")
	_, err = tok.EncodeBatch(texts, oslo.EncodeOptions{MaxLength: 4, PadToMaxLength: true})
	refused(t, "PadNone to max length", err, "PadToMaxLength needs")
	_, err = tok.EncodeBatch(texts, oslo.EncodeOptions{MaxLength: -1})
	refused(t, "negative max length", err, "MaxLength -1")
	_, err = tok.EncodeBatch(texts, oslo.EncodeOptions{TruncationSide: 3})
	refused(t, "bad truncation side", err, "TruncationSide 3")
}
