package natsstore_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"agentsociety/store"
	"agentsociety/store/natsstore"
	"agentsociety/store/natsstore/natstest"
	"agentsociety/store/storetest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A fenced store that sweeps after every message ended passes the
// conformance suite, on one replica and on three.
func TestEnds_ConformanceSweepingEachEnd(t *testing.T) {
	url := natstest.Server(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		s := open(t, url, natsstore.Options{Fence: true})
		s.SweepAfter(1)
		return s
	})
	urls := natstest.Cluster(t, 3)
	storetest.Run(t, func(t *testing.T) store.Store {
		s := open(t, urls[0], natsstore.Options{Fence: true, Replicas: 3, Storage: jetstream.MemoryStorage})
		s.SweepAfter(1)
		return s
	})
}

// endMsg returns message n of the tests of ends.
func endMsg(n int) store.Message {
	return store.Message{ID: fmt.Sprintf("m%d", n), Seq: uint64(n), From: "a", To: "b", Type: "text",
		Payload: json.RawMessage(`{"text":"hi"}`), SentAt: time.Unix(int64(n), 0).UTC()}
}

// loadPending loads s and returns the ids of its pending messages.
func loadPending(t *testing.T, s *natsstore.Store) []string {
	t.Helper()
	st, err := s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range st.Pending {
		ids = append(ids, m.ID)
	}
	return ids
}

// fenced starts a NATS server of the test's own and returns its URL, with
// the options of a fenced store in memory on a bucket of its own there.
func fenced(t *testing.T) (string, natsstore.Options) {
	t.Helper()
	return natstest.Server(t), natsstore.Options{Fence: true, Bucket: fmt.Sprintf("b%d", buckets.Add(1)), Storage: jetstream.MemoryStorage}
}

// streamMsgs returns how many messages the bucket's stream holds, and
// its last sequence.
func streamMsgs(t *testing.T, url, bucket string) (msgs, last uint64) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(t.Context(), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs, info.State.LastSeq
}

// keyRevision returns the revision of the pending key of message id.
func keyRevision(t *testing.T, url, bucket, id string) uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), "m."+base64.RawURLEncoding.EncodeToString([]byte(id)))
	if err != nil {
		t.Fatal(err)
	}
	return e.Revision()
}

// A fenced store records the ends of the messages a change finishes as one
// write, and sweeps the keys of the messages ended in bulk: the bucket
// keeps a bounded number of keys however many messages pass, a message
// that stays pending is kept (written again) and listed, and a store
// opened on the bucket after lists exactly the messages pending.
func TestEnds_SweepKeepsWhatIsPending(t *testing.T) {
	ctx := t.Context()
	url, opts := fenced(t)
	s := open(t, url, opts)
	s.SweepAfter(64)
	// Message 0 stays pending throughout; so does every tenth.
	if err := s.Apply(ctx, store.Change{Accepted: []store.Message{endMsg(0)}}); err != nil {
		t.Fatal(err)
	}
	want := []string{"m0"}
	n := 1
	for round := range 20 {
		var accepted []store.Message
		var finished []string
		for range 50 {
			accepted = append(accepted, endMsg(n))
			if n%10 == 0 {
				want = append(want, endMsg(n).ID)
			} else {
				finished = append(finished, endMsg(n).ID)
			}
			n++
		}
		if err := s.Apply(ctx, store.Change{Accepted: accepted}); err != nil {
			t.Fatal(err)
		}
		_, before := streamMsgs(t, url, opts.Bucket)
		if err := s.Apply(ctx, store.Change{Finished: finished}); err != nil {
			t.Fatal(err)
		}
		if _, after := streamMsgs(t, url, opts.Bucket); round == 0 && after != before+1 {
			t.Fatalf("finishing %d messages wrote %d messages to the bucket, want 1", len(finished), after-before)
		}
	}
	if s.Sweeps() == 0 {
		t.Fatal("no sweep")
	}
	// Message 0, accepted first, was written again past the keys purged.
	if rev := keyRevision(t, url, opts.Bucket, "m0"); rev < 100 {
		t.Fatalf("message 0's key is at revision %d, the one it was accepted at: no sweep wrote it again", rev)
	}
	held, _ := streamMsgs(t, url, opts.Bucket)
	// What is pending (101), the ends since the last sweeps (at most twice
	// 64, and their records), the fence.
	if held > 101+2*64+20+1 {
		t.Fatalf("the bucket holds %d messages after 1,000 accepted and 900 ended", held)
	}
	if got := loadPending(t, s); !slices.Equal(got, want) {
		t.Fatalf("Load lists %d pending messages, want %d:\n%v\nwant\n%v", len(got), len(want), got, want)
	}
	// Finishing the rest, and a message not pending, after the Load.
	if err := s.Apply(ctx, store.Change{Finished: append(want[1:], "m1")}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	next := open(t, url, opts)
	if got := loadPending(t, next); !slices.Equal(got, []string{"m0"}) {
		t.Fatalf("a store opened after lists the pending messages %v, want [m0]", got)
	}
	// A message ended may be accepted again.
	if err := next.Apply(ctx, store.Change{Accepted: []store.Message{endMsg(1)}}); err != nil {
		t.Fatalf("accepting again a message ended: %v", err)
	}
	if err := next.Apply(ctx, store.Change{Accepted: []store.Message{endMsg(0)}}); err == nil {
		t.Fatal("accepting again a message pending: no error")
	}
}

// A fenced store of this version reads a bucket as a store of the version
// before left it, whose finished messages' keys are deleted one by one,
// and finishes its messages.
func TestEnds_ReadsTheLayoutBefore(t *testing.T) {
	ctx := t.Context()
	url, opts := fenced(t)
	old := open(t, url, opts)
	if err := old.Apply(ctx, store.Change{Accepted: []store.Message{endMsg(1), endMsg(2), endMsg(3), endMsg(4)}}); err != nil {
		t.Fatal(err)
	}
	old.Close()
	// The version before wrote the keys of messages pending as this one
	// does, and deleted those of messages finished, with a marker.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, opts.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	tok := func(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }
	for _, id := range []string{"m1", "m3"} {
		if err := kv.Delete(ctx, "m."+tok(id)); err != nil {
			t.Fatal(err)
		}
	}
	s := open(t, url, opts)
	s.SweepAfter(1)
	if got := loadPending(t, s); !slices.Equal(got, []string{"m2", "m4"}) {
		t.Fatalf("Load lists %v pending, want [m2 m4]", got)
	}
	if err := s.Apply(ctx, store.Change{Finished: []string{"m2"}}); err != nil {
		t.Fatal(err)
	}
	if s.Sweeps() == 0 {
		t.Fatal("no sweep")
	}
	s.Close()
	next := open(t, url, opts)
	if got := loadPending(t, next); !slices.Equal(got, []string{"m4"}) {
		t.Fatalf("after the sweep, Load lists %v pending, want [m4]", got)
	}
}

// A store deposed by another's claim writes no ends, and its sweep
// removes nothing the new store lists.
func TestEnds_DeposedStoreEndsNothing(t *testing.T) {
	ctx := t.Context()
	url, opts := fenced(t)
	old := open(t, url, opts)
	old.SweepAfter(1)
	if err := old.Apply(ctx, store.Change{Accepted: []store.Message{endMsg(1), endMsg(2), endMsg(3)}}); err != nil {
		t.Fatal(err)
	}
	next := open(t, url, opts)
	if err := old.Apply(ctx, store.Change{Finished: []string{"m1", "m2"}}); err == nil {
		t.Fatal("a deposed store recorded ends")
	}
	if got := loadPending(t, next); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("the new store lists %v pending, want [m1 m2 m3]", got)
	}
}

// Sweeps made while changes are in flight, from many goroutines at once,
// keep every message pending and no other: a store opened after lists
// exactly those.
func TestEnds_SweepsAmongConcurrentChanges(t *testing.T) {
	ctx := t.Context()
	url, opts := fenced(t)
	s := open(t, url, opts)
	s.SweepAfter(16)
	const workers, each = 8, 120
	kept := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var ended []string
			for i := range each {
				n := w*each + i
				if err := s.Apply(ctx, store.Change{Accepted: []store.Message{endMsg(n)}}); err != nil {
					t.Error(err)
					return
				}
				if n%50 == 0 {
					kept[w] = append(kept[w], endMsg(n).ID)
					continue
				}
				ended = append(ended, endMsg(n).ID)
				if len(ended) == 3 || i == each-1 {
					if err := s.Apply(ctx, store.Change{Finished: ended}); err != nil {
						t.Error(err)
						return
					}
					ended = nil
				}
			}
		})
	}
	wg.Wait()
	if s.Sweeps() == 0 {
		t.Fatal("no sweep")
	}
	var want []string
	for _, ids := range kept {
		want = append(want, ids...)
	}
	s.Close()
	next := open(t, url, opts)
	got := loadPending(t, next)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("a store opened after lists %d pending messages, want %d:\n%v\nwant\n%v", len(got), len(want), got, want)
	}
}

// A store deposed by another's claim purges nothing when it sweeps: a
// purge is not a write the server checks against the fence.
func TestEnds_DeposedStoreSweepsNothing(t *testing.T) {
	ctx := t.Context()
	url, opts := fenced(t)
	old := open(t, url, opts)
	old.SweepAfter(1000)
	if err := old.Apply(ctx, store.Change{Accepted: []store.Message{endMsg(1), endMsg(2), endMsg(3)}}); err != nil {
		t.Fatal(err)
	}
	if err := old.Apply(ctx, store.Change{Finished: []string{"m1", "m2"}}); err != nil {
		t.Fatal(err)
	}
	before := keyRevision(t, url, opts.Bucket, "m1")
	next := open(t, url, opts)
	old.SweepNow()
	select {
	case <-old.Fenced():
	default:
		t.Fatal("the deposed store's sweep did not find it deposed")
	}
	if old.Sweeps() != 0 {
		t.Fatal("the deposed store swept")
	}
	if rev := keyRevision(t, url, opts.Bucket, "m1"); rev != before {
		t.Fatalf("m1's key went from revision %d to %d", before, rev)
	}
	if got := loadPending(t, next); !slices.Equal(got, []string{"m3"}) {
		t.Fatalf("the new store lists %v pending, want [m3]", got)
	}
}

// A fenced store whose messages all end with other records (a turn's
// history), as deletions, never sweeps: its list of the pending keys the
// bucket holds follows the keys its index knows, not every message it
// ever accepted.
func TestEnds_PresentBoundedWithoutEnds(t *testing.T) {
	ctx := t.Context()
	url := natstest.Server(t)
	s := open(t, url, natsstore.Options{Fence: true, Storage: jetstream.MemoryStorage, MarkerTTL: time.Second})
	const each, rounds = 300, 5
	n := 0
	for round := range rounds {
		var accepted []store.Message
		var finished []string
		for range each {
			accepted = append(accepted, endMsg(n))
			finished = append(finished, endMsg(n).ID)
			n++
		}
		if err := s.Apply(ctx, store.Change{Accepted: accepted}); err != nil {
			t.Fatal(err)
		}
		// Ended with a state entry, as a turn's end is with its history.
		turn := store.Change{Finished: finished, States: []store.StateEntry{{Scope: "s", Key: "k", Value: json.RawMessage(fmt.Sprint(round))}}}
		if err := s.Apply(ctx, turn); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond) // the markers expire, and the index forgets their keys
	}
	if s.Sweeps() != 0 {
		t.Fatal("a sweep without ends")
	}
	// What the index knows: the last round's markers, and up to as many
	// entries again before the list is compacted.
	if got := s.Present(); got > 3*each {
		t.Fatalf("the store lists %d pending keys after %d messages accepted and ended, with none pending", got, n)
	}
}

// A change that only finishes many messages of long ids, whose ends would
// be more than one message of the server's in one record, is recorded,
// alone or with other changes, on three replicas as on one, and does not
// fence the store.
func TestEnds_LongIDs(t *testing.T) {
	ctx := t.Context()
	long := func(n int) store.Message {
		m := endMsg(n)
		m.ID = fmt.Sprintf("%04d-%s", n, strings.Repeat("x", 1200))
		return m
	}
	for _, c := range []struct {
		name string
		url  string
		opts natsstore.Options
	}{
		{"R1", natstest.Server(t), natsstore.Options{Fence: true, Storage: jetstream.MemoryStorage}},
		{"R3", natstest.Cluster(t, 3)[0], natsstore.Options{Fence: true, Replicas: 3, Storage: jetstream.MemoryStorage}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, c.url, c.opts)
			var finished []string
			for lo := 0; lo < 2000; lo += 100 {
				var accepted []store.Message
				for n := lo; n < lo+100; n++ {
					accepted = append(accepted, long(n))
					finished = append(finished, long(n).ID)
				}
				if err := s.Apply(ctx, store.Change{Accepted: accepted}); err != nil {
					t.Fatal(err)
				}
			}
			// With another change, as concurrent Applies go out together.
			other := store.Change{States: []store.StateEntry{{Scope: "s", Key: "k", Value: json.RawMessage("1")}}}
			for i, err := range s.ApplyAll(ctx, []store.Change{{Finished: finished[:1000]}, other}) {
				if err != nil {
					t.Fatalf("change %d, finishing 1,000 messages of long ids with another change: %v", i, err)
				}
			}
			if err := s.Apply(ctx, store.Change{Finished: finished[1000:]}); err != nil {
				t.Fatalf("finishing 1,000 messages of long ids: %v", err)
			}
			select {
			case <-s.Fenced():
				t.Fatal("fenced")
			default:
			}
			st, err := s.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Pending) != 0 {
				t.Fatalf("Load lists %d pending messages, want none", len(st.Pending))
			}
		})
	}
}

// TestEnds_SweepWritesFewAgain: a sweep writes again at most maxBumps of
// the messages pending below its cut, each a read and a write while the
// store's other changes wait, however many of them the ends before would
// let it purge past; the rest wait for later sweeps, and Load lists every
// one.
func TestEnds_SweepWritesFewAgain(t *testing.T) {
	ctx := t.Context()
	url, opts := fenced(t)
	s := open(t, url, opts)
	const pending, ended = 400, 4000 // enough ends to purge past every pending one
	s.SweepAfter(ended)
	var want []string
	var accepted []store.Message
	for n := range pending {
		accepted = append(accepted, endMsg(n))
		want = append(want, endMsg(n).ID)
	}
	if err := s.Apply(ctx, store.Change{Accepted: accepted}); err != nil {
		t.Fatal(err)
	}
	revs := map[string]uint64{}
	for _, id := range want {
		revs[id] = keyRevision(t, url, opts.Bucket, id)
	}
	for n := pending; n < pending+ended; n += 500 {
		accepted, finished := accepted[:0], []string(nil)
		for i := n; i < n+500; i++ {
			accepted = append(accepted, endMsg(i))
			finished = append(finished, endMsg(i).ID)
		}
		if err := s.Apply(ctx, store.Change{Accepted: accepted}); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(ctx, store.Change{Finished: finished}); err != nil {
			t.Fatal(err)
		}
	}
	if s.Sweeps() != 1 {
		t.Fatalf("%d sweeps, want 1", s.Sweeps())
	}
	moved := 0
	for id, rev := range revs {
		if keyRevision(t, url, opts.Bucket, id) != rev {
			moved++
		}
	}
	if moved == 0 || moved > natsstore.MaxBumps {
		t.Fatalf("the sweep wrote %d pending messages again, want 1 to %d", moved, natsstore.MaxBumps)
	}
	if got := loadPending(t, s); !slices.Equal(got, want) {
		t.Fatalf("Load lists %d pending messages, want %d", len(got), len(want))
	}
}
