package agentsociety_test

import (
	"context"
	"errors"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/store"
)

// TestTerminateHandsOverThenEndsTheSubtree: a lead terminates its developer,
// which has a child of its own. The developer handles what was queued, then
// its handoff turn, in which it stores its state and reports to the lead;
// then it and its child are terminated, in the society and in the store.
func TestTerminateHandsOverThenEndsTheSubtree(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	reports := make(chan as.Message, 4)
	release := make(chan struct{})
	var seen []string
	dev := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		var p struct {
			Handoff bool `json:"handoff"`
		}
		m.Decode(&p)
		if !p.Handoff {
			<-release // hold the first message so termination begins while it is handled
			seen = append(seen, m.Text())
			return nil
		}
		seen = append(seen, "handoff")
		art, err := self.PutArtifact(ctx, as.ArtifactSpec{Name: "state.json", Data: []byte(`{"done":3}`)})
		if err != nil {
			return err
		}
		_, err = self.Send(ctx, as.Outgoing{To: self.Agent().ParentID, Type: as.StatusReport, Payload: as.StatusReportPayload{Status: "handed over", Text: art.Ref()}})
		return err
	})
	lead := as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		reports <- m
		return nil
	})
	s := newSociety(t, as.Config{Store: mem, MaxAgents: 3})
	root, _ := s.Actor(as.RootID)
	root = root.WithTask("t")
	lrole, _, _ := root.CreateRole(ctx, as.RoleSpec{Name: "lead"})
	l, _, _ := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: lrole.ID, Brief: validBrief(), Behavior: lead})
	la, _ := s.Actor(l.ID)
	drole, _, _ := la.CreateRole(ctx, as.RoleSpec{Name: "developer"})
	d, _, _ := la.SpawnAgent(ctx, as.SpawnSpec{RoleID: drole.ID, Brief: validBrief(), Behavior: dev})
	da, _ := s.Actor(d.ID)
	grole, _, _ := da.CreateRole(ctx, as.RoleSpec{Name: "helper"})
	g, _, err := da.SpawnAgent(ctx, as.SpawnSpec{RoleID: grole.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := la.SendText(ctx, d.ID, "work"); err != nil {
		t.Fatal(err)
	}

	if err := da.Terminate(ctx, l.ID); !errors.Is(err, as.ErrNotAncestor) {
		t.Fatalf("a child terminating its parent: %v, want ErrNotAncestor", err)
	}
	if err := la.Terminate(ctx, as.RootID); !errors.Is(err, as.ErrForbidden) {
		t.Fatalf("terminating root: %v, want ErrForbidden", err)
	}
	if err := la.Terminate(ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	if err := la.Terminate(ctx, d.ID); !errors.Is(err, as.ErrAgentTerminated) {
		t.Fatalf("terminating twice: %v, want ErrAgentTerminated", err)
	}
	if _, err := la.SendText(ctx, d.ID, "more"); !errors.Is(err, as.ErrAgentTerminated) {
		t.Fatalf("a message to a terminating agent: %v, want ErrAgentTerminated", err)
	}
	close(release)

	if m := recv(t, reports, "the handoff report"); m.From != d.ID || m.Type != as.StatusReport {
		t.Fatalf("lead got %+v, want the developer's handoff report", m)
	}
	// The termination completes after the handoff turn: wait for it by
	// waiting for the store to say so.
	deadline := time.Now().Add(hangGuard)
	for {
		st, _ := mem.Load(ctx)
		ended := 0
		for _, a := range st.Agents {
			if (a.ID == d.ID || a.ID == g.ID) && a.Status == string(as.StatusTerminated) {
				ended++
			}
		}
		if ended == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store does not record the termination: %+v", st.Agents)
		}
		time.Sleep(time.Millisecond)
	}
	if len(seen) != 2 || seen[0] != "work" || seen[1] != "handoff" {
		t.Fatalf("the developer handled %v, want [work handoff]", seen)
	}
	for _, id := range []string{d.ID, g.ID} {
		if a, _ := s.Agent(id); a.Status != as.StatusTerminated {
			t.Fatalf("%s is %s, want terminated", id, a.Status)
		}
		if _, err := la.SendText(ctx, id, "hello?"); !errors.Is(err, as.ErrAgentTerminated) {
			t.Fatalf("a message to terminated %s: %v", id, err)
		}
	}
	// The two ended agents no longer count against MaxAgents (3).
	if _, _, err := la.SpawnAgent(ctx, as.SpawnSpec{RoleID: drole.ID, Brief: validBrief()}); err != nil {
		t.Fatalf("spawning after a termination freed room: %v", err)
	}
}

func TestHostTerminateRefusesTheBuiltins(t *testing.T) {
	s := newSociety(t, as.Config{})
	for _, id := range []string{as.RootID, as.UserID} {
		if err := s.Terminate(context.Background(), id); !errors.Is(err, as.ErrForbidden) {
			t.Fatalf("Terminate(%s) = %v, want ErrForbidden", id, err)
		}
	}
	if err := s.Terminate(context.Background(), "agent-9"); !errors.Is(err, as.ErrAgentNotFound) {
		t.Fatalf("Terminate(unknown) = %v", err)
	}
}

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
	deadline := time.Now().Add(hangGuard)
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

// TestTerminate_DescendantBlockedInCollaborate: a worker blocked in
// Collaborate (no timeout) on an agent outside its subtree is terminated
// with its lead. The answer that comes later is refused, the worker being
// terminated, and nothing else settles its wait: the worker's behaviour
// runs on, blocked, for the society's life.
func TestTerminate_DescendantBlockedInCollaborate(t *testing.T) {
	ctx := context.Background()
	asked := make(chan string, 1)
	s := newSociety(t, as.Config{Root: noop, StuckAfter: -1, Logger: quiet})
	helper := actorOf(t, s, rootSpawn(t, s, "u", "helper", "helper", as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if m.Type == as.CollaborationRequest {
			var p as.CollaborationRequestPayload
			m.Decode(&p)
			asked <- p.RequestID
		}
		return nil
	})).ID)
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", noop).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "w"})
	returned := make(chan error, 1)
	w := spawnWith(t, s, lead, role.ID, as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if m.Text() == "ask" {
			_, err := self.Collaborate(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "help"}, 0)
			returned <- err
		}
		return nil
	}))
	sendAs(t, s, lead.ID(), w.ID(), "ask")
	id := recv(t, asked, "the request")
	if err := s.Terminate(ctx, lead.ID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker to end with its lead", func() bool {
		a, _ := s.Agent(w.ID())
		return a.Status == as.StatusTerminated
	})
	if err := recv(t, returned, "the terminated worker's Collaborate to return"); !errors.Is(err, as.ErrAgentTerminated) {
		t.Fatalf("the terminated worker's Collaborate returned %v, want ErrAgentTerminated", err)
	}
	if _, err := helper.Respond(ctx, id, as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: []byte(`"done"`)}); !errors.Is(err, as.ErrAgentTerminated) {
		t.Fatalf("the answer to the terminated worker: %v, want ErrAgentTerminated", err)
	}
	waitQuiet(t, s)
}

// TestTerminate_EndedRequesterStopsWaiting: a worker asks a helper, with a
// timeout of an hour, and is terminated before the helper answers. Its
// request's timer stops with it: the task is not kept running for the
// hour, waiting to tell an agent that ended that its request timed out.
func TestTerminate_EndedRequesterStopsWaiting(t *testing.T) {
	s := newSociety(t, as.Config{Root: noop, Logger: quiet})
	w, _ := askedInVain(t, s)
	terminateAndWait(t, s, w.ID())
	waitTaskStopped(t, s, "t", "the task to stop running once its only work is a terminated agent's request")
}
