package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/internal/demo"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
	"agentsociety/store"
	"agentsociety/store/filestore"
)

// collect returns the events of s from seq from on, as Events yields them,
// failing t on an error other than a MissedEventsError, which it returns.
func collect(t testing.TB, s *as.Society, from uint64) ([]as.Event, *as.MissedEventsError) {
	t.Helper()
	var out []as.Event
	var missed *as.MissedEventsError
	for e, err := range s.Events(context.Background(), from) {
		if err != nil {
			if !errors.As(err, &missed) {
				t.Fatalf("Events: %v", err)
			}
			continue
		}
		out = append(out, e)
	}
	return out, missed
}

// runQuickstart runs the quick start's requirement on the demo model and
// returns the task and the artifact reference that reached user.
func runQuickstart(t testing.TB, s *as.Society) (task string, reply as.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	task, err := s.SubmitRequirement(ctx, demo.Requirement)
	if err != nil {
		t.Fatal(err)
	}
	reply, err = s.WaitForUserMessage(ctx, func(m as.Message) bool {
		return m.TaskID == task && strings.Contains(m.Text(), as.ArtifactRefPrefix)
	})
	if err != nil {
		t.Fatal(err)
	}
	return task, reply
}

// TestEvents_Quickstart runs the quick start, then a few host actions
// that the quick start does not make, and checks that the event stream has
// every kind of event, numbered from 1 without gaps, in causal order: a
// message is accepted before it is delivered, and handled after, and what
// a turn does comes between its delivery and its end.
func TestEvents_Quickstart(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Model: demo.Model(), TaskBudget: as.Budget{ModelCalls: 100}})
	task, _ := runQuickstart(t, s)
	waitQuiet(t, s)
	lead := s.Agents()[0]
	for _, a := range s.Agents() {
		if a.ParentID == as.RootID && a.TaskID == task {
			lead = a
		}
	}
	x := actorOf(t, s, lead.ID)
	if err := x.SetState(ctx, "progress", "done", as.ScopeProject); err != nil {
		t.Fatal(err)
	}
	if _, err := x.SendText(ctx, "agent-404", "hello?"); !errors.Is(err, as.ErrAgentNotFound) {
		t.Fatalf("a message to nobody: %v", err)
	}
	if err := s.Terminate(ctx, lead.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lead to end", func() bool { a, _ := s.Agent(lead.ID); return a.Status == as.StatusTerminated })
	waitQuiet(t, s)

	evs, missed := collect(t, s, 1)
	if missed != nil {
		t.Fatalf("events missed with the default retention: %v", missed)
	}
	kinds := map[as.EventKind]int{}
	accepted, delivered, handled := map[string]uint64{}, map[string]uint64{}, map[string]uint64{}
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		if e.Time.IsZero() || e.Kind == "" {
			t.Fatalf("event %d has no time or kind: %+v", e.Seq, e)
		}
		kinds[e.Kind]++
		switch e.Kind {
		case as.EventMessageAccepted:
			accepted[e.Message.ID] = e.Seq
			if e.Turn != "" && (delivered[e.Turn] == 0 || handled[e.Turn] != 0) {
				t.Errorf("message %s accepted in turn %s outside that turn", e.Message.ID, e.Turn)
			}
		case as.EventMessageDelivered:
			if accepted[e.Message.ID] == 0 {
				t.Errorf("message %s delivered (event %d) before it was accepted", e.Message.ID, e.Seq)
			}
			delivered[e.Turn] = e.Seq
		case as.EventMessageHandled:
			if delivered[e.Turn] == 0 {
				t.Errorf("message %s handled before it was delivered", e.Turn)
			}
			handled[e.Turn] = e.Seq
		case as.EventModelCallStarted, as.EventModelCallFinished, as.EventToolCalled, as.EventThought:
			if e.Turn == "" || delivered[e.Turn] == 0 || handled[e.Turn] != 0 {
				t.Errorf("%s (event %d) of turn %q outside that turn", e.Kind, e.Seq, e.Turn)
			}
			if e.Kind == as.EventModelCallFinished && (e.Usage == nil || e.Duration <= 0) {
				t.Errorf("model call finished without usage or duration: %+v", e)
			}
		}
	}
	for _, k := range []as.EventKind{
		as.EventTaskSubmitted, as.EventRoleCreated, as.EventAgentSpawned,
		as.EventMessageAccepted, as.EventMessageDelivered, as.EventMessageHandled, as.EventRefused,
		as.EventModelCallStarted, as.EventModelCallFinished, as.EventThought, as.EventToolCalled,
		as.EventArtifactStored, as.EventRequestOpened, as.EventRequestSettled, as.EventStateSet,
		as.EventAgentTerminated,
	} {
		if kinds[k] == 0 {
			t.Errorf("no %s event in %d events: %v", k, len(evs), kinds)
		}
	}
	if got := s.LastEvent(); got != uint64(len(evs)) {
		t.Errorf("LastEvent = %d, want %d", got, len(evs))
	}
	// From the middle.
	tail, _ := collect(t, s, uint64(len(evs)-4))
	if len(tail) != 5 || tail[0].Seq != uint64(len(evs)-4) {
		t.Errorf("Events from %d returned %d events starting at %d", len(evs)-4, len(tail), tail[0].Seq)
	}
}

// TestEvents_Governance checks that running out of budget and the loop
// guard are events too.
func TestEvents_Governance(t *testing.T) {
	ctx := context.Background()
	model := llmtest.New(llmtest.Rule{Name: "loop", Reply: func(req *llm.Request) (*llm.Response, error) {
		return call("c", "console_print", `{"text":"again"}`), nil
	}})
	s := newSociety(t, as.Config{Model: model, TaskBudget: as.Budget{ModelCalls: 3}})
	if _, err := s.SubmitRequirement(ctx, "go"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a budget_exhausted event", func() bool { return hasEvent(t, s, as.EventBudgetExhausted) })
	if !hasEvent(t, s, as.EventConsole) {
		t.Error("no console event")
	}
}

// hasEvent reports whether s has an event of kind k.
func hasEvent(t testing.TB, s *as.Society, k as.EventKind) bool {
	evs, _ := collect(t, s, 1)
	for _, e := range evs {
		if e.Kind == k {
			return true
		}
	}
	return false
}

// TestEvents_Retention checks that only the newest events are kept, that
// reading from older ones reports what was missed and goes on from the
// oldest kept, and that a reader that stops reading holds nothing up: when
// it reads again it is told how many events it missed.
func TestEvents_Retention(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{EventRetention: 20})
	lead, _ := hostLead(t, s, "task-r", "worker")
	send := func(n int) {
		for i := range n {
			if _, err := lead.SendText(ctx, as.UserID, fmt.Sprint("note ", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(30)
	waitQuiet(t, s)
	last := s.LastEvent()
	evs, missed := collect(t, s, 1)
	if missed == nil || missed.From != 1 || missed.Oldest != last-19 || missed.Missed() != last-20 {
		t.Fatalf("reading from 1 of %d events with retention 20: missed = %+v", last, missed)
	}
	if !errors.Is(missed, as.ErrEventsMissed) {
		t.Error("a MissedEventsError is not ErrEventsMissed")
	}
	if len(evs) != 20 || evs[0].Seq != last-19 || evs[19].Seq != last {
		t.Fatalf("got %d events from %d; want the 20 newest", len(evs), evs[0].Seq)
	}

	// A watcher that stops reading: the society goes on.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next, stop := pull(s.WatchEvents(wctx, last+1))
	defer stop()
	send(1)
	e, err, ok := next()
	if !ok || err != nil || e.Seq != last+1 {
		t.Fatalf("watching: %+v, %v, %v; want event %d", e, err, ok, last+1)
	}
	send(40) // the watcher reads nothing meanwhile: it can hold no more than the 20 kept
	waitQuiet(t, s)
	seen := e.Seq
	for e, err, _ = next(); err == nil; e, err, _ = next() {
		if e.Seq != seen+1 {
			t.Fatalf("watching: event %d after %d", e.Seq, seen)
		}
		seen = e.Seq
	}
	// The reader may have found out about the miss while the sends went
	// on, so the oldest it was told of may be older than the oldest now
	// kept: it is then told again.
	end := s.LastEvent()
	for seen < end {
		if !errors.As(err, &missed) || missed.From != seen+1 || missed.Oldest <= missed.From || missed.Oldest > end-19 {
			t.Fatalf("a watcher that fell behind after event %d: %v; want a miss from %d to at most %d", seen, err, seen+1, end-19)
		}
		seen = missed.Oldest - 1
		for e, err, _ = next(); err == nil; e, err, _ = next() {
			if e.Seq != seen+1 {
				t.Fatalf("watching: event %d after %d", e.Seq, seen)
			}
			if seen = e.Seq; seen == end {
				break
			}
		}
	}
	cancel()
	for _, err, ok := next(); ok; _, err, ok = next() { // the watch ends with its ctx
		_ = err
	}
}

// pull turns an event iterator into a function returning the next event.
func pull(seq func(func(as.Event, error) bool)) (next func() (as.Event, error, bool), stop func()) {
	type item struct {
		e   as.Event
		err error
	}
	ch, done := make(chan item), make(chan struct{})
	go func() {
		defer close(ch)
		seq(func(e as.Event, err error) bool {
			select {
			case ch <- item{e, err}:
				return true
			case <-done:
				return false
			}
		})
	}()
	next = func() (as.Event, error, bool) {
		it, ok := <-ch
		return it.e, it.err, ok
	}
	return next, func() { close(done) }
}

// TestEvents_Off checks that a negative retention turns events off.
func TestEvents_Off(t *testing.T) {
	s := newSociety(t, as.Config{EventRetention: -1})
	lead, _ := hostLead(t, s, "task-off", "worker")
	if _, err := lead.SendText(context.Background(), as.UserID, "hi"); err != nil {
		t.Fatal(err)
	}
	if s.LastEvent() != 0 {
		t.Fatalf("events off, yet LastEvent = %d", s.LastEvent())
	}
	// Both readers say why nothing comes, at once: a watcher is not left
	// to take the end of its iteration for the society's closing.
	for name, read := range map[string]func(context.Context, uint64) iter.Seq2[as.Event, error]{"Events": s.Events, "WatchEvents": s.WatchEvents} {
		n := 0
		for e, err := range read(context.Background(), 1) {
			if n++; !errors.Is(err, as.ErrEventsOff) {
				t.Fatalf("%s yielded %+v, %v; want only an error with code %s", name, e, err, as.ErrEventsOff)
			}
		}
		if n != 1 {
			t.Fatalf("%s yielded %d times, want one error", name, n)
		}
	}
}

// TestEvents_Restart checks that a society on the file store keeps its
// events across a restart: the reopened society numbers on from the last,
// and reading from any sequence number resumes exactly there.
func TestEvents_Restart(t *testing.T) {
	dir := t.TempDir()
	s, st := openFS(t, dir, filestore.SyncEveryRecord, as.Config{Model: demo.Model()})
	runQuickstart(t, s)
	waitQuiet(t, s)
	before, _ := collect(t, s, 1)
	closeFS(t, s, st)

	s, st = openFS(t, dir, filestore.SyncEveryRecord, as.Config{Model: demo.Model()})
	defer closeFS(t, s, st)
	if got := s.LastEvent(); got != uint64(len(before)) {
		t.Fatalf("LastEvent after reopening = %d, want %d", got, len(before))
	}
	after, missed := collect(t, s, 1)
	if missed != nil {
		t.Fatalf("reopened: %v", missed)
	}
	if len(after) != len(before) {
		t.Fatalf("reopened: %d events, want %d", len(after), len(before))
	}
	for i := range before {
		b, a := before[i], after[i]
		if a.Seq != b.Seq || a.Kind != b.Kind || a.Agent != b.Agent || a.Turn != b.Turn || !a.Time.Equal(b.Time) {
			t.Fatalf("event %d after reopening: %+v, before: %+v", i+1, a, b)
		}
	}
	n := uint64(len(before)) - 7
	from, _ := collect(t, s, n)
	if len(from) != 8 || from[0].Seq != n {
		t.Fatalf("reading from %d after reopening: %d events from %d", n, len(from), from[0].Seq)
	}
	runQuickstart(t, s)
	waitQuiet(t, s)
	more, _ := collect(t, s, uint64(len(before))+1)
	if len(more) == 0 || more[0].Seq != uint64(len(before))+1 || more[0].Kind != as.EventTaskSubmitted {
		t.Fatalf("the first event after reopening: %+v", more[0])
	}
}

// TestEvents_CloseWritesEveryEvent checks that a Close that stops waiting
// early still writes every event before the society counts as closed: a
// second Close waits for it, and a reopened society has them all.
func TestEvents_CloseWritesEveryEvent(t *testing.T) {
	dir := t.TempDir()
	s, st := openFS(t, dir, filestore.SyncBatched, as.Config{})
	for range 3000 {
		s.SubmitRequirement(context.Background(), "") // refused: one event each
	}
	last := s.LastEvent()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	s.Close(gone)
	closeFS(t, s, st) // waits for the rest, then closes the store

	s, st = openFS(t, dir, filestore.SyncBatched, as.Config{})
	defer closeFS(t, s, st)
	if got := s.LastEvent(); got != last {
		t.Fatalf("after reopening LastEvent = %d, want %d", got, last)
	}
}

// TestEvents_LargeRetention checks that a retention far beyond what a
// society holds costs nothing up front.
func TestEvents_LargeRetention(t *testing.T) {
	s := newSociety(t, as.Config{EventRetention: 1 << 60})
	lead, _ := hostLead(t, s, "task-big", "worker")
	if _, err := lead.SendText(context.Background(), as.UserID, "hi"); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, s)
	if evs, missed := collect(t, s, 1); missed != nil || len(evs) == 0 || uint64(len(evs)) != s.LastEvent() {
		t.Fatalf("%d events, missed %v, last %d", len(evs), missed, s.LastEvent())
	}
}

// TestEvents_Trace checks that the host's trace context reaches the events
// of the messages the host sends, and only those.
func TestEvents_Trace(t *testing.T) {
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	s := newSociety(t, as.Config{Model: demo.Model()})
	ctx, cancel := context.WithTimeout(as.WithTrace(context.Background(), parent), hangGuard)
	defer cancel()
	task, err := s.SubmitRequirement(ctx, demo.Requirement)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitForUserMessage(ctx, func(m as.Message) bool {
		return m.TaskID == task && strings.Contains(m.Text(), as.ArtifactRefPrefix)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SendTextToAgent(context.Background(), as.RootID, "no trace here", task); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, s)
	evs, _ := collect(t, s, 1)
	traced := map[as.EventKind]int{}
	for _, e := range evs {
		if e.Trace == "" {
			continue
		}
		traced[e.Kind]++
		if e.Trace != parent || e.Turn != "" || e.Agent != as.UserID {
			t.Errorf("event %d (%s by %s in turn %q) carries trace %q", e.Seq, e.Kind, e.Agent, e.Turn, e.Trace)
		}
		if e.Kind == as.EventMessageAccepted && e.Message.Text() != demo.Requirement {
			t.Errorf("the traced message is %q, not the requirement", e.Message.Text())
		}
	}
	if want := (map[as.EventKind]int{as.EventTaskSubmitted: 1, as.EventMessageAccepted: 1}); !maps.Equal(traced, want) {
		t.Errorf("traced events %v, want %v", traced, want)
	}
}

// TestEvents_ToolCallArgs checks that a tool call's event shows its
// arguments only when they are JSON, and encodes whatever the model sent:
// blank arguments (read as {}), an object, and text that is no JSON.
func TestEvents_ToolCallArgs(t *testing.T) {
	sent := []string{" \n", `{"text":"hi"}`, `not json`}
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if lastToolResult(req) != "" {
			return llmtest.Say(""), nil
		}
		var calls []llm.ToolCall
		for i, args := range sent {
			calls = append(calls, llm.ToolCall{ID: fmt.Sprint("c", i), Name: "console_print", Arguments: json.RawMessage(args)})
		}
		return llmtest.Calls(calls...), nil
	})
	s := newSociety(t, as.Config{Model: model, UserConsole: io.Discard})
	if _, err := s.SubmitRequirement(context.Background(), "print"); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, s)
	evs, _ := collect(t, s, 1)
	var args []string
	for _, e := range evs {
		if e.Kind != as.EventToolCalled {
			continue
		}
		if _, err := json.Marshal(e); err != nil {
			t.Errorf("the event of a call with arguments %q does not encode: %v", e.Args, err)
		}
		args = append(args, string(e.Args))
	}
	if want := []string{"", `{"text":"hi"}`, ""}; !slices.Equal(args, want) {
		t.Errorf("the tool calls' events show arguments %q, want %q", args, want)
	}
}

// eventStore is a file store whose AppendEvents fails the next fail calls,
// and, while gate is set, waits for it to close first.
type eventStore struct {
	*filestore.Store
	fail    atomic.Int32
	failed  atomic.Int32
	gate    atomic.Pointer[chan struct{}]
	waiting atomic.Int32
	onRead  func() // if set, called before ReadEvents
}

func (f *eventStore) ReadEvents(ctx context.Context, from uint64, limit int) ([]store.Event, error) {
	if f.onRead != nil {
		f.onRead()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return f.Store.ReadEvents(ctx, from, limit)
}

func (f *eventStore) AppendEvents(ctx context.Context, evs []store.Event) error {
	if g := f.gate.Load(); g != nil {
		f.waiting.Add(1)
		<-*g
	}
	if f.fail.Add(-1) >= 0 {
		f.failed.Add(1)
		return errors.New("injected: the disk did not answer")
	}
	return f.Store.AppendEvents(ctx, evs)
}

// openEventStore opens a society on an eventStore in a temporary
// directory, closed at the end of the test, and returns them with the
// function that closes the society.
func openEventStore(t *testing.T, cfg as.Config) (*as.Society, *eventStore, func()) {
	fst, err := filestore.Open(t.TempDir(), filestore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fst.Close(); err != nil {
			t.Error(err)
		}
	})
	st := &eventStore{Store: fst}
	cfg.Store = st
	s, done := openSociety(t, cfg)
	return s, st, done
}

// storedLast returns the seq of the newest event st keeps.
func storedLast(t *testing.T, st *eventStore) uint64 {
	t.Helper()
	_, last, err := st.EventBounds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// TestEvents_FailedAppendIsTriedAgain: events whose append failed are
// appended again, and the store has every event, with no gap, when the
// society closes.
func TestEvents_FailedAppendIsTriedAgain(t *testing.T) {
	ctx := context.Background()
	s, st, done := openEventStore(t, as.Config{})
	s.SubmitRequirement(ctx, "") // refused: one event
	waitFor(t, "event 1 stored", func() bool { return storedLast(t, st) == 1 })
	st.fail.Store(2)
	s.SubmitRequirement(ctx, "")
	waitFor(t, "two failed appends", func() bool { return st.failed.Load() == 2 })
	for range 5 {
		s.SubmitRequirement(ctx, "")
	}
	last := s.LastEvent()
	done()
	got, err := st.ReadEvents(ctx, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) {
			t.Fatalf("the store's event %d is seq %d: events were lost", i, e.Seq)
		}
	}
	if uint64(len(got)) != last {
		t.Fatalf("the store has %d events, the society made %d", len(got), last)
	}
}

// TestEvents_NumbersAreNotGivenTwice: events whose writing failed as the
// society closed, or that a crash kept from the store, are not numbered
// again by the society reopened on the store: it numbers after them, and
// a reader is told of the gap.
func TestEvents_NumbersAreNotGivenTwice(t *testing.T) {
	ctx := context.Background()
	open := func(t *testing.T, dir string) (*as.Society, *eventStore) {
		fst, err := filestore.Open(dir, filestore.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fst.Close() })
		st := &eventStore{Store: fst}
		return newSociety(t, as.Config{Store: st, Logger: quiet}), st
	}
	// reopened opens dir, has one event made, and checks it comes after
	// last, with the events after stored (the last the store has) missed.
	reopened := func(t *testing.T, dir string, stored, last uint64) {
		t.Helper()
		s, _ := open(t, dir)
		s.SubmitRequirement(ctx, "") // refused: one event
		if got := s.LastEvent(); got <= last {
			t.Fatalf("the reopened society's first event is %d, a number given before (up to %d)", got, last)
		}
		evs, missed := collect(t, s, 1)
		if missed == nil || len(evs) != int(stored)+1 || evs[stored].Seq != s.LastEvent() {
			t.Fatalf("reading the reopened society's events: %d events, missed %v", len(evs), missed)
		}
	}

	t.Run("closed", func(t *testing.T) {
		dir := t.TempDir()
		s, st := open(t, dir)
		s.SubmitRequirement(ctx, "")
		waitFor(t, "event 1 stored", func() bool { return storedLast(t, st) == 1 })
		st.fail.Store(1 << 30) // every append fails from now on
		for range 5 {
			s.SubmitRequirement(ctx, "")
		}
		last := s.LastEvent()
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := st.Store.Close(); err != nil {
			t.Fatal(err)
		}
		reopened(t, dir, 1, last)
	})
	t.Run("crashed", func(t *testing.T) {
		dir := t.TempDir()
		s, st := open(t, dir)
		s.SubmitRequirement(ctx, "")
		waitFor(t, "event 1 stored", func() bool { return storedLast(t, st) == 1 })
		gate := make(chan struct{})
		st.gate.Store(&gate)
		t.Cleanup(func() { close(gate) })
		for range 5 {
			s.SubmitRequirement(ctx, "")
		}
		waitFor(t, "the writer to wait on the store", func() bool { return st.waiting.Load() > 0 })
		last := s.LastEvent()
		crashed := t.TempDir()
		copyDir(t, dir, crashed)
		reopened(t, crashed, 1, last)
	})
}

// TestEvents_NoMissForAnEventOnItsWayToTheStore: an event the ring dropped
// while the writer was appending it is read from the writer, not reported
// missed.
func TestEvents_NoMissForAnEventOnItsWayToTheStore(t *testing.T) {
	ctx := context.Background()
	s, st, done := openEventStore(t, as.Config{EventRetention: 4})
	defer done()
	s.SubmitRequirement(ctx, "")
	waitFor(t, "event 1 stored", func() bool { return storedLast(t, st) == 1 })
	gate := make(chan struct{})
	st.gate.Store(&gate)
	s.SubmitRequirement(ctx, "")
	waitFor(t, "the append of event 2 to wait", func() bool { return st.waiting.Load() == 1 })
	for range 4 {
		s.SubmitRequirement(ctx, "") // events 3 to 6: the ring keeps 3 to 6
	}
	got, missed := collect(t, s, 2)
	st.gate.Store(nil)
	close(gate)
	if missed != nil || len(got) != 5 || got[0].Seq != 2 {
		t.Fatalf("reading from 2 while event 2 was on its way to the store: %d events from %d, missed %v", len(got), got[0].Seq, missed)
	}
}

// TestEvents_NoEventAfterClose: a call refused after Close adds no event,
// which the store would never have and whose number a reopened society
// would give again.
func TestEvents_NoEventAfterClose(t *testing.T) {
	dir := t.TempDir()
	s, st := openFS(t, dir, filestore.SyncBatched, as.Config{})
	s.SubmitRequirement(context.Background(), "")
	closeFS(t, s, st)
	s.SubmitRequirement(context.Background(), "") // refused: closed
	after := s.LastEvent()
	s2, st2 := openFS(t, dir, filestore.SyncBatched, as.Config{})
	defer closeFS(t, s2, st2)
	if got := s2.LastEvent(); got != after {
		t.Fatalf("the closed society's last event is %d; reopened, the store's is %d", after, got)
	}
}

// TestEvents_ReaderCancelledInTheStore: a reader whose own context ends
// while it reads events from the store sees the iteration end, not a
// store error.
func TestEvents_ReaderCancelledInTheStore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, st, done := openEventStore(t, as.Config{EventRetention: 2})
	defer done()
	for range 5 {
		s.SubmitRequirement(ctx, "")
	}
	waitFor(t, "event 5 stored", func() bool { return storedLast(t, st) == 5 })
	st.onRead = cancel
	for e, err := range s.Events(ctx, 1) {
		if err != nil {
			t.Fatalf("the reader cancelled its context while reading the store, and got %v", err)
		}
		t.Fatalf("got event %d from a store read whose context ended", e.Seq)
	}
}

// TestEvents_FollowUpAfterReopening: the user's message to root on a task
// that has agents, after the society reopened, is not taken for the
// task's start: task_submitted comes once for a task.
func TestEvents_FollowUpAfterReopening(t *testing.T) {
	dir := t.TempDir()
	s, st := openFS(t, dir, filestore.SyncBatched, as.Config{Model: demo.Model()})
	task, _ := runQuickstart(t, s)
	waitQuiet(t, s)
	closeFS(t, s, st)

	s, st = openFS(t, dir, filestore.SyncBatched, as.Config{Model: demo.Model()})
	defer closeFS(t, s, st)
	from := s.LastEvent() + 1
	if _, err := s.SendTextToAgent(context.Background(), as.RootID, "one more thing", task); err != nil {
		t.Fatal(err)
	}
	evs, _ := collect(t, s, from)
	for _, e := range evs {
		if e.Kind == as.EventTaskSubmitted {
			t.Fatalf("a follow-up on task %s after reopening was taken for its start: %+v", task, e)
		}
	}
	if len(evs) == 0 || evs[0].Kind != as.EventMessageAccepted {
		t.Fatalf("the follow-up's first event: %+v, want message_accepted", evs)
	}
}

// TestWatchEvents_FollowsTheHandlersCloseWaitsFor: a watcher that follows
// the society until it closes sees the events of the handlers Close waits
// for, logged after Close began: a turn under way at Close ends with its
// message_handled in the stream, rather than after the stream ended.
func TestWatchEvents_FollowsTheHandlersCloseWaitsFor(t *testing.T) {
	ctx := context.Background()
	started, release := make(chan as.Message, 1), make(chan struct{})
	s, err := as.New(ctx, as.Config{Logger: quiet, Root: as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		started <- m
		<-release
		return nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubmitRequirement(ctx, "hold root"); err != nil {
		t.Fatal(err)
	}
	held := recv(t, started, "root to start handling the requirement")
	seen := make(chan []as.Event, 1)
	go func() {
		var evs []as.Event
		for e, err := range s.WatchEvents(ctx, 1) {
			if err != nil {
				t.Errorf("WatchEvents: %v", err)
			}
			evs = append(evs, e)
		}
		seen <- evs
	}()
	closed := make(chan error, 1)
	go func() { closed <- s.Close(ctx) }()
	<-s.Done()
	// The watcher has either returned or waits for the next event, with
	// the society closing: what comes next decides whether it sees it.
	waitFor(t, "the watcher to have ended or to wait past Done", func() bool {
		return len(seen) > 0 || parked("(*eventLog).read", "select")
	})
	close(release)
	if err := recv(t, closed, "Close"); err != nil {
		t.Fatal(err)
	}
	evs := recv(t, seen, "the watcher to end once the society closed")
	for _, e := range evs {
		if e.Kind == as.EventMessageHandled && e.Turn == held.ID {
			return
		}
	}
	t.Fatalf("the watcher ended without the message_handled of root's turn, which Close waited for; it saw %d events, the society logged %d", len(evs), s.LastEvent())
}

// memEvents is a durable-looking store kept in memory: a store.Memory
// that says it is not volatile, with an event log of its own, whose
// appends fail while fail is set.
type memEvents struct {
	*store.Memory
	fail          atomic.Bool
	refuseReserve atomic.Bool // refuse to record how far events are numbered
	mu            sync.Mutex
	evs           []store.Event
}

func (m *memEvents) Volatile() bool { return false }

func (m *memEvents) Apply(ctx context.Context, c store.Change) error {
	if m.refuseReserve.Load() && slices.ContainsFunc(c.States, func(e store.StateEntry) bool { return e.Scope == "events:" }) {
		// Slow, as a store may be: a society that handled messages before
		// it reserved would have handled them by now.
		time.Sleep(50 * time.Millisecond)
		return errors.New("injected: the store refuses the write")
	}
	return m.Memory.Apply(ctx, c)
}

func (m *memEvents) AppendEvents(ctx context.Context, evs []store.Event) error {
	if m.fail.Load() {
		return errors.New("injected: the log is full")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.evs = append(m.evs, evs...)
	return nil
}

func (m *memEvents) ReadEvents(ctx context.Context, from uint64, limit int) ([]store.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Event
	for _, e := range m.evs {
		if e.Seq >= from && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (m *memEvents) TrimEvents(ctx context.Context, before uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.evs); n > 0 {
		before = min(before, m.evs[n-1].Seq) // the newest is kept
	}
	m.evs = slices.DeleteFunc(m.evs, func(e store.Event) bool { return e.Seq < before })
	return nil
}

func (m *memEvents) EventBounds(ctx context.Context) (first, last uint64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.evs) == 0 {
		return 0, 0, nil
	}
	return m.evs[0].Seq, m.evs[len(m.evs)-1].Seq, nil
}

// The numbers a reopened society skips, for the events lost before, do
// not count as events kept: the store is trimmed to keep
// Config.EventRetention events, some from before the gap.
func TestEvents_TrimAfterTheNumbersSkipped(t *testing.T) {
	ctx := context.Background()
	st := &memEvents{Memory: store.NewMemory()}
	cfg := as.Config{Store: st, EventRetention: 10, Logger: quiet}
	s, err := as.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 12 {
		s.SubmitRequirement(ctx, "") // refused: one event each
	}
	waitFor(t, "12 events stored", func() bool { _, last, _ := st.EventBounds(ctx); return last == 12 })
	st.fail.Store(true)
	for range 20 {
		s.SubmitRequirement(ctx, "")
	}
	if err := s.Close(ctx); err != nil { // events 13 to 32 are lost
		t.Fatal(err)
	}
	st.fail.Store(false)
	s = newSociety(t, cfg)
	for range 5 {
		s.SubmitRequirement(ctx, "")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// However the writer batched them: at least 10 events kept, the new
	// ones and the newest of the old.
	var seqs []uint64
	for _, e := range st.evs {
		seqs = append(seqs, e.Seq)
	}
	if n := len(seqs); n < 10 || !slices.Equal(seqs[n-5:], []uint64{33, 34, 35, 36, 37}) || seqs[n-6] != 12 {
		t.Fatalf("the store keeps events %v, want 33 to 37 and the old ones up to 12, 10 in all or more", seqs)
	}
}

// A society that cannot record how far its events are numbered as it
// opens fails New before it handles any message it was left.
func TestEvents_ReserveFailsBeforeAnyHandling(t *testing.T) {
	ctx := context.Background()
	st := &memEvents{Memory: store.NewMemory()}
	release := make(chan struct{})
	defer close(release)
	s1 := newSociety(t, as.Config{Store: st, Logger: quiet, Root: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		<-release // the message stays pending in the store
		return nil
	})})
	if _, err := s1.SubmitRequirement(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	st.refuseReserve.Store(true)
	var handled atomic.Int32
	s2, err := as.New(ctx, as.Config{Store: st, Logger: quiet, Root: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		handled.Add(1)
		return nil
	})})
	if err == nil {
		s2.Close(ctx)
		t.Fatal("New succeeded with a store that refused the events' reservation")
	}
	if n := handled.Load(); n != 0 {
		t.Fatalf("the failed New handled %d messages", n)
	}
}
