package agentsociety_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/store"
)

// countingStore counts the message records applied to the store it wraps,
// and says it is volatile or not as told.
type countingStore struct {
	store.Store
	volatile           bool
	accepted, finished atomic.Int64
}

func (c *countingStore) Apply(ctx context.Context, ch store.Change) error {
	c.accepted.Add(int64(len(ch.Accepted)))
	c.finished.Add(int64(len(ch.Finished)))
	return c.Store.Apply(ctx, ch)
}

func (c *countingStore) Volatile() bool { return c.volatile }

// A society records each message in a store that outlives the process, and
// none in a volatile one, where the records would only cost time.
func TestVolatileStore_MessagesAreRecordedOnlyInDurableStores(t *testing.T) {
	for _, volatile := range []bool{false, true} {
		t.Run("volatile="+strconv.FormatBool(volatile), func(t *testing.T) {
			ctx := context.Background()
			st := &countingStore{Store: store.NewMemory(), volatile: volatile}
			s := newSociety(t, as.Config{Logger: quiet, Store: st})
			lead, roleID := hostLead(t, s, "task-count", "worker")

			const n = 50
			var wg sync.WaitGroup
			wg.Add(n)
			a := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
				wg.Done()
				return nil
			}))
			// The lead knows its child already: no message adds a contact.
			acc0, fin0 := st.accepted.Load(), st.finished.Load()
			for i := range n {
				if _, err := lead.SendText(ctx, a.ID(), strconv.Itoa(i)); err != nil {
					t.Fatal(err)
				}
			}
			wg.Wait()
			waitFor(t, func() bool { return volatile || st.finished.Load()-fin0 == n })
			acc, fin := st.accepted.Load()-acc0, st.finished.Load()-fin0
			want := int64(n)
			if volatile {
				want = 0
			}
			if acc != want || fin != want {
				t.Fatalf("%d messages recorded as accepted and %d as finished, want %d each", acc, fin, want)
			}
		})
	}
}

// A society on a volatile store records at Close the messages still queued,
// and a society opened again on the store delivers them, in order, once:
// those it handles are not pending at its own Close, those still queued
// are, once each.
func TestVolatileStore_QueuedMessagesOutliveClose(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	const n = 10
	// hold keeps its agent on its first message until Close cancels it, so
	// the rest stay queued.
	started := make(chan struct{}, 1)
	hold := as.BehaviorFunc(func(ctx context.Context, _ *as.Actor, _ as.Message) error {
		started <- struct{}{}
		<-ctx.Done()
		return nil
	})
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	s, err := as.New(ctx, as.Config{Logger: quiet, Store: mem, DefaultBehavior: hold})
	if err != nil {
		t.Fatal(err)
	}
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.CreateRole(ctx, as.RoleSpec{Name: "worker"})
	x, _, err := root.WithTask("x").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := root.WithTask("x").SendText(ctx, x.ID, strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	durRecv(t, started, 10*time.Second, "x's first message")
	if st, _ := mem.Load(ctx); len(st.Pending) != 0 {
		t.Fatalf("%d messages recorded in a volatile store while the society runs", len(st.Pending))
	}
	s.Close(cancelled) // x's first message was being handled: it ends there
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close after a timed-out Close = %v, want nil", err)
	}
	want := texts(1, n)
	if got := pendingTexts(t, mem); !slices.Equal(got, want) {
		t.Fatalf("pending after Close: %v, want %v", got, want)
	}

	// Reopened with x holding again: x takes the first restored message,
	// the others stay queued, and the second Close records each once.
	s, err = as.New(ctx, as.Config{Logger: quiet, Store: mem, DefaultBehavior: hold})
	if err != nil {
		t.Fatal(err)
	}
	durRecv(t, started, 10*time.Second, "x's first restored message")
	if err := s.Close(cancelled); err != context.Canceled {
		t.Fatalf("Close = %v, want context.Canceled", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close after a timed-out Close = %v, want no store error", err)
	}
	want = texts(2, n)
	if got := pendingTexts(t, mem); !slices.Equal(got, want) {
		t.Fatalf("pending after the second Close: %v, want %v", got, want)
	}

	// Reopened with x recording: every message comes, in order, and none is
	// pending after Close.
	var (
		mu   sync.Mutex
		got  []string
		done = make(chan struct{})
	)
	record := as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if got = append(got, m.Text()); len(got) == len(want) {
			close(done)
		}
		return nil
	})
	s, err = as.New(ctx, as.Config{Logger: quiet, Store: mem, DefaultBehavior: record})
	if err != nil {
		t.Fatal(err)
	}
	durRecv(t, done, 10*time.Second, "the restored messages")
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	if p := pendingTexts(t, mem); len(p) != 0 {
		t.Fatalf("pending after every message was handled: %v", p)
	}
}

func pendingTexts(t *testing.T, st store.Store) []string {
	t.Helper()
	loaded, err := st.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range loaded.Pending {
		out = append(out, as.Message{Payload: m.Payload}.Text())
	}
	return out
}

// texts returns the decimal numbers from..to-1.
func texts(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, strconv.Itoa(i))
	}
	return out
}

// A send with a context already cancelled is refused on a volatile store as
// on any other, though nothing is written to the store.
func TestVolatileStore_CancelledSendIsRefused(t *testing.T) {
	s := newSociety(t, as.Config{Logger: quiet})
	lead, roleID := hostLead(t, s, "task-cancelled", "worker")
	kid := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
		t.Error("a message sent with a cancelled context was delivered")
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := lead.SendText(ctx, kid.ID(), "hi"); !errors.Is(err, context.Canceled) {
		t.Fatalf("send with a cancelled context = %v, want an error wrapping context.Canceled", err)
	}
}

// A Close that times out cancels the handlers still running; on a volatile
// store there is nothing to record of their end, so nothing fails to be
// recorded either.
func TestVolatileStore_TimedOutCloseLogsNoRecordFailure(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	started := make(chan struct{})
	s, err := as.New(ctx, as.Config{Logger: slog.New(rec), Root: as.BehaviorFunc(func(ctx context.Context, _ *as.Actor, _ as.Message) error {
		close(started)
		<-ctx.Done()
		return nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubmitRequirement(ctx, "block"); err != nil {
		t.Fatal(err)
	}
	<-started
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := s.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want context.DeadlineExceeded", err)
	}
	if err := s.Close(ctx); err != nil { // wait for the society to stop
		t.Fatalf("Close after a timed-out Close = %v, want nil", err)
	}
	if rec.find("recording a handled message failed", nil) {
		t.Fatal("a volatile store's empty record was reported as failed")
	}
}
