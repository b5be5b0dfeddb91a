package natsstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"agentsociety/store"
	"agentsociety/store/natsstore"
	"agentsociety/store/natsstore/natstest"
)

// commitWriters and commitSteps size the group commit tests: each writer
// accepts a message, sets a key of its own and finishes its message before,
// commitSteps times, all at once.
const (
	commitWriters = 16
	commitSteps   = 40
)

// Concurrent Applies go out together, and each is still a change of its
// own: every one that succeeds is in the bucket whole, two that accept one
// message id are one success and one ErrExists, and changes that write one
// key (a state key every writer sets now and then) are each applied, in some order.
func TestApply_ConcurrentChanges(t *testing.T) {
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprintf("Fence=%v", fence), func(t *testing.T) {
			ctx := t.Context()
			s := open(t, natstest.Server(t), natsstore.Options{Fence: fence})
			var dupWins, applies atomic.Int64
			var wg sync.WaitGroup
			for w := range commitWriters {
				wg.Go(func() {
					for i := range commitSteps {
						c := store.Change{
							Accepted: []store.Message{msg(fmt.Sprintf("m-%d-%d", w, i))},
							States:   []store.StateEntry{state(strconv.Itoa(w), "k", strconv.Itoa(i))},
						}
						if i%8 == w%8 {
							c.States = append(c.States, state("all", "k", strconv.Itoa(w)))
						}
						if i > 0 {
							c.Finished = []string{fmt.Sprintf("m-%d-%d", w, i-1)}
						}
						applies.Add(1)
						if err := s.Apply(ctx, c); err != nil {
							t.Errorf("writer %d, step %d: %v", w, i, err)
							return
						}
						// Writers 0 and 1 race to accept one id.
						if w < 2 {
							applies.Add(1)
							err := s.Apply(ctx, store.Change{Accepted: []store.Message{msg(fmt.Sprintf("dup-%d", i))}})
							switch {
							case err == nil:
								dupWins.Add(1)
							case !errors.Is(err, store.ErrExists):
								t.Errorf("writer %d accepting dup-%d: %v, want nil or ErrExists", w, i, err)
							}
						}
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			if n := dupWins.Load(); n != commitSteps {
				t.Errorf("%d accepts of the contested ids succeeded, want one each, %d", n, commitSteps)
			}
			t.Logf("%d Applies, %d rounds of two or more", applies.Load(), s.Rounds())
			if s.Rounds() == 0 {
				t.Errorf("none of %d Applies shared a round", applies.Load())
			}

			st, err := s.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var pending []string
			for _, m := range st.Pending {
				pending = append(pending, m.ID)
			}
			var want []string
			for w := range commitWriters {
				want = append(want, fmt.Sprintf("m-%d-%d", w, commitSteps-1))
			}
			for i := range commitSteps {
				want = append(want, fmt.Sprintf("dup-%d", i))
			}
			slices.Sort(pending)
			slices.Sort(want)
			if !slices.Equal(pending, want) {
				t.Errorf("pending %v, want %v", pending, want)
			}
			for _, e := range st.States {
				if e.Scope != "all" && string(e.Value) != strconv.Itoa(commitSteps-1) {
					t.Errorf("state %s/%s = %s, want the last step's, %d", e.Scope, e.Key, e.Value, commitSteps-1)
				}
			}
			if len(st.States) != commitWriters+1 {
				t.Errorf("%d state keys, want %d", len(st.States), commitWriters+1)
			}
		})
	}
}

// A fenced store deposed while its writers write: each Apply either
// succeeds and is in the bucket, or fails with ErrFenced and left nothing;
// once one has failed so, every later one does.
func TestApply_DeposedWhileWriting(t *testing.T) {
	ctx := t.Context()
	url := natstest.Server(t)
	old := open(t, url, natsstore.Options{Bucket: "deposed", Fence: true})
	var mu sync.Mutex
	accepted, finished := map[string]bool{}, map[string]bool{}
	deposed := make(chan struct{})
	var wg sync.WaitGroup
	for w := range commitWriters {
		wg.Go(func() {
			fenced := false
			for i := range commitSteps {
				if i == commitSteps/2 && w == 0 {
					// Not open: t.Fatal must not run in this goroutine.
					next, err := natsstore.New(ctx, natsstore.Options{URL: url, Bucket: "deposed", Fence: true})
					if err != nil {
						t.Errorf("claiming the bucket while the deposed store writes: %v", err)
					} else {
						t.Cleanup(func() { next.Close() })
					}
					close(deposed)
				}
				id := fmt.Sprintf("m-%d-%d", w, i)
				c := store.Change{Accepted: []store.Message{msg(id)}}
				prev := fmt.Sprintf("m-%d-%d", w, i-1)
				if i > 0 {
					c.Finished = []string{prev}
				}
				err := old.Apply(ctx, c)
				switch {
				case err == nil && fenced:
					t.Errorf("writer %d, step %d: an Apply succeeded after one was fenced", w, i)
				case err == nil:
					mu.Lock()
					accepted[id] = true
					finished[prev] = i > 0
					mu.Unlock()
				case errors.Is(err, natsstore.ErrFenced):
					fenced = true
				default:
					t.Errorf("writer %d, step %d: %v, want nil or ErrFenced", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	<-deposed
	select {
	case <-old.Fenced():
	default:
		t.Fatal("the deposed store does not say it is fenced")
	}
	next := open(t, url, natsstore.Options{Bucket: "deposed", Fence: true})
	st, err := next.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pending, want []string
	for _, m := range st.Pending {
		pending = append(pending, m.ID)
	}
	for id := range accepted {
		if !finished[id] {
			want = append(want, id)
		}
	}
	slices.Sort(pending)
	slices.Sort(want)
	if !slices.Equal(pending, want) {
		t.Errorf("pending %v, want what the deposed store's successful Applies left: %v", pending, want)
	}
}

func msg(id string) store.Message {
	return store.Message{ID: id, Seq: 1, From: "user", To: "root", Type: "text", Payload: json.RawMessage(`{}`), SentAt: time.Unix(1, 0).UTC()}
}

func state(scope, key, value string) store.StateEntry {
	return store.StateEntry{Scope: scope, Key: key, Value: json.RawMessage(value), Writer: "root", UpdatedAt: time.Unix(1, 0).UTC()}
}

// A deposed store's round of one-write changes writes nothing, even though
// the claim that deposed it moved the stream by as many messages as one of
// them: the round goes as one batch expecting the stream's last sequence as
// the deposed store left it. The new writer is not disturbed.
func TestApply_DeposedRoundWritesNothing(t *testing.T) {
	ctx := t.Context()
	url := natstest.Server(t)
	old := open(t, url, natsstore.Options{Bucket: "round", Fence: true})
	if err := old.Apply(ctx, store.Change{Accepted: []store.Message{msg("x")}, States: []store.StateEntry{state("s", "before", "1")}}); err != nil {
		t.Fatal(err)
	}
	next := open(t, url, natsstore.Options{Bucket: "round", Fence: true})
	errs := old.ApplyAll(ctx, []store.Change{
		{States: []store.StateEntry{state("s", "a", "1")}},
		{States: []store.StateEntry{state("s", "b", "1")}},
		{States: []store.StateEntry{state("s", "c", "1")}},
		{Finished: []string{"x"}},
	})
	for i, err := range errs {
		if !errors.Is(err, natsstore.ErrFenced) {
			t.Errorf("change %d of the deposed store's round: %v, want ErrFenced", i, err)
		}
	}
	if err := next.Apply(ctx, store.Change{States: []store.StateEntry{state("s", "after", "1")}}); err != nil {
		t.Fatalf("the new writer, after the deposed store's round: %v", err)
	}
	st, err := next.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range st.States {
		keys = append(keys, e.Key)
	}
	if !slices.Equal(keys, []string{"after", "before"}) || len(st.Pending) != 1 {
		t.Fatalf("state keys %v and %d pending, want [after before] and x: none of the deposed store's round", keys, len(st.Pending))
	}
}

// Without the fence, a round's changes are each their own write: one that
// is refused leaves the others written, and a change that only finishes
// messages is written message by message.
func TestApply_RoundWithoutFence(t *testing.T) {
	ctx := t.Context()
	s := open(t, natstest.Server(t), natsstore.Options{})
	if err := s.Apply(ctx, store.Change{Accepted: []store.Message{msg("m1"), msg("m2"), msg("m3")}}); err != nil {
		t.Fatal(err)
	}
	errs := s.ApplyAll(ctx, []store.Change{
		{Accepted: []store.Message{msg("m1")}}, // pending already: refused
		{States: []store.StateEntry{state("s", "a", "1")}},
		{Finished: []string{"m2", "m3", "m2", "unknown"}},
	})
	if !errors.Is(errs[0], store.ErrExists) || errs[1] != nil || errs[2] != nil {
		t.Fatalf("errors %v, want ErrExists, nil, nil", errs)
	}
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Pending) != 1 || st.Pending[0].ID != "m1" || len(st.States) != 1 {
		t.Fatalf("pending %v and %d state keys, want m1 and 1", st.Pending, len(st.States))
	}
}

// records is a slog.Handler that keeps the messages of the records it
// handles, at every level.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Message)
	r.mu.Unlock()
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// On a bucket of three replicas, which takes one expectation of a
// subject's sequence at a time, a round goes as one atomic batch: its
// changes are all written without one being refused and tried again. A
// round holding a change the server refuses is written change by change,
// and a deposed store's round writes nothing.
func TestApply_ReplicatedRound(t *testing.T) {
	ctx := t.Context()
	urls := natstest.Cluster(t, 3)
	log := &records{}
	s := open(t, urls[0], natsstore.Options{Bucket: "replicated", Fence: true, Replicas: 3, Logger: slog.New(log)})
	if err := s.Apply(ctx, store.Change{Accepted: []store.Message{msg("m1"), msg("m2")}}); err != nil {
		t.Fatal(err)
	}
	var round []store.Change
	for i := range 20 {
		round = append(round, store.Change{States: []store.StateEntry{state("s", fmt.Sprint("k", i), "1")}})
	}
	round = append(round, store.Change{Finished: []string{"m1", "m2"}})
	for i, err := range s.ApplyAll(ctx, round) {
		if err != nil {
			t.Fatalf("change %d of the round: %v", i, err)
		}
	}
	if len(log.msgs) != 0 {
		t.Fatalf("a round of changes to distinct keys was refused in part: %q", log.msgs)
	}
	errs := s.ApplyAll(ctx, []store.Change{
		{States: []store.StateEntry{state("s", "a", "1")}},
		{Accepted: []store.Message{msg("m3")}},
		{Accepted: []store.Message{msg("m3")}, States: []store.StateEntry{state("s", "b", "1")}}, // the next round: same key
	})
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], store.ErrExists) {
		t.Fatalf("errors %v, want nil, nil, ErrExists", errs)
	}
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.States) != 21 || len(st.Pending) != 1 || st.Pending[0].ID != "m3" {
		t.Fatalf("%d state keys and pending %v, want 21 and m3", len(st.States), st.Pending)
	}

	next := open(t, urls[1], natsstore.Options{Bucket: "replicated", Fence: true, Replicas: 3})
	for i, err := range s.ApplyAll(ctx, []store.Change{
		{States: []store.StateEntry{state("s", "x", "1")}},
		{States: []store.StateEntry{state("s", "y", "1")}},
	}) {
		if !errors.Is(err, natsstore.ErrFenced) {
			t.Errorf("change %d of the deposed store's round: %v, want ErrFenced", i, err)
		}
	}
	if st, err = next.Load(ctx); err != nil || len(st.States) != 21 {
		t.Fatalf("the new writer loads %d state keys (%v), want 21: none of the deposed store's round", len(st.States), err)
	}
}

// A change the server refuses, in a flight followed by another already
// in the air, is that change's failure alone: the changes sent after it,
// in its flight and in the next, which expected the stream's last
// sequence it would have left, are written all the same, and the store is
// not fenced. The bucket's messages are limited to 1 KB, so that the
// server itself refuses the change.
func TestApply_RefusedChangeBeforeAFlightInTheAir(t *testing.T) {
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprintf("Fence=%v", fence), func(t *testing.T) {
			ctx := t.Context()
			url := natstest.Server(t)
			bucket := fmt.Sprintf("limited%v", fence)
			limitedBucket(t, url, bucket)
			log := &records{}
			s := open(t, url, natsstore.Options{Bucket: bucket, Fence: fence, Logger: slog.New(log)})
			// retries counts the records of changes refused and tried
			// again one by one: only the refused change's flight and the
			// next should have any.
			retries := func() int {
				log.mu.Lock()
				defer log.mu.Unlock()
				return len(log.msgs)
			}
			if err := s.Apply(ctx, store.Change{Accepted: []store.Message{msg("m1"), msg("m2")}}); err != nil {
				t.Fatal(err)
			}
			if n := retries(); n != 0 {
				t.Errorf("the first Apply was refused and tried again: %q", log.msgs)
			}
			big := `"` + strings.Repeat("x", 2000) + `"`
			errs, err := s.ApplyFlights(ctx, [][]store.Change{
				{
					{States: []store.StateEntry{state("s", "a", "1")}},
					{States: []store.StateEntry{state("s", "big", big)}},
					{States: []store.StateEntry{state("s", "b", "1")}},
					{Finished: []string{"m1"}},
				},
				{
					{States: []store.StateEntry{state("s", "c", "1")}},
					{Finished: []string{"m2"}},
					{Accepted: []store.Message{msg("m3")}},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			for g, es := range errs {
				for i, err := range es {
					if want := g == 0 && i == 1; (err != nil) != want || errors.Is(err, natsstore.ErrFenced) {
						t.Errorf("flight %d, change %d: %v, want an error other than ErrFenced: %v", g, i, err, want)
					}
				}
			}
			select {
			case <-s.Fenced():
				t.Fatal("the store fenced itself over a change the server refused")
			default:
			}
			retried := retries()
			if err := s.Apply(ctx, store.Change{States: []store.StateEntry{state("s", "d", "1")}}); err != nil {
				t.Fatalf("the next Apply: %v", err)
			}
			if n := retries(); n != retried {
				t.Errorf("the next Apply was refused and tried again: %q", log.msgs[retried:])
			}
			st, err := s.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, e := range st.States {
				keys = append(keys, e.Key)
			}
			if !slices.Equal(keys, []string{"a", "b", "c", "d"}) || len(st.Pending) != 1 || st.Pending[0].ID != "m3" {
				t.Fatalf("state keys %v and pending %v, want a to d and m3", keys, st.Pending)
			}
		})
	}
}

// A deposed store's flights in the air at once write nothing, whatever
// the other store writes, and each of their changes fails with ErrFenced.
func TestApply_DeposedFlightsWriteNothing(t *testing.T) {
	ctx := t.Context()
	url := natstest.Server(t)
	old := open(t, url, natsstore.Options{Bucket: "flights", Fence: true})
	if err := old.Apply(ctx, store.Change{Accepted: []store.Message{msg("x")}}); err != nil {
		t.Fatal(err)
	}
	next := open(t, url, natsstore.Options{Bucket: "flights", Fence: true})
	errs, err := old.ApplyFlights(ctx, [][]store.Change{
		{{States: []store.StateEntry{state("s", "a", "1")}}, {Finished: []string{"x"}}},
		{{States: []store.StateEntry{state("s", "b", "1")}}},
		{{States: []store.StateEntry{state("s", "c", "1")}}, {Accepted: []store.Message{msg("y")}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for g, es := range errs {
		for i, err := range es {
			if !errors.Is(err, natsstore.ErrFenced) {
				t.Errorf("flight %d, change %d of the deposed store: %v, want ErrFenced", g, i, err)
			}
		}
	}
	if err := next.Apply(ctx, store.Change{States: []store.StateEntry{state("s", "after", "1")}}); err != nil {
		t.Fatalf("the new writer: %v", err)
	}
	st, err := next.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.States) != 1 || st.States[0].Key != "after" || len(st.Pending) != 1 || st.Pending[0].ID != "x" {
		t.Fatalf("states %v and pending %v, want only after and x: nothing of the deposed store's flights", st.States, st.Pending)
	}
}

// TestApply_AnswersReadAfterTheDeadline: answers that came while the
// settler was away, past the flights' deadline, still count: the changes
// were written, and Apply reports them written (without Fence) and does
// not fence the store over them (with Fence).
func TestApply_AnswersReadAfterTheDeadline(t *testing.T) {
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprintf("Fence=%v", fence), func(t *testing.T) {
			ctx := t.Context()
			url := natstest.Server(t)
			s := open(t, url, natsstore.Options{Bucket: fmt.Sprintf("late%v", fence), Fence: fence, Timeout: 200 * time.Millisecond})
			s.SettleAfter(600 * time.Millisecond)
			errs, err := s.ApplyFlights(ctx, [][]store.Change{
				{{States: []store.StateEntry{state("s", "a", "1")}}, {States: []store.StateEntry{state("s", "b", "1")}}},
				{{States: []store.StateEntry{state("s", "c", "1")}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			for g, es := range errs {
				for i, err := range es {
					if err != nil {
						t.Errorf("flight %d, change %d: %v; want it written, as the server answered", g, i, err)
					}
				}
			}
			s.SettleAfter(0)
			if err := s.Apply(ctx, store.Change{States: []store.StateEntry{state("s", "d", "1")}}); err != nil {
				t.Errorf("the next Apply: %v", err)
			}
		})
	}
}
