package agentsociety_test

import (
	"context"
	"errors"
	"testing"
	"time"

	as "agentsociety"
)

func TestSubmitRequirementRoundTrip(t *testing.T) {
	ctx := context.Background()
	worker := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		_, err := self.SendText(ctx, as.UserID, "done: "+m.Text())
		return err
	})
	root := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "lead", Prompt: "lead the task"})
		if err != nil {
			return err
		}
		child, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: worker})
		if err != nil {
			return err
		}
		_, err = self.SendText(ctx, child.ID, m.Text())
		return err
	})
	s := newSociety(t, as.Config{Root: root})
	task, err := s.SubmitRequirement(ctx, "calc")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := s.WaitForUserMessage(wctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Text() != "done: calc" || m.TaskID != task {
		t.Fatalf("got %q on task %q, want %q on %q", m.Text(), m.TaskID, "done: calc", task)
	}
	agents := s.Agents()
	if len(agents) != 1 || agents[0].ParentID != as.RootID || agents[0].TaskID != task {
		t.Fatalf("agents = %+v", agents)
	}
	if !s.IsKnown(as.RootID, agents[0].ID) || !s.IsKnown(agents[0].ID, as.RootID) {
		t.Fatal("root and its child must know each other")
	}
	if !s.IsKnown(as.UserID, agents[0].ID) {
		t.Fatal("user must know the agent that wrote to it first")
	}
}

func TestCloseRefusesAndWakesWaiters(t *testing.T) {
	s, err := as.New(context.Background(), as.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := s.WaitForUserMessage(context.Background(), nil)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, as.ErrClosed) {
		t.Fatalf("waiter got %v, want ErrClosed", err)
	}
	if _, err := s.SubmitRequirement(context.Background(), "x"); !errors.Is(err, as.ErrClosed) {
		t.Fatalf("SubmitRequirement after Close: %v, want ErrClosed", err)
	}
}

// A second Close returns only once the first has finished, so that "no
// goroutine is left" holds for whoever Close returns to; with a context that
// ends first, it returns that context's error.
func TestSecondCloseWaitsForTheFirst(t *testing.T) {
	ctx := context.Background()
	release, started := make(chan struct{}), make(chan struct{})
	s, err := as.New(ctx, as.Config{Logger: quiet, Root: as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
		close(started)
		<-release
		return nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubmitRequirement(ctx, "hold root"); err != nil {
		t.Fatal(err)
	}
	<-started
	first := make(chan error)
	go func() { first <- s.Close(ctx) }()
	for !errors.Is(func() error { _, err := s.SubmitRequirement(ctx, "x"); return err }(), as.ErrClosed) {
		time.Sleep(time.Millisecond) // until the first Close has begun
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Close while root's handler runs = %v, want context.DeadlineExceeded", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first Close = %v", err)
	}
	if err := s.Close(short); err != nil {
		t.Fatalf("Close after the first returned = %v, want nil", err)
	}
}
