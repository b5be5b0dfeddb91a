package agentsociety_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
	"agentsociety/store"
	"agentsociety/store/filestore"
	"agentsociety/toolset"
)

// TestReopen_PendingRequestTimesOutAfterRestart: a collaboration request
// with an hour's timeout is pending when the society closes, and the
// society stays down past its deadline (the test moves the stored request
// two hours back, as if they had gone by). Reopened, the society settles it
// at once: the requester receives the timeout outcome from the agent that
// did not answer, and a late answer is refused. A timer armed again for the
// whole hour would not answer within hangGuard.
func TestReopen_PendingRequestTimesOutAfterRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	got := make(chan as.Message, 16)
	inbox := as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		got <- m
		return nil
	})
	cfg := as.Config{DefaultBehavior: inbox}

	s, st := openFS(t, dir, filestore.SyncEveryRecord, cfg)
	a, b := rootSpawn(t, s, "a", "worker", "", nil), rootSpawn(t, s, "b", "worker", "", nil)
	ax, _ := s.Actor(a.ID)
	const timeout = time.Hour
	reqID, err := ax.RequestCollaboration(ctx, b.ID, as.CollaborationRequestPayload{SubtaskDescription: "review the page"}, timeout)
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, got, "the request"); m.Type != as.CollaborationRequest || m.To != b.ID {
		t.Fatalf("%s got %s, want the collaboration request", m.To, m.Type)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		t.Fatalf("the closed society delivered %s to %s", m.Type, m.To)
	default:
	}

	st, err = filestore.Open(dir, filestore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	aged := ageRequests(t, st, 2*time.Hour)
	if len(aged) != 1 || aged[0].ID != reqID || aged[0].Deadline.Sub(aged[0].CreatedAt) != timeout {
		t.Fatalf("the store holds the pending requests %+v, want %s with a deadline %v after its creation", aged, reqID, timeout)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	s, st = openFS(t, dir, filestore.SyncEveryRecord, cfg)
	defer closeFS(t, s, st)
	m := recv(t, got, "the timeout outcome after reopening")
	var p as.CollaborationResponsePayload
	if err := m.Decode(&p); err != nil {
		t.Fatal(err)
	}
	if m.Type != as.CollaborationResponse || m.From != b.ID || m.To != a.ID || p.RequestID != reqID ||
		p.Status != as.StatusError || !strings.Contains(p.ErrorMessage, "timeout") {
		t.Fatalf("after reopening %s got %s from %s: %s; want the timeout of %s from %s", m.To, m.Type, m.From, m.Payload, reqID, b.ID)
	}
	bx, _ := s.Actor(b.ID)
	if _, err := bx.Respond(ctx, reqID, as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: json.RawMessage(`{"ok":true}`)}); !errors.Is(err, as.ErrRequestClosed) {
		t.Errorf("a late answer after the timeout: %v, want %v", err, as.ErrRequestClosed)
	}
	select {
	case m := <-got:
		t.Errorf("a second outcome: %s from %s: %s", m.Type, m.From, m.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}

// ageRequests moves the pending requests with a deadline in st back by d,
// as if d had gone by while no society ran on it, and returns them.
func ageRequests(t *testing.T, st store.Store, d time.Duration) []store.Request {
	t.Helper()
	ctx := context.Background()
	loaded, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var aged []store.Request
	for _, r := range loaded.Requests {
		if r.Status == string(as.StatusPending) && !r.Deadline.IsZero() {
			r.CreatedAt, r.Deadline = r.CreatedAt.Add(-d), r.Deadline.Add(-d)
			aged = append(aged, r)
		}
	}
	if err := st.Apply(ctx, store.Change{Requests: aged}); err != nil {
		t.Fatal(err)
	}
	return aged
}

// TestReopen_ExpiredRequestsAndPendingMessages reopens a society whose store
// holds many requests whose deadlines passed while it was down (the test
// moves them two hours back), and messages that were never handled: every
// requester gets its timeout outcome once and every message is handled,
// while New is still restoring the rest.
// Under -race this checks that restoring does not race with the timers and
// handlers it starts.
func TestReopen_ExpiredRequestsAndPendingMessages(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	const requests, messages = 100, 100
	var (
		mu       sync.Mutex
		outcomes = map[string]int{}
		handled  = map[string]int{}
		spawned  = make(chan struct{}, messages)
	)
	record := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		switch m.Type {
		case as.CollaborationResponse:
			var p as.CollaborationResponsePayload
			m.Decode(&p)
			mu.Lock()
			outcomes[p.RequestID+" "+string(p.Status)]++
			mu.Unlock()
		case as.General:
			mu.Lock()
			handled[m.Text()]++
			mu.Unlock()
			// Handling changes the organisation as restoring goes on.
			role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "helper"})
			if err != nil {
				return err
			}
			if _, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()}); err != nil {
				return err
			}
			if err := self.SetState(ctx, "seen-"+m.Text(), true, as.ScopePrivate); err != nil {
				return err
			}
			spawned <- struct{}{}
		}
		return nil
	})
	block := make(chan struct{})
	hold := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil
	})

	s, err := as.New(ctx, as.Config{Logger: quiet, Store: mem, DefaultBehavior: hold})
	if err != nil {
		t.Fatal(err)
	}
	a, b := rootSpawn(t, s, "a", "worker", "", nil), rootSpawn(t, s, "b", "worker", "", nil)
	ax, _ := s.Actor(a.ID)
	var ids []string
	for range requests {
		id, err := ax.RequestCollaboration(ctx, b.ID, as.CollaborationRequestPayload{SubtaskDescription: "x"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// b is held on the first request; the other requests and these
	// messages stay queued.
	for i := range messages {
		if _, err := s.SendTextToAgent(ctx, b.ID, strconv.Itoa(i), ""); err != nil {
			t.Fatal(err)
		}
	}
	// Closing with a context that has ended releases the held handler.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Close(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v", err)
	}
	close(block)
	if err := s.Close(ctx); err != nil { // returns once the first Close has recorded the queue
		t.Fatalf("Close after a cancelled Close: %v", err)
	}
	if aged := ageRequests(t, mem, 2*time.Hour); len(aged) != requests { // every deadline passes
		t.Fatalf("%d requests pending in the store, want %d", len(aged), requests)
	}

	s, err = as.New(ctx, as.Config{Logger: quiet, Store: mem, DefaultBehavior: record})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	for range messages {
		recv(t, spawned, "the pending messages to be handled")
	}
	poll(func() bool { // what is missing, if anything, the checks below say
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes) >= requests
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if n := outcomes[id+" "+string(as.StatusError)]; n != 1 {
			t.Errorf("request %s: %d timeout outcomes after reopening, want 1", id, n)
		}
	}
	if len(outcomes) != requests {
		t.Errorf("%d distinct outcomes, want %d: %v", len(outcomes), requests, outcomes)
	}
	for i := range messages {
		if n := handled[strconv.Itoa(i)]; n != 1 {
			t.Errorf("message %d was handled %d times after reopening, want once", i, n)
		}
	}
}

// TestReopen_NewMessagesDoNotOvertakePendingOnes: root's messages to x were
// accepted and not handled when the society stopped, and so was a message to
// root. Reopened, the society delivers them again, and root, handling its
// message, sends x one more: x gets root's messages in the order they were
// accepted, the new one last, and every message has a sequence number of
// its own.
func TestReopen_NewMessagesDoNotOvertakePendingOnes(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	const n = 20000
	hold := as.BehaviorFunc(func(ctx context.Context, _ *as.Actor, _ as.Message) error {
		<-ctx.Done()
		return nil
	})
	// More messages than a mailbox holds by default: no cap.
	s, err := as.New(ctx, as.Config{Logger: quiet, Store: forgetFinished{mem}, Root: hold, DefaultBehavior: hold, MaxQueued: -1})
	if err != nil {
		t.Fatal(err)
	}
	root, x := actorOf(t, s, as.RootID), rootSpawn(t, s, "x", "worker", "", nil)
	if _, err := s.SendTextToAgent(ctx, as.RootID, "go", "x"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := root.WithTask("x").SendText(ctx, x.ID, strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	s.Close(cctx) // releases the held handlers; forgetFinished keeps every message pending

	var (
		mu   sync.Mutex
		got  []as.Message
		done = make(chan struct{})
	)
	record := as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if got = append(got, m); len(got) == n+1 {
			close(done)
		}
		return nil
	})
	forward := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		_, err := self.SendText(ctx, x.ID, "last")
		return err
	})
	s, err = as.New(ctx, as.Config{Logger: quiet, Store: mem, Root: forward, DefaultBehavior: record, MaxQueued: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	recv(t, done, "x's messages")
	mu.Lock()
	defer mu.Unlock()
	seqs := map[uint64]string{}
	for i, m := range got {
		want := strconv.Itoa(i)
		if i == n {
			want = "last"
		}
		if m.Text() != want {
			t.Errorf("x's message %d is %q, want %q: a message root sent after reopening overtook older ones of root's", i, m.Text(), want)
			break
		}
	}
	for _, m := range got {
		if other, dup := seqs[m.Seq]; dup {
			t.Errorf("messages %s and %s have the same Seq %d", other, m.ID, m.Seq)
			break
		}
		seqs[m.Seq] = m.ID
	}
}

// forgetFinished is a store that never records the end of a message's
// handling: reopened on the inner store, a society sees every message as
// accepted and not finished, as after a crash in the middle of each.
type forgetFinished struct{ store.Store }

func (f forgetFinished) Apply(ctx context.Context, c store.Change) error {
	c.Finished = nil
	return f.Store.Apply(ctx, c)
}

// TestRedeliveryDuplicatesNoSpawn: a lead spawns two workers while handling a
// message, and the process "crashes" before the end of the handling is
// recorded. Reopened, the society delivers the message again; the lead spawns
// again, and gets the same two workers back.
func TestRedeliveryDuplicatesNoSpawn(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	handled := make(chan []string, 2)
	lead := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "worker"})
		if err != nil {
			return err
		}
		var ids []string
		for range 2 {
			w, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
			if err != nil {
				return err
			}
			ids = append(ids, w.ID)
		}
		handled <- ids
		return nil
	})
	open := func(st store.Store) *as.Society {
		s, err := as.New(ctx, as.Config{Logger: quiet, Store: st, DefaultBehavior: lead})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	next := func() []string { return recv(t, handled, "the lead to handle its message") }

	s := open(forgetFinished{mem})
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("t").CreateRole(ctx, as.RoleSpec{Name: "lead"})
	l, _, err := root.WithTask("t").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: lead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SendTextToAgent(ctx, l.ID, "staff up", ""); err != nil {
		t.Fatal(err)
	}
	first := next()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	s = open(mem) // the message was never finished: it comes again
	defer s.Close(ctx)
	again := next()
	if again[0] != first[0] || again[1] != first[1] {
		t.Fatalf("handled again, the lead got %v, first %v: a spawn was duplicated", again, first)
	}
	if n := len(s.Agents()); n != 3 {
		t.Fatalf("%d agents after redelivery, want 3 (the lead and two workers)", n)
	}
}

// TestRedelivery_RootSpawnsForTwoTasksInOneTurn: root, handling one message,
// spawns a child for its task and one for another task; the process stops
// after the first spawn, before the end of the handling is recorded. Handled
// again, the first spawn returns the child made before and the second makes
// the second child: no spawn is duplicated, none is lost, and each child is
// on its own task.
func TestRedelivery_RootSpawnsForTwoTasksInOneTurn(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	crashed := make(chan string, 1)
	handled := make(chan [2]as.Agent, 1)
	spawnBoth := func(stopAfterFirst bool) as.Behavior {
		return as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
			role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "lead"})
			if err != nil {
				return err
			}
			first, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
			if err != nil {
				return err
			}
			if stopAfterFirst {
				crashed <- first.ID
				return nil
			}
			second, _, err := self.WithTask(m.TaskID+"-review").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
			if err != nil {
				return err
			}
			handled <- [2]as.Agent{first, second}
			return nil
		})
	}

	s, err := as.New(ctx, as.Config{Logger: quiet, Store: forgetFinished{mem}, Root: spawnBoth(true)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SendTextToAgent(ctx, as.RootID, "build it", "t"); err != nil {
		t.Fatal(err)
	}
	firstID := recv(t, crashed, "the first handling")
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	s, err = as.New(ctx, as.Config{Logger: quiet, Store: mem, Root: spawnBoth(false)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	got := recv(t, handled, "the second handling")
	if got[0].ID != firstID || got[0].TaskID != "t" {
		t.Errorf("handled again, the first spawn returned %s on task %q; want %s on task t", got[0].ID, got[0].TaskID, firstID)
	}
	if got[1].ID == firstID || got[1].TaskID != "t-review" {
		t.Errorf("handled again, the spawn for task t-review returned %s on task %q; want a new child on task t-review", got[1].ID, got[1].TaskID)
	}
	tasks := map[string]int{}
	for _, a := range s.Agents() {
		tasks[a.TaskID]++
	}
	if tasks["t"] != 1 || tasks["t-review"] != 1 || len(s.Agents()) != 2 {
		t.Errorf("root's children by task after redelivery: %v, want one on t and one on t-review", tasks)
	}
}

// TestRestoreBehaviorGivesAgentsTheirCodeBack: behaviours are code, so a
// reopened society asks the host for them, by agent and role.
func TestRestoreBehaviorGivesAgentsTheirCodeBack(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	got := make(chan string, 1)
	echo := as.BehaviorFunc(func(_ context.Context, self *as.Actor, m as.Message) error {
		got <- self.ID() + ":" + m.Text()
		return nil
	})
	s, err := as.New(ctx, as.Config{Logger: quiet, Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("t").CreateRole(ctx, as.RoleSpec{Name: "echo"})
	e, _, _ := root.WithTask("t").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: echo})
	s.Close(ctx)

	var asked []string
	s, err = as.New(ctx, as.Config{Logger: quiet, Store: mem, RestoreBehavior: func(a as.Agent, r as.Role) as.Behavior {
		asked = append(asked, a.ID+"/"+r.Name)
		if r.Name == "echo" {
			return echo
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if len(asked) != 1 || asked[0] != e.ID+"/echo" {
		t.Fatalf("RestoreBehavior was asked for %v", asked)
	}
	if _, err := s.SendTextToAgent(ctx, e.ID, "again", ""); err != nil {
		t.Fatal(err)
	}
	if g := recv(t, got, "the restored agent to handle the message"); g != e.ID+":again" {
		t.Fatalf("got %q", g)
	}
}

// TestFailedNewLeavesNothingRunning: a store whose state cannot be restored
// makes New fail, and the timers and drainers restore started are stopped.
func TestFailedNewLeavesNothingRunning(t *testing.T) {
	ctx := context.Background()
	base := runtime.NumGoroutine()
	mem := store.NewMemory()
	past := time.Now().Add(-time.Hour)
	mem.Apply(ctx, store.Change{
		Requests:  []store.Request{{ID: "req-1", From: as.UserID, To: as.RootID, Status: string(as.StatusPending), CreatedAt: past, Deadline: past.Add(time.Second)}},
		Accepted:  []store.Message{{ID: "m-1", Seq: 1, From: as.UserID, To: as.RootID, Type: "general", Payload: json.RawMessage(`{"text":"x"}`), SentAt: past}},
		Histories: []store.History{{AgentID: "agent-404"}},
	})
	if _, err := as.New(ctx, as.Config{Logger: quiet, Store: mem}); err == nil {
		t.Fatal("New restored the history of an agent that does not exist")
	}
	// Once every goroutine it started has ended, nothing can change the
	// store any more.
	waitGoroutines(t, base)
	st, _ := mem.Load(ctx)
	if st.Requests[0].Status != string(as.StatusPending) || len(st.Pending) != 1 {
		t.Fatalf("the failed New went on working: %+v, %d pending", st.Requests, len(st.Pending))
	}
}

// TestHistorySurvivesReopening: a model-driven agent's history is recorded
// with each finished message, so the agent reopened on the same store goes
// on with the conversation it had.
func TestHistorySurvivesReopening(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	requests := make(chan *llm.Request, 8)
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		cp := *req
		cp.Messages = append([]llm.Message(nil), req.Messages...)
		requests <- &cp
		if lastToolResult(req) != "" {
			return llmtest.Say("done"), nil
		}
		return call("c1", "get_artifact", `not json, kept as written`), nil
	})
	open := func() *as.Society {
		s, err := as.New(ctx, as.Config{Logger: quiet, Store: mem, Model: model})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	next := func() *llm.Request { return recv(t, requests, "a model call") }
	s := open()
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("t").CreateRole(ctx, as.RoleSpec{Name: "worker"})
	w, _, _ := root.WithTask("t").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	next() // the brief's turn: a call, then its end
	next()
	if _, err := s.SendTextToAgent(ctx, w.ID, "first", ""); err != nil {
		t.Fatal(err)
	}
	next()
	first := next() // after the tool result: the whole first turn
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	s = open()
	defer s.Close(ctx)
	if _, err := s.SendTextToAgent(ctx, w.ID, "second", ""); err != nil {
		t.Fatal(err)
	}
	got := next()
	if len(got.Messages) != len(first.Messages)+2 { // + the final "done" and the new message
		t.Fatalf("after reopening the agent sent %d messages, want %d", len(got.Messages), len(first.Messages)+2)
	}
	for i, m := range first.Messages {
		g := got.Messages[i]
		if g.Role != m.Role || g.Content != m.Content || g.ToolCallID != m.ToolCallID || len(g.ToolCalls) != len(m.ToolCalls) {
			t.Fatalf("message %d differs after reopening:\n got %+v\nwant %+v", i, g, m)
		}
		for j := range m.ToolCalls {
			if string(g.ToolCalls[j].Arguments) != string(m.ToolCalls[j].Arguments) {
				t.Fatalf("tool arguments %q came back as %q", m.ToolCalls[j].Arguments, g.ToolCalls[j].Arguments)
			}
		}
	}
	if !strings.Contains(got.Messages[len(got.Messages)-1].Content, "second") {
		t.Fatalf("the last message is %q", got.Messages[len(got.Messages)-1].Content)
	}
}

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
			waitFor(t, "the end of every handling to be recorded", func() bool { return volatile || st.finished.Load()-fin0 == n })
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
	root, x := actorOf(t, s, as.RootID), rootSpawn(t, s, "x", "worker", "", nil)
	for i := range n {
		if _, err := root.WithTask("x").SendText(ctx, x.ID, strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	recv(t, started, "x's first message")
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
	recv(t, started, "x's first restored message")
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
	recv(t, done, "the restored messages")
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
	rec := &logRecorder{}
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

// The crash test: a society on a file store survives its process.
//
// TestCrash_SocietyOnFileStore runs TestCrashHelper_Society, a process that
// runs a society on a file store, and kills it with SIGKILL at random
// moments, again and again on the same directory; then it finishes the
// workload in a society of its own on that directory.
//
// The workload has crashTasks tasks. For each task T:
//
//   - user sends root "req T"; root (Go code) records the message as the
//     task's owner in the project state (a second requirement for T, should
//     one come, is skipped), creates the role "lead", spawns a lead for T,
//     driven by the scripted model, and sends it "start T";
//   - the lead (model) creates the role "worker", spawns workers T/w1 and
//     T/w2, puts the artifact T/plan, sends each worker a
//     collaboration_request "make T/wN", and asks root for a helper;
//   - each worker (model) puts the artifact it was asked for, records it in
//     its private state (state_set) and answers with its reference;
//   - root (code) spawns a helper for the task T-h with the lead as its
//     preset collaborator, driven by Go code, and introduces it to the lead
//     with an introduction_response;
//   - the lead asks the helper for "make T/review"; the helper puts it,
//     records it in the project state and answers;
//   - once the lead has the three answers it puts T/report and sends a
//     status_report to user.
//
// Every message carries a token ("tok=..."). The helper prints a line for
// every operation that returned: "msg <id> <to> <token>", "spawn <id>
// <parent> <task> <objective>", "art <id> <name> <sha256>"; the Go-driven
// receivers (root, the helper, user) print "h <token>" as they start
// handling a message, and user prints "rep T" for each report. The lead and
// the workers (model-driven) handle a message in a turn of their history,
// which the society stores when the message's handling ends; so a message to
// a model-driven agent has been handled when its token is in the agent's
// stored history.
//
// After each kill the test opens a copy of the directory with the store and
// checks:
//
//   - org.json, when there is one, is JSON;
//   - every acknowledged spawn is there, with its parent, task and
//     objective; no two agents share parent, role and objective (the
//     workload makes them unique), root has one child per task, and no two
//     agents share a spawn key;
//   - every acknowledged artifact reads back byte for byte (SHA-256);
//   - every acknowledged message is either still pending (accepted, not
//     finished) or was handled: a "h" line, or its token in the receiver's
//     history; and a message found finished is never handled again: no
//     later "h" line, no second copy in a history;
//
// and the next helper reopens the society on the directory, which delivers
// the pending messages again, and resumes the workload: it submits the
// requirements of the tasks the store shows no trace of. The requirements
// come over the first three quarters of the runs, so that there is work in
// every run; every other helper compacts the store after 64 records, so
// that some kills cut a compaction short. After the last kill the
// test reopens the society itself, with the same behaviours and model,
// until every task has reported to user and no message is pending, and
// checks the whole organisation: one lead per task with exactly two
// workers, one helper per task, each role once per creator, every request
// completed, the states written, every acknowledged message handled.
//
// Code-driven agents other than root do not stay code-driven: the society
// restores every agent it did not give its own behaviour to, root aside,
// as driven by Config.DefaultBehavior or, without it, the model (see New). So the
// helper, Go code while the process that spawned it lives, is driven by the
// scripted model after a restart, and the script does what the Go code
// does.
//
// AGENTSOCIETY_CRASH_ITERATIONS sets the number of kills (default 20);
// AGENTSOCIETY_CRASH_SEED the seed of the kill timing;
// AGENTSOCIETY_CRASH_VERBOSE, when set, logs each run.
func TestCrash_SocietyOnFileStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	iterations := 20
	if v := os.Getenv(crashIterEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", crashIterEnv, v)
		}
		iterations = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(crashSeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a number", crashSeedEnv, v)
		}
		seed = n
	}
	t.Logf("kill timing seed %d (%s=%d to repeat it)", seed, crashSeedEnv, seed)
	r := rand.New(rand.NewPCG(seed, 4))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	scratch := t.TempDir()
	l := newCrashLedger()
	start := time.Now()
	// The requirements come over the first three quarters of the runs,
	// and a run is killed after a random number of acknowledgements, so
	// that the kills spread over the workload whatever the machine's speed.
	ramp := max(1, iterations*3/4)
	maxTarget := max(4, crashTasks*crashAcksPerTask/ramp)
	var stats struct {
		early, beforeReady, idle, orgJSON, pending, torn int
	}
	startup := 100 * time.Millisecond // how long a helper takes to be ready, on average
	races := 0                        // helpers that reported a data race
	lastPending := 0                  // messages pending after the last kill

	for i := range iterations {
		l.setRun(i)
		cmd := exec.Command(exe, "-test.run=^TestCrashHelper_Society$", "-test.count=1")
		submit := min(crashTasks, (crashTasks*(i+1)+ramp-1)/ramp)
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashSubmitEnv+"="+strconv.Itoa(submit))
		if i%2 == 1 {
			cmd.Env = append(cmd.Env, crashCompactEnv+"=1")
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		// One kill in five lands at a random moment of the start: while the
		// store recovers, the society restores, or the first messages are
		// delivered again.
		var kill <-chan time.Time
		early := i%5 == 4
		if early {
			stats.early++
			kill = time.After(time.Duration(r.Int64N(int64(startup + startup/2))))
		}
		// The messages pending at the last kill are handled again first,
		// which makes as many acknowledgements again; the kill comes after
		// some progress beyond them.
		target, acks, ready, submitted, killed := lastPending+1+r.IntN(maxTarget), 0, false, false, false
		began := time.Now()
		idle := time.NewTimer(hangGuard) // the helper did not start, or hangs
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				switch line {
				case "ready":
					ready = true
					startup = (startup + time.Since(began)) / 2
				case "submitted":
					submitted = true
				}
				if l.line(line) && submitted {
					acks++
					if !early && acks == target && kill == nil && !killed {
						kill = time.After(time.Duration(r.IntN(1500)) * time.Microsecond)
					}
				}
				if ready {
					idle.Reset(200 * time.Millisecond) // nothing left to do
				}
			case <-kill:
				cmd.Process.Kill() // SIGKILL
				kill, killed = nil, true
				if !ready {
					stats.beforeReady++
				}
			case <-idle.C:
				if !killed {
					cmd.Process.Kill()
					killed = true
					stats.idle++
				}
			}
		}
		idle.Stop()
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(interface{ Signaled() bool }); !ok || !ws.Signaled() {
			t.Fatalf("run %d: the helper was not killed: %v\n%s", i, err, crashTail(stderr.String()))
		}
		if !ready && !early {
			t.Fatalf("run %d: the helper never became ready\n%s", i, crashTail(stderr.String()))
		}
		switch s := stderr.String(); {
		case strings.Contains(s, "panic:") || strings.Contains(s, "fatal error"):
			t.Fatalf("run %d: the helper crashed:\n%s", i, crashTail(s))
		case strings.Contains(s, "handler failed") || strings.Contains(s, "the store failed") || strings.Contains(s, "compaction failed"):
			t.Fatalf("run %d: the helper logged a failure:\n%s", i, crashTail(s))
		case strings.Contains(s, "DATA RACE"):
			// Reported once; the kills go on, so that the log says
			// whether the durability checks hold as well.
			if races++; races == 1 {
				t.Errorf("run %d: the helper process (this test binary, built with -race) reported a data race:\n%s", i, crashTail(s))
			}
		}
		if strings.Contains(stderr.String(), "torn or corrupt tail") {
			stats.torn++
		}
		if _, err := os.Stat(filepath.Join(dir, "org.json")); err == nil {
			stats.orgJSON++
		}
		np, failures := l.check(t, dir, scratch, false)
		stats.pending += np
		lastPending = np
		if os.Getenv(crashVerboseEnv) != "" {
			l.mu.Lock()
			t.Logf("run %d early=%v ready=%v target=%d acks=%d pending=%d reports=%d handled=%d spawns=%d respawns=%d msgs=%d arts=%d startup=%v", i, early, ready, target, acks, np, len(l.reports), len(l.handled), len(l.spawns), l.respawns, len(l.msgs), len(l.arts), startup)
			l.mu.Unlock()
		}
		if failures > 0 {
			t.Fatalf("run %d failed; its helper's stderr:\n%s", i, crashTail(stderr.String()))
		}
	}

	// Reopen the society here, with the same behaviours and model, and
	// finish the workload.
	l.setRun(iterations)
	ctx := context.Background()
	st, err := filestore.Open(dir, filestore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sink := &crashSink{w: crashLineWriter{l}}
	loaded, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := as.New(ctx, crashConfig(st, sink, quiet))
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	if err := crashSubmit(ctx, s, loaded, crashTasks, sink); err != nil {
		t.Fatal(err)
	}
	// Wait until the workload is done, and fail when nothing happens for
	// a minute, far beyond normal: the workload never waits.
	lastLines, lastChange := -1, time.Now()
	for {
		loaded, err := st.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		missing := l.missingReports()
		if len(missing) == 0 && len(loaded.Pending) == 0 {
			break
		}
		if n := l.lineCount(); n != lastLines {
			lastLines, lastChange = n, time.Now()
		}
		if errs := l.errors(); len(errs) > 0 || time.Since(lastChange) > time.Minute {
			s.Close(ctx)
			st.Close()
			t.Fatalf("the reopened society did not finish the workload: tasks not reported %v; %d messages pending; errors %q",
				missing, len(loaded.Pending), errs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	crashCheckSociety(t, s)
	if err := s.Close(ctx); err != nil {
		t.Error(err)
	}
	if err := st.Close(); err != nil {
		t.Error(err)
	}
	l.check(t, dir, scratch, true)
	if races > 0 {
		t.Errorf("%d of %d helper processes reported a data race", races, iterations)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	redone := 0
	for _, n := range l.handled {
		if n > 1 {
			redone++
		}
	}
	t.Logf("%d kills (%d at the start, %d of them before the society was ready, %d of an idle helper), %d acknowledgements (%d messages, %d spawns of which %d again, %d artifacts), %d messages pending at the kills, %d messages handled more than once, %d torn journal tails cut, org.json present after %d kills, %v",
		iterations, stats.early, stats.beforeReady, stats.idle, l.acks, len(l.msgs), len(l.spawns), l.respawns, len(l.arts),
		stats.pending, redone, stats.torn, stats.orgJSON, time.Since(start).Round(time.Millisecond))
}

// Environment of the helper process.
const (
	crashDirEnv     = "AGENTSOCIETY_CRASH_DIR"
	crashCompactEnv = "AGENTSOCIETY_CRASH_COMPACT"
	crashIterEnv    = "AGENTSOCIETY_CRASH_ITERATIONS"
	crashSeedEnv    = "AGENTSOCIETY_CRASH_SEED"
	crashSubmitEnv  = "AGENTSOCIETY_CRASH_SUBMIT"
	crashVerboseEnv = "AGENTSOCIETY_CRASH_VERBOSE"
)

const (
	// crashTasks is the number of requirements of the workload.
	crashTasks = 30
	// crashAcksPerTask is about how many acknowledgements a task makes.
	crashAcksPerTask = 20
)

// TestCrashHelper_Society is the process TestCrash_SocietyOnFileStore kills.
// It opens the society on the directory AGENTSOCIETY_CRASH_DIR names, which
// delivers again what was accepted and not finished, submits the
// requirements of the first AGENTSOCIETY_CRASH_SUBMIT tasks that were not
// submitted before, and runs until it is killed. Without
// AGENTSOCIETY_CRASH_DIR it returns at once.
func TestCrashHelper_Society(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		return // only the helper process of TestCrash_SocietyOnFileStore
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := filestore.Options{Logger: log}
	if os.Getenv(crashCompactEnv) != "" {
		opts.CompactAfter = 64 // compactions while it runs, so some kills cut one short
	}
	st, err := filestore.Open(dir, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: filestore.Open:", err)
		os.Exit(3)
	}
	out := &crashSink{w: os.Stdout}
	ctx := context.Background()
	loaded, err := st.Load(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: Load:", err)
		os.Exit(3)
	}
	s, err := as.New(ctx, crashConfig(st, out, log))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: New:", err)
		os.Exit(3)
	}
	out.printf("ready")
	submit, err := strconv.Atoi(os.Getenv(crashSubmitEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", crashSubmitEnv, err)
		os.Exit(3)
	}
	if err := crashSubmit(ctx, s, loaded, submit, out); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(4)
	}
	out.printf("submitted")
	time.Sleep(2 * hangGuard) // the test kills it long before
	fmt.Fprintln(os.Stderr, "helper: never killed")
	os.Exit(5)
}

// crashSubmit submits the requirements of the first tasks tasks, except those
// that the store, as it was before the society reopened, shows a trace of:
// a child of root, an owner in the task's state, a requirement pending.
// (Should a requirement be submitted twice all the same, root skips the
// second.)
func crashSubmit(ctx context.Context, s *as.Society, loaded store.State, tasks int, out *crashSink) error {
	have := map[string]bool{}
	for _, a := range loaded.Agents {
		if a.ParentID == as.RootID {
			have[a.TaskID] = true
		}
	}
	for _, e := range loaded.States {
		if e.Key == "owner" {
			have[strings.TrimPrefix(e.Scope, "task:")] = true
		}
	}
	for _, m := range loaded.Pending {
		if m.To == as.RootID && m.From == as.UserID {
			have[m.TaskID] = true
		}
	}
	for k := range tasks {
		task := crashTask(k)
		if have[task] {
			continue
		}
		tok := crashNewTok()
		m, err := s.SendTextToAgent(ctx, as.RootID, "req "+task+" tok="+tok, task)
		if err != nil {
			return fmt.Errorf("submitting %s: %w", task, err)
		}
		out.printf("msg %s %s %s", m.ID, as.RootID, tok)
	}
	return nil
}

func crashTask(k int) string { return fmt.Sprintf("task-%02d", k) }

// crashContent is the content of the artifact named name.
func crashContent(name string) []byte {
	var b strings.Builder
	for i := range 12 {
		fmt.Fprintf(&b, "%s, line %02d: 内容 ✓ <ok> & \"quoted\"\n", name, i)
	}
	return []byte(b.String())
}

func crashSHA(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func crashNewTok() string { return fmt.Sprintf("t%016x", rand.Uint64()) }

// The role prompts; the script tells the roles apart by them.
const (
	crashLeadPrompt   = "ROLE=lead: own one task end to end."
	crashWorkerPrompt = "ROLE=maker:worker: make what you are asked for."
	crashHelperPrompt = "ROLE=maker:helper: review what the lead asks."
)

var (
	crashTokRE     = regexp.MustCompile(`tok=(t[0-9a-f]{16})`)
	crashReportRE  = regexp.MustCompile(`report (task-\d+) `)
	crashLeadRE    = regexp.MustCompile(`objective: lead:(task-\d+)`)
	crashTargetRE  = regexp.MustCompile(`"target_agent_id": "([^"]+)"`)
	crashNameRE    = regexp.MustCompile(`"name": "(task-\d+/[a-z0-9]+)"`)
	crashSenderRE  = regexp.MustCompile(`（([^）]+)）的消息】`)
	crashReqIDRE   = regexp.MustCompile(`"request_id": "([^"]+)"`)
	crashSubtaskRE = regexp.MustCompile(`"subtask_description": "make ([^"]+)"`)
)

func crashTokOf(s string) string {
	if m := crashTokRE.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

// crashSink writes the helper's lines, one write each.
type crashSink struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *crashSink) printf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	line = strings.ReplaceAll(line, "\n", `\n`) + "\n"
	s.mu.Lock()
	defer s.mu.Unlock()
	io.WriteString(s.w, line)
}

// crashLineWriter feeds the lines of a society run in the test's own process
// to the ledger.
type crashLineWriter struct{ l *crashLedger }

func (w crashLineWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSuffix(string(p), "\n"), "\n") {
		w.l.line(line)
	}
	return len(p), nil
}

// crashConfig is the configuration of the workload's society on st.
func crashConfig(st store.Store, out *crashSink, log *slog.Logger) as.Config {
	model := llmtest.New(idleOnBrief,
		llmtest.Rule{Name: "lead", SystemContains: "ROLE=lead", Reply: func(req *llm.Request) (*llm.Response, error) {
			return crashLead(out, req), nil
		}},
		llmtest.Rule{Name: "maker", SystemContains: "ROLE=maker:", Reply: func(req *llm.Request) (*llm.Response, error) {
			return crashMaker(out, req), nil
		}},
	)
	return as.Config{
		Store:         st,
		Logger:        log,
		Root:          crashRoot(out),
		Model:         model,
		Tools:         toolset.State(),
		UserConsole:   crashConsole{out},
		HistoryBudget: 1 << 24, // keep every turn: the test counts them
	}
}

// crashConsole is user's console: it acknowledges each message to user.
type crashConsole struct{ out *crashSink }

func (c crashConsole) Write(p []byte) (int, error) {
	s := string(p)
	tok := crashTokOf(s)
	m := crashReportRE.FindStringSubmatch(s)
	if tok == "" || m == nil {
		c.out.printf("E user got an unexpected message: %s", s)
		return len(p), nil
	}
	c.out.printf("h %s", tok)
	c.out.printf("rep %s", m[1])
	return len(p), nil
}

// crashRoot is root's behaviour.
func crashRoot(out *crashSink) as.Behavior {
	return as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		out.printf("h %s", crashTokOf(string(m.Payload)))
		fail := func(err error) error {
			out.printf("E root handling %s: %v", m.ID, err)
			return err
		}
		text := m.Text()
		switch {
		case m.From == as.UserID && strings.HasPrefix(text, "req "):
			task := m.TaskID
			v, ok, err := self.GetState("owner", as.ScopeProject)
			if err != nil {
				return fail(err)
			}
			if ok {
				var owner string
				if err := json.Unmarshal(v.Value, &owner); err != nil {
					return fail(err)
				}
				if owner != m.ID {
					return nil // a requirement submitted again
				}
			} else if err := self.SetState(ctx, "owner", m.ID, as.ScopeProject); err != nil {
				return fail(err)
			}
			role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "lead", Prompt: crashLeadPrompt})
			if err != nil {
				return fail(err)
			}
			lead, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(withObjective("lead:" + task))})
			if err != nil {
				return fail(err)
			}
			out.printf("spawn %s %s %s %s", lead.ID, as.RootID, lead.TaskID, lead.Brief.Objective)
			tok := crashNewTok()
			sent, err := self.SendText(ctx, lead.ID, "start "+task+" tok="+tok)
			if err != nil {
				return fail(err)
			}
			out.printf("msg %s %s %s", sent.ID, lead.ID, tok)
			return nil

		case strings.HasPrefix(text, "need helper "):
			task := m.TaskID
			role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "helper", Prompt: crashHelperPrompt})
			if err != nil {
				return fail(err)
			}
			brief := validBrief(withObjective("helper:" + task))
			brief.Collaborators = []as.Collaborator{{AgentID: m.From, Description: "the lead of " + task}}
			h, _, err := self.WithTask(task+"-h").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: brief, Behavior: crashHelperAgent(out)})
			if err != nil {
				return fail(err)
			}
			out.printf("spawn %s %s %s %s", h.ID, as.RootID, h.TaskID, h.Brief.Objective)
			tok := crashNewTok()
			sent, err := self.Send(ctx, as.Outgoing{To: m.From, Type: as.IntroductionResponse,
				Payload: as.IntroductionResponsePayload{TargetAgentID: h.ID, Text: "your helper tok=" + tok}})
			if err != nil {
				return fail(err)
			}
			out.printf("msg %s %s %s", sent.ID, m.From, tok)
			return nil
		}
		out.printf("E root got an unexpected %s from %s: %s", m.Type, m.From, m.Payload)
		return nil
	})
}

// crashHelperAgent is the helper's behaviour while the process that spawned it
// lives; after a restart the script's maker does the same.
func crashHelperAgent(out *crashSink) as.Behavior {
	return as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		out.printf("h %s", crashTokOf(string(m.Payload)))
		fail := func(err error) error {
			out.printf("E helper %s handling %s: %v", self.ID(), m.ID, err)
			return err
		}
		var p as.CollaborationRequestPayload
		if m.Type != as.CollaborationRequest || m.Decode(&p) != nil || !strings.HasPrefix(p.SubtaskDescription, "make ") {
			out.printf("E helper %s got an unexpected %s from %s: %s", self.ID(), m.Type, m.From, m.Payload)
			return nil
		}
		name := strings.TrimPrefix(p.SubtaskDescription, "make ")
		data := crashContent(name)
		art, err := self.PutArtifact(ctx, as.ArtifactSpec{Name: name, MediaType: "text/plain; charset=utf-8", Data: data})
		if err != nil {
			return fail(err)
		}
		out.printf("art %s %s %s", art.ID, name, crashSHA(data))
		if err := self.SetState(ctx, "review", art.Ref(), as.ScopeProject); err != nil {
			return fail(err)
		}
		result, _ := json.Marshal(map[string]string{"name": name, "ref": art.Ref()})
		tok := crashNewTok()
		sent, err := self.Respond(ctx, p.RequestID, as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: result, Text: "made " + name + " tok=" + tok})
		if errors.Is(err, as.ErrRequestClosed) {
			return nil // answered before a crash
		}
		if err != nil {
			return fail(err)
		}
		out.printf("msg %s %s %s", sent.ID, sent.To, tok)
		return nil
	})
}

// crashTurn is the turn a model-driven agent is in: the message that opened
// it, the history before it, and the tool calls made since, with their
// results (the script makes one call per step).
type crashTurn struct {
	msg     string
	before  []llm.Message
	calls   []llm.ToolCall
	results []map[string]any
	raw     []string
}

func crashTurnOf(req *llm.Request) crashTurn {
	start := len(req.Messages) - 1
	for start > 0 && req.Messages[start].Role != llm.RoleUser {
		start--
	}
	t := crashTurn{msg: req.Messages[start].Content, before: req.Messages[:start]}
	results := map[string]string{}
	for _, m := range req.Messages[start+1:] {
		switch m.Role {
		case llm.RoleAssistant:
			t.calls = append(t.calls, m.ToolCalls...)
		case llm.RoleTool:
			results[m.ToolCallID] = m.Content
		}
	}
	for _, c := range t.calls {
		var v map[string]any
		json.Unmarshal([]byte(results[c.ID]), &v)
		t.results = append(t.results, v)
		t.raw = append(t.raw, results[c.ID])
	}
	return t
}

// last returns a string field of the result of the turn's last call, and
// whether that call succeeded.
func (t *crashTurn) last(field string) (string, bool) {
	r := t.results[len(t.results)-1]
	if _, failed := r["error"]; failed || r == nil {
		return "", false
	}
	s, _ := r[field].(string)
	return s, true
}

// lastError returns the error code of the turn's last call, if it failed.
func (t *crashTurn) lastError() string {
	r := t.results[len(t.results)-1]
	s, _ := r["error"].(string)
	return s
}

// crashLead is the script of a lead.
func crashLead(out *crashSink, req *llm.Request) *llm.Response {
	t := crashTurnOf(req)
	step := len(t.calls)
	m := crashLeadRE.FindStringSubmatch(req.Messages[0].Content) // the brief, pinned first
	if m == nil {
		out.printf("E lead %s: no task in its prompt", req.Agent)
		return llmtest.Say("confused")
	}
	task := m[1]
	bad := func(what string) *llm.Response {
		out.printf("E lead %s, step %d: %s: %s", req.Agent, step, what, t.raw[step-1])
		return llmtest.Say("failed")
	}
	ackSpawn := func(objective string) bool {
		id, ok := t.last("agentId")
		if ok {
			out.printf("spawn %s %s %s %s", id, req.Agent, task, objective)
		}
		return ok
	}
	ackArt := func(name string) bool {
		ref, ok := t.last("ref")
		if ok {
			out.printf("art %s %s %s", strings.TrimPrefix(ref, as.ArtifactRefPrefix), name, crashSHA(crashContent(name)))
		}
		return ok
	}
	ackMsg := func() bool {
		id, ok := t.last("messageId")
		if ok {
			var a struct {
				To string `json:"to"`
			}
			json.Unmarshal(t.calls[step-1].Arguments, &a)
			out.printf("msg %s %s %s", id, a.To, crashTokOf(string(t.calls[step-1].Arguments)))
		}
		return ok
	}
	request := func(to, name string) *llm.Response {
		return llmtest.Call("send_message", map[string]any{"to": to, "message_type": "collaboration_request",
			"payload": map[string]any{"subtask_description": "make " + name, "text": "please tok=" + crashNewTok()}})
	}
	switch {
	case strings.Contains(t.msg, "\nstart "+task+" tok="):
		for _, h := range t.before {
			if h.Role == llm.RoleUser && strings.Contains(h.Content, "\nstart "+task+" tok=") {
				return llmtest.Say("already started") // root's message came again
			}
		}
		brief := func(objective string) map[string]any {
			b := validBrief(withObjective(objective))
			return map[string]any{"objective": b.Objective, "constraints": b.Constraints, "inputs": b.Inputs,
				"outputs": b.Outputs, "completion_criteria": b.CompletionCriteria}
		}
		switch step {
		case 0:
			return llmtest.Call("create_role", map[string]any{"name": "worker", "rolePrompt": crashWorkerPrompt})
		case 1:
			role, ok := t.last("roleId")
			if !ok {
				return bad("create_role")
			}
			return llmtest.Call("spawn_agent", map[string]any{"roleId": role, "taskBrief": brief(task + "/w1")})
		case 2:
			if !ackSpawn(task + "/w1") {
				return bad("spawn_agent")
			}
			role, _ := t.results[0]["roleId"].(string)
			return llmtest.Call("spawn_agent", map[string]any{"roleId": role, "taskBrief": brief(task + "/w2")})
		case 3:
			if !ackSpawn(task + "/w2") {
				return bad("spawn_agent")
			}
			name := task + "/plan"
			return llmtest.Call("put_artifact", map[string]any{"name": name, "content": string(crashContent(name))})
		case 4:
			if !ackArt(task + "/plan") {
				return bad("put_artifact")
			}
			w1, _ := t.results[1]["agentId"].(string)
			return request(w1, task+"/w1")
		case 5:
			if !ackMsg() {
				return bad("send_message")
			}
			w2, _ := t.results[2]["agentId"].(string)
			return request(w2, task+"/w2")
		case 6:
			if !ackMsg() {
				return bad("send_message")
			}
			return llmtest.Call("send_message", map[string]any{"to": as.RootID, "payload": map[string]any{"text": "need helper for " + task + " tok=" + crashNewTok()}})
		default:
			if !ackMsg() {
				return bad("send_message")
			}
			return llmtest.Say("started")
		}

	case strings.Contains(t.msg, "message_type: introduction_response"):
		m := crashTargetRE.FindStringSubmatch(t.msg)
		if m == nil {
			out.printf("E lead %s: an introduction without a target: %s", req.Agent, t.msg)
			return llmtest.Say("confused")
		}
		if step == 0 {
			return request(m[1], task+"/review")
		}
		if !ackMsg() {
			return bad("send_message")
		}
		return llmtest.Say("asked the helper")

	case strings.Contains(t.msg, "message_type: collaboration_response"):
		if !strings.Contains(t.msg, `"status": "completed"`) {
			out.printf("E lead %s: a collaboration failed: %s", req.Agent, t.msg)
			return llmtest.Say("failed")
		}
		have := map[string]bool{}
		for _, h := range req.Messages {
			if h.Role == llm.RoleUser && strings.Contains(h.Content, "message_type: collaboration_response") {
				for _, n := range crashNameRE.FindAllStringSubmatch(h.Content, -1) {
					have[n[1]] = true
				}
			}
		}
		if !have[task+"/w1"] || !have[task+"/w2"] || !have[task+"/review"] {
			return llmtest.Say("waiting")
		}
		for _, h := range t.before {
			for _, c := range h.ToolCalls {
				if c.Name == "send_message" && strings.Contains(string(c.Arguments), `"to":"user"`) {
					return llmtest.Say("already reported")
				}
			}
		}
		name := task + "/report"
		switch step {
		case 0:
			return llmtest.Call("put_artifact", map[string]any{"name": name, "content": string(crashContent(name))})
		case 1:
			if !ackArt(name) {
				return bad("put_artifact")
			}
			ref, _ := t.last("ref")
			return llmtest.Call("send_message", map[string]any{"to": as.UserID, "message_type": "status_report",
				"payload": map[string]any{"status": "completed", "text": "report " + task + " " + ref + " tok=" + crashNewTok()}})
		default:
			if !ackMsg() {
				return bad("send_message")
			}
			return llmtest.Say("reported")
		}
	}
	out.printf("E lead %s got an unexpected message: %s", req.Agent, t.msg)
	return llmtest.Say("confused")
}

// crashMaker is the script of a worker, and of a helper restored after a
// crash: it makes the artifact it is asked for, records it in its state and
// answers with its reference.
func crashMaker(out *crashSink, req *llm.Request) *llm.Response {
	t := crashTurnOf(req)
	step := len(t.calls)
	from := crashSenderRE.FindStringSubmatch(t.msg)
	reqID := crashReqIDRE.FindStringSubmatch(t.msg)
	name := crashSubtaskRE.FindStringSubmatch(t.msg)
	if !strings.Contains(t.msg, "message_type: collaboration_request") || from == nil || reqID == nil || name == nil {
		out.printf("E maker %s got an unexpected message: %s", req.Agent, t.msg)
		return llmtest.Say("confused")
	}
	bad := func(what string) *llm.Response {
		out.printf("E maker %s, step %d: %s: %s", req.Agent, step, what, t.raw[step-1])
		return llmtest.Say("failed")
	}
	switch step {
	case 0:
		return llmtest.Call("put_artifact", map[string]any{"name": name[1], "content": string(crashContent(name[1]))})
	case 1:
		ref, ok := t.last("ref")
		if !ok {
			return bad("put_artifact")
		}
		out.printf("art %s %s %s", strings.TrimPrefix(ref, as.ArtifactRefPrefix), name[1], crashSHA(crashContent(name[1])))
		if strings.Contains(req.System, "ROLE=maker:helper") {
			return llmtest.Call("state_set", map[string]any{"key": "review", "value": ref, "scope": "project"})
		}
		return llmtest.Call("state_set", map[string]any{"key": "made:" + name[1], "value": ref, "scope": "private"})
	case 2:
		if _, ok := t.last("ok"); !ok {
			return bad("state_set")
		}
		ref, _ := t.results[0]["ref"].(string)
		return llmtest.Call("send_message", map[string]any{"to": from[1], "message_type": "collaboration_response",
			"payload": map[string]any{"request_id": reqID[1], "status": "completed",
				"result_data": map[string]any{"name": name[1], "ref": ref}, "text": "made " + name[1] + " tok=" + crashNewTok()}})
	default:
		id, ok := t.last("messageId")
		if !ok {
			if t.lastError() == "request_closed" {
				return llmtest.Say("answered before") // answered before a crash
			}
			return bad("send_message")
		}
		out.printf("msg %s %s %s", id, from[1], crashTokOf(string(t.calls[step-1].Arguments)))
		return llmtest.Say("done")
	}
}

// crashLedger is what the helpers acknowledged and handled, run after run.
type crashLedger struct {
	mu       sync.Mutex
	run      int
	msgs     map[string]*crashMsg   // by token
	spawns   map[string]crashSpawn  // by agent id
	arts     map[string]crashArtAck // by artifact id
	handled  map[string]int         // token -> "h" lines
	reports  map[string]bool        // tasks reported to user
	errs     []string
	acks     int
	respawns int // spawn acknowledgements of an agent acknowledged before
	lines    int
}

type crashMsg struct {
	id, to string
	run    int
	// When a check first finds the message finished: the check, and how
	// many times it had been handled then ("h" lines, copies in the
	// receiver's history).
	finished       int
	prints, inHist int
}

type crashSpawn struct{ parent, task, objective string }

type crashArtAck struct{ name, sha string }

func newCrashLedger() *crashLedger {
	return &crashLedger{
		msgs:    map[string]*crashMsg{},
		spawns:  map[string]crashSpawn{},
		arts:    map[string]crashArtAck{},
		handled: map[string]int{},
		reports: map[string]bool{},
	}
}

func (l *crashLedger) setRun(run int) {
	l.mu.Lock()
	l.run = run
	l.mu.Unlock()
}

// line records one line of a helper and reports whether it acknowledges an
// operation.
func (l *crashLedger) line(line string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines++
	f := strings.Fields(line)
	if len(f) == 0 {
		return false
	}
	switch {
	case f[0] == "msg" && len(f) == 4:
		if f[3] == "" || l.msgs[f[3]] != nil {
			l.errs = append(l.errs, "a message acknowledged twice or without a token: "+line)
			return false
		}
		l.msgs[f[3]] = &crashMsg{id: f[1], to: f[2], run: l.run, finished: -1}
	case f[0] == "spawn" && len(f) == 5:
		s := crashSpawn{parent: f[2], task: f[3], objective: f[4]}
		if old, ok := l.spawns[f[1]]; ok {
			if old != s {
				l.errs = append(l.errs, fmt.Sprintf("agent %s acknowledged as %+v and as %+v", f[1], old, s))
			}
			l.respawns++
		}
		l.spawns[f[1]] = s
	case f[0] == "art" && len(f) == 4:
		l.arts[f[1]] = crashArtAck{name: f[2], sha: f[3]}
	case f[0] == "h" && len(f) == 2:
		l.handled[f[1]]++
		return false
	case f[0] == "rep" && len(f) == 2:
		l.reports[f[1]] = true
		return false
	case f[0] == "E":
		l.errs = append(l.errs, line)
		return false
	default:
		return false // "ready", and what the testing package prints
	}
	l.acks++
	return true
}

func (l *crashLedger) lineCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines
}

func (l *crashLedger) errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errs...)
}

func (l *crashLedger) missingReports() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k := range crashTasks {
		if !l.reports[crashTask(k)] {
			out = append(out, crashTask(k))
		}
	}
	return out
}

// check opens a copy of dir with the store and checks it against what was
// acknowledged; final adds the checks of a finished workload. It returns
// the number of messages pending.
func (l *crashLedger) check(t *testing.T, dir, scratch string, final bool) (pending, failures int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	errorf := func(format string, args ...any) {
		t.Helper()
		failures++
		t.Errorf(format, args...)
	}
	for _, e := range l.errs {
		errorf("run %d: %s", l.run, e)
	}
	l.errs = nil

	if data, err := os.ReadFile(filepath.Join(dir, "org.json")); err == nil && !json.Valid(data) {
		t.Fatalf("run %d: org.json is not JSON after the kill:\n%s", l.run, crashTail(string(data)))
	}
	copied := filepath.Join(scratch, strconv.Itoa(l.run))
	copyDir(t, dir, copied)
	defer os.RemoveAll(copied)
	fst, err := filestore.Open(copied, filestore.Options{Logger: quiet})
	if err != nil {
		t.Fatalf("run %d: opening the store after the kill: %v", l.run, err)
	}
	defer fst.Close()
	ctx := context.Background()
	st, err := fst.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Spawns: none lost, none duplicated.
	agents := map[string]store.Agent{}
	seen := map[string]string{}
	rootKids := map[string]string{}
	keys := map[string]string{}
	objective := map[string]string{}
	for _, a := range st.Agents {
		agents[a.ID] = a
		var b struct{ Objective string }
		if err := json.Unmarshal(a.Brief, &b); err != nil {
			errorf("run %d: agent %s: brief %s: %v", l.run, a.ID, a.Brief, err)
		}
		objective[a.ID] = b.Objective
		k := a.ParentID + " " + a.RoleID + " " + b.Objective
		if other, dup := seen[k]; dup {
			errorf("run %d: agents %s (spawn key %s) and %s (spawn key %s) are both %q on role %s under %s: a spawn was duplicated",
				l.run, other, agents[other].SpawnKey, a.ID, a.SpawnKey, b.Objective, a.RoleID, a.ParentID)
			if os.Getenv(crashVerboseEnv) != "" {
				for _, h := range st.Histories {
					if h.AgentID == a.ParentID {
						t.Logf("the history of %s:\n%s", h.AgentID, h.Messages)
					}
				}
				for _, m := range st.Pending {
					t.Logf("pending %s %d %s->%s %s", m.ID, m.Seq, m.From, m.To, m.Payload)
				}
			}
		}
		seen[k] = a.ID
		if a.ParentID == as.RootID {
			if other, dup := rootKids[a.TaskID]; dup {
				errorf("run %d: root has two children on task %s: %s and %s", l.run, a.TaskID, other, a.ID)
			}
			rootKids[a.TaskID] = a.ID
		}
		if a.SpawnKey != "" {
			if other, dup := keys[a.SpawnKey]; dup {
				errorf("run %d: agents %s and %s have the same spawn key %s", l.run, other, a.ID, a.SpawnKey)
			}
			keys[a.SpawnKey] = a.ID
		}
	}
	for id, s := range l.spawns {
		a, ok := agents[id]
		switch {
		case !ok:
			errorf("run %d: acknowledged spawn %s (%+v) is missing", l.run, id, s)
		case a.ParentID != s.parent || a.TaskID != s.task || objective[id] != s.objective:
			errorf("run %d: agent %s is %s/%s/%q, acknowledged as %+v", l.run, id, a.ParentID, a.TaskID, objective[id], s)
		}
	}

	// Artifacts: every acknowledged one reads back.
	for id, a := range l.arts {
		meta, data, err := fst.GetArtifact(ctx, id)
		switch {
		case err != nil:
			errorf("run %d: acknowledged artifact %s (%s): %v", l.run, id, a.name, err)
		case crashSHA(data) != a.sha || meta.Name != a.name || !bytes.Equal(data, crashContent(a.name)):
			errorf("run %d: artifact %s (%s) reads back %d bytes, SHA-256 %s, as %q; acknowledged %s", l.run, id, a.name, len(data), crashSHA(data), meta.Name, a.sha)
		}
	}

	// Messages: every acknowledged one pending or handled; a finished one
	// never handled again.
	inHist := map[string]map[string]int{} // agent -> token -> copies
	for _, h := range st.Histories {
		counts := map[string]int{}
		for i, raw := range h.Messages {
			var m struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				errorf("run %d: the history of %s: message %d: %v", l.run, h.AgentID, i, err)
			}
			if m.Role == string(llm.RoleUser) {
				if tok := crashTokOf(m.Content); tok != "" {
					counts[tok]++
					if counts[tok] == 2 {
						errorf("run %d: %s handled message %s twice:\n%s", l.run, h.AgentID, tok, m.Content)
					}
				}
			}
		}
		inHist[h.AgentID] = counts
	}
	isPending := map[string]bool{}
	seqs := map[uint64]string{}
	for _, m := range st.Pending {
		isPending[m.ID] = true
		if other, dup := seqs[m.Seq]; dup {
			errorf("run %d: pending messages %s and %s have the same Seq %d: their order is lost", l.run, other, m.ID, m.Seq)
		}
		seqs[m.Seq] = m.ID
	}
	for tok, m := range l.msgs {
		prints, hist := l.handled[tok], inHist[m.to][tok]
		switch {
		case isPending[m.id]:
			if m.finished >= 0 {
				errorf("run %d: message %s to %s, finished at run %d, is pending again", l.run, m.id, m.to, m.finished)
			}
			if final {
				errorf("run %d: message %s to %s is still pending at the end", l.run, m.id, m.to)
			}
		case prints == 0 && hist == 0:
			errorf("run %d: acknowledged message %s (run %d) to %s was lost: it is not pending and was never handled", l.run, m.id, m.run, m.to)
		case m.finished < 0:
			m.finished, m.prints, m.inHist = l.run, prints, hist
		case prints != m.prints || hist != m.inHist:
			errorf("run %d: message %s to %s finished at run %d and was handled again: %d+%d times then, %d+%d now",
				l.run, m.id, m.to, m.finished, m.prints, m.inHist, prints, hist)
		}
	}
	if !final {
		return len(st.Pending), failures
	}

	// The finished workload.
	if len(st.Pending) > 0 {
		errorf("%d messages are pending at the end", len(st.Pending))
	}
	for k := range crashTasks {
		task := crashTask(k)
		if !l.reports[task] {
			errorf("%s never reported to user", task)
		}
		lead, helper := agents[rootKids[task]], agents[rootKids[task+"-h"]]
		if objective[lead.ID] != "lead:"+task || objective[helper.ID] != "helper:"+task {
			errorf("%s: root's children are %q and %q, want its lead and its helper", task, objective[lead.ID], objective[helper.ID])
		}
		var workers []string
		for _, a := range st.Agents {
			if a.ParentID == lead.ID {
				workers = append(workers, objective[a.ID])
				if ok := crashHasState(st, "agent:"+a.ID, "made:"+objective[a.ID]); !ok {
					errorf("%s: worker %s did not record what it made", task, a.ID)
				}
			}
		}
		sort.Strings(workers)
		if strings.Join(workers, " ") != task+"/w1 "+task+"/w2" {
			errorf("%s: the lead %s has the workers %q, want %s/w1 and %s/w2", task, lead.ID, workers, task, task)
		}
		if !crashHasState(st, "task:"+task, "owner") || !crashHasState(st, "task:"+task, "review") {
			errorf("%s: the project state lacks owner or review", task)
		}
	}
	if len(st.Agents) != 4*crashTasks {
		errorf("%d agents at the end, want %d", len(st.Agents), 4*crashTasks)
	}
	roles := map[string]bool{}
	for _, r := range st.Roles {
		k := r.CreatedBy + " " + r.Name
		if roles[k] {
			errorf("%s created the role %s twice", r.CreatedBy, r.Name)
		}
		roles[k] = true
	}
	if len(st.Roles) != 2+crashTasks {
		errorf("%d roles at the end, want %d", len(st.Roles), 2+crashTasks)
	}
	for _, r := range st.Requests {
		if r.Status != string(as.StatusCompleted) {
			errorf("request %s from %s to %s is %s at the end", r.ID, r.From, r.To, r.Status)
		}
	}
	return 0, failures
}

func crashHasState(st store.State, scope, key string) bool {
	for _, e := range st.States {
		if e.Scope == scope && e.Key == key && len(e.Value) > 0 {
			return true
		}
	}
	return false
}

// crashCheckSociety checks the reopened society's own view of the finished
// workload.
func crashCheckSociety(t *testing.T, s *as.Society) {
	t.Helper()
	children := map[string][]as.Agent{}
	for _, a := range s.Agents() {
		children[a.ParentID] = append(children[a.ParentID], a)
	}
	byTask := map[string]as.Agent{}
	for _, a := range children[as.RootID] {
		if _, dup := byTask[a.TaskID]; dup {
			t.Errorf("root has two children on task %s", a.TaskID)
		}
		byTask[a.TaskID] = a
	}
	for k := range crashTasks {
		task := crashTask(k)
		lead, ok := byTask[task]
		if !ok || lead.Brief.Objective != "lead:"+task {
			t.Errorf("%s has no lead", task)
			continue
		}
		if len(children[lead.ID]) != 2 {
			t.Errorf("%s: the lead %s has %d children, want 2", task, lead.ID, len(children[lead.ID]))
		}
		if h, ok := byTask[task+"-h"]; !ok || h.Brief.Objective != "helper:"+task || !s.IsKnown(h.ID, lead.ID) || !s.IsKnown(lead.ID, h.ID) {
			t.Errorf("%s: no helper that knows the lead and is known by it", task)
		}
		x, err := s.Actor(lead.ID)
		if err != nil {
			t.Fatal(err)
		}
		v, ok, err := x.GetState("review", as.ScopeProject)
		if err != nil || !ok {
			t.Errorf("%s: no review in the project state: %v", task, err)
			continue
		}
		var ref string
		json.Unmarshal(v.Value, &ref)
		if _, data, err := s.GetArtifact(context.Background(), ref); err != nil || !bytes.Equal(data, crashContent(task+"/review")) {
			t.Errorf("%s: the review %s does not read back: %v", task, ref, err)
		}
	}
}

// crashTail returns the end of a long text.
func crashTail(s string) string {
	const n = 4000
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// restoreBrief is validBrief as the store records it.
func restoreBrief(t *testing.T) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(validBrief())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A store written across a backwards step of the wall clock, whose child
// agent has an earlier CreatedAt than its parent, opens: restore orders
// agents by their parents, not by time.
func TestRestore_ChildOlderThanItsParentReopens(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	now := time.Now()
	brief := restoreBrief(t)
	if err := mem.Apply(ctx, store.Change{
		Roles: []store.Role{
			{ID: "role-1", Name: "lead", CreatedBy: as.RootID, CreatedAt: now},
			{ID: "role-2", Name: "worker", CreatedBy: "agent-1", CreatedAt: now},
		},
		// The child first, and an hour older than its parent.
		Agents: []store.Agent{
			{ID: "agent-2", RoleID: "role-2", ParentID: "agent-1", TaskID: "t", Brief: brief, Status: "active", CreatedAt: now.Add(-time.Hour)},
			{ID: "agent-3", RoleID: "role-2", ParentID: "agent-2", TaskID: "t", Brief: brief, Status: "active", CreatedAt: now.Add(-2 * time.Hour)},
			{ID: "agent-1", RoleID: "role-1", ParentID: as.RootID, TaskID: "t", Brief: brief, Status: "active", CreatedAt: now},
		},
	}); err != nil {
		t.Fatal(err)
	}
	s := newSociety(t, as.Config{Store: mem})
	for id, parent := range map[string]string{"agent-1": as.RootID, "agent-2": "agent-1", "agent-3": "agent-2"} {
		a, ok := s.Agent(id)
		if !ok || a.ParentID != parent {
			t.Fatalf("agent %s after reopening: %+v, %v; want parent %s", id, a, ok, parent)
		}
	}
	// The depth came from the parents: agent-3 is at depth 3.
	x, _ := s.Actor("agent-3")
	role, _, err := x.CreateRole(ctx, as.RoleSpec{Name: "deeper"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := x.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()}); err != nil {
		t.Fatalf("spawn under the restored agent-3: %v", err)
	}
}

// A store whose agents' parents are missing, or form a cycle, is refused.
func TestRestore_BrokenParentsAreRefused(t *testing.T) {
	ctx := context.Background()
	brief := restoreBrief(t)
	for name, agents := range map[string][]store.Agent{
		"missing parent": {{ID: "agent-2", RoleID: "role-1", ParentID: "agent-1", Brief: brief, Status: "active"}},
		"cycle": {
			{ID: "agent-1", RoleID: "role-1", ParentID: "agent-2", Brief: brief, Status: "active"},
			{ID: "agent-2", RoleID: "role-1", ParentID: "agent-1", Brief: brief, Status: "active"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			mem := store.NewMemory()
			if err := mem.Apply(ctx, store.Change{Roles: []store.Role{{ID: "role-1", Name: "lead", CreatedBy: as.RootID}}, Agents: agents}); err != nil {
				t.Fatal(err)
			}
			if s, err := as.New(ctx, as.Config{Store: mem, Logger: quiet}); err == nil {
				s.Close(ctx)
				t.Fatal("New opened a store whose agents have no way up to root")
			}
		})
	}
}

// A terminated agent whose parent or role the store no longer holds (the
// society forgot and removed them first, when the agent's own removal
// failed, see Config.Retention) is restored, terminated, and forgotten in
// its turn.
func TestRestore_TerminatedAgentWithoutItsParentOrRole(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	if err := mem.Apply(ctx, store.Change{
		Agents: []store.Agent{{ID: "agent-2", RoleID: "role-1", ParentID: "agent-1", TaskID: "t", Brief: restoreBrief(t), Status: string(as.StatusTerminated)}},
	}); err != nil {
		t.Fatal(err)
	}
	s := newSociety(t, as.Config{Store: mem, Retention: 10 * time.Millisecond, Logger: quiet})
	if a, ok := s.Agent("agent-2"); !ok || a.Status != as.StatusTerminated {
		t.Fatalf("agent-2 restored as %+v, %v", a, ok)
	}
	waitFor(t, "agent-2 to be forgotten and removed", func() bool {
		state, err := mem.Load(ctx)
		_, ok := s.Agent("agent-2")
		return err == nil && !ok && len(state.Agents) == 0
	})
}

// A pending request whose requester the store no longer holds (removed
// before it, when a removal stopped half way, see Config.Retention) is
// forgotten, and removed, in its turn.
func TestRestore_RequestWithoutItsRequester(t *testing.T) {
	ctx := context.Background()
	mem := twoAgentStore(t, as.StatusActive, store.Change{Requests: []store.Request{{ID: "req-x", From: "agent-9", To: "agent-2", TaskID: "t", Status: string(as.StatusPending)}}})
	s := newSociety(t, as.Config{Store: mem, Retention: 10 * time.Millisecond, Logger: quiet})
	waitFor(t, "req-x to be forgotten and removed", func() bool {
		state, err := mem.Load(ctx)
		return err == nil && len(state.Requests) == 0 && s.Held()["requests"] == 0
	})
}

// A store holding a pending message whose payload is not JSON is refused,
// with an error naming the message: every message the society hands on,
// to an agent or to the event log, carries JSON.
func TestRestore_PendingMessageWithoutJSONIsRefused(t *testing.T) {
	ctx := context.Background()
	mem := twoAgentStore(t, as.StatusActive, store.Change{Accepted: []store.Message{
		{ID: "msg-7", Seq: 7, From: "agent-1", To: "agent-2", TaskID: "t", Type: string(as.General), Payload: json.RawMessage(`{"text":`), SentAt: time.Now()},
	}})
	s, err := as.New(ctx, as.Config{Store: mem, Logger: quiet})
	if err == nil {
		s.Close(ctx)
		t.Fatal("New opened a store whose pending message has a payload that is not JSON")
	}
	if !strings.Contains(err.Error(), "msg-7") {
		t.Fatalf("the error does not name the message: %v", err)
	}
}

// twoAgentStore returns an in-memory store holding a lead (agent-1, root's
// child) and its worker (agent-2) in the given status, with what extra adds.
func twoAgentStore(t *testing.T, worker as.AgentStatus, extra store.Change) *store.Memory {
	t.Helper()
	mem := store.NewMemory()
	now := time.Now()
	brief := restoreBrief(t)
	extra.Roles = []store.Role{
		{ID: "role-1", Name: "lead", CreatedBy: as.RootID, CreatedAt: now},
		{ID: "role-2", Name: "worker", CreatedBy: "agent-1", CreatedAt: now},
	}
	extra.Agents = []store.Agent{
		{ID: "agent-1", RoleID: "role-1", ParentID: as.RootID, TaskID: "t", Brief: brief, Status: "active", CreatedAt: now},
		{ID: "agent-2", RoleID: "role-2", ParentID: "agent-1", TaskID: "t", Brief: brief, Status: string(worker), CreatedAt: now},
	}
	if err := mem.Apply(context.Background(), extra); err != nil {
		t.Fatal(err)
	}
	return mem
}

// recordAll is a RestoreBehavior whose agents send every message they get
// to got.
func recordAll(got chan<- as.Message) func(as.Agent, as.Role) as.Behavior {
	return func(as.Agent, as.Role) as.Behavior {
		return as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
			got <- m
			return nil
		})
	}
}

// A request to an agent that was being terminated, or had been, when the
// society stopped is settled on reopening: its requester gets an error
// response, instead of waiting forever.
func TestRestore_RequestToAnEndedAgentIsSettled(t *testing.T) {
	for _, status := range []as.AgentStatus{as.StatusTerminating, as.StatusTerminated} {
		t.Run(string(status), func(t *testing.T) {
			ctx := context.Background()
			mem := twoAgentStore(t, status, store.Change{
				Requests: []store.Request{{ID: "req-1", From: "agent-1", To: "agent-2", TaskID: "t", Status: string(as.StatusPending), CreatedAt: time.Now()}},
			})
			got := make(chan as.Message, 4)
			s := newSociety(t, as.Config{Store: mem, RestoreBehavior: recordAll(got)})
			m := recv(t, got, "the requester's outcome after reopening")
			var p as.CollaborationResponsePayload
			if err := m.Decode(&p); err != nil || m.To != "agent-1" || m.Type != as.CollaborationResponse || p.RequestID != "req-1" || p.Status != as.StatusError {
				t.Fatalf("the requester got %+v (%s), want an error response to req-1", m, m.Payload)
			}
			if a, _ := s.Agent("agent-2"); a.Status != as.StatusTerminated {
				t.Fatalf("agent-2 is %s after reopening, want terminated", a.Status)
			}
			st, _ := mem.Load(ctx)
			if len(st.Requests) != 1 || st.Requests[0].Status != string(as.StatusError) {
				t.Fatalf("the store's requests: %+v, want req-1 settled with an error", st.Requests)
			}
		})
	}
}

// An agent being terminated whose handoff message is still pending when the
// society stops gets, on reopening, the messages queued before it and its
// handoff turn, then ends.
func TestRestore_PendingHandoffIsHandledBeforeTheAgentEnds(t *testing.T) {
	now := time.Now()
	handoff, _ := json.Marshal(map[string]any{"text": as.HandoffText, "handoff": true})
	mem := twoAgentStore(t, as.StatusTerminating, store.Change{Accepted: []store.Message{
		{ID: "m-1", Seq: 1, From: "agent-1", To: "agent-2", TaskID: "t", Type: "general", Payload: json.RawMessage(`{"text":"before"}`), SentAt: now},
		{ID: "m-2", Seq: 2, From: "agent-1", To: "agent-2", TaskID: "t", Type: "general", Payload: handoff, SentAt: now},
	}})
	got := make(chan as.Message, 4)
	s := newSociety(t, as.Config{Store: mem, RestoreBehavior: recordAll(got)})
	for _, want := range []string{"m-1", "m-2"} {
		if m := recv(t, got, "agent-2's messages after reopening"); m.ID != want {
			t.Fatalf("agent-2 got %s, want %s", m.ID, want)
		}
	}
	waitFor(t, "agent-2 terminated after its handoff", func() bool {
		a, _ := s.Agent("agent-2")
		return a.Status == as.StatusTerminated
	})
}

// reopeningMachine is the organisation's state machine on a file store,
// with one more action: close the society and its store and open both
// again, after which the organisation must still agree with the model.
type reopeningMachine struct {
	*orgMachine
	dir string
	st  *filestore.Store
	cfg as.Config
}

func (r *reopeningMachine) open(t *rapid.T) {
	st, err := filestore.Open(r.dir, filestore.Options{Logger: quiet, Sync: filestore.SyncBatched, CompactAfter: 16})
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.cfg
	cfg.Store = st
	s, err := as.New(r.ctx, cfg)
	if err != nil {
		st.Close()
		t.Fatalf("reopening: %v", err)
	}
	r.st, r.s = st, s
}

func (r *reopeningMachine) shut(t *rapid.T) {
	if err := r.s.Close(r.ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.st.Close(); err != nil {
		t.Fatalf("closing the store: %v", err)
	}
}

func (r *reopeningMachine) reopen(t *rapid.T) {
	r.shut(t)
	r.open(t)
	clear(r.model.asks) // open introduction requests live in memory only
}

// reopenRounds is how many times rapid runs its default number of checks
// (100) of the reopening state machine: 1,000 random sequences in all.
const reopenRounds = 10

func TestStateMachine_OrganisationReopened(t *testing.T) {
	for range reopenRounds {
		rapid.Check(t, func(t *rapid.T) {
			policy := rapid.SampledFrom([]as.ContactPolicy{as.ContactOpen, as.ContactStrict}).Draw(t, "policy")
			maxAgents := rapid.IntRange(2, 12).Draw(t, "maxAgents")
			maxDepth := rapid.IntRange(1, 4).Draw(t, "maxDepth")
			dir, err := os.MkdirTemp("", "agentsociety-reopen-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			r := &reopeningMachine{
				orgMachine: &orgMachine{ctx: context.Background(), model: newOrgModel(policy, maxAgents, maxDepth), tasks: []string{"task-a", "task-b", "task-c"}},
				dir:        dir,
				cfg:        as.Config{Logger: quiet, Root: noop, DefaultBehavior: noop, ContactPolicy: policy, MaxAgents: maxAgents, MaxDepth: maxDepth},
			}
			r.open(t)
			defer r.shut(t)
			t.Repeat(map[string]func(*rapid.T){
				"":            r.check,
				"create_role": r.createRole,
				"spawn":       r.spawn,
				"send":        r.send,
				"reopen":      r.reopen,
			})
		})
	}
}

// appendSignal is a store that says when a history append it was given is
// applied.
type appendSignal struct {
	store.Store
	appended chan struct{}
}

func (a *appendSignal) Apply(ctx context.Context, c store.Change) error {
	err := a.Store.Apply(ctx, c)
	if err == nil && len(c.HistoryAppends) > 0 {
		a.appended <- struct{}{}
	}
	return err
}

func (a *appendSignal) Volatile() bool {
	v, ok := a.Store.(store.Volatile)
	return ok && v.Volatile()
}

// TestHistoryReopened_SameMind: a model-driven agent whose history is
// trimmed, with or without a summariser that sometimes fails, and whose
// society is closed and opened again between turns, on the memory store or
// the file store (compacting every few records), sends the model exactly
// what an agent that was never reopened sends: what each turn recorded
// rebuilds the same history and summary.
func TestHistoryReopened_SameMind(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		budget := rapid.IntRange(200, 2000).Draw(t, "budget")
		summarise := rapid.Bool().Draw(t, "summarise")
		onFile := rapid.Bool().Draw(t, "onFile")
		type turn struct {
			text   string
			reopen bool
		}
		turns := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) turn {
			text := fmt.Sprintf("calls=%d %s", rapid.IntRange(0, 2).Draw(t, "calls"), strings.Repeat("x", rapid.IntRange(0, 400).Draw(t, "pad")))
			if rapid.IntRange(0, 4).Draw(t, "fail") == 0 {
				text += " FAIL"
			}
			return turn{text, rapid.Bool().Draw(t, "reopen")}
		}), 1, 12).Draw(t, "turns")
		turns = append(turns, turn{"calls=1 last", true}) // the last turn runs on what was recorded

		var sum as.Summarizer
		if summarise {
			sum = func(_ context.Context, _, previous string, dropped []llm.Message) (string, error) {
				var b strings.Builder
				b.WriteString(previous)
				for _, m := range dropped {
					if strings.Contains(m.Content, "FAIL") {
						return "", errors.New("the summariser fails on FAIL")
					}
					fmt.Fprintf(&b, "|%s:%.12s", m.Role, m.Content)
				}
				return b.String(), nil
			}
		}
		// run plays the turns and returns the messages of every model
		// call, reopening the society where told if reopen is set.
		run := func(reopen bool) [][]llm.Message {
			var mu sync.Mutex
			var calls [][]llm.Message
			model := llm.ModelFunc(func(_ context.Context, req *llm.Request) (*llm.Response, error) {
				mu.Lock()
				calls = append(calls, slices.Clone(req.Messages))
				mu.Unlock()
				start := 0
				for i, m := range req.Messages {
					if m.Role == llm.RoleUser {
						start = i
					}
				}
				i := strings.Index(req.Messages[start].Content, "calls=")
				if i < 0 {
					return llmtest.Say(""), nil // the brief's turn
				}
				var want int
				fmt.Sscanf(req.Messages[start].Content[i:], "calls=%d", &want)
				results := 0
				for _, m := range req.Messages[start:] {
					if m.Role == llm.RoleTool {
						results++
					}
				}
				if results < want {
					return call(fmt.Sprint("c", results), "get_artifact", `{}`), nil
				}
				return llmtest.Say(fmt.Sprintf("done after %d calls", results)), nil
			})
			mem := store.NewMemory()
			dir, err := os.MkdirTemp("", "agentsociety-history-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			var fst *filestore.Store
			var s *as.Society
			var sig *appendSignal
			open := func() {
				var st store.Store = mem
				if onFile {
					if fst, err = filestore.Open(dir, filestore.Options{Logger: quiet, Sync: filestore.SyncBatched, CompactAfter: 3}); err != nil {
						t.Fatal(err)
					}
					st = fst
				}
				sig = &appendSignal{st, make(chan struct{}, 1)}
				s, err = as.New(context.Background(), as.Config{Logger: quiet, Store: sig, Model: model, Root: noop, HistoryBudget: budget, Summarize: sum})
				if err != nil {
					t.Fatal(err)
				}
			}
			shut := func() {
				if err := s.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				if fst != nil {
					if err := fst.Close(); err != nil {
						t.Fatal(err)
					}
				}
			}
			open()
			root, err := s.Actor(as.RootID)
			if err != nil {
				t.Fatal(err)
			}
			role, _, err := root.WithTask("t").CreateRole(context.Background(), as.RoleSpec{Name: "worker"})
			if err != nil {
				t.Fatal(err)
			}
			worker, _, err := root.WithTask("t").SpawnAgent(context.Background(), as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
			if err != nil {
				t.Fatal(err)
			}
			recv(t, sig.appended, "the brief's turn recorded")
			for i, tn := range turns {
				if reopen && tn.reopen {
					shut()
					open()
				}
				if _, err := s.SendTextToAgent(context.Background(), worker.ID, tn.text, ""); err != nil {
					t.Fatal(err)
				}
				recv(t, sig.appended, fmt.Sprintf("turn %d recorded", i+1))
			}
			shut()
			return calls
		}
		want, got := run(false), run(true)
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("the model calls after reopening differ (-never reopened +reopened):\n%s", diff)
		}
	})
}

// failingAppends fails the Applies that carry a history append while fail
// is set, and says on done when each such Apply has returned.
type failingAppends struct {
	store.Store
	fail atomic.Bool
	done chan error
}

func (f *failingAppends) Apply(ctx context.Context, c store.Change) error {
	if len(c.HistoryAppends) == 0 {
		return f.Store.Apply(ctx, c)
	}
	err := errors.New("the disk is full")
	if !f.fail.Load() {
		err = f.Store.Apply(ctx, c)
	}
	f.done <- err
	return err
}

func (f *failingAppends) Volatile() bool { return true }

// TestHistoryAppendThatFailedIsMadeAgain: when the store fails to record a
// turn, the next turn's record carries that turn's messages too, so the
// agent reopened on the store has its whole history.
func TestHistoryAppendThatFailedIsMadeAgain(t *testing.T) {
	ctx := context.Background()
	requests := make(chan *llm.Request, 1)
	model := llm.ModelFunc(func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		requests <- &llm.Request{Messages: slices.Clone(req.Messages)}
		return llmtest.Say("ok"), nil
	})
	st := &failingAppends{Store: store.NewMemory(), done: make(chan error, 1)}
	s := newSociety(t, as.Config{Store: st, Model: model, Root: noop})
	worker := rootSpawn(t, s, "t", "worker", "", nil)
	recv(t, requests, "the model call of the brief's turn")
	if err := recv(t, st.done, "the record of the brief's turn"); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"one", "two", "three"} {
		st.fail.Store(text == "two")
		if _, err := s.SendTextToAgent(ctx, worker.ID, text, ""); err != nil {
			t.Fatal(err)
		}
		recv(t, requests, "the model call of turn "+text)
		if err := recv(t, st.done, "the record of turn "+text); (err != nil) != (text == "two") {
			t.Fatalf("recording turn %s: %v", text, err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	checkWholeHistoryAfterReopening(t, st, model, requests, worker.ID)
}

// TestClose_TurnCutShortIsHandledAgain: root's turn is in a model
// call when Close begins; Close lets the call finish, then refuses the
// turn's next call. The turn did not end: its message should stay pending,
// to be handled again by the society reopened on the store, as a turn
// whose context Close cancelled is.
func TestClose_TurnCutShortIsHandledAgain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var n atomic.Int64
	held, release := make(chan struct{}), make(chan struct{})
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if n.Add(1) == 1 {
			close(held)
			<-release
		}
		if lastToolResult(req) == "" {
			return call("c1", "console_print", `{"text":"working"}`), nil
		}
		return call("a", "send_message", `{"to":"user","payload":{"text":"answer"},"end_turn":true}`), nil
	})
	cfg := as.Config{Model: model, MaxSteps: 10}
	s, st := openFS(t, dir, filestore.SyncBatched, cfg)
	task, err := s.SubmitRequirement(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	recv(t, held, "root's first call")
	closed := make(chan struct{})
	go func() { closeFS(t, s, st); close(closed) }()
	waitFor(t, "Close to begin", func() bool {
		return errors.Is(s.Terminate(ctx, "nobody"), as.ErrClosed) // changes nothing
	})
	close(release)
	recv(t, closed, "Close")

	s2, st2 := openFS(t, dir, filestore.SyncBatched, cfg)
	defer closeFS(t, s2, st2)
	m := userMessage(t, s2)
	if m.TaskID != task || m.Text() != "answer" {
		t.Fatalf("reopened, user got %+v (%s): the turn Close cut short was not handled again", m, m.Payload)
	}
}

// TestClose_RepeatedCallsRefusedByCloseAreNotAFailure: a reply whose
// three identical calls are refused because Close began is not a model
// repeating a failing call (see the turn's count of repeated failures):
// the turn did not end, and its message is handled again once the society
// is reopened, where it was ended as failed with step_limit, and lost.
func TestClose_RepeatedCallsRefusedByCloseAreNotAFailure(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var n atomic.Int64
	held, release := make(chan struct{}), make(chan struct{})
	progress := `{"to":"user","payload":{"text":"progress"}}`
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if n.Add(1) == 1 {
			close(held)
			<-release
		}
		if lastToolResult(req) == "" {
			return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
				{ID: "c1", Name: "send_message", Arguments: json.RawMessage(progress)},
				{ID: "c2", Name: "send_message", Arguments: json.RawMessage(progress)},
				{ID: "c3", Name: "send_message", Arguments: json.RawMessage(progress)},
			}}}, nil
		}
		return call("a", "send_message", `{"to":"user","payload":{"text":"answer"},"end_turn":true}`), nil
	})
	cfg := as.Config{Model: model, MaxSteps: 10}
	s, st := openFS(t, dir, filestore.SyncBatched, cfg)
	task, err := s.SubmitRequirement(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	recv(t, held, "root's first call")
	closed := make(chan struct{})
	go func() { closeFS(t, s, st); close(closed) }()
	waitFor(t, "Close to begin", func() bool {
		return errors.Is(s.Terminate(ctx, "nobody"), as.ErrClosed) // changes nothing
	})
	close(release)
	recv(t, closed, "Close")

	s2, st2 := openFS(t, dir, filestore.SyncBatched, cfg)
	defer closeFS(t, s2, st2)
	wctx, cancel := context.WithTimeout(ctx, hangGuard)
	defer cancel()
	m, err := s2.WaitForUserMessage(wctx, func(m as.Message) bool { return m.Text() == "answer" })
	if err != nil || m.TaskID != task {
		t.Fatalf("reopened, user got %+v, %v: the turn Close cut short was not handled again", m, err)
	}
}

// checkWholeHistoryAfterReopening opens a society on st, whose worker
// handled its brief and the messages "one", "two" and "three", each
// answered "ok" by model, and checks that the worker's model call on a
// fourth message is sent all of them, once each.
func checkWholeHistoryAfterReopening(t *testing.T, st store.Store, model llm.Model, requests <-chan *llm.Request, worker string) {
	t.Helper()
	s := newSociety(t, as.Config{Store: st, Model: model, Root: noop})
	if _, err := s.SendTextToAgent(context.Background(), worker, "four", ""); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range recv(t, requests, "the model call after reopening").Messages {
		got = append(got, string(m.Role)+" "+m.Content[strings.LastIndex(m.Content, "\n")+1:])
	}
	want := []string{"user 如需回复，请使用 send_message(to='root', ...)", "assistant ok", "user one", "assistant ok", "user two", "assistant ok", "user three", "assistant ok", "user four"}
	if !slices.Equal(got, want) {
		t.Fatalf("after reopening the model was sent %q, want %q", got, want)
	}
}

// durableFailingAppends is failingAppends on a store that says it outlives
// the process, so that the society records there the end of each message.
type durableFailingAppends struct{ *failingAppends }

func (durableFailingAppends) Volatile() bool { return false }

// TestHistoryAppendThatFailedFinishesItsMessage: on a durable store, the
// record of a turn (its history and the end of its message) fails; the next
// turn's record carries that turn's history, and must carry the end of its
// message too. Else the message stays pending, and the society reopened on
// the store handles it again, after the turns that came after it, with a
// history that has the turn already: the model is told it twice.
func TestHistoryAppendThatFailedFinishesItsMessage(t *testing.T) {
	ctx := context.Background()
	requests := make(chan *llm.Request, 16) // a turn handled again does not block Close
	model := llm.ModelFunc(func(_ context.Context, req *llm.Request) (*llm.Response, error) {
		requests <- &llm.Request{Messages: slices.Clone(req.Messages)}
		return llmtest.Say("ok"), nil
	})
	fa := &failingAppends{Store: store.NewMemory(), done: make(chan error, 16)}
	st := durableFailingAppends{fa}
	s := newSociety(t, as.Config{Store: st, Model: model, Root: noop})
	worker := rootSpawn(t, s, "t", "worker", "", nil)
	recv(t, requests, "the model call of the brief's turn")
	if err := recv(t, fa.done, "the record of the brief's turn"); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"one", "two", "three"} {
		fa.fail.Store(text == "two")
		if _, err := s.SendTextToAgent(ctx, worker.ID, text, ""); err != nil {
			t.Fatal(err)
		}
		recv(t, requests, "the model call of turn "+text)
		if err := recv(t, fa.done, "the record of turn "+text); (err != nil) != (text == "two") {
			t.Fatalf("recording turn %s: %v", text, err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	loaded, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range loaded.Pending {
		if m.To == worker.ID {
			t.Errorf("after the worker handled every message, %s is pending in the store: %s", m.ID, m.Payload)
		}
	}

	checkWholeHistoryAfterReopening(t, st, model, requests, worker.ID)
}

// TestRestore_EndedRequesterStopsWaiting is
// TestTerminate_EndedRequesterStopsWaiting across a reopening: the timer of
// a request whose requester was terminated is not armed again, so that it
// does not keep its task running for an hour to tell an agent that ended.
func TestRestore_EndedRequesterStopsWaiting(t *testing.T) {
	dir := t.TempDir()
	s, st := openFS(t, dir, filestore.SyncEveryRecord, as.Config{Root: noop, Logger: quiet})
	w, _ := askedInVain(t, s)
	terminateAndWait(t, s, w.ID())
	closeFS(t, s, st)

	s, st = openFS(t, dir, filestore.SyncEveryRecord, as.Config{Root: noop, Logger: quiet})
	defer closeFS(t, s, st)
	waitTaskStopped(t, s, "t", "the reopened task to stop running once its only work is a terminated agent's request")
}
