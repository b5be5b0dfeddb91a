package inbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

var (
	errPanic  = errors.New("filter panicked")
	errClosed = errors.New("closed")
)

func newBox(limit int) *Box[string] {
	return New(limit, func(m string, r any) error { return fmt.Errorf("%w on %s: %v", errPanic, m, r) }, func() error { return errClosed })
}

// hangGuard bounds a test that waits on conditions.
func hangGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waiting waits until b has n waiters.
func waiting(t *testing.T, ctx context.Context, b *Box[string], n int) {
	for {
		b.mu.Lock()
		got := len(b.waiters)
		b.mu.Unlock()
		if got == n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%d waiters, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBox_PanickingFilter: a filter that panics returns the panic to its
// caller and the box goes on: the message it looked at stays in the inbox,
// or goes on to the next waiter.
func TestBox_PanickingFilter(t *testing.T) {
	ctx := hangGuard(t)
	b := newBox(10)
	panicky := func(string) bool { panic("filter bug") }

	b.Put("m1")
	if _, fromInbox, err := b.Take(ctx, panicky); !errors.Is(err, errPanic) || !fromInbox {
		t.Fatalf("the panicking filter on the inbox: %v (from the inbox: %v)", err, fromInbox)
	}
	if m, fromInbox, err := b.Take(ctx, nil); err != nil || m != "m1" || !fromInbox {
		t.Fatalf("after the panic: %q, %v, %v; want m1 from the inbox", m, fromInbox, err)
	}

	// Two waiters: the first one's filter panics, the second takes m2.
	panicked, took := make(chan error, 1), make(chan string, 1)
	go func() {
		_, _, err := b.Take(ctx, panicky)
		panicked <- err
	}()
	waiting(t, ctx, b, 1)
	go func() {
		m, _, _ := b.Take(ctx, func(m string) bool { return m == "m2" })
		took <- m
	}()
	waiting(t, ctx, b, 2)
	claimed, dropped, panics := b.Put("m2")
	if !claimed || dropped != nil || len(panics) != 1 || !errors.Is(panics[0], errPanic) {
		t.Fatalf("Put = %v, %v, %v; want claimed, nothing dropped, one panic", claimed, dropped, panics)
	}
	if err := <-panicked; !errors.Is(err, errPanic) {
		t.Fatalf("the panicking waiter got %v", err)
	}
	if m := <-took; m != "m2" {
		t.Fatalf("the second waiter got %q, want m2", m)
	}
}

// TestBox_LimitAndClose: the oldest message is dropped beyond the limit;
// a closed box answers a waiter, and later calls, with the closed error
// once it has nothing for them.
func TestBox_LimitAndClose(t *testing.T) {
	ctx := hangGuard(t)
	b := newBox(2)
	b.Put("a")
	b.Put("b")
	if _, dropped, _ := b.Put("c"); dropped == nil || *dropped != "a" {
		t.Fatalf("dropped %v, want a", dropped)
	}
	if got := b.Items(); len(got) != 2 || got[0] != "b" || got[1] != "c" {
		t.Fatalf("items %v, want [b c]", got)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := b.Take(ctx, func(m string) bool { return m == "z" })
		done <- err
	}()
	waiting(t, ctx, b, 1)
	b.Close()
	b.Close()
	if err := <-done; !errors.Is(err, errClosed) {
		t.Fatalf("the waiter got %v, want the closed error", err)
	}
	if m, _, err := b.Take(ctx, nil); err != nil || m != "b" {
		t.Fatalf("a closed box still gives what it holds: %q, %v", m, err)
	}
	if _, _, err := b.Take(ctx, func(m string) bool { return m == "z" }); !errors.Is(err, errClosed) {
		t.Fatalf("after Close: %v, want the closed error", err)
	}
}

// TestBox_Callbacks: Call calls those registered, and unregistering
// removes one.
func TestBox_Callbacks(t *testing.T) {
	b := newBox(1)
	var got []string
	un := b.Subscribe(func(m string) { got = append(got, "1:"+m) })
	b.Subscribe(func(m string) { got = append(got, "2:"+m) })
	un()
	b.Call("x", func(f func(string), m string) { f(m) })
	if len(got) != 1 || got[0] != "2:x" {
		t.Fatalf("callbacks ran %v, want [2:x]", got)
	}
}

// TestCallbacks_UnregisteredIsSkipped: a callback unregistered while Call
// runs, before its turn, is not called, and Call counts only the callbacks
// it called.
func TestCallbacks_UnregisteredIsSkipped(t *testing.T) {
	b := newBox(4)
	var got []string
	b.Subscribe(func(m string) { got = append(got, "a:"+m) })
	unregister := b.Subscribe(func(m string) { got = append(got, "c:"+m) })
	n := b.Call("2", func(f func(string), m string) {
		if len(got) == 0 {
			unregister() // a's call unregisters c before c's turn
		}
		f(m)
	})
	if n != 1 || len(got) != 1 || got[0] != "a:2" {
		t.Fatalf("Call called %q and counted %d, want only a, counted 1", got, n)
	}
}
