package agentsociety_test

import (
	"context"
	"errors"
	"testing"
	"time"

	as "agentsociety"
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
