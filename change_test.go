package agentsociety_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/store"
)

// stuckStore is a store whose Apply blocks for every change that records a
// role named "stuck", the state key "stuck" or the request "stuck": until the call's context
// ends, or, if ignoreCtx, until release is closed, and then records the
// change if its context is still live. Everything else goes to the
// in-memory store beneath.
type stuckStore struct {
	*store.Memory
	ignoreCtx bool
	release   chan struct{}
	blocked   chan struct{} // receives once per blocked Apply, when it blocks
}

func newStuckStore(ignoreCtx bool) *stuckStore {
	return &stuckStore{Memory: store.NewMemory(), ignoreCtx: ignoreCtx, release: make(chan struct{}), blocked: make(chan struct{}, 16)}
}

func (s *stuckStore) Apply(ctx context.Context, c store.Change) error {
	stuck := false
	for _, r := range c.Roles {
		stuck = stuck || r.Name == "stuck"
	}
	for _, e := range c.States {
		stuck = stuck || e.Key == "stuck"
	}
	for _, r := range c.Requests {
		stuck = stuck || r.ID == "stuck"
	}
	if !stuck {
		return s.Memory.Apply(ctx, c)
	}
	s.blocked <- struct{}{}
	if s.ignoreCtx {
		<-s.release
		return s.Memory.Apply(ctx, c) // fails if ctx ended meanwhile
	}
	<-ctx.Done()
	return ctx.Err()
}

// pingPong spawns two children of lead that answer each other's messages
// until each has handled n, and starts them. It returns a channel closed
// when both are done.
func pingPong(t *testing.T, s *as.Society, lead *as.Actor, roleID string, n int) <-chan struct{} {
	t.Helper()
	var handled atomic.Int64
	done := make(chan struct{})
	pong := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		switch k := handled.Add(1); {
		case k == int64(2*n):
			close(done)
			return nil
		case k > int64(2*n):
			return nil
		}
		_, err := self.SendText(ctx, m.From, "ping")
		return err
	})
	a := spawnWith(t, s, lead, roleID, pong)
	b := spawnWith(t, s, lead, roleID, pong)
	if _, err := a.SendText(context.Background(), b.ID(), "ping"); err != nil {
		t.Fatal(err)
	}
	return done
}

// A store write that blocks delays only the operation that made it: sends
// between other agents keep flowing, and Close returns by its deadline
// whether the store honours the context or not.
func TestChange_StoreWriteThatBlocksDelaysOnlyItsOperation(t *testing.T) {
	for _, ignoreCtx := range []bool{false, true} {
		name := "store honours ctx"
		if ignoreCtx {
			name = "store ignores ctx"
		}
		t.Run(name, func(t *testing.T) {
			baseline := runtime.NumGoroutine()
			ctx := context.Background()
			st := newStuckStore(ignoreCtx)
			var once sync.Once
			release := func() { once.Do(func() { close(st.release) }) }
			defer release()
			// The worker's handler writes the stuck state key with its
			// turn's context: a drainer blocked in the store.
			worker := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
				return self.SetState(ctx, "stuck", 1, as.ScopeProject)
			})
			s, err := as.New(ctx, as.Config{Logger: quiet, Store: st})
			if err != nil {
				t.Fatal(err)
			}
			lead, roleID := hostLead(t, s, "t", "worker")
			w := spawnWith(t, s, lead, roleID, worker)
			if _, err := lead.SendText(ctx, w.ID(), "go"); err != nil {
				t.Fatal(err)
			}
			// And a host call blocked in the store, with a context of
			// its own that nothing cancels until the test ends.
			hostCtx, cancelHost := context.WithCancel(ctx)
			defer cancelHost()
			hostDone := make(chan error, 1)
			go func() {
				_, _, err := lead.CreateRole(hostCtx, as.RoleSpec{Name: "stuck"})
				hostDone <- err
			}()
			for range 2 {
				<-st.blocked
			}

			// Other agents, and the lead itself, go on.
			recv(t, pingPong(t, s, lead, roleID, 200), "ping-pong while two store writes hang")
			if _, _, err := lead.CreateRole(ctx, as.RoleSpec{Name: "free"}); err != nil {
				t.Fatalf("a role by the agent whose other role is being recorded: %v", err)
			}

			closeCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			t0 := time.Now()
			err = s.Close(closeCtx)
			took := time.Since(t0)
			t.Logf("Close with a 300ms deadline returned after %v", took.Round(time.Millisecond))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Close = %v, want context.DeadlineExceeded", err)
			}
			if took > 5*time.Second { // a hang guard: Close returns at its deadline
				t.Fatalf("Close took %v with a 300ms deadline", took)
			}
			if _, err := lead.SendText(ctx, w.ID(), "after"); !errors.Is(err, as.ErrClosed) {
				t.Fatalf("send after Close = %v, want ErrClosed", err)
			}

			// Once the store returns, every goroutine of the society ends.
			cancelHost()
			release()
			if err := <-hostDone; err == nil {
				t.Fatal("the host's CreateRole whose record failed succeeded")
			}
			if err := s.Close(ctx); err != nil {
				t.Fatalf("second Close = %v, want nil", err)
			}
			waitGoroutines(t, baseline)
			if r := s.FindRoleByName("stuck"); len(r) != 0 {
				t.Fatalf("a role whose record failed is in the organisation: %+v", r)
			}
		})
	}
}

// A change recorded while Close begins is committed after it, and starts
// nothing: a collaboration request with an hour's timeout arms no timer
// that a second Close would wait for.
func TestChange_CommitAfterCloseStartsNoTimer(t *testing.T) {
	ctx := context.Background()
	st := newStuckStore(true)
	var once sync.Once
	release := func() { once.Do(func() { close(st.release) }) }
	defer release()
	s, err := as.New(ctx, as.Config{Logger: quiet, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	lead, roleID := hostLead(t, s, "t", "worker")
	w := spawnWith(t, s, lead, roleID, noop)
	asked := make(chan error, 1)
	go func() {
		_, err := lead.RequestCollaboration(ctx, w.ID(), as.CollaborationRequestPayload{RequestID: "stuck", SubtaskDescription: "wait"}, time.Hour)
		asked <- err
	}()
	<-st.blocked
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := s.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want context.DeadlineExceeded", err)
	}
	release() // the store takes the write: the request is committed after Close
	if err := recv(t, asked, "the request's answer once the store returned"); err != nil {
		t.Fatalf("the request recorded as Close began: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close(ctx) }()
	if err := recv(t, closed, "the second Close"); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// stuckHandler is a log handler that, once armed, blocks on every record
// whose message contains "role created", until release is closed.
type stuckHandler struct {
	armed   atomic.Bool
	release chan struct{}
	blocked chan struct{}
}

func (h *stuckHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *stuckHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *stuckHandler) WithGroup(string) slog.Handler            { return h }
func (h *stuckHandler) Handle(_ context.Context, r slog.Record) error {
	if h.armed.Load() && strings.Contains(r.Message, "role created") {
		h.blocked <- struct{}{}
		<-h.release
	}
	return nil
}

// A log handler that blocks delays only the goroutine that logs: sends
// between other agents, with every level enabled, keep flowing.
func TestChange_LogHandlerThatBlocksDelaysOnlyItsCaller(t *testing.T) {
	ctx := context.Background()
	h := &stuckHandler{release: make(chan struct{}), blocked: make(chan struct{}, 1)}
	defer close(h.release)
	s := newSociety(t, as.Config{Logger: slog.New(h)})
	lead, roleID := hostLead(t, s, "t", "worker")

	h.armed.Store(true)
	created := make(chan struct{})
	go func() {
		defer close(created)
		lead.CreateRole(ctx, as.RoleSpec{Name: "logged"})
	}()
	<-h.blocked
	recv(t, pingPong(t, s, lead, roleID, 200), "ping-pong while a log handler blocks")
	select {
	case <-created:
		t.Fatal("CreateRole returned while its log record was blocked")
	default:
	}
}

// slowStore is an in-memory store, not volatile, whose Apply takes a
// varying time, so that changes recorded at once finish in any order.
type slowStore struct {
	store.Store
	n atomic.Int64
}

func (s *slowStore) Apply(ctx context.Context, c store.Change) error {
	time.Sleep(time.Duration(s.n.Add(7919)%200) * time.Microsecond)
	return s.Store.Apply(ctx, c)
}

// Message.Seq agrees with the order in which a receiver handles its
// messages, however the store's writes interleave, so that redelivery after
// a crash replays them in the order they were first delivered.
func TestChange_ReceiverHandlesMessagesInSeqOrder(t *testing.T) {
	ctx := context.Background()
	const senders, each = 8, 40
	s := newSociety(t, as.Config{Store: &slowStore{Store: store.NewMemory()}})
	lead, roleID := hostLead(t, s, "t", "worker")
	var (
		last    uint64
		handled atomic.Int64
		bad     atomic.Value
		done    = make(chan struct{})
	)
	sink := spawnWith(t, s, lead, roleID, as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		if m.Seq <= last {
			bad.CompareAndSwap(nil, m.ID)
		}
		last = m.Seq
		if handled.Add(1) == senders*each {
			close(done)
		}
		return nil
	}))
	var wg sync.WaitGroup
	for range senders {
		x := spawnWith(t, s, lead, roleID, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := x.SendText(ctx, sink.ID(), "m"); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	recv(t, done, "every message handled")
	if id := bad.Load(); id != nil {
		t.Fatalf("message %s was handled after a message with a higher Seq", id)
	}
}
