package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/store"

	"pgregory.net/rapid"
)

func TestHandlerPanicIsReportedToParent(t *testing.T) {
	ctx := context.Background()
	boom := as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { panic("boom") })
	s := newSociety(t, as.Config{Root: boom})
	if _, err := s.SubmitRequirement(ctx, "anything"); err != nil {
		t.Fatal(err)
	}
	m := userMessage(t, s)
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || m.Type != as.StatusReport || p.Status != string(as.StatusError) || m.From != as.RootID {
		t.Fatalf("got %+v (%v), want an error status_report from root", m, err)
	}
	// The agent goes on: a second message is handled (and fails) again.
	if _, err := s.SubmitRequirement(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	userMessage(t, s)
}

// A handler's turn holds an idle agent it sends to, for its own drainer to
// take up when it returns. A handler that sends and then waits, by means the
// society cannot see, for the receiver to act must still see it act.
func TestDrainer_HandlerBlockedAfterSendingIsNotWaitedFor(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Logger: quiet})
	lead, roleID := hostLead(t, s, "task-blocked", "worker")

	acted := make(chan struct{})
	b := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
		close(acted)
		return nil
	}))
	result := make(chan error, 1)
	a := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if _, err := self.SendText(ctx, b.ID(), "go"); err != nil {
			result <- err
			return err
		}
		select {
		case <-acted:
			result <- nil
		case <-time.After(hangGuard):
			result <- errors.New("the receiver never ran while its sender's handler waited for it")
		}
		return nil
	}))
	if _, err := lead.SendText(ctx, a.ID(), "start"); err != nil {
		t.Fatal(err)
	}
	if err := <-result; err != nil {
		t.Fatal(err)
	}
}

// A handle kept past the end of its turn still delivers: the ended turn
// holds nothing, so the receiver gets a drainer of its own.
func TestDrainer_HandleKeptPastItsTurn(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Logger: quiet})
	lead, roleID := hostLead(t, s, "task-kept", "worker")

	got := make(chan as.Message, 1)
	b := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		got <- m
		return nil
	}))
	kept := make(chan *as.Actor, 1)
	a := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(_ context.Context, self *as.Actor, _ as.Message) error {
		kept <- self
		return nil
	}))
	if _, err := lead.SendText(ctx, a.ID(), "start"); err != nil {
		t.Fatal(err)
	}
	self := <-kept
	time.Sleep(10 * time.Millisecond) // let the turn end
	if _, err := self.SendText(ctx, b.ID(), "late"); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, got, "the message sent through a handle after its turn ended"); m.From != a.ID() {
		t.Fatalf("message from %s, want %s", m.From, a.ID())
	}
}

// A turn holds one agent; a handler that sends to many idle agents gets the
// others drained at once, in parallel with it, and the held one too if it
// goes on running.
func TestDrainer_FanOutRunsInParallel(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Logger: quiet})
	lead, roleID := hostLead(t, s, "task-fan", "worker")

	const n = 4
	arrived := make(chan struct{}, n)
	release := make(chan struct{})
	defer close(release)
	var kids []*as.Actor
	for range n {
		kids = append(kids, spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
			arrived <- struct{}{}
			return nil
		})))
	}
	parent := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(ctx context.Context, self *as.Actor, _ as.Message) error {
		for _, k := range kids {
			if _, err := self.SendText(ctx, k.ID(), "work"); err != nil {
				return err
			}
		}
		<-release // every child runs while this handler still does
		return nil
	}))
	if _, err := lead.SendText(ctx, parent.ID(), "fan out"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		select {
		case <-arrived:
		case <-time.After(hangGuard):
			t.Fatalf("%d of %d children ran while their parent's handler waited", i, n)
		}
	}
}

// hop is one step of a routed message's path: the agent it goes to (an
// index), and whether its sender then waits until the receiver's handler has
// started, which a held receiver only does once released.
type hop struct {
	To   int  `json:"to"`
	Wait bool `json:"wait"`
}

// routed is the payload of TestDrainers_RandomTrafficArrivesOnce's messages.
type routed struct {
	Text string `json:"text"`
	ID   string `json:"id"`
	Path []hop  `json:"path"` // the hops after this message
}

// trip is a message the host sends, and the path it is forwarded along.
type trip struct {
	first int
	path  []hop
}

// Random traffic, in which handlers forward messages along drawn paths and
// some wait after sending for the receiver to start: every message is
// handled exactly once, no agent runs two handlers at once, and each
// sender's messages to a receiver arrive in the order sent. A handler waits
// only for an agent of higher index, so waits cannot form a cycle.
func TestDrainers_RandomTrafficArrivesOnce(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(2, 5).Draw(rt, "agents")
		var trips []trip
		for range rapid.IntRange(1, 6).Draw(rt, "trips") {
			tr := trip{first: rapid.IntRange(0, n-1).Draw(rt, "first")}
			at := tr.first
			for range rapid.IntRange(0, 5).Draw(rt, "hops") {
				wait := at < n-1 && rapid.Bool().Draw(rt, "wait")
				lo := 0
				if wait {
					lo = at + 1
				}
				from := at
				at = rapid.IntRange(lo, n-1).Filter(func(k int) bool { return k != from }).Draw(rt, "to")
				tr.path = append(tr.path, hop{To: at, Wait: wait})
			}
			trips = append(trips, tr)
		}
		if err := runTraffic(t, n, trips); err != nil {
			rt.Fatal(err)
		}
	})
}

// runTraffic runs trips on a new society of n agents and checks the
// delivery guarantees.
func runTraffic(t *testing.T, n int, trips []trip) error {
	ctx := context.Background()
	s, err := as.New(ctx, as.Config{Logger: quiet})
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	lead, roleID := hostLead(t, s, "task-traffic", "worker")

	var (
		mu      sync.Mutex
		started = map[string]chan struct{}{} // by message id, closed when its handler starts
		handled = map[string]int{}
		lastSeq = map[[2]string]uint64{} // by sender and receiver
		fail    error
		total   sync.WaitGroup
	)
	failf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if fail == nil {
			fail = fmt.Errorf(format, args...)
		}
	}
	expect := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		c := make(chan struct{})
		started[id] = c
		return c
	}
	agents := make([]*as.Actor, n)
	for i := range n {
		var busy atomic.Bool
		agents[i] = spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
			defer total.Done()
			if !busy.CompareAndSwap(false, true) {
				failf("%s runs two handlers at once", self.ID())
			}
			defer busy.Store(false)
			var p routed
			if err := m.Decode(&p); err != nil {
				failf("payload: %v", err)
				return nil
			}
			mu.Lock()
			close(started[p.ID])
			handled[p.ID]++
			pair := [2]string{m.From, m.To}
			if m.Seq <= lastSeq[pair] {
				failf("%s got message %d from %s after %d", m.To, m.Seq, m.From, lastSeq[pair])
			}
			lastSeq[pair] = m.Seq
			mu.Unlock()
			if len(p.Path) == 0 {
				return nil
			}
			h, next := p.Path[0], routed{Text: "hop", ID: p.ID + ">", Path: p.Path[1:]}
			began := expect(next.ID)
			if _, err := self.Send(ctx, as.Outgoing{To: agents[h.To].ID(), Payload: next}); err != nil {
				failf("forwarding %s: %v", next.ID, err)
				return nil
			}
			if h.Wait {
				select {
				case <-began:
				case <-time.After(hangGuard):
					failf("%s never started while %s, which sent it, waited", next.ID, self.ID())
				}
			}
			return nil
		}))
	}
	for i, tr := range trips {
		total.Add(1 + len(tr.path))
		m := routed{Text: "trip", ID: strconv.Itoa(i), Path: tr.path}
		expect(m.ID)
		if _, err := lead.Send(ctx, as.Outgoing{To: agents[tr.first].ID(), Payload: m}); err != nil {
			return err
		}
	}
	finished := make(chan struct{})
	go func() { total.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(hangGuard):
		return errors.New("not every message was handled")
	}
	mu.Lock()
	defer mu.Unlock()
	if fail != nil {
		return fail
	}
	for id, c := range handled {
		if c != 1 {
			return fmt.Errorf("message %s handled %d times", id, c)
		}
	}
	return nil
}

// blockFinish is a durable store whose record of a given message's end
// waits until wait is closed, as a slow disk would, or until hangGuard
// passes.
type blockFinish struct {
	store.Store
	id   atomic.Value // string: the message whose finish waits
	wait chan struct{}
	late atomic.Bool // the wait gave up
}

func (b *blockFinish) Apply(ctx context.Context, c store.Change) error {
	if id, _ := b.id.Load().(string); id != "" && slices.Contains(c.Finished, id) {
		select {
		case <-b.wait:
		case <-time.After(hangGuard):
			b.late.Store(true)
		}
	}
	return b.Store.Apply(ctx, c)
}

// On a durable store a turn holds nothing, since the record of its end is
// written before its drainer could take a held agent up: the receiver does
// not wait for that record.
func TestDrainer_HeldAgentDoesNotWaitForTheStore(t *testing.T) {
	ctx := context.Background()
	st := &blockFinish{Store: store.NewMemory(), wait: make(chan struct{})}
	s := newSociety(t, as.Config{Logger: quiet, Store: st})
	lead, roleID := hostLead(t, s, "task-slow-store", "worker")

	b := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
		close(st.wait)
		return nil
	}))
	a := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		st.id.Store(m.ID)
		_, err := self.SendText(ctx, b.ID(), "go")
		return err
	}))
	if _, err := lead.SendText(ctx, a.ID(), "start"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.wait:
	case <-time.After(2 * hangGuard): // after blockFinish gives up
		t.Fatal("the receiver never ran")
	}
	if st.late.Load() {
		t.Fatal("the receiver waited for the record of its sender's turn")
	}
}

// benchPairs is the number of agent pairs (or goroutine pairs) that bounce a
// message back and forth in the routing benchmarks.
const benchPairs = 64

// benchPayload is the payload every routed message carries.
var benchPayload = json.RawMessage(`{"text":"ping"}`)

// benchPayloadAny is benchPayload already boxed, so that a reply does not
// allocate to put it in Outgoing.Payload.
var benchPayloadAny any = benchPayload

// BenchmarkRoute measures messages delivered per second between code-driven
// agents on the default in-memory store: benchPairs pairs of agents each
// bounce one message until b.N deliveries in all have happened.
func BenchmarkRoute(b *testing.B) {
	b.ReportMetric(routePairs(b, as.Config{}), "msgs/s") // messages log at Debug: dropped
}

// BenchmarkRouteNoEvents is BenchmarkRoute with the event log turned off:
// the two side by side show what keeping events costs the message path.
func BenchmarkRouteNoEvents(b *testing.B) {
	b.ReportMetric(routePairs(b, as.Config{EventRetention: -1}), "msgs/s")
}

// routePairs runs BenchmarkRoute's exchange on a society with cfg (its
// logger replaced by one that drops everything) and returns the rate of
// delivered messages.
func routePairs(b *testing.B, cfg as.Config) float64 {
	ctx := context.Background()
	cfg.Logger = quiet
	s := newSociety(b, cfg)
	lead, roleID := hostLead(b, s, "route", "pinger")

	var (
		armed   atomic.Bool
		warm    sync.WaitGroup
		count   atomic.Int64
		budget  = int64(b.N)
		done    = make(chan struct{})
		failure = make(chan error, 1)
	)
	pong := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if !armed.Load() {
			warm.Done()
			return nil
		}
		n := count.Add(1)
		if n == budget {
			close(done)
		}
		if n >= budget {
			return nil
		}
		if _, err := self.Send(ctx, as.Outgoing{To: m.From, Payload: benchPayloadAny}); err != nil {
			select {
			case failure <- err:
			default:
			}
		}
		return nil
	})
	var left, right [benchPairs]*as.Actor
	for i := range benchPairs {
		for _, side := range []*[benchPairs]*as.Actor{&left, &right} {
			a, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: roleID, Brief: validBrief(), Behavior: pong})
			if err != nil {
				b.Fatal(err)
			}
			if side[i], err = s.Actor(a.ID); err != nil {
				b.Fatal(err)
			}
		}
	}
	warm.Add(2 * benchPairs)
	for i := range benchPairs {
		if _, err := left[i].Send(ctx, as.Outgoing{To: right[i].ID(), Payload: benchPayloadAny}); err != nil {
			b.Fatal(err)
		}
		if _, err := right[i].Send(ctx, as.Outgoing{To: left[i].ID(), Payload: benchPayloadAny}); err != nil {
			b.Fatal(err)
		}
	}
	warm.Wait()
	armed.Store(true)

	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU(b)
	for i := range benchPairs {
		if _, err := left[i].Send(ctx, as.Outgoing{To: right[i].ID(), Payload: benchPayloadAny}); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-done:
	case err := <-failure:
		b.Fatal(err)
	case <-time.After(5 * time.Minute):
		b.Fatalf("delivered %d of %d messages", count.Load(), b.N)
	}
	b.StopTimer()
	cpu.report()
	return float64(b.N) / b.Elapsed().Seconds()
}

// benchMsg is what the baseline's goroutines pass around: about what a
// message between agents needs.
type benchMsg struct {
	from, to string
	seq      uint64
	payload  json.RawMessage
}

// BenchmarkRouteBaseline is BenchmarkRoute's shape with nothing but
// goroutines and buffered channels: benchPairs pairs of goroutines bounce a
// message struct until b.N deliveries in all have happened.
func BenchmarkRouteBaseline(b *testing.B) {
	var (
		count  atomic.Int64
		budget = int64(b.N)
		done   = make(chan struct{})
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	run := func(self string, in <-chan benchMsg, out chan<- benchMsg) {
		for {
			select {
			case m := <-in:
				n := count.Add(1)
				if n == budget {
					close(done)
				}
				if n >= budget {
					continue
				}
				// One message per pair is in flight, so out always has room.
				out <- benchMsg{from: self, to: m.from, seq: m.seq + 1, payload: benchPayload}
			case <-stop:
				return
			}
		}
	}
	var kick [benchPairs]chan benchMsg
	for i := range benchPairs {
		l, r := make(chan benchMsg, 1), make(chan benchMsg, 1)
		ln, rn := "l"+strconv.Itoa(i), "r"+strconv.Itoa(i)
		wg.Go(func() { run(ln, l, r) })
		wg.Go(func() { run(rn, r, l) })
		kick[i] = r
	}

	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU(b)
	for i := range benchPairs {
		kick[i] <- benchMsg{from: "l" + strconv.Itoa(i), to: "r" + strconv.Itoa(i), payload: benchPayload}
	}
	<-done
	b.StopTimer()
	cpu.report()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// TestMailboxCap: a send to an agent whose mailbox already holds
// Config.MaxQueued messages is refused with ErrMailboxFull and changes
// nothing; the society's own messages (a failure report, a handoff) and
// answers to requests still go through; once the agent has caught up,
// sends work again.
func TestMailboxCap(t *testing.T) {
	ctx := context.Background()
	const maxQueued = 3
	st := newRecordingStore()
	s := newSociety(t, as.Config{Store: st, MaxQueued: maxQueued, Logger: quiet})

	// The lead holds on each "hold" until released; its child fails on
	// "fail".
	got := make(chan as.Message, 64)
	holding, release := make(chan struct{}), make(chan struct{})
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "", as.BehaviorFunc(func(ctx context.Context, _ *as.Actor, m as.Message) error {
		got <- m
		if m.Text() == "hold" {
			holding <- struct{}{}
			<-release
		}
		return nil
	})).ID)
	role, _, err := lead.CreateRole(ctx, as.RoleSpec{Name: "child"})
	if err != nil {
		t.Fatal(err)
	}
	child := spawnWith(t, s, lead, role.ID, as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		if m.Text() == "fail" {
			return errors.New("cannot")
		}
		return nil
	}))
	user := actorOf(t, s, as.UserID)
	send := func(from *as.Actor, out as.Outgoing) (as.Message, error) {
		t.Helper()
		if out.TaskID == "" {
			out.TaskID = "t"
		}
		return from.Send(ctx, out)
	}
	mustSend := func(from *as.Actor, out as.Outgoing) as.Message {
		t.Helper()
		m, err := send(from, out)
		if err != nil {
			t.Fatalf("%s to %s: %v", from.ID(), out.To, err)
		}
		return m
	}

	// The lead holds its first message; a request from it waits for the
	// child's answer.
	hold := mustSend(user, as.Outgoing{To: lead.ID(), Payload: as.Text("hold")})
	recv(t, holding, "the lead holding")
	req := mustSend(lead, as.Outgoing{To: child.ID(), Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: "req-1", SubtaskDescription: "x"}})
	st.waitFinished(t, req.ID)
	queued := []as.Message{hold}
	for i := range maxQueued {
		queued = append(queued, mustSend(user, as.Outgoing{To: lead.ID(), Payload: as.Text("m" + strconv.Itoa(i))}))
	}

	// The mailbox is full: nothing more gets in, from anyone, of any type.
	before, mark := snapshot(t, s), st.mark()
	for _, c := range []struct {
		from *as.Actor
		out  as.Outgoing
	}{
		{user, as.Outgoing{To: lead.ID(), Payload: as.Text("one too many")}},
		{child, as.Outgoing{To: lead.ID(), Payload: as.Text("one too many")}},
		{child, as.Outgoing{To: lead.ID(), Type: as.StatusReport, Payload: as.StatusReportPayload{Status: "busy"}}},
		{child, as.Outgoing{To: lead.ID(), Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: "req-refused", SubtaskDescription: "x"}}},
	} {
		m, err := send(c.from, c.out)
		if e := wantCode(t, err, as.ErrMailboxFull); e.AgentID != lead.ID() || m.ID != "" {
			t.Fatalf("refusal %+v, message %+v", e, m)
		}
	}
	wantCode(t, sendErr(ctx, child, as.Outgoing{To: lead.ID(), Type: as.CollaborationResponse,
		Payload: as.CollaborationResponsePayload{RequestID: "req-refused", Status: as.StatusRejected, ErrorMessage: "no"}}), as.ErrUnknownRequest)
	sameState(t, before, s)
	st.assertOnly(t, mark)

	// An answer to a request and a failure report still get in.
	answer, err := child.Respond(ctx, "req-1", as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: json.RawMessage(`{"ok":true}`)})
	if err != nil {
		t.Fatalf("the answer: %v", err)
	}
	queued = append(queued, answer)
	mustSend(user, as.Outgoing{To: child.ID(), Payload: as.Text("fail")})
	waitFor(t, "the failure report to be accepted", func() bool {
		for _, c := range st.since(mark) {
			for _, m := range c.Accepted {
				if m.From == child.ID() && m.Type == string(as.StatusReport) {
					return true
				}
			}
		}
		return false
	})

	// Once the lead has caught up, sends work again.
	release <- struct{}{}
	for i, want := range queued {
		if m := recv(t, got, "a message to the lead"); m.ID != want.ID {
			t.Fatalf("message %d to the lead is %s %s, want %s %s", i, m.ID, m.Payload, want.ID, want.Payload)
		}
	}
	if m := recv(t, got, "the failure report"); m.From != child.ID() || m.Type != as.StatusReport {
		t.Fatalf("the lead got %+v, want the child's failure report", m)
	}
	after := mustSend(user, as.Outgoing{To: lead.ID(), Payload: as.Text("after")})
	if m := recv(t, got, "a message after the lead caught up"); m.ID != after.ID {
		t.Fatalf("the lead got %s, want %s", m.ID, after.ID)
	}

	// A handoff gets into a full mailbox too.
	mustSend(user, as.Outgoing{To: lead.ID(), Payload: as.Text("hold")})
	recv(t, holding, "the lead holding again")
	for i := range maxQueued {
		mustSend(user, as.Outgoing{To: lead.ID(), Payload: as.Text("n" + strconv.Itoa(i))})
	}
	wantCode(t, sendErr(ctx, user, as.Outgoing{To: lead.ID(), TaskID: "t", Payload: as.Text("one too many")}), as.ErrMailboxFull)
	if err := s.Terminate(ctx, lead.ID()); err != nil {
		t.Fatalf("terminating an agent whose mailbox is full: %v", err)
	}
	release <- struct{}{}
	for range maxQueued + 1 {
		recv(t, got, "a message to the lead")
	}
	waitFor(t, "the lead to end", func() bool {
		a, _ := s.Agent(lead.ID())
		return a.Status == as.StatusTerminated
	})
}

// TestMailboxCapNegativeMeansNone: with a negative MaxQueued, a mailbox
// takes any number of messages.
func TestMailboxCapNegativeMeansNone(t *testing.T) {
	ctx := context.Background()
	holding, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	s := newSociety(t, as.Config{MaxQueued: -1, Logger: quiet, Root: as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
		once.Do(func() {
			holding <- struct{}{}
			<-release
		})
		return nil
	})})
	user := actorOf(t, s, as.UserID).WithTask("t")
	if _, err := user.SendText(ctx, as.RootID, "first"); err != nil {
		t.Fatal(err)
	}
	recv(t, holding, "root holding")
	for i := range as.DefaultMaxQueued + 1 {
		if _, err := user.SendText(ctx, as.RootID, strconv.Itoa(i)); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	close(release)
}

// TestNoBehaviour_DropIsLoggedAtWarn: an agent with no behaviour and no
// model to drive it logs each message it drops at Warn level, as
// Config.DefaultBehavior says: the host misconfigured it, and a logger
// set to Warn must show that.
func TestNoBehaviour_DropIsLoggedAtWarn(t *testing.T) {
	rec := &logRecorder{}
	s := newSociety(t, as.Config{Logger: slog.New(rec)})
	m, err := s.SendTextToAgent(context.Background(), as.RootID, "anyone?", "")
	if err != nil {
		t.Fatal(err)
	}
	const msg = "message dropped: the agent has no behaviour"
	waitFor(t, "root to drop the message", func() bool { return rec.find(msg, map[string]string{"msg": m.ID}) })
	if !rec.find(msg, map[string]string{"msg": m.ID, "_level": slog.LevelWarn.String()}) {
		t.Fatalf("root dropped message %s with a record below Warn: %v", m.ID, rec.records(msg))
	}
}
