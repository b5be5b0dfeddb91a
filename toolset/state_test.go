package toolset_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/toolset"
)

// TestToolArgumentsAgreeWithTheMessageRules: state_set needs a value (null
// deletes), and timeout_seconds, when given, must be positive in
// delegate_task as in the built-in request_collaboration.
func TestToolArgumentsAgreeWithTheMessageRules(t *testing.T) {
	ctx := context.Background()
	results := make(chan string, 8)
	calls := []*llm.Response{
		call("1", "state_set", `{"key":"spec"}`),
		call("2", "state_set", `{"key":"spec","value":{"v":1}}`),
		call("3", "state_set", `{"key":"spec","value":null}`),
		call("4", "send_message", `{"to":"root","message_type":"collaboration_request","payload":{"subtask_description":"x","timeout_seconds":0}}`),
		call("5", "delegate_task", `{"assignee":"root","description":"x","timeout_seconds":-1}`),
		say("done"),
	}
	step := 0
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if briefTurn(req) {
			return say(""), nil
		}
		if r := lastToolResult(req); r != "" {
			results <- r
		}
		step++
		return calls[step-1], nil
	})
	tools := append(toolset.State(), toolset.Delegation()...)
	s := newSociety(t, as.Config{Model: model, Tools: tools})
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("t").CreateRole(ctx, as.RoleSpec{Name: "w"})
	w, _, _ := root.WithTask("t").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if _, err := s.SendTextToAgent(ctx, w.ID, "go", ""); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{`"missing_fields":["value"]`, `"ok":true`, `"ok":true`, `"error":"invalid_message_format"`, `"error":"invalid_argument"`} {
		select {
		case r := <-results:
			if !strings.Contains(r, want) {
				t.Fatalf("call %d: result %s lacks %s", i+1, r, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no result")
		}
	}
}

// TestState plays the state tools through a model: what state_set writes,
// state_get reads back with its writer, in its scope only; null deletes;
// bad arguments are refused with invalid_argument.
func TestState(t *testing.T) {
	s, w, results := runCalls(t, toolset.State(), []*llm.Response{
		call("1", "state_set", `{"key":"spec","value":{"chapters":5}}`),
		call("2", "state_get", `{"key":"spec","scope":"project"}`),
		call("3", "state_set", `{"key":"notes","value":"mine","scope":"private"}`),
		call("4", "state_get", `{"key":"notes"}`),
		call("5", "state_get", `{"key":"notes","scope":"private"}`),
		call("6", "state_set", `{"key":"spec","value":null}`),
		call("7", "state_get", `{"key":"spec"}`),
		call("8", "state_get", `{"key":"spec","scope":"global"}`),
		call("9", "state_get", `{"key":5}`),
		call("10", "state_set", `{"key":" ","value":1}`),
	})
	want := [][]string{
		{`"ok":true`},
		{`"found":true`, `"value":{"chapters":5}`, `"writer":"` + w.ID() + `"`},
		{`"ok":true`},
		{`"found":false`},
		{`"found":true`, `"value":"mine"`},
		{`"ok":true`},
		{`"found":false`},
		{`"error":"invalid_argument"`, `scope must be`},
		{`"error":"invalid_argument"`, `bad arguments for state_get: \"key\" holds a number where a string is expected`},
		{`"error":"invalid_argument"`, `"missing_fields":["key"]`},
	}
	for i, r := range results {
		for _, part := range want[i] {
			if !strings.Contains(r, part) {
				t.Errorf("call %d: result %s lacks %s", i+1, r, part)
			}
		}
	}
	// The host reads what the agent wrote, through the library's API.
	if v, ok, err := w.GetState("notes", as.ScopePrivate); err != nil || !ok || string(v.Value) != `"mine"` || v.Writer != w.ID() {
		t.Errorf("private notes = %+v, %v, %v", v, ok, err)
	}
	root, _ := s.Actor(as.RootID)
	if _, ok, _ := root.WithTask(w.TaskID()).GetState("spec", as.ScopeProject); ok {
		t.Error("state_set with null did not delete the key")
	}
}

// runCalls starts a society with tools, spawns one model-driven agent on
// task "t" and sends it a message, on which it makes calls, one a step; it
// returns the society, the agent and the result of each call, as the model
// read it.
func runCalls(t *testing.T, tools []as.Tool, calls []*llm.Response) (*as.Society, *as.Actor, []string) {
	t.Helper()
	ctx := context.Background()
	results := make(chan string, len(calls))
	var mu sync.Mutex
	step := 0
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		if r := lastToolResult(req); r != "" {
			results <- r
		}
		if step == len(calls) {
			return say("done"), nil
		}
		step++
		return calls[step-1], nil
	})
	s := newSociety(t, as.Config{Model: model, Tools: tools})
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("t").CreateRole(ctx, as.RoleSpec{Name: "w"})
	a, _, err := root.WithTask("t").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Actor(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SendTextToAgent(ctx, w.ID(), "go", ""); err != nil {
		t.Fatal(err)
	}
	var out []string
	for range calls {
		select {
		case r := <-results:
			out = append(out, r)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d results of %d calls: %q", len(out), len(calls), out)
		}
	}
	return s, w, out
}
