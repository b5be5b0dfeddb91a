package natsstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"agentsociety/store"
	"agentsociety/store/natsstore"
	"agentsociety/store/natsstore/natstest"
	"agentsociety/store/storetest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var buckets atomic.Int64

// open opens a store on a bucket of its own on url, closed when the test
// ends.
func open(t testing.TB, url string, opts natsstore.Options) *natsstore.Store {
	t.Helper()
	opts.URL = url
	if opts.Bucket == "" {
		opts.Bucket = fmt.Sprintf("b%d", buckets.Add(1))
	}
	s, err := natsstore.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	url := natstest.Server(t)
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, url, natsstore.Options{}) })
	storetest.RunEventLog(t, func(t *testing.T) store.EventLog { return open(t, url, natsstore.Options{}) })
}

// An event log whose first event is not 1, as a society's is when it
// reopens on a bucket whose log was removed, starts there.
func TestEvents_StartPastOne(t *testing.T) {
	s := open(t, natstest.Server(t), natsstore.Options{})
	ctx := t.Context()
	ev := func(seq uint64) store.Event { return store.Event{Seq: seq, Data: json.RawMessage(fmt.Sprint(seq))} }
	if err := s.AppendEvents(ctx, []store.Event{ev(41), ev(42)}); err != nil {
		t.Fatal(err)
	}
	if first, last, err := s.EventBounds(ctx); err != nil || first != 41 || last != 42 {
		t.Fatalf("EventBounds = %d, %d, %v; want 41, 42", first, last, err)
	}
	got, err := s.ReadEvents(ctx, 1, 10)
	if err != nil || len(got) != 2 || got[0].Seq != 41 || string(got[1].Data) != "42" {
		t.Fatalf("ReadEvents = %+v, %v", got, err)
	}
	if err := s.AppendEvents(ctx, []store.Event{ev(42)}); err == nil {
		t.Fatal("appending event 42 after 42: got no error")
	}
}

// New with a URL where no server listens fails at once, within its
// context, rather than wait for a server.
func TestNew_Unreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()                                                       // nothing listens there now
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a hang guard
	defer cancel()
	s, err := natsstore.New(ctx, natsstore.Options{URL: "nats://" + addr})
	if err == nil {
		s.Close()
		t.Fatal("New with no server: got no error")
	}
	if ctx.Err() != nil {
		t.Fatalf("New with no server waited until the guard's deadline: %v", err)
	}
}

// Two stores on one bucket, as two nodes will have: each Apply checks the
// revision of every key it writes, so a store whose knowledge is stale
// learns the bucket's and tries again, and a message pending through the
// other store is refused, not accepted twice.
func TestTwoStoresOnOneBucket(t *testing.T) {
	url := natstest.Server(t)
	a := open(t, url, natsstore.Options{Bucket: "shared"})
	b := open(t, url, natsstore.Options{Bucket: "shared"})
	ctx := t.Context()
	mustApply := func(s *natsstore.Store, c store.Change) {
		t.Helper()
		if err := s.Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	role := func(id, name string) store.Role {
		return store.Role{ID: id, Name: name, CreatedBy: "root", CreatedAt: at}
	}
	msg := func(id string, seq uint64) store.Message {
		return store.Message{ID: id, Seq: seq, From: "user", To: "root", Type: "general", SentAt: at}
	}
	// Both stores know the bucket is empty.
	if _, err := a.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Load(ctx); err != nil {
		t.Fatal(err)
	}
	mustApply(a, store.Change{Roles: []store.Role{role("r1", "writer"), role("r2", "critic")}, Accepted: []store.Message{msg("m1", 1)},
		HistoryAppends: []store.HistoryAppend{{AgentID: "x", Messages: msgs("1")}}})
	// b has not seen a's change: it expects r1 and x's history not to
	// exist, loses, refreshes and replaces them, keeping r1's place.
	mustApply(b, store.Change{Roles: []store.Role{role("r1", "poet")},
		HistoryAppends: []store.HistoryAppend{{AgentID: "x", Messages: msgs("2")}}})
	err := b.Apply(ctx, store.Change{Accepted: []store.Message{msg("m1", 1)}})
	if !errors.Is(err, store.ErrExists) {
		t.Fatalf("b accepting m1, pending through a: got %v, want an error wrapping store.ErrExists", err)
	}
	mustApply(b, store.Change{Finished: []string{"m1"}})
	// a's knowledge of m1 is stale now: it accepts it again.
	mustApply(a, store.Change{Accepted: []store.Message{msg("m1", 2)}})

	want := store.State{
		Roles:     []store.Role{role("r1", "poet"), role("r2", "critic")},
		Pending:   []store.Message{msg("m1", 2)},
		Histories: []store.History{{AgentID: "x", Messages: msgs("1", "2")}},
	}
	for name, s := range map[string]*natsstore.Store{"a": a, "b": b} {
		got, err := s.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.EquateApproxTime(0)); diff != "" {
			t.Errorf("%s: Load mismatch (-want +got):\n%s", name, diff)
		}
	}
}

// A store opened again on a bucket finds what the last one left, and goes
// on from it; a history grown by many turns keeps only what it kept.
func TestReopen(t *testing.T) {
	url := natstest.Server(t)
	ctx := t.Context()
	first, err := natsstore.New(ctx, natsstore.Options{URL: url, Bucket: "again"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 5 {
		c := store.Change{
			Agents:         []store.Agent{{ID: "a1", RoleID: "r", ParentID: "root", Status: fmt.Sprint("turn ", i), CreatedAt: at}},
			HistoryAppends: []store.HistoryAppend{{AgentID: "a1", Drop: 1, Messages: msgs(fmt.Sprint(i))}},
		}
		if err := first.Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	first.Close()
	if err := first.Apply(ctx, store.Change{Finished: []string{"m"}}); !errors.Is(err, natsstore.ErrClosed) {
		t.Fatalf("Apply after Close: got %v, want ErrClosed", err)
	}

	second := open(t, url, natsstore.Options{Bucket: "again"})
	if err := second.Apply(ctx, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a1", Messages: msgs("5")}}}); err != nil {
		t.Fatal(err)
	}
	got, err := second.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := store.State{
		Agents:    []store.Agent{{ID: "a1", RoleID: "r", ParentID: "root", Status: "turn 4", CreatedAt: at}},
		Histories: []store.History{{AgentID: "a1", Messages: msgs("4", "5"), Dropped: 4}},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.EquateApproxTime(0)); diff != "" {
		t.Errorf("Load mismatch (-want +got):\n%s", diff)
	}
}

// A change that needs more writes than one atomic batch takes is refused
// whole.
func TestApply_TooLargeIsRefusedWhole(t *testing.T) {
	s := open(t, natstest.Server(t), natsstore.Options{MaxBatch: 3})
	c := store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a", Messages: msgs("1", "2", "3")}}} // and the head
	if err := s.Apply(t.Context(), c); err == nil {
		t.Fatal("Apply of 4 writes with MaxBatch 3: got no error")
	}
	got, err := s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Histories) != 0 {
		t.Errorf("the refused change left %+v", got.Histories)
	}
}

func msgs(texts ...string) []json.RawMessage {
	var out []json.RawMessage
	for _, t := range texts {
		out = append(out, json.RawMessage(fmt.Sprintf(`{"content":%q}`, t)))
	}
	return out
}
