package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	as "agentsociety"
)

// wcArgs are the arguments of the test tool: a field of each JSON kind.
type wcArgs struct {
	Text  string            `json:"text"`
	Max   int               `json:"max"`
	Ratio *float64          `json:"ratio"`
	Tags  []string          `json:"tags"`
	Opts  map[string]string `json:"opts"`
	Deep  struct {
		On bool `json:"on"`
	} `json:"deep"`
}

// wcTool returns a NewTool over wcArgs that records what it was called with.
func wcTool(got *[]wcArgs, err error) as.Tool {
	return as.NewTool("word_count", "Counts words.", json.RawMessage(`{"type":"object"}`),
		func(ctx context.Context, self *as.Actor, a wcArgs) (any, error) {
			*got = append(*got, a)
			if err != nil {
				return nil, err
			}
			return map[string]int{"words": len(strings.Fields(a.Text))}, nil
		})
}

func TestNewToolDecodesTheArguments(t *testing.T) {
	var got []wcArgs
	tool := wcTool(&got, nil)
	if tool.Name != "word_count" || tool.Description != "Counts words." || string(tool.Parameters) != `{"type":"object"}` || tool.Handler == nil || tool.Roles != nil {
		t.Fatalf("NewTool made %+v", tool)
	}
	out, err := tool.Handler(context.Background(), nil, json.RawMessage(`{"text":"a b c","max":3,"ratio":0.5,"tags":["x"],"opts":{"k":"v"},"deep":{"on":true},"extra":"ignored"}`))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(out); string(b) != `{"words":3}` {
		t.Fatalf("result %s", b)
	}
	if len(got) != 1 {
		t.Fatalf("fn called %d times", len(got))
	}
	a := got[0]
	if a.Text != "a b c" || a.Max != 3 || a.Ratio == nil || *a.Ratio != 0.5 || len(a.Tags) != 1 || a.Opts["k"] != "v" || !a.Deep.On {
		t.Fatalf("fn got %+v", a)
	}

	// No arguments at all decode as the zero value.
	for _, raw := range []string{``, `  `, `{}`} {
		got = nil
		if _, err := tool.Handler(context.Background(), nil, json.RawMessage(raw)); err != nil || len(got) != 1 || got[0].Text != "" || got[0].Ratio != nil {
			t.Fatalf("arguments %q: fn got %+v, err %v", raw, got, err)
		}
	}
}

func TestNewToolPassesFnsErrorsThrough(t *testing.T) {
	var got []wcArgs
	want := &as.Error{Code: as.ErrArtifactNotFound, Message: "no such text"}
	_, err := wcTool(&got, want).Handler(context.Background(), nil, json.RawMessage(`{"text":"x"}`))
	if err != want {
		t.Fatalf("err = %v, want fn's own error", err)
	}
}

func TestNewToolRefusesBadArguments(t *testing.T) {
	for _, c := range []struct {
		name, args string
		says       string // what the message must say, after the tool's name
	}{
		{"malformed JSON", `{"text":`, "the arguments are not valid JSON (unexpected end of JSON input"},
		{"trailing garbage", `{"text":"a"} x`, "the arguments are not valid JSON (invalid character 'x' after top-level value, at byte"},
		{"number for a string", `{"text":42}`, `"text" holds a number where a string is expected`},
		{"string for an int", `{"max":"3"}`, `"max" holds a string where a whole number is expected`},
		{"fraction for an int", `{"max":1.5}`, `"max" holds a number where a whole number is expected`},
		{"string for a number", `{"ratio":"0.5"}`, `"ratio" holds a string where a number is expected`},
		{"object for an array", `{"tags":{"a":1}}`, `"tags" holds a JSON object where an array is expected`},
		{"number in an array", `{"tags":["a",2]}`, `"tags" holds a number where a string is expected`},
		{"array for an object", `{"opts":[1]}`, `"opts" holds an array where a JSON object is expected`},
		{"nested field", `{"deep":{"on":"yes"}}`, `"deep.on" holds a string where true or false is expected`},
		{"boolean for a string", `{"text":true}`, `"text" holds true or false where a string is expected`},
		{"array for the arguments", `["a"]`, "the arguments must be a JSON object, not an array"},
		{"string for the arguments", `"a b"`, "the arguments must be a JSON object, not a string"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []wcArgs
			out, err := wcTool(&got, nil).Handler(context.Background(), nil, json.RawMessage(c.args))
			if !errors.Is(err, as.ErrInvalidArgument) {
				t.Fatalf("err = %v, want %s", err, as.ErrInvalidArgument)
			}
			var e *as.Error
			if !errors.As(err, &e) || e.Code != as.ErrInvalidArgument {
				t.Fatalf("err %#v is not a coded *Error", err)
			}
			if want := "bad arguments for word_count: " + c.says; !strings.HasPrefix(e.Message, want) {
				t.Fatalf("message %q\nwant it to start %q", e.Message, want)
			}
			if out != nil || len(got) != 0 {
				t.Fatalf("the tool ran on bad arguments: %v, %+v", out, got)
			}
		})
	}
}

func TestNewToolWithoutAFuncIsRefusedByNew(t *testing.T) {
	tool := as.NewTool[wcArgs]("word_count", "Counts words.", nil, nil)
	if tool.Handler != nil {
		t.Fatal("a nil fn gave a Handler")
	}
	_, err := as.New(context.Background(), as.Config{Logger: quiet, Tools: []as.Tool{tool}})
	if err == nil || !strings.Contains(err.Error(), "no Handler") {
		t.Fatalf("New = %v, want a refusal of the tool without a Handler", err)
	}
}
