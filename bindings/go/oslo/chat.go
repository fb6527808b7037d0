package oslo

import (
	"encoding/json"
	"runtime"

	"github.com/oslo/oslo/bindings/go/oslo/internal/capi"
)

// ChatMessage is one message of a conversation, for the common case; a
// message with more keys (tool_calls, name, a list as content, ...) is a
// map[string]any or a struct of one's own.
type ChatMessage struct {
	Role    string `json:"role"`    // "system", "user", "assistant", "tool", ...
	Content string `json:"content"` // the text
}

// ChatTemplateOptions are the options of Tokenizer.ApplyChatTemplate and
// ApplyChatTemplate (oslo_chat_template_options), as transformers'
// arguments of apply_chat_template. The zero value (or a nil pointer) is
// the default: the tokenizer's template, no generation prompt.
type ChatTemplateOptions struct {
	// AddGenerationPrompt ends the text with the assistant's header, so
	// the model answers next.
	AddGenerationPrompt bool
	// ChatTemplate is "" for the tokenizer's template ("tool_use" when
	// Tools are given and it has one, else its default), the name of one
	// of the tokenizer's templates, or a template's own source text
	// (transformers' chat_template=).
	ChatTemplate string
	// Tools are the JSON schemas of the tools the model may call
	// (transformers' tools=): any value encoding/json makes a list of; nil:
	// none.
	Tools any
	// Documents are transformers' documents= (for retrieval templates);
	// nil: none.
	Documents any
	// Variables are more template variables (date_string,
	// enable_thinking, ..., transformers' keyword arguments), written with
	// encoding/json; they replace the special tokens of the same name. They
	// may not set messages or add_generation_prompt, nor tools or
	// documents when those fields are set.
	Variables map[string]any
	// ContinueFinalMessage ends the text inside the last message, so the
	// model continues it (a prefilled answer), as transformers'
	// continue_final_message=True. Not with AddGenerationPrompt.
	ContinueFinalMessage bool
}

// chatJSON is the JSON text of messages: string, []byte and
// json.RawMessage are JSON text already; anything else is marshalled.
func chatJSON(what string, messages any) ([]byte, error) {
	switch m := messages.(type) {
	case string:
		return []byte(m), nil
	case []byte:
		return m, nil
	case json.RawMessage:
		return m, nil
	case nil:
		return nil, errorf(StatusInvalidArgument,
			"%s: the messages are nil (pass a slice of messages or their JSON text)", what)
	}
	b, err := json.Marshal(messages)
	if err != nil {
		return nil, errorf(StatusInvalidArgument, "%s: the messages cannot be written as JSON: %v",
			what, err)
	}
	return b, nil
}

// variables is the JSON object of the template variables of o (nil: none).
func (o *ChatTemplateOptions) variables(what string) ([]byte, error) {
	if o.Tools == nil && o.Documents == nil && len(o.Variables) == 0 {
		return nil, nil
	}
	v := make(map[string]any, len(o.Variables)+2)
	for k, x := range o.Variables {
		v[k] = x
	}
	for _, f := range []struct {
		name string
		val  any
	}{{"tools", o.Tools}, {"documents", o.Documents}} {
		if f.val == nil {
			continue
		}
		if _, dup := v[f.name]; dup {
			return nil, errorf(StatusInvalidArgument,
				"%s: %s is given twice (as a field and in Variables)", what, f.name)
		}
		v[f.name] = f.val
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, errorf(StatusInvalidArgument,
			"%s: the template variables cannot be written as JSON: %v", what, err)
	}
	return b, nil
}

// sizedText returns the text write(out) writes, which returns its full
// length in bytes: a first call with out nil sizes the buffer. Run inside
// call.
func sizedText(write func(out []byte) int64) string {
	n := write(nil)
	buf := make([]byte, n+1)
	if n2 := write(buf); n2 != n {
		panic(panicPrefix + "12\x01chat template: the second call disagrees with the first")
	}
	return string(buf[:n])
}

// render renders through raw (the tokenizer's raw method, or the module
// function without one).
func render(what string, messages any, opts *ChatTemplateOptions, template string,
	raw func(m []byte, agp int, t, v []byte, cont int, out []byte) int64) (string, error) {
	var o ChatTemplateOptions
	if opts != nil {
		o = *opts
	}
	m, err := chatJSON(what, messages)
	if err != nil {
		return "", err
	}
	v, err := o.variables(what)
	if err != nil {
		return "", err
	}
	if template == "" {
		template = o.ChatTemplate
	}
	var s string
	err = call(func() {
		s = sizedText(func(out []byte) int64 {
			return raw(m, b2i(o.AddGenerationPrompt), []byte(template), v,
				b2i(o.ContinueFinalMessage), out)
		})
	})
	return s, err
}

// HasChatTemplate reports whether the tokenizer's folder came with a chat
// template (chat_template.jinja, additional_chat_templates/ or
// tokenizer_config.json's "chat_template").
func (t *Tokenizer) HasChatTemplate() (bool, error) {
	if err := t.check(); err != nil {
		return false, err
	}
	var has int64
	err := call(func() { has = int64(t.t.Has_chat_template()) })
	runtime.KeepAlive(t)
	return has != 0, err
}

// ChatTemplate returns the source text of the tokenizer's chat template
// name ("default", "tool_use", ...; "": the one ApplyChatTemplate uses).
// It fails with StatusInvalidArgument when there is none of that name.
func (t *Tokenizer) ChatTemplate(name string) (string, error) {
	if err := t.check(); err != nil {
		return "", err
	}
	var s string
	err := call(func() {
		s = sizedText(func(out []byte) int64 { return t.t.Get_chat_template([]byte(name), out) })
	})
	runtime.KeepAlive(t)
	return s, err
}

// ApplyChatTemplate returns the prompt text of a conversation, exactly as
// transformers' tokenizer.apply_chat_template(messages, tokenize=False,
// ...) renders it. messages is the JSON text of an array of message
// objects (a string, []byte or json.RawMessage), or any value
// encoding/json writes as one: []ChatMessage, []map[string]any, a slice of
// one's own structs. Keys whose value is null are dropped. encoding/json
// writes a map's keys sorted: where a template prints an object as it is
// (tools and tool call arguments through tojson) and their order matters,
// pass structs or json.RawMessage. opts nil: the defaults. Encode the text
// without special tokens (Encode(text, false)): the template writes them.
//
// Errors: StatusInvalidArgument (no chat template, messages that are not
// a non-empty array of objects, the template's raise_exception with its
// text, an undefined value, ContinueFinalMessage with
// AddGenerationPrompt), StatusFormat (a template that does not parse: its
// line and column), StatusNotSupported.
func (t *Tokenizer) ApplyChatTemplate(messages any, opts *ChatTemplateOptions) (string, error) {
	if err := t.check(); err != nil {
		return "", err
	}
	s, err := render("ApplyChatTemplate", messages, opts, "",
		func(m []byte, agp int, tp, v []byte, cont int, out []byte) int64 {
			return t.t.Apply_chat_template(m, agp, tp, v, cont, out)
		})
	runtime.KeepAlive(t)
	return s, err
}

// ApplyChatTemplate renders a conversation with a chat template of one's
// own, template (its source text), without a tokenizer: the special tokens
// (bos_token, eos_token, ...) are then only what opts.Variables set.
// messages and opts are Tokenizer.ApplyChatTemplate's; opts.ChatTemplate
// must be empty.
func ApplyChatTemplate(template string, messages any, opts *ChatTemplateOptions) (string, error) {
	const what = "ApplyChatTemplate"
	if template == "" {
		return "", errorf(StatusInvalidArgument, "%s: the template is empty (without a tokenizer "+
			"there is no template of its own; Tokenizer.ApplyChatTemplate uses the tokenizer's)",
			what)
	}
	if opts != nil && opts.ChatTemplate != "" {
		return "", errorf(StatusInvalidArgument,
			"%s: the template is given twice (as the argument and in opts.ChatTemplate)", what)
	}
	return render(what, messages, opts, template, capi.Chat_template_apply)
}
