package agentsociety_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	as "agentsociety"
	"agentsociety/llm"
)

// twoAgents returns a society with a requester and a responder, both
// code-driven and recording into in.
func twoAgents(t testing.TB, in *inbox) (*as.Society, *as.Actor, *as.Actor) {
	t.Helper()
	ctx := context.Background()
	s := newSociety(t, as.Config{DefaultBehavior: in.behavior()})
	root, _ := s.Actor(as.RootID)
	root = root.WithTask("t")
	role, _, _ := root.CreateRole(ctx, as.RoleSpec{Name: "lead"})
	lead, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	la, _ := s.Actor(lead.ID)
	hrole, _, _ := la.CreateRole(ctx, as.RoleSpec{Name: "helper"})
	helper, _, err := la.SpawnAgent(ctx, as.SpawnSpec{RoleID: hrole.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	ha, _ := s.Actor(helper.ID)
	return s, la, ha
}

func answer(t rapid.TB, from *as.Actor, to, id string, status as.RequestStatus) error {
	t.Helper()
	p := as.CollaborationResponsePayload{RequestID: id, Status: status}
	if status == as.StatusCompleted {
		p.ResultData = []byte(`{"ok":true}`)
	} else {
		p.ErrorMessage = "cannot"
	}
	_, err := from.Send(context.Background(), as.Outgoing{To: to, Type: as.CollaborationResponse, Payload: p})
	return err
}

func TestCollaborationTimeoutSettlesAndRefusesLateAnswers(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	_, lead, helper := twoAgents(t, in)
	id, err := lead.RequestCollaboration(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "slow work"}, 20*time.Millisecond)
	if err != nil || !strings.HasPrefix(id, "req-") {
		t.Fatalf("RequestCollaboration = %q, %v", id, err)
	}
	if m := in.next(t); m.To != helper.ID() || m.Type != as.CollaborationRequest {
		t.Fatalf("helper got %+v", m)
	}
	m := in.next(t)
	var p as.CollaborationResponsePayload
	if err := m.Decode(&p); err != nil || m.To != lead.ID() || m.From != helper.ID() || p.RequestID != id || p.Status != as.StatusError || !strings.Contains(p.ErrorMessage, "timeout") {
		t.Fatalf("lead got %+v (%+v), want a timeout error response for %s", m, p, id)
	}
	if err := answer(t, helper, lead.ID(), id, as.StatusCompleted); !errors.Is(err, as.ErrRequestClosed) {
		t.Fatalf("late answer: %v, want ErrRequestClosed", err)
	}
}

func TestCollaborateWaitsForTheAnswer(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	s, lead, helper := twoAgents(t, in)
	go func() {
		m := in.next(t) // the request, delivered to the helper
		var p as.CollaborationRequestPayload
		m.Decode(&p)
		answer(t, helper, m.From, p.RequestID, as.StatusRejected)
	}()
	out, err := lead.Collaborate(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var p as.CollaborationResponsePayload
	if out.Decode(&p); p.Status != as.StatusRejected || out.From != helper.ID() {
		t.Fatalf("Collaborate = %+v", out)
	}
	// The answer went to the caller only, not to the lead's mailbox.
	if _, err := lead.SendText(ctx, helper.ID(), "marker"); err != nil {
		t.Fatal(err)
	}
	if m := in.next(t); m.Text() != "marker" {
		t.Fatalf("after Collaborate the next delivery is %+v, want the marker", m)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if n := len(in.got[lead.ID()]); n != 0 {
		t.Fatalf("the lead's mailbox got %d messages, want 0", n)
	}
	_ = s
}

func TestCollaborateGivingUpSendsTheOutcomeToTheMailbox(t *testing.T) {
	in := newInbox()
	_, lead, helper := twoAgents(t, in)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := lead.Collaborate(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, 30*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Collaborate = %v, want DeadlineExceeded", err)
	}
	in.next(t) // the request, to the helper
	if m := in.next(t); m.To != lead.ID() || m.Type != as.CollaborationResponse {
		t.Fatalf("got %+v, want the timeout in the lead's mailbox", m)
	}
}

func TestCloseStopsRequestTimers(t *testing.T) {
	base := runtime.NumGoroutine()
	in := newInbox()
	s, err := as.New(context.Background(), as.Config{Logger: quiet, DefaultBehavior: in.behavior()})
	if err != nil {
		t.Fatal(err)
	}
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.CreateRole(context.Background(), as.RoleSpec{Name: "r"})
	a, _, _ := root.SpawnAgent(context.Background(), as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	for range 10 {
		if _, err := root.RequestCollaboration(context.Background(), a.ID, as.CollaborationRequestPayload{SubtaskDescription: "x"}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Fatalf("%d goroutines after Close, %d before", n, base)
	}
}

// TestProperty_CollaborationOutcomesExactlyOnce drives random interleavings
// of requests, answers and timeouts and checks that each request ends in
// exactly one final state and its requester receives exactly one outcome.
func TestProperty_CollaborationOutcomesExactlyOnce(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		in := newInbox()
		s, err := as.New(ctx, as.Config{Logger: quiet, DefaultBehavior: in.behavior()})
		if err != nil {
			rt.Fatal(err)
		}
		defer s.Close(ctx)
		root, _ := s.Actor(as.RootID)
		root = root.WithTask("t")
		role, _, _ := root.CreateRole(ctx, as.RoleSpec{Name: "lead"})
		leadInfo, _, _ := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
		lead, _ := s.Actor(leadInfo.ID)
		hrole, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "helper"})
		var helpers []*as.Actor
		for range 3 {
			h, _, _ := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: hrole.ID, Brief: validBrief()})
			ha, _ := s.Actor(h.ID)
			helpers = append(helpers, ha)
		}

		type req struct {
			id     string
			helper *as.Actor
			closed bool
		}
		var reqs []*req
		n := rapid.IntRange(1, 12).Draw(rt, "steps")
		for range n {
			if len(reqs) == 0 || rapid.Bool().Draw(rt, "new") {
				h := rapid.SampledFrom(helpers).Draw(rt, "helper")
				timeout := time.Duration(rapid.IntRange(0, 3).Draw(rt, "timeoutMs")) * time.Millisecond
				id, err := lead.RequestCollaboration(ctx, h.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, timeout)
				if err != nil {
					rt.Fatal(err)
				}
				reqs = append(reqs, &req{id: id, helper: h})
				continue
			}
			r := rapid.SampledFrom(reqs).Draw(rt, "answer")
			status := rapid.SampledFrom([]as.RequestStatus{as.StatusCompleted, as.StatusError, as.StatusRejected}).Draw(rt, "status")
			err := answer(rt, r.helper, lead.ID(), r.id, status)
			switch {
			case err == nil:
				if r.closed {
					rt.Fatalf("request %s answered twice", r.id)
				}
				r.closed = true
			case errors.Is(err, as.ErrRequestClosed):
				r.closed = true // answered before, or timed out
			default:
				rt.Fatalf("answer %s: %v", r.id, err)
			}
		}
		// Settle the rest by timeouts: requests without one are answered.
		for _, r := range reqs {
			if err := answer(rt, r.helper, lead.ID(), r.id, as.StatusCompleted); err != nil && !errors.Is(err, as.ErrRequestClosed) {
				rt.Fatal(err)
			}
		}
		outcomes := map[string]int{}
		for len(outcomes) < len(reqs) {
			select {
			case m := <-in.ch:
				if m.To == lead.ID() && m.Type == as.CollaborationResponse {
					var p as.CollaborationResponsePayload
					m.Decode(&p)
					outcomes[p.RequestID]++
				}
			case <-time.After(5 * time.Second):
				rt.Fatalf("%d outcomes for %d requests", len(outcomes), len(reqs))
			}
		}
		// Nothing more may come: a marker sent last arrives before any stray outcome would.
		helpers[0].SendText(ctx, lead.ID(), "end")
		for {
			m := in.next(rt)
			if m.To != lead.ID() {
				continue
			}
			if m.Text() == "end" {
				break
			}
			var p as.CollaborationResponsePayload
			m.Decode(&p)
			outcomes[p.RequestID]++
		}
		for _, r := range reqs {
			if outcomes[r.id] != 1 {
				rt.Fatalf("request %s had %d outcomes", r.id, outcomes[r.id])
			}
		}
	})
}

func TestRequestCollaborationTool(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	results := make(chan string, 4)
	step := 0
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if r := lastToolResult(req); r != "" {
			results <- r
			return say("waiting"), nil
		}
		step++
		return call("c1", "request_collaboration", `{"to":"agent-2","subtask_description":"review","context":"artifact:a-1","timeout_seconds":0.02}`), nil
	})
	s := newSociety(t, as.Config{Model: model, DefaultBehavior: nil})
	root, _ := s.Actor(as.RootID)
	root = root.WithTask("t")
	role, _, _ := root.CreateRole(ctx, as.RoleSpec{Name: "lead"})
	lead, _, _ := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	la, _ := s.Actor(lead.ID)
	hrole, _, _ := la.CreateRole(ctx, as.RoleSpec{Name: "helper"})
	if _, _, err := la.SpawnAgent(ctx, as.SpawnSpec{RoleID: hrole.ID, Brief: validBrief(), Behavior: in.behavior()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SendTextToAgent(ctx, lead.ID, "go", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-results:
		if !strings.Contains(r, `"request_id":"req-`) || !strings.Contains(r, `"status":"pending"`) {
			t.Fatalf("tool result %s", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no tool result")
	}
	m := in.next(t)
	var p as.CollaborationRequestPayload
	if m.Decode(&p); p.SubtaskDescription != "review" || string(p.Context) != `"artifact:a-1"` || p.TimeoutSeconds != 0.02 {
		t.Fatalf("helper got %s", m.Payload)
	}
}
