package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	as "agentsociety"
)

// TestEndpoint_PanickingFilter: a WaitForUserMessage filter that panics
// returns the panic to its caller as ErrInvalidArgument, and the node's
// endpoint goes on: the message it looked at stays for the next call, or
// goes on to the inbox.
func TestEndpoint_PanickingFilter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	u := newEndpoint(10, slog.New(slog.NewTextHandler(io.Discard, nil)))
	panicky := func(as.Message) bool { panic("filter bug") }
	wantPanic := func(err error) {
		t.Helper()
		var e *as.Error
		if !errors.As(err, &e) || e.Code != as.ErrInvalidArgument {
			t.Fatalf("the panicking filter's call returned %v, want ErrInvalidArgument", err)
		}
	}

	// On a message in the inbox.
	u.deliver(as.Message{ID: "m1"})
	_, err := u.wait(ctx, panicky)
	wantPanic(err)
	if m, err := u.wait(ctx, nil); err != nil || m.ID != "m1" {
		t.Fatalf("after the panic: %q, %v; want m1", m.ID, err)
	}

	// On a message that comes while it waits.
	done := make(chan error, 1)
	go func() {
		_, err := u.wait(ctx, panicky)
		done <- err
	}()
	for waiting := false; !waiting; time.Sleep(time.Millisecond) {
		if ctx.Err() != nil {
			t.Fatal("the waiter never registered")
		}
		u.mu.Lock()
		waiting = len(u.waiters) == 1
		u.mu.Unlock()
	}
	u.deliver(as.Message{ID: "m2"})
	wantPanic(<-done)
	if m, err := u.wait(ctx, nil); err != nil || m.ID != "m2" {
		t.Fatalf("after the waiter's panic: %q, %v; want m2 in the inbox", m.ID, err)
	}
}
