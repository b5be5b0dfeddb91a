package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/cluster"
	"agentsociety/store/natsstore/natstest"
)

// A leader whose society does not close in time (here a behaviour that
// does not end its turn) returns the society's error from Close, wrapped:
// the host learns that the last records may not be written.
func TestClose_ReportsTheSocietysError(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	started, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	stuck := as.Config{Root: as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
		started <- struct{}{}
		<-release // the turn outlasts the society's Close
		return nil
	})}
	n := join(t, url, newClusterName(), "a", cluster.Options{Config: stuck, LeaseTTL: 300 * time.Millisecond})
	waitFor(t, ctx, "a to lead", func() bool { return n.Leader() == "a" })
	if _, err := n.SubmitRequirement(ctx, "anything"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the root's turn never started")
	}
	if err := n.Close(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the leader's Close: %v, want an error wrapping the society's context.DeadlineExceeded", err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("closing the leader again: %v, want nil", err)
	}
}

// A node that leads nothing, or whose society closes cleanly, closes
// without an error.
func TestClose_Clean(t *testing.T) {
	ctx := hangGuard(t)
	url := natstest.Server(t)
	name := newClusterName()
	a := join(t, url, name, "a", cluster.Options{Config: echo()})
	waitFor(t, ctx, "a to lead", func() bool { return a.Leader() == "a" })
	b := join(t, url, name, "b", cluster.Options{Config: echo()})
	if _, err := b.SubmitRequirement(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WaitForUserMessage(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("the follower's Close: %v, want nil", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("the leader's Close: %v, want nil", err)
	}
}
