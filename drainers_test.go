package agentsociety_test

import (
	"context"
	"errors"
	"testing"
	"time"

	as "agentsociety"
)

// spawnWith spawns a child of lead on roleID driven by b.
func spawnWith(t *testing.T, s *as.Society, lead *as.Actor, roleID string, b as.Behavior) *as.Actor {
	t.Helper()
	a, _, err := lead.SpawnAgent(context.Background(), as.SpawnSpec{RoleID: roleID, Brief: validBrief(), Behavior: b})
	if err != nil {
		t.Fatal(err)
	}
	x, err := s.Actor(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// A handler's turn holds an idle agent it sends to, for its own drainer to
// take up when it returns. A handler that sends and then waits, by means the
// society cannot see, for the receiver to act must still see it act.
func TestDrainer_HandlerBlockedAfterSendingIsNotWaitedFor(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Logger: quiet})
	lead, roleID := hostLead(t, s, "task-blocked", "worker")

	acted := make(chan struct{})
	b := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
		close(acted)
		return nil
	}))
	result := make(chan error, 1)
	a := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if _, err := self.SendText(ctx, b.ID(), "go"); err != nil {
			result <- err
			return err
		}
		select {
		case <-acted:
			result <- nil
		case <-time.After(10 * time.Second):
			result <- errors.New("the receiver never ran while its sender's handler waited for it")
		}
		return nil
	}))
	if _, err := lead.SendText(ctx, a.ID(), "start"); err != nil {
		t.Fatal(err)
	}
	if err := <-result; err != nil {
		t.Fatal(err)
	}
}

// A handle kept past the end of its turn still delivers: the ended turn
// holds nothing, so the receiver gets a drainer of its own.
func TestDrainer_HandleKeptPastItsTurn(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Logger: quiet})
	lead, roleID := hostLead(t, s, "task-kept", "worker")

	got := make(chan as.Message, 1)
	b := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		got <- m
		return nil
	}))
	kept := make(chan *as.Actor, 1)
	a := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(_ context.Context, self *as.Actor, _ as.Message) error {
		kept <- self
		return nil
	}))
	if _, err := lead.SendText(ctx, a.ID(), "start"); err != nil {
		t.Fatal(err)
	}
	self := <-kept
	time.Sleep(10 * time.Millisecond) // let the turn end
	if _, err := self.SendText(ctx, b.ID(), "late"); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.From != a.ID() {
			t.Fatalf("message from %s, want %s", m.From, a.ID())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a message sent through a handle after its turn ended was never handled")
	}
}

// A turn holds one agent; a handler that sends to many idle agents gets the
// others drained at once, in parallel with it, and the held one too if it
// goes on running.
func TestDrainer_FanOutRunsInParallel(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Logger: quiet})
	lead, roleID := hostLead(t, s, "task-fan", "worker")

	const n = 4
	arrived := make(chan struct{}, n)
	release := make(chan struct{})
	defer close(release)
	var kids []*as.Actor
	for range n {
		kids = append(kids, spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
			arrived <- struct{}{}
			return nil
		})))
	}
	parent := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(ctx context.Context, self *as.Actor, _ as.Message) error {
		for _, k := range kids {
			if _, err := self.SendText(ctx, k.ID(), "work"); err != nil {
				return err
			}
		}
		<-release // every child runs while this handler still does
		return nil
	}))
	if _, err := lead.SendText(ctx, parent.ID(), "fan out"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d children ran while their parent's handler waited", i, n)
		}
	}
}
