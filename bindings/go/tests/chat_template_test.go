package tests

// Chat templates (Tokenizer.HasChatTemplate, ChatTemplate,
// ApplyChatTemplate, oslo.ApplyChatTemplate): the chat_template_* cases of
// tests/bindings/cases.txt against transformers' renders
// (tests/bindings/chat_template_reference.txt, its format in
// make_chat_template_reference.py: OSLO_CHATREF), the folders and template
// files of tests/template (OSLO_TEMPLATES).

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oslo/oslo/bindings/go/oslo"
)

var chatUnescape = strings.NewReplacer(`\\`, `\`, `\n`, "\n", `\t`, "\t", `\r`, "\r", `\s`, " ")

type chatRecord map[string]string

// chatRecords returns the records of case which (folder, options, errors).
func chatRecords(t *testing.T, which string) []chatRecord {
	t.Helper()
	b, err := os.ReadFile(env(t, "OSLO_CHATREF"))
	if err != nil {
		t.Fatal(err)
	}
	var all []chatRecord
	cur := chatRecord{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if line == "end" {
			if cur["case"] == which {
				all = append(all, cur)
			}
			cur = chatRecord{}
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		cur[k] = v
	}
	if len(all) == 0 {
		t.Fatalf("no records of case %s", which)
	}
	return all
}

// chatTokenizers loads the folders' tokenizers once each.
type chatTokenizers struct {
	t      *testing.T
	dir    string
	loaded map[string]*oslo.Tokenizer
}

func newChatTokenizers(t *testing.T) *chatTokenizers {
	c := &chatTokenizers{t: t, dir: env(t, "OSLO_TEMPLATES"), loaded: map[string]*oslo.Tokenizer{}}
	t.Cleanup(func() {
		for _, tok := range c.loaded {
			tok.Close()
		}
	})
	return c
}

func (c *chatTokenizers) get(folder string) *oslo.Tokenizer {
	if folder == "-" {
		return nil
	}
	if tok, ok := c.loaded[folder]; ok {
		return tok
	}
	tok, err := oslo.LoadTokenizer(filepath.Join(c.dir, "folders", folder))
	if err != nil {
		c.t.Fatal(err)
	}
	c.loaded[folder] = tok
	return tok
}

func (c *chatTokenizers) template(spec string) string {
	if spec == "-" {
		return ""
	}
	kind, v, _ := strings.Cut(spec, " ")
	switch kind {
	case "name":
		return v
	case "text":
		return chatUnescape.Replace(v)
	case "file":
		b, err := os.ReadFile(filepath.Join(c.dir, "fixtures", v))
		if err != nil {
			c.t.Fatal(err)
		}
		return string(b)
	}
	c.t.Fatalf("template %q", spec)
	return ""
}

// run makes the record's call. The messages travel as a slice of their
// JSON texts (a []json.RawMessage that encoding/json writes again), or as
// their text when they are no JSON array; the variables as Tools and
// Variables of json.RawMessage values (Go maps would write the tools' keys
// sorted, and templates print them with tojson).
func (c *chatTokenizers) run(r chatRecord) (string, error) {
	tok := c.get(r["folder"])
	switch r["kind"] {
	case "has":
		has, err := tok.HasChatTemplate()
		if has {
			return "1", err
		}
		return "0", err
	case "source":
		name := r["name"]
		if name == "-" {
			name = ""
		}
		return tok.ChatTemplate(name)
	}
	var messages any = r["messages"]
	var decoded []json.RawMessage
	if json.Unmarshal([]byte(r["messages"]), &decoded) == nil && len(decoded) > 0 {
		messages = decoded
	}
	opts := &oslo.ChatTemplateOptions{
		AddGenerationPrompt:  r["add_generation_prompt"] == "1",
		ContinueFinalMessage: r["continue_final_message"] == "1",
	}
	var vars map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r["variables"]), &vars); err != nil {
		c.t.Fatalf("%s: variables: %v", r["label"], err)
	}
	for k, v := range vars {
		if k == "tools" {
			opts.Tools = v
			continue
		}
		if opts.Variables == nil {
			opts.Variables = map[string]any{}
		}
		opts.Variables[k] = v
	}
	tmpl := c.template(r["template"])
	if tok == nil {
		return oslo.ApplyChatTemplate(tmpl, messages, opts)
	}
	opts.ChatTemplate = tmpl
	return tok.ApplyChatTemplate(messages, opts)
}

func (c *chatTokenizers) check(r chatRecord) {
	label := r["label"]
	got, err := c.run(r)
	if e, ok := r["error"]; ok {
		status, sub, _ := strings.Cut(e, " ")
		sub = chatUnescape.Replace(sub)
		var oe *oslo.Error
		if !errors.As(err, &oe) || oe.Status.String() != "OSLO_ERR_"+status ||
			!strings.Contains(oe.Message, sub) {
			c.t.Errorf("%s: want OSLO_ERR_%s with %q, got %v (text %q)", label, status, sub, err, got)
		}
		return
	}
	if err != nil {
		c.t.Errorf("%s: %v", label, err)
		return
	}
	want := r["expected"]
	if r["kind"] != "has" {
		want = chatUnescape.Replace(want)
	}
	if got != want {
		c.t.Errorf("%s\n  want %q\n  got  %q", label, want, got)
	}
}

func chatCase(t *testing.T, which string) *chatTokenizers {
	c := newChatTokenizers(t)
	recs := chatRecords(t, which)
	for _, r := range recs {
		c.check(r)
	}
	t.Logf("%d records of case %s checked", len(recs), which)
	return c
}

// TestChatTemplateFolder: a folder's own template: has, its source by
// name, renders, tools choosing its tool_use template.
func TestChatTemplateFolder(t *testing.T) {
	c := chatCase(t, "folder")
	tok := c.get("cfg_list")
	a, err1 := tok.ChatTemplate("")
	b, err2 := tok.ChatTemplate("default")
	if err1 != nil || err2 != nil || a != b {
		t.Errorf("the default template %q (%v) is not the one named default %q (%v)", a, err1, b, err2)
	}
}

// TestChatTemplateOptions: a template by name, one's own (with a tokenizer
// and without), variables, ContinueFinalMessage; the kinds of messages
// ApplyChatTemplate takes give the same text.
func TestChatTemplateOptions(t *testing.T) {
	c := chatCase(t, "options")
	tok := c.get("cfg_list")
	opts := &oslo.ChatTemplateOptions{AddGenerationPrompt: true}
	const want = "[user] x\n[assistant] "
	for _, m := range []any{
		[]oslo.ChatMessage{{Role: "user", Content: "x"}},
		[]map[string]any{{"role": "user", "content": "x", "name": nil}},
		`[{"role": "user", "content": "x"}]`,
		[]byte(`[{"role": "user", "content": "x"}]`),
		json.RawMessage(`[{"role": "user", "content": "x"}]`),
	} {
		if got, err := tok.ApplyChatTemplate(m, opts); err != nil || got != want {
			t.Errorf("messages %T: %q, %v", m, got, err)
		}
	}
	if got, err := tok.ApplyChatTemplate(`[{"role": "user", "content": "x"}]`, nil); err != nil ||
		got != "[user] x\n" {
		t.Errorf("nil options: %q, %v", got, err)
	}
	got, err := oslo.ApplyChatTemplate("{{ messages | length }}{{ documents[0].title }}",
		[]oslo.ChatMessage{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}},
		&oslo.ChatTemplateOptions{Documents: []map[string]string{{"title": "T"}}})
	if err != nil || got != "2T" {
		t.Errorf("documents without a tokenizer: %q, %v", got, err)
	}
}

// TestChatTemplateErrors: the named *oslo.Error with oslo's message; then
// what Go refuses itself.
func TestChatTemplateErrors(t *testing.T) {
	c := chatCase(t, "errors")
	tok := c.get("cfg_list")
	m := []oslo.ChatMessage{{Role: "user", Content: "x"}}
	for _, tc := range []struct {
		what string
		call func() (string, error)
		sub  string
	}{
		{"nil messages", func() (string, error) { return tok.ApplyChatTemplate(nil, nil) }, "the messages are nil"},
		{"messages encoding/json cannot write", func() (string, error) {
			return tok.ApplyChatTemplate([]map[string]any{{"content": func() {}}}, nil)
		}, "cannot be written as JSON"},
		{"a NUL byte in the template", func() (string, error) {
			return tok.ApplyChatTemplate(m, &oslo.ChatTemplateOptions{ChatTemplate: "{{ 1 }}\x00"})
		}, "holds a NUL byte (at byte 7 of 8)"},
		{"tools twice", func() (string, error) {
			return tok.ApplyChatTemplate(m, &oslo.ChatTemplateOptions{Tools: []int{1},
				Variables: map[string]any{"tools": []int{2}}})
		}, "tools is given twice"},
		{"no template", func() (string, error) { return oslo.ApplyChatTemplate("", m, nil) }, "the template is empty"},
		{"the template twice", func() (string, error) {
			return oslo.ApplyChatTemplate("x", m, &oslo.ChatTemplateOptions{ChatTemplate: "y"})
		}, "given twice"},
		{"no template of its own", func() (string, error) { return c.get("no_template").ChatTemplate("") },
			"has no chat template"},
	} {
		_, err := tc.call()
		if !errors.Is(err, oslo.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.sub) {
			t.Errorf("%s: want INVALID_ARGUMENT with %q, got %v", tc.what, tc.sub, err)
		}
	}
	no := c.get("no_template")
	no.Close()
	if _, err := no.HasChatTemplate(); !errors.Is(err, oslo.ErrInvalidArgument) {
		t.Errorf("a closed tokenizer: %v", err)
	}
}
