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

// TestTools_MisspeltAndMissingArgumentsAreRefused: a key a tool does not
// declare is refused with the list of those it does, and a call without an
// argument its tool requires names it, where the key was dropped and the
// call failed on an empty value (no agent "", no collaboration request ""),
// named a field of the payload the model never wrote (subtask_description),
// or went ahead: state_get read key "" and said it was not found.
func TestTools_MisspeltAndMissingArgumentsAreRefused(t *testing.T) {
	calls := []struct{ name, args, want string }{
		{"state_get", `{"name":"spec"}`, `unknown argument \"name\" for state_get. The arguments are: key, scope."`},
		{"state_get", `{}`, `state_get needs the arguments key","missing_fields":["key"]`},
		{"state_set", `{"key":"spec","val":1}`, `unknown argument \"val\" for state_set. The arguments are: key, scope, value."`},
		{"delegate_task", `{"to":"root","description":"x"}`, `unknown argument \"to\" for delegate_task. The arguments are: assignee, description, payload, timeout_seconds."`},
		{"delegate_task", `{"assignee":"root","description":"x","timeout":30}`, `unknown argument \"timeout\" for delegate_task`},
		{"delegate_task", `{"assignee":"root"}`, `delegate_task needs the arguments description","missing_fields":["description"]`},
		{"complete_task", `{"taskId":"req-1","result":{}}`, `unknown argument \"taskId\" for complete_task. The arguments are: result, task_id."`},
		{"complete_task", `{"result":null}`, `complete_task needs the arguments task_id, result","missing_fields":["task_id","result"]`},
		{"fail_task", `{"task_id":"req-1"}`, `fail_task needs the arguments error_message","missing_fields":["error_message"]`},
		{"state_set", `{"key":"spec","value":1,"end_turn":false}`, `"ok":true`},
	}
	var mu sync.Mutex
	var results []string
	done := make(chan struct{})
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if briefTurn(req) {
			return say(""), nil
		}
		mu.Lock()
		defer mu.Unlock()
		if r := lastToolResult(req); r != "" {
			results = append(results, r)
		}
		if n := len(results); n < len(calls) {
			return call("c"+calls[n].name, calls[n].name, calls[n].args), nil
		}
		close(done)
		return say("done"), nil
	})
	ctx := context.Background()
	tools := append(toolset.State(), toolset.Delegation()...)
	s := newSociety(t, as.Config{Model: model, Tools: tools, MaxSteps: len(calls) + 1})
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("t").CreateRole(ctx, as.RoleSpec{Name: "w"})
	w, _, err := root.WithTask("t").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SendTextToAgent(ctx, w.ID, "go", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute): // a hang guard only
		t.Fatal("the turn did not end")
	}
	mu.Lock()
	defer mu.Unlock()
	for i, c := range calls {
		if !strings.Contains(results[i], c.want) {
			t.Errorf("%s(%s) gave %s, want it to contain %s", c.name, c.args, results[i], c.want)
		}
	}
}
