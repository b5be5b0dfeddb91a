package natsstore_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"agentsociety/store"
	"agentsociety/store/natsstore"
	"agentsociety/store/natsstore/natstest"
	"agentsociety/store/storetest"

	"github.com/nats-io/nats.go/jetstream"
)

// A store opened with Fence on a bucket that a later fenced store claimed
// is refused by the server: its single writes, its batches and its
// artifacts change nothing, and it says it is fenced. The later store
// writes on, and reads none of the refused writes.
func TestFence_DeposedWriterChangesNothing(t *testing.T) {
	ctx := t.Context()
	url := natstest.Server(t)
	old := open(t, url, natsstore.Options{Bucket: "fenced", Fence: true})
	msg := func(id string) store.Message {
		return store.Message{ID: id, Seq: 1, From: "user", To: "root", Type: "text", Payload: json.RawMessage(`{}`), SentAt: time.Unix(1, 0).UTC()}
	}
	state := func(key, value string) store.StateEntry {
		return store.StateEntry{Scope: "task", Key: key, Value: json.RawMessage(value), Writer: "root", UpdatedAt: time.Unix(1, 0).UTC()}
	}
	if err := old.Apply(ctx, store.Change{Accepted: []store.Message{msg("m1")}}); err != nil {
		t.Fatal(err)
	}
	if err := old.Apply(ctx, store.Change{States: []store.StateEntry{state("a", "1"), state("b", "2")}}); err != nil {
		t.Fatal(err)
	}

	next := open(t, url, natsstore.Options{Bucket: "fenced", Fence: true})
	before, err := next.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Fenced():
		t.Fatal("the old store is fenced before it wrote again")
	default:
	}

	refused := []struct {
		name  string
		write func() error
	}{
		{"single write", func() error { return old.Apply(ctx, store.Change{Finished: []string{"m1"}}) }},
		{"batch", func() error {
			return old.Apply(ctx, store.Change{Accepted: []store.Message{msg("m2")}, States: []store.StateEntry{state("a", "3")}})
		}},
		{"artifact", func() error {
			return old.PutArtifact(ctx, store.Artifact{ID: "x1", Name: "x", CreatedBy: "root", Size: 1, CreatedAt: time.Unix(1, 0).UTC()}, []byte("x"))
		}},
		{"events", func() error {
			return old.AppendEvents(ctx, []store.Event{{Seq: 1, Data: json.RawMessage(`1`)}})
		}},
	}
	for _, r := range refused {
		if err := r.write(); !errors.Is(err, natsstore.ErrFenced) {
			t.Errorf("%s by the deposed store: %v, want ErrFenced", r.name, err)
		}
	}
	select {
	case <-old.Fenced():
	default:
		t.Error("Fenced() is not closed after a refused write")
	}

	after, err := next.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Pending) != 1 || after.Pending[0].ID != "m1" || len(after.States) != 2 || string(after.States[0].Value) != "1" {
		t.Fatalf("after the deposed store's writes the bucket holds %+v, want what it held before: %+v", after, before)
	}
	if _, _, err := next.GetArtifact(ctx, "x1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the deposed store's artifact: %v, want ErrNotFound", err)
	}
	// The new writer writes on, artifacts included.
	if err := next.Apply(ctx, store.Change{Finished: []string{"m1"}, States: []store.StateEntry{state("a", "4")}}); err != nil {
		t.Fatal(err)
	}
	if err := next.PutArtifact(ctx, store.Artifact{ID: "x2", Name: "x", CreatedBy: "root", Size: 1, CreatedAt: time.Unix(1, 0).UTC()}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := next.PutArtifact(ctx, store.Artifact{ID: "x2", Name: "x", CreatedBy: "root", Size: 1, CreatedAt: time.Unix(1, 0).UTC()}, []byte("x")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second put of x2: %v, want ErrExists", err)
	}
	select {
	case <-next.Fenced():
		t.Fatal("the new store fenced itself")
	default:
	}
}

// A fenced store passes the conformance suite: the fence changes nothing
// for its one writer.
func TestFence_Conformance(t *testing.T) {
	url := natstest.Server(t)
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, url, natsstore.Options{Fence: true}) })
	storetest.RunEventLog(t, func(t *testing.T) store.EventLog { return open(t, url, natsstore.Options{Fence: true}) })
}

// Events appended after a gap, right after a claim's message, are kept,
// and the log's oldest event is the first of them, not the claim's.
func TestFence_GapAfterAClaim(t *testing.T) {
	ctx := t.Context()
	ev := func(seq uint64) store.Event { return store.Event{Seq: seq, Data: json.RawMessage(fmt.Sprint(seq))} }
	s := open(t, natstest.Server(t), natsstore.Options{Fence: true}) // its claim's message comes first
	if err := s.AppendEvents(ctx, []store.Event{ev(7), ev(8)}); err != nil {
		t.Fatalf("appending events 7 and 8 to an empty log: %v", err)
	}
	if lo, hi, err := s.EventBounds(ctx); err != nil || lo != 7 || hi != 8 {
		t.Fatalf("EventBounds = %d, %d, %v; want 7, 8", lo, hi, err)
	}
	got, err := s.ReadEvents(ctx, 1, 10)
	if err != nil || len(got) != 2 || got[0].Seq != 7 {
		t.Fatalf("ReadEvents from 1 = %v, %v; want events 7 and 8", got, err)
	}
}

// A store that knows it was deposed trims nothing of the log the new
// store writes.
func TestFence_DeposedStoreDoesNotTrim(t *testing.T) {
	ctx := t.Context()
	url := natstest.Server(t)
	ev := func(seq uint64) store.Event { return store.Event{Seq: seq, Data: json.RawMessage(fmt.Sprint(seq))} }
	old := open(t, url, natsstore.Options{Bucket: "trim", Fence: true})
	next := open(t, url, natsstore.Options{Bucket: "trim", Fence: true})
	for _, evs := range [][]store.Event{{ev(1), ev(2)}, {ev(3), ev(4)}} {
		if err := next.AppendEvents(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.AppendEvents(ctx, []store.Event{ev(5)}); !errors.Is(err, natsstore.ErrFenced) {
		t.Fatalf("the deposed store's append: %v, want ErrFenced", err)
	}
	if err := old.TrimEvents(ctx, 100); !errors.Is(err, natsstore.ErrFenced) {
		t.Errorf("the deposed store's TrimEvents: %v, want ErrFenced", err)
	}
	if lo, hi, err := next.EventBounds(ctx); err != nil || lo != 1 || hi != 4 {
		t.Fatalf("the new store's log after the deposed store's trim: %d..%d, %v; want 1..4", lo, hi, err)
	}
}

// A deposed store that has not written since the bucket was claimed
// appends no events: the claim's message in the event log makes its next
// append refused, and when it learns the stream again it finds another
// store's claim there. The new store's log reads on as it wrote it.
func TestFence_DeposedStoreAppendsNoEvents(t *testing.T) {
	ctx := t.Context()
	url := natstest.Server(t)
	ev := func(seq uint64) store.Event { return store.Event{Seq: seq, Data: json.RawMessage(fmt.Sprint(seq))} }
	old := open(t, url, natsstore.Options{Bucket: "events", Fence: true})
	if err := old.AppendEvents(ctx, []store.Event{ev(1), ev(2)}); err != nil {
		t.Fatal(err)
	}
	next := open(t, url, natsstore.Options{Bucket: "events", Fence: true})
	if first, last, err := next.EventBounds(ctx); err != nil || first != 1 || last != 2 {
		t.Fatalf("the new store's EventBounds = %d, %d, %v; want 1, 2", first, last, err)
	}
	// Its append is refused; it learns the stream again and finds the claim.
	for range 2 {
		if err := old.AppendEvents(ctx, []store.Event{ev(3)}); !errors.Is(err, natsstore.ErrFenced) {
			t.Fatalf("the deposed store's append: %v, want ErrFenced", err)
		}
	}
	if err := next.AppendEvents(ctx, []store.Event{ev(3), ev(4)}); err != nil {
		t.Fatalf("the new store appends after the claim: %v", err)
	}
	got, err := next.ReadEvents(ctx, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, e := range got {
		seqs = append(seqs, e.Seq)
		if string(e.Data) != fmt.Sprint(e.Seq) {
			t.Errorf("event %d reads %s", e.Seq, e.Data)
		}
	}
	if !slices.Equal(seqs, []uint64{1, 2, 3, 4}) {
		t.Fatalf("the log holds events %v, want 1 to 4", seqs)
	}
	if first, last, err := next.EventBounds(ctx); err != nil || first != 1 || last != 4 {
		t.Fatalf("EventBounds = %d, %d, %v; want 1, 4", first, last, err)
	}
	// A claim on an empty log leaves it empty, and the first event is 1.
	empty := open(t, url, natsstore.Options{Bucket: "empty", Fence: true})
	if first, last, err := empty.EventBounds(ctx); err != nil || first != 0 || last != 0 {
		t.Fatalf("EventBounds of a claimed empty log = %d, %d, %v; want 0, 0", first, last, err)
	}
	if evs, err := empty.ReadEvents(ctx, 1, 10); err != nil || len(evs) != 0 {
		t.Fatalf("ReadEvents of a claimed empty log = %v, %v", evs, err)
	}
	if err := empty.AppendEvents(ctx, []store.Event{ev(1)}); err != nil {
		t.Fatal(err)
	}
}

// A store whose claim of the bucket another store's overtook, before it
// claimed the event log, does not claim the log: it finds itself deposed,
// and the later store appends on.
func TestFence_OvertakenClaimOfTheEventLog(t *testing.T) {
	ctx := t.Context()
	url := natstest.Server(t)
	a, err := natsstore.NewClaimingLater(ctx, natsstore.Options{URL: url, Bucket: "race", Fence: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	claimed, err := a.ClaimBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := open(t, url, natsstore.Options{Bucket: "race", Fence: true})
	if err := a.ClaimEvents(ctx, claimed); !errors.Is(err, natsstore.ErrFenced) {
		t.Fatalf("claiming the event log after another store claimed the bucket: %v, want ErrFenced", err)
	}
	ev := store.Event{Seq: 1, Data: json.RawMessage(`1`)}
	if err := a.AppendEvents(ctx, []store.Event{ev}); !errors.Is(err, natsstore.ErrFenced) {
		t.Fatalf("the deposed store's append: %v, want ErrFenced", err)
	}
	if err := b.AppendEvents(ctx, []store.Event{ev}); err != nil {
		t.Fatalf("the later store's append: %v", err)
	}
}

// A trim past the newest event keeps the message that holds it, though a
// claim's message, holding none, follows it: a store opened next numbers
// its events on from there.
func TestFence_TrimKeepsTheNewestEvent(t *testing.T) {
	ctx := t.Context()
	url := natstest.Server(t)
	ev := func(seq uint64) store.Event { return store.Event{Seq: seq, Data: json.RawMessage(fmt.Sprint(seq))} }
	first := open(t, url, natsstore.Options{Bucket: "trim", Fence: true})
	if err := first.AppendEvents(ctx, []store.Event{ev(1), ev(2), ev(3)}); err != nil {
		t.Fatal(err)
	}
	first.Close()
	second := open(t, url, natsstore.Options{Bucket: "trim", Fence: true})
	if err := second.TrimEvents(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if lo, hi, err := second.EventBounds(ctx); err != nil || hi != 3 || lo == 0 {
		t.Fatalf("EventBounds after a trim past the end = %d, %d, %v; want the newest, 3, kept", lo, hi, err)
	}
	second.Close()
	third := open(t, url, natsstore.Options{Bucket: "trim", Fence: true})
	if err := third.AppendEvents(ctx, []store.Event{ev(4)}); err != nil {
		t.Fatalf("appending event 4 after the trim: %v", err)
	}
}

// A change with a record larger than the server takes in one message is
// refused, alone or in a batch, and the store is not fenced for it: it
// was never sent. The next change is written.
func TestFence_OversizedChangeIsRefusedNotFenced(t *testing.T) {
	ctx := t.Context()
	s := open(t, natstest.Server(t), natsstore.Options{Fence: true})
	big := `"` + strings.Repeat("x", 2<<20) + `"`
	for name, c := range map[string]store.Change{
		"single write": {States: []store.StateEntry{state("s", "big", big)}},
		"batch":        {States: []store.StateEntry{state("s", "a", "1"), state("s", "big", big)}},
	} {
		if err := s.Apply(ctx, c); err == nil || errors.Is(err, natsstore.ErrFenced) {
			t.Errorf("%s: Apply of an oversized record: %v, want an error other than ErrFenced", name, err)
		}
	}
	select {
	case <-s.Fenced():
		t.Fatal("the store fenced itself over a change it never sent")
	default:
	}
	if err := s.Apply(ctx, store.Change{States: []store.StateEntry{state("s", "small", "1")}}); err != nil {
		t.Fatalf("the next, ordinary Apply: %v", err)
	}
	// In a round of group commit, between two changes that are written.
	errs := s.ApplyAll(ctx, []store.Change{
		{States: []store.StateEntry{state("s", "before", "1")}},
		{States: []store.StateEntry{state("s", "big", big)}},
		{States: []store.StateEntry{state("s", "after", "1")}},
	})
	if errs[0] != nil || errs[1] == nil || errors.Is(errs[1], natsstore.ErrFenced) || errs[2] != nil {
		t.Fatalf("a round with an oversized change in the middle: %v", errs)
	}
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range st.States {
		keys = append(keys, e.Key)
	}
	if !slices.Equal(keys, []string{"after", "before", "small"}) {
		t.Fatalf("the bucket holds the state keys %v, want after, before and small", keys)
	}
}

// A fenced store on a bucket of three replicas, where a round of group
// commit goes as one atomic batch, passes the conformance suite.
func TestFence_ConformanceReplicated(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	opts := natsstore.Options{Fence: true, Replicas: 3, Storage: jetstream.MemoryStorage}
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, urls[0], opts) })
	storetest.RunEventLog(t, func(t *testing.T) store.EventLog { return open(t, urls[0], opts) })
}

// On a bucket of three replicas, an artifact reads back as soon as
// PutArtifact has returned, whichever server the store is connected to:
// a read served by a replica that has not yet applied the write (a direct
// get, which any replica answers) said it was not found.
func TestGetArtifact_ReplicatedReadsItsOwnWrites(t *testing.T) {
	ctx := t.Context()
	urls := natstest.Cluster(t, 3)
	opts := natsstore.Options{Bucket: "artifacts", Fence: true, Replicas: 3, Storage: jetstream.MemoryStorage}
	for i, url := range urls {
		s := open(t, url, opts) // each claims the bucket from the one before
		var wg sync.WaitGroup
		var missed atomic.Int64
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 50 {
					id := fmt.Sprintf("s%d-%d-%d", i, g, j)
					if err := s.PutArtifact(ctx, store.Artifact{ID: id, Name: id, Size: 1, CreatedAt: time.Now()}, []byte("x")); err != nil {
						t.Error(err)
						return
					}
					if _, data, err := s.GetArtifact(ctx, id); err != nil || string(data) != "x" {
						if missed.Add(1) == 1 {
							t.Errorf("artifact %s read back as %q, %v", id, data, err)
						}
					}
				}
			}()
		}
		wg.Wait()
		if n := missed.Load(); n > 0 {
			t.Errorf("on server %d, %d of 400 artifacts did not read back after PutArtifact", i, n)
		}
	}
}

// A trim finds where to cut the event log in the store's index of what it
// appended, where that tells, as it would reading the stream: after the
// claims of two stores, with appends of one event, of several, and of
// more than one message holds, and after a trim.
func TestTrimEvents_IndexAsTheStream(t *testing.T) {
	ctx := t.Context()
	url := natstest.Server(t)
	seq := uint64(0)
	events := func(n, size int) []store.Event {
		var evs []store.Event
		for range n {
			seq++
			evs = append(evs, store.Event{Seq: seq, Data: json.RawMessage(`"` + strings.Repeat("x", size) + `"`)})
		}
		return evs
	}
	check := func(name string, s *natsstore.Store, wantIndexed bool) {
		t.Helper()
		indexed, read, err := s.TrimPoints(ctx)
		if err != nil {
			t.Fatal(err)
		}
		known := 0
		for before := range indexed {
			switch {
			case indexed[before] == 0:
			case indexed[before] != read[before]:
				t.Errorf("%s: trimming before %d, the index cuts at %d, the stream at %d", name, before, indexed[before], read[before])
			default:
				known++
			}
		}
		if wantIndexed && known == 0 {
			t.Errorf("%s: the index told none of the trims %v", name, read)
		}
	}
	first := open(t, url, natsstore.Options{Bucket: "trims", Fence: true})
	for _, evs := range [][]store.Event{events(1, 10), events(3, 10), events(3, 100<<10), events(1, 10)} {
		if err := first.AppendEvents(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	check("one store", first, true)
	if err := first.TrimEvents(ctx, 4); err != nil {
		t.Fatal(err)
	}
	check("after a trim", first, true)
	second := open(t, url, natsstore.Options{Bucket: "trims", Fence: true})
	check("the next store, before it appends", second, false)
	for _, evs := range [][]store.Event{events(2, 10), events(1, 10)} {
		if err := second.AppendEvents(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	check("the next store", second, true)
	if err := second.TrimEvents(ctx, seq+5); err != nil {
		t.Fatal(err)
	}
	check("after a trim past the newest event", second, true)
	if first, last, err := second.EventBounds(ctx); err != nil || first > seq || last != seq {
		t.Fatalf("EventBounds = %d, %d, %v; want the newest event, %d, kept", first, last, err, seq)
	}
}
