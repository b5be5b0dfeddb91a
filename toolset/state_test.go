package toolset_test

import (
	"context"
	"strings"
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
		call("4", "request_collaboration", `{"to":"root","subtask_description":"x","timeout_seconds":0}`),
		call("5", "delegate_task", `{"assignee":"root","description":"x","timeout_seconds":-1}`),
		say("done"),
	}
	step := 0
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
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
	for i, want := range []string{`"missing_fields":["value"]`, `"ok":true`, `"ok":true`, `"error":"invalid_argument"`, `"error":"invalid_argument"`} {
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
