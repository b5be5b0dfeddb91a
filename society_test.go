package agentsociety_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	as "agentsociety"
)

func TestCloseRefusesAndWakesWaiters(t *testing.T) {
	s, err := as.New(context.Background(), as.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := s.WaitForUserMessage(context.Background(), nil)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, as.ErrClosed) {
		t.Fatalf("waiter got %v, want ErrClosed", err)
	}
	if _, err := s.SubmitRequirement(context.Background(), "x"); !errors.Is(err, as.ErrClosed) {
		t.Fatalf("SubmitRequirement after Close: %v, want ErrClosed", err)
	}
}

// A second Close returns only once the first has finished, so that "no
// goroutine is left" holds for whoever Close returns to; with a context that
// ends first, it returns that context's error.
func TestSecondCloseWaitsForTheFirst(t *testing.T) {
	ctx := context.Background()
	release, started := make(chan struct{}), make(chan struct{})
	s, err := as.New(ctx, as.Config{Logger: quiet, Root: as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
		close(started)
		<-release
		return nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubmitRequirement(ctx, "hold root"); err != nil {
		t.Fatal(err)
	}
	<-started
	first := make(chan error)
	go func() { first <- s.Close(ctx) }()
	for !errors.Is(func() error { _, err := s.SubmitRequirement(ctx, "x"); return err }(), as.ErrClosed) {
		time.Sleep(time.Millisecond) // until the first Close has begun
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Close while root's handler runs = %v, want context.DeadlineExceeded", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first Close = %v", err)
	}
	if err := s.Close(short); err != nil {
		t.Fatalf("Close after the first returned = %v, want nil", err)
	}
}

func TestRefusals_AfterClose(t *testing.T) {
	ctx := context.Background()
	f := newSmallOrg(t, as.Config{})
	before := snapshot(t, f.s)
	if err := f.s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Close(ctx); err != nil {
		t.Fatalf("closing twice: %v", err)
	}
	ops := map[string]func() error{
		"SpawnAgent": func() error {
			return spawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief()})
		},
		"SpawnAgent by root on a new task": func() error {
			return spawnErr(ctx, f.root.WithTask("t9"), as.SpawnSpec{RoleID: f.lead.ID, Brief: validBrief()})
		},
		"CreateRole": func() error {
			_, _, err := f.a.CreateRole(ctx, as.RoleSpec{Name: "late"})
			return err
		},
		"Send": func() error {
			return sendErr(ctx, f.a, as.Outgoing{To: as.RootID, Payload: as.Text("anyone?")})
		},
		"Send collaboration_request": func() error {
			return sendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{SubtaskDescription: "x"}})
		},
		"SubmitRequirement": func() error {
			_, err := f.s.SubmitRequirement(ctx, "a calculator")
			return err
		},
		"SendTextToAgent": func() error {
			_, err := f.s.SendTextToAgent(ctx, f.a.ID(), "hello", "")
			return err
		},
		"PutArtifact": func() error {
			_, err := f.a.PutArtifact(ctx, as.ArtifactSpec{Name: "after", Data: []byte("y")})
			return err
		},
		"WaitForUserMessage": func() error {
			_, err := f.s.WaitForUserMessage(ctx, nil)
			return err
		},
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			wantCode(t, op(), as.ErrClosed)
			sameState(t, before, f.s)
		})
	}
}

func TestCloseLeavesNoGoroutine(t *testing.T) {
	const busy = 8
	// setup starts a society with a lead and returns the lead's handle and
	// the id of a role it may spawn on.
	setup := func(t *testing.T) (*as.Society, *as.Actor, string) {
		s, err := as.New(context.Background(), as.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		lead, roleID := hostLead(t, s, "close", "busy")
		return s, lead, roleID
	}
	sendN := func(t *testing.T, from *as.Actor, to string, n int) {
		for i := range n {
			if _, err := from.SendText(context.Background(), to, "work "+strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	sleeper := func(handled *atomic.Int64) as.Behavior {
		return as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
			time.Sleep(time.Millisecond)
			handled.Add(1)
			return nil
		})
	}

	t.Run("blocked handlers", func(t *testing.T) {
		baseline := runtime.NumGoroutine()
		s, lead, roleID := setup(t)
		started := make(chan struct{}, busy)
		var cancelled, handled atomic.Int64
		blocker := as.BehaviorFunc(func(ctx context.Context, _ *as.Actor, _ as.Message) error {
			started <- struct{}{}
			<-ctx.Done()
			cancelled.Add(1)
			return ctx.Err() // reported to the parent, which the closed society refuses
		})
		for range busy {
			sendN(t, lead, spawnWith(t, s, lead, roleID, blocker).ID(), 3)
			sendN(t, lead, spawnWith(t, s, lead, roleID, sleeper(&handled)).ID(), 50)
		}
		for i := range busy {
			recv(t, started, fmt.Sprintf("blocking handler %d of %d to start", i+1, busy))
		}

		ctx, cancelClose := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancelClose()
		t0 := time.Now()
		closed := make(chan error, 1)
		go func() { closed <- s.Close(ctx) }()
		// The blocked handlers return only once cancelled.
		if err := recv(t, closed, "Close to return after its deadline"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close = %v, want context.DeadlineExceeded", err)
		}
		t.Logf("Close returned after %v; sleepers handled %d of %d messages", time.Since(t0).Round(time.Millisecond), handled.Load(), busy*50)
		// A second Close waits for the handlers the first cancelled: all
		// of them are done when it returns.
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("second Close = %v, want nil", err)
		}
		if n := cancelled.Load(); n != busy {
			t.Errorf("%d blocked handlers saw their context cancelled before the second Close returned, want %d", n, busy)
		}
		if len(started) != 0 {
			t.Errorf("%d more blocked handlers started after the first", len(started))
		}
		waitGoroutines(t, baseline)
	})

	t.Run("sleeping handlers", func(t *testing.T) {
		baseline := runtime.NumGoroutine()
		s, lead, roleID := setup(t)
		var handled atomic.Int64
		for range busy {
			sendN(t, lead, spawnWith(t, s, lead, roleID, sleeper(&handled)).ID(), 50)
		}
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Fatalf("Close = %v, want nil: the handlers return on their own", err)
		}
		n := handled.Load()
		if n >= busy*50 {
			t.Logf("every message was handled before Close stopped the agents")
		}
		if _, err := lead.SendText(context.Background(), as.UserID, "late"); !errors.Is(err, as.ErrClosed) {
			t.Errorf("send after Close: %v, want ErrClosed", err)
		}
		if handled.Load() != n {
			t.Errorf("handlers ran after Close returned")
		}
		waitGoroutines(t, baseline)
	})
}

// The shape of the stress test: stressAgents agents each send stressPerPair
// messages to each of stressFanout others, while stressNew agents are
// spawned during the exchange and each receives stressNewPerPair messages
// from each of stressNewSenders existing agents.
const (
	stressAgents     = 200
	stressFanout     = 19
	stressPerPair    = 25
	stressNew        = 50
	stressNewSenders = 4
	stressNewPerPair = 25
	stressSenderGos  = 16 // goroutines that drive the existing agents' sends
	stressTotal      = stressAgents*stressFanout*stressPerPair + stressNew*stressNewSenders*stressNewPerPair
	stressTickEvery  = stressAgents * stressFanout * stressPerPair / stressNew // deliveries between spawns
)

// stressPayload returns {"s":"<sender>","n":<seq>}.
func stressPayload(sender string, seq int) json.RawMessage {
	b := make([]byte, 0, 32+len(sender))
	b = append(b, `{"s":"`...)
	b = append(b, sender...)
	b = append(b, `","n":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	return append(b, '}')
}

// parseStressPayload is the inverse of stressPayload.
func parseStressPayload(p []byte) (sender string, seq int, ok bool) {
	rest, ok := bytes.CutPrefix(p, []byte(`{"s":"`))
	if !ok {
		return "", 0, false
	}
	s, n, ok := bytes.Cut(rest, []byte(`","n":`))
	if !ok {
		return "", 0, false
	}
	n, ok = bytes.CutSuffix(n, []byte("}"))
	if !ok {
		return "", 0, false
	}
	seq, err := strconv.Atoi(string(n))
	return string(s), seq, err == nil
}

// stressReceiver is what one agent saw.
type stressReceiver struct {
	id       string // set before any message can reach the agent
	inFlight atomic.Bool

	mu   sync.Mutex
	next map[string]int // sender -> next expected sequence number
	bad  []string       // the first few violations
}

func (r *stressReceiver) fault(format string, args ...any) {
	if len(r.bad) < 5 {
		r.bad = append(r.bad, fmt.Sprintf(format, args...))
	}
}

func TestStress_ExactlyOnceInOrder(t *testing.T) {
	start := time.Now()
	s := newSociety(t, as.Config{MaxAgents: 1000})
	lead, roleID := hostLead(t, s, "stress", "peer")

	// A hang guard: the exchange takes seconds, a few times that on a
	// loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*hangGuard)
	defer cancel()

	var (
		delivered atomic.Int64
		overlaps  atomic.Int64 // handlers found running twice for one agent
		done      = make(chan struct{})
		ticks     = make(chan struct{}, stressTotal/stressTickEvery+1) // never full: sends below never drop
	)
	behavior := func(r *stressReceiver) as.Behavior {
		return as.BehaviorFunc(func(_ context.Context, self *as.Actor, m as.Message) error {
			if !r.inFlight.CompareAndSwap(false, true) {
				overlaps.Add(1)
			}
			runtime.Gosched() // widen the window in which a second handler would show
			from, seq, ok := parseStressPayload(m.Payload)
			r.mu.Lock()
			switch {
			case self.ID() != r.id || m.To != r.id:
				r.fault("message %s for %s handled as %s", m.ID, m.To, self.ID())
			case !ok:
				r.fault("payload %s does not parse", m.Payload)
			case from != m.From:
				r.fault("payload names sender %s, message says %s", from, m.From)
			case seq != r.next[from]:
				r.fault("from %s got seq %d, want %d", from, seq, r.next[from])
			}
			r.next[from] = seq + 1
			r.mu.Unlock()
			r.inFlight.Store(false)

			n := delivered.Add(1)
			if n%stressTickEvery == 0 {
				select {
				case ticks <- struct{}{}:
				default:
				}
			}
			if n == stressTotal {
				close(done)
			}
			return nil
		})
	}

	recv := make([]*stressReceiver, stressAgents+stressNew)
	for i := range recv {
		recv[i] = &stressReceiver{next: make(map[string]int)}
	}
	actors := make([]*as.Actor, stressAgents)
	for i := range stressAgents {
		a, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: roleID, Brief: validBrief(), Behavior: behavior(recv[i])})
		if err != nil {
			t.Fatal(err)
		}
		recv[i].id = a.ID
		if actors[i], err = s.Actor(a.ID); err != nil {
			t.Fatal(err)
		}
	}

	var wg sync.WaitGroup
	send := func(from *as.Actor, to string, seq int) bool {
		if _, err := from.Send(ctx, as.Outgoing{To: to, Payload: stressPayload(from.ID(), seq)}); err != nil {
			t.Errorf("send %s -> %s #%d: %v", from.ID(), to, seq, err)
			cancel()
			return false
		}
		return true
	}

	// The existing agents write to each other. Every pair (i, i+k) is driven
	// by the one goroutine that owns sender i, so its order is defined.
	for g := range stressSenderGos {
		wg.Go(func() {
			for seq := range stressPerPair {
				for i := g; i < stressAgents; i += stressSenderGos {
					for k := 1; k <= stressFanout; k++ {
						if !send(actors[i], recv[(i+k)%stressAgents].id, seq) {
							return
						}
					}
				}
			}
		})
	}

	// Meanwhile new agents are born, one every stressTickEvery deliveries,
	// and each new agent gets its own goroutine of writers.
	var firstSpawn, lastSpawn int64 // deliveries counted when they were born
	wg.Go(func() {
		for j := range stressNew {
			if j > 0 {
				select {
				case <-ticks:
				case <-ctx.Done():
					return
				}
			}
			r := recv[stressAgents+j]
			a, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: roleID, Brief: validBrief(), Behavior: behavior(r)})
			if err != nil {
				t.Errorf("spawning new agent %d: %v", j, err)
				cancel()
				return
			}
			r.id = a.ID
			if j == 0 {
				firstSpawn = delivered.Load()
			}
			lastSpawn = delivered.Load()
			wg.Go(func() {
				for seq := range stressNewPerPair {
					for q := range stressNewSenders {
						if !send(actors[(stressNewSenders*j+q)%stressAgents], r.id, seq) {
							return
						}
					}
				}
			})
		}
	})

	select {
	case <-done:
	case <-ctx.Done():
	}
	timedOut := ctx.Err() != nil
	cancel() // stops the spawner if it still waits
	wg.Wait()
	cctx, ccancel := context.WithTimeout(context.Background(), hangGuard)
	defer ccancel()
	if err := s.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// After Close no handler runs: the count is final.
	if n := delivered.Load(); timedOut || n != stressTotal {
		t.Errorf("delivered %d messages (timed out: %v), want exactly %d", n, timedOut, stressTotal)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("a handler ran concurrently with another for the same agent %d times", n)
	}
	if n := len(s.Agents()); n != 1+stressAgents+stressNew {
		t.Errorf("%d agents, want %d", n, 1+stressAgents+stressNew)
	}
	want := make([]map[string]int, len(recv))
	for i := range want {
		want[i] = make(map[string]int)
	}
	for i := range stressAgents {
		for k := 1; k <= stressFanout; k++ {
			want[(i+k)%stressAgents][actors[i].ID()] = stressPerPair
		}
	}
	for j := range stressNew {
		for q := range stressNewSenders {
			want[stressAgents+j][actors[(stressNewSenders*j+q)%stressAgents].ID()] = stressNewPerPair
		}
	}
	for i, r := range recv {
		for _, b := range r.bad {
			t.Errorf("%s: %s", r.id, b)
		}
		for from, n := range want[i] {
			if got := r.next[from]; got != n {
				t.Errorf("%s got %d messages from %s, want %d in order", r.id, got, from, n)
			}
		}
		for from := range r.next {
			if _, ok := want[i][from]; !ok {
				t.Errorf("%s got messages from %s, which never wrote to it", r.id, from)
			}
		}
	}
	t.Logf("%d messages among %d agents in %v; %d agents born between deliveries %d and %d",
		stressTotal, stressAgents+stressNew, time.Since(start).Round(time.Millisecond), stressNew, firstSpawn, lastSpawn)
}

func TestLogRecordsCarryTheIDsInvolved(t *testing.T) {
	ctx := context.Background()
	rec := &logRecorder{}
	s := newSociety(t, as.Config{Logger: slog.New(rec)})
	root, _ := s.Actor(as.RootID)
	root = root.WithTask("task-1")
	role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "lead"})
	if err != nil {
		t.Fatal(err)
	}
	child, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	lead, _ := s.Actor(child.ID)
	art, err := lead.PutArtifact(ctx, as.ArtifactSpec{Name: "x", Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	m, err := lead.SendText(ctx, as.UserID, "hi")
	if err != nil {
		t.Fatal(err)
	}
	userMessage(t, s)
	_, _ = lead.SendText(ctx, "agent-404", "nobody")

	for _, want := range []struct {
		msg   string
		attrs map[string]string
	}{
		{"role created", map[string]string{"role": role.ID, "name": "lead", "by": as.RootID}},
		{"agent spawned", map[string]string{"agent": child.ID, "role": role.ID, "parent": as.RootID, "task": "task-1"}},
		{"artifact stored", map[string]string{"artifact": art.ID, "by": child.ID}},
		{"message accepted", map[string]string{"msg": m.ID, "from": child.ID, "to": as.UserID}},
		{"message delivered", map[string]string{"msg": m.ID, "to": as.UserID}},
		{"message to user", map[string]string{"msg": m.ID, "from": child.ID, "role": "lead"}},
		{"refused", map[string]string{"op": "send_message", "by": child.ID, "code": "agent_not_found"}},
	} {
		if !rec.find(want.msg, want.attrs) {
			t.Errorf("no %q record with %v", want.msg, want.attrs)
		}
	}
}

// parked reports whether a goroutine whose stack runs through fn is
// blocked in state (as a stack dump names it: "select", "chan receive"):
// for a test to know that a goroutine waits, rather than that it has not
// got there yet.
func parked(fn, state string) bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "["+state) && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}

// TestNew_UnknownContactPolicy: a ContactPolicy that is neither
// ContactOpen nor ContactStrict is refused by New, as an unknown Language
// is, rather than run as ContactOpen: a host that meant a stricter policy
// must not get the open one without a word.
func TestNew_UnknownContactPolicy(t *testing.T) {
	for _, p := range []as.ContactPolicy{-1, as.ContactStrict + 1} {
		s, err := as.New(context.Background(), as.Config{Logger: quiet, ContactPolicy: p})
		if err == nil {
			s.Close(context.Background())
			t.Fatalf("New with ContactPolicy %d started a society enforcing %v", int(p), s.ContactPolicy())
		}
		if !errors.Is(err, as.ErrInvalidArgument) || !strings.Contains(err.Error(), "ContactPolicy") {
			t.Fatalf("New with ContactPolicy %d: %v, want an ErrInvalidArgument naming Config.ContactPolicy", int(p), err)
		}
	}
}
