package agentsociety_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	as "agentsociety"
	"agentsociety/llm"
)

// TestPromptOverhead reports the fixed prompt overhead of root and of a
// worker: the characters of the system prompt plus the tool schemas sent
// with every call, and fails above the budget of 4,800 characters.
func TestPromptOverhead(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	first := map[string]*llm.Request{}
	both := make(chan struct{})
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		if first[req.Agent] == nil {
			first[req.Agent] = req
			if len(first) == 2 {
				close(both)
			}
		}
		return say(""), nil
	})
	s := newSociety(t, as.Config{Model: model})
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.CreateRole(ctx, as.RoleSpec{Name: "developer", Prompt: "Build the page the brief asks for."})
	child, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubmitRequirement(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SendTextToAgent(ctx, child.ID, "go", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-both:
	case <-time.After(5 * time.Second):
		t.Fatal("root and the worker were not both called")
	}
	const budget = 4800
	for _, id := range []string{as.RootID, child.ID} {
		mu.Lock()
		req := first[id]
		mu.Unlock()
		if req == nil {
			t.Fatalf("no model call for %s", id)
		}
		tools, _ := json.Marshal(req.Tools)
		sys, schema := utf8.RuneCountInString(req.System), utf8.RuneCountInString(string(tools))
		t.Logf("%s: system prompt %d chars + tool schemas %d chars = %d chars (~%d tokens at chars/4)", id, sys, schema, sys+schema, (sys+schema)/4)
		if sys+schema > budget {
			t.Errorf("%s: fixed prompt overhead %d chars exceeds %d", id, sys+schema, budget)
		}
	}
}
