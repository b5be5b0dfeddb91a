package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/store"
)

// TestNestedTerminationEndsEachAgentOnce: b is being terminated when its
// parent a is terminated too and ends first, taking b with it; b's own
// handoff, delivered later, must not end it a second time.
func TestNestedTerminationEndsEachAgentOnce(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	busy := as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { <-release; return nil })
	s := newSociety(t, as.Config{MaxAgents: 2})
	aa, ba := chain(t, s, busy)
	if _, err := aa.SendText(ctx, ba.ID(), "hold"); err != nil {
		t.Fatal(err)
	}
	if err := aa.Terminate(ctx, ba.ID()); err != nil {
		t.Fatal(err)
	}
	if err := s.Terminate(ctx, aa.ID()); err != nil {
		t.Fatal(err)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		a, _ := s.Agent(aa.ID())
		b, _ := s.Agent(ba.ID())
		if a.Status == as.StatusTerminated && b.Status == as.StatusTerminated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a %s, b %s", a.Status, b.Status)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let b's handoff be delivered and dropped
	if n := len(s.Agents()); n != 2 {
		t.Fatalf("Agents() = %d agents", n)
	}
	// Exactly two slots were freed: two spawns fit under MaxAgents 2, a third does not.
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("u").CreateRole(ctx, as.RoleSpec{Name: "c"})
	for i, task := range []string{"u", "v", "w"} {
		_, _, err := root.WithTask(task).SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
		if i < 2 && err != nil {
			t.Fatalf("spawn %d: %v", i, err)
		}
		if i == 2 && !errors.Is(err, as.ErrTooManyAgents) {
			t.Fatalf("spawn %d: %v, want ErrTooManyAgents", i, err)
		}
	}
}

// TestFailedNewLeavesNothingRunning: a store whose state cannot be restored
// makes New fail, and the timers and drainers restore started are stopped.
func TestFailedNewLeavesNothingRunning(t *testing.T) {
	ctx := context.Background()
	base := runtime.NumGoroutine()
	mem := store.NewMemory()
	past := time.Now().Add(-time.Hour)
	mem.Apply(ctx, store.Change{
		Requests:  []store.Request{{ID: "req-1", From: as.UserID, To: as.RootID, Status: string(as.StatusPending), CreatedAt: past, Deadline: past.Add(time.Second)}},
		Accepted:  []store.Message{{ID: "m-1", Seq: 1, From: as.UserID, To: as.RootID, Type: "general", Payload: json.RawMessage(`{"text":"x"}`), SentAt: past}},
		Histories: []store.History{{AgentID: "agent-404", Messages: json.RawMessage(`[]`)}},
	})
	if _, err := as.New(ctx, as.Config{Logger: quiet, Store: mem}); err == nil {
		t.Fatal("New restored the history of an agent that does not exist")
	}
	time.Sleep(50 * time.Millisecond)
	st, _ := mem.Load(ctx)
	if st.Requests[0].Status != string(as.StatusPending) || len(st.Pending) != 1 {
		t.Fatalf("the failed New went on working: %+v, %d pending", st.Requests, len(st.Pending))
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Fatalf("%d goroutines after a failed New, %d before", n, base)
	}
}
