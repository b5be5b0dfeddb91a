package toolset_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/toolset"
)

// TestDelegation plays seed 004's delegation with model-driven agents:
// the delegator delegates three tasks; the assignee completes one and fails
// one (escalation), and lets the third time out. The delegator is told of
// each outcome by one collaboration_response.
func TestDelegation(t *testing.T) {
	ctx := context.Background()
	outcomes := make(chan as.CollaborationResponsePayload, 8)
	var delegator, assignee string
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if briefTurn(req) {
			return say(""), nil
		}
		last := req.Messages[len(req.Messages)-1]
		switch req.Agent {
		case delegator:
			if last.Role == llm.RoleUser && strings.Contains(last.Content, "collaboration_response") {
				var p as.CollaborationResponsePayload
				body := last.Content[strings.Index(last.Content, "{") : strings.LastIndex(last.Content, "}")+1]
				if err := json.Unmarshal([]byte(body), &p); err != nil {
					t.Errorf("delegator read %q: %v", last.Content, err)
				}
				outcomes <- p
				return say("noted"), nil
			}
			if last.Role == llm.RoleUser { // the kick-off from the host
				return &llm.Response{Message: llm.Message{ToolCalls: []llm.ToolCall{
					{ID: "d1", Name: "delegate_task", Arguments: json.RawMessage(`{"assignee":"` + assignee + `","description":"summarise","payload":{"n":1}}`)},
					{ID: "d2", Name: "delegate_task", Arguments: json.RawMessage(`{"assignee":"` + assignee + `","description":"impossible","payload":{"n":2}}`)},
					{ID: "d3", Name: "delegate_task", Arguments: json.RawMessage(`{"assignee":"` + assignee + `","description":"ignore me","timeout_seconds":0.05}`)},
				}}}, nil
			}
			return say("delegated"), nil
		case assignee:
			if last.Role != llm.RoleUser {
				return say("done"), nil
			}
			id := last.Content[strings.Index(last.Content, `"request_id": "`)+len(`"request_id": "`):]
			id = id[:strings.Index(id, `"`)]
			switch {
			case strings.Contains(last.Content, "summarise"):
				return call("c", "complete_task", `{"task_id":"`+id+`","result":{"summary":"short"}}`), nil
			case strings.Contains(last.Content, "impossible"):
				return call("c", "fail_task", `{"task_id":"`+id+`","error_message":"no sources","details":{"tried":3}}`), nil
			}
			return say("ignoring"), nil
		}
		return say(""), nil
	})
	tools := toolset.Delegation()
	for i := range tools {
		tools[i].Roles = []string{"partner", "librarian"}
	}
	s := newSociety(t, as.Config{Model: model, Tools: tools})
	root, _ := s.Actor(as.RootID)
	root = root.WithTask("thesis")
	prole, _, _ := root.CreateRole(ctx, as.RoleSpec{Name: "partner"})
	p, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: prole.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := s.Actor(p.ID)
	lrole, _, _ := pa.CreateRole(ctx, as.RoleSpec{Name: "librarian"})
	l, _, err := pa.SpawnAgent(ctx, as.SpawnSpec{RoleID: lrole.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	delegator, assignee = p.ID, l.ID
	if _, err := s.SendTextToAgent(ctx, delegator, "start", ""); err != nil {
		t.Fatal(err)
	}
	got := map[string]as.CollaborationResponsePayload{}
	for len(got) < 3 {
		select {
		case o := <-outcomes:
			if _, dup := got[o.RequestID]; dup {
				t.Fatalf("two outcomes for %s", o.RequestID)
			}
			got[o.RequestID] = o
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d outcomes: %+v", len(got), got)
		}
	}
	var completed, failed, timedOut int
	for _, o := range got {
		var data bytes.Buffer
		json.Compact(&data, o.ResultData) // the agent reads the payload indented
		switch {
		case o.Status == as.StatusCompleted && data.String() == `{"summary":"short"}`:
			completed++
		case o.Status == as.StatusError && o.ErrorMessage == "no sources" && data.String() == `{"tried":3}`:
			failed++
		case o.Status == as.StatusError && strings.Contains(o.ErrorMessage, "timeout"):
			timedOut++
		default:
			t.Errorf("unexpected outcome %+v", o)
		}
	}
	if completed != 1 || failed != 1 || timedOut != 1 {
		t.Fatalf("completed %d, failed %d, timed out %d; want one each", completed, failed, timedOut)
	}
}

// TestDelegationRefusals: the delegation tools' refusals reach the model as
// coded results it can act on, and a valid delegation still works after
// them.
func TestDelegationRefusals(t *testing.T) {
	_, w, results := runCalls(t, toolset.Delegation(), []*llm.Response{
		call("1", "delegate_task", `{"assignee":"agent-404","description":"x"}`),
		call("2", "delegate_task", `{"assignee":7,"description":"x"}`),
		call("3", "complete_task", `{"task_id":"req-404","result":{}}`),
		call("4", "fail_task", `{"task_id":"req-404","error_message":"no"}`),
		call("5", "fail_task", `{"task_id":"req-404","error_message":"no","details":[1]}`),
		call("6", "delegate_task", `{"assignee":"root","description":"x","timeout_seconds":"soon"}`),
		call("7", "delegate_task", `{"assignee":"root","description":"x","payload":{"n":1}}`),
	})
	want := [][]string{
		{`"error":"agent_not_found"`, `"agentId":"agent-404"`},
		{`"error":"invalid_argument"`, `bad arguments for delegate_task: \"assignee\" holds a number where a string is expected`},
		{`"error":"unknown_request"`},
		{`"error":"unknown_request"`},
		{`"error":"unknown_request"`},
		{`"error":"invalid_argument"`, `\"timeout_seconds\" holds a string where a number is expected`},
		{`"status":"pending"`, `"task_id":"`},
	}
	for i, r := range results {
		for _, part := range want[i] {
			if !strings.Contains(r, part) {
				t.Errorf("call %d by %s: result %s lacks %s", i+1, w.ID(), r, part)
			}
		}
	}
}

// TestDelegateTaskRefusesATimeoutTooLong: a timeout_seconds past the
// longest time.Duration is refused with a message naming the maximum, never
// taken as no timeout; the maximum itself is accepted.
func TestDelegateTaskRefusesATimeoutTooLong(t *testing.T) {
	maxSecs := strconv.FormatInt(as.MaxTimeoutSeconds, 10)
	_, w, results := runCalls(t, toolset.Delegation(), []*llm.Response{
		call("1", "delegate_task", `{"assignee":"root","description":"x","timeout_seconds":1e10}`),
		call("2", "delegate_task", `{"assignee":"root","description":"x","timeout_seconds":1e300}`),
		call("3", "delegate_task", `{"assignee":"root","description":"x","timeout_seconds":1e400}`),
		call("4", "delegate_task", `{"assignee":"root","description":"x","timeout_seconds":`+maxSecs+`}`),
	})
	want := [][]string{
		{`"error":"invalid_argument"`, `at most ` + maxSecs + ` (about 292 years)`},
		{`"error":"invalid_argument"`, `at most ` + maxSecs + ` (about 292 years)`},
		{`"error":"invalid_argument"`, `\"timeout_seconds\" holds a number out of range: 1e400 is too large`},
		{`"status":"pending"`, `"task_id":"`},
	}
	for i, r := range results {
		for _, part := range want[i] {
			if !strings.Contains(r, part) {
				t.Errorf("call %d by %s: result %s lacks %s", i+1, w.ID(), r, part)
			}
		}
	}
}

// TestDelegatorCannotSettleItsOwnTask: the delegator that calls
// complete_task or fail_task on a task it delegated is told that only the
// assignee settles it (wrong_responder), where it was told that "an agent
// cannot send a message to itself", which names nothing it did; the task
// stays pending for the assignee.
func TestDelegatorCannotSettleItsOwnTask(t *testing.T) {
	ctx := context.Background()
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) { return say(""), nil })
	s := newSociety(t, as.Config{Model: model})
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("t").CreateRole(ctx, as.RoleSpec{Name: "w"})
	a, _, err := root.WithTask("t").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := s.Actor(a.ID)
	tools := map[string]as.Tool{}
	for _, tl := range toolset.Delegation() {
		tools[tl.Name] = tl
	}
	out, err := tools["delegate_task"].Handler(ctx, w, json.RawMessage(`{"assignee":"root","description":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	id := out.(map[string]any)["task_id"].(string)
	for _, c := range []struct{ name, args string }{
		{"complete_task", `{"task_id":"` + id + `","result":{"done":true}}`},
		{"fail_task", `{"task_id":"` + id + `","error_message":"never mind"}`},
	} {
		_, err := tools[c.name].Handler(ctx, w, json.RawMessage(c.args))
		var e *as.Error
		if !errors.As(err, &e) || !errors.Is(err, as.ErrWrongResponder) || !strings.Contains(e.Message, "one you made") || !strings.Contains(e.Message, "collaboration_response") {
			t.Errorf("%s by the delegator: %v; want wrong_responder saying the request is one it made", c.name, err)
		}
	}
	// The assignee still settles it.
	if _, err := tools["complete_task"].Handler(ctx, root.WithTask("t"), json.RawMessage(`{"task_id":"`+id+`","result":{"ok":1}}`)); err != nil {
		t.Errorf("complete_task by the assignee after the delegator's attempts: %v", err)
	}
}
