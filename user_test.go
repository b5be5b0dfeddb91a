package agentsociety_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/store"
	"agentsociety/store/filestore"
)

func TestSubmitRequirementRoundTrip(t *testing.T) {
	ctx := context.Background()
	worker := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		_, err := self.SendText(ctx, as.UserID, "done: "+m.Text())
		return err
	})
	root := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "lead", Prompt: "lead the task"})
		if err != nil {
			return err
		}
		child, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: worker})
		if err != nil {
			return err
		}
		_, err = self.SendText(ctx, child.ID, m.Text())
		return err
	})
	s := newSociety(t, as.Config{Root: root})
	task, err := s.SubmitRequirement(ctx, "calc")
	if err != nil {
		t.Fatal(err)
	}
	m := userMessage(t, s)
	if m.Text() != "done: calc" || m.TaskID != task {
		t.Fatalf("got %q on task %q, want %q on %q", m.Text(), m.TaskID, "done: calc", task)
	}
	agents := s.Agents()
	if len(agents) != 1 || agents[0].ParentID != as.RootID || agents[0].TaskID != task {
		t.Fatalf("agents = %+v", agents)
	}
	if !s.IsKnown(as.RootID, agents[0].ID) || !s.IsKnown(agents[0].ID, as.RootID) {
		t.Fatal("root and its child must know each other")
	}
	if !s.IsKnown(as.UserID, agents[0].ID) {
		t.Fatal("user must know the agent that wrote to it first")
	}
}

func TestUserConsoleShowsNoReplyHint(t *testing.T) {
	var console strings.Builder
	s := newSociety(t, as.Config{UserConsole: &console})
	root, _ := s.Actor(as.RootID)
	if _, err := root.SendText(context.Background(), as.UserID, "hello"); err != nil {
		t.Fatal(err)
	}
	userMessage(t, s)
	if got, want := console.String(), "【来自 root（root）的消息】\nhello\n\n"; got != want {
		t.Fatalf("console = %q, want %q", got, want)
	}
}

func TestSendTextToRootStartsATask(t *testing.T) {
	got := make(chan as.Message, 1)
	s := newSociety(t, as.Config{Root: as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		got <- m
		return nil
	})})
	m, err := s.SendTextToAgent(context.Background(), as.RootID, "new work", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m.TaskID, "task-") {
		t.Fatalf("TaskID = %q, want a new task id", m.TaskID)
	}
}

// userKillDirEnv names the file store directory of the process that
// TestUserMessage_SurvivesKillBeforeTheHostHasIt kills.
const userKillDirEnv = "AGENTSOCIETY_USERKILL_DIR"

// killOnRecord is a log handler that kills its process with SIGKILL when a
// record with message msg is logged.
type killOnRecord struct{ msg string }

func (h killOnRecord) Enabled(context.Context, slog.Level) bool { return true }
func (h killOnRecord) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h killOnRecord) WithGroup(string) slog.Handler            { return h }
func (h killOnRecord) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	return nil
}

// answerUser is a root that answers each requirement to user.
var answerUser = as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
	_, err := self.SendText(ctx, as.UserID, "the final answer to "+m.Text())
	return err
})

// A report to user on a durable store is pending until the host has it: a
// process killed (SIGKILL) after the message reached the user endpoint and
// before any host claimed it delivers it on reopening, once.
func TestUserMessage_SurvivesKillBeforeTheHostHasIt(t *testing.T) {
	if dir := os.Getenv(userKillDirEnv); dir != "" {
		userKillChild(t, dir)
		return
	}
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestUserMessage_SurvivesKillBeforeTheHostHasIt$", "-test.count=1")
	cmd.Env = append(os.Environ(), userKillDirEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed as planned: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	open := func() (*as.Society, *filestore.Store) {
		st, err := filestore.Open(dir, filestore.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		s, err := as.New(ctx, as.Config{Store: st, Logger: quiet, Root: answerUser})
		if err != nil {
			t.Fatal(err)
		}
		return s, st
	}
	shut := func(s *as.Society, st *filestore.Store) {
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	}
	// The report is pending. The requirement may be too, if the kill came
	// before root's turn was recorded as ended: then root answers again.
	reports := 0
	if st, err := filestore.Open(dir, filestore.Options{Logger: quiet}); err != nil {
		t.Fatal(err)
	} else {
		loaded, err := st.Load(ctx)
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range loaded.Pending {
			switch m.To {
			case as.UserID:
				reports++
			case as.RootID:
				reports++ // it makes another report
			}
		}
		if reports == 0 || slices.IndexFunc(loaded.Pending, func(m store.Message) bool { return m.To == as.UserID }) < 0 {
			t.Fatalf("the report to user is not pending after the kill: %+v", loaded.Pending)
		}
	}
	s, st := open()
	for range reports {
		m, err := s.WaitForUserMessage(ctx, nil)
		if err != nil {
			t.Fatalf("the report to user was not delivered after the kill: %v", err)
		}
		if m.From != as.RootID || m.Text() != "the final answer to the requirement" {
			t.Fatalf("delivered %+v (%s), want root's final answer", m, m.Payload)
		}
	}
	shut(s, st)

	// The host had it: reopened again, nothing is pending.
	st2, err := filestore.Open(dir, filestore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	loaded, err := st2.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded.Pending) != 0 {
		t.Fatalf("%d messages pending after the host claimed the report: %+v", len(loaded.Pending), loaded.Pending)
	}
}

// userKillChild runs a society on dir whose process is killed when the
// report to user reaches the user endpoint.
func userKillChild(t *testing.T, dir string) {
	ctx := context.Background()
	st, err := filestore.Open(dir, filestore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s, err := as.New(ctx, as.Config{Store: st, Logger: slog.New(killOnRecord{"message to user"}), Root: answerUser})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubmitRequirement(ctx, "the requirement"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Minute) // the kill comes long before
	t.Fatal("the report never reached the user endpoint")
}

// Each way the host can have a message to user ends it in the store; until
// then it is pending.
func TestUserMessage_PendingUntilTheHostHasIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	pending := func(mem store.Store) int {
		st, err := mem.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Pending)
	}
	t.Run("waiter", func(t *testing.T) {
		mem := durable{store.NewMemory()}
		s := newSociety(t, as.Config{Store: mem, Root: answerUser})
		if _, err := s.SubmitRequirement(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the report pending, and nothing else", func() bool {
			st, err := mem.Load(ctx)
			return err == nil && len(st.Pending) == 1 && st.Pending[0].To == as.UserID
		})
		if _, err := s.WaitForUserMessage(ctx, nil); err != nil {
			t.Fatal(err)
		}
		// Claimed from the inbox, its end is recorded before the claim
		// returns; handed to a waiter, just after.
		waitFor(t, "nothing pending once the host claimed the report", func() bool { return pending(mem) == 0 })
	})
	t.Run("callback", func(t *testing.T) {
		mem := durable{store.NewMemory()}
		s := newSociety(t, as.Config{Store: mem, Root: answerUser})
		got := make(chan as.Message, 1)
		s.OnUserMessage(func(m as.Message) { got <- m })
		if _, err := s.SubmitRequirement(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		<-got
		waitFor(t, "nothing pending once the callback ran", func() bool { return pending(mem) == 0 })
	})
	t.Run("console", func(t *testing.T) {
		mem := durable{store.NewMemory()}
		var console consoleBuffer
		s := newSociety(t, as.Config{Store: mem, Root: answerUser, UserConsole: &console})
		if _, err := s.SubmitRequirement(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the report on the console and nothing pending", func() bool {
			return strings.Contains(console.String(), "the final answer") && pending(mem) == 0
		})
	})
}

// errorCounter is a log handler that counts the Error-level records with
// message msg.
type errorCounter struct {
	msg string
	n   atomic.Int64
}

func (h *errorCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *errorCounter) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *errorCounter) WithGroup(string) slog.Handler            { return h }
func (h *errorCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelError && r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}

// consoleBuffer is a console safe to read while the society writes it.
type consoleBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (c *consoleBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.Write(p)
}

func (c *consoleBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// durable is a store.Memory that does not say it is volatile.
type durable struct{ store.Store }

// When the user inbox overflows, the host is told how many messages were
// dropped: a counter, and an Error-level record for each.
func TestUserMessage_OverflowIsCountedAndLogged(t *testing.T) {
	ctx := context.Background()
	rec := &errorCounter{msg: "user inbox full: dropped the oldest unclaimed message"}
	s := newSociety(t, as.Config{Logger: slog.New(rec), UserInbox: 2})
	lead, _ := hostLead(t, s, "t", "worker")
	for i := range 5 {
		if _, err := lead.SendText(ctx, as.UserID, "report "+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "three messages dropped", func() bool { return s.DroppedUserMessages() == 3 })
	if n := rec.n.Load(); n != 3 {
		t.Fatalf("%d Error-level records of dropped messages, want 3", n)
	}
	for _, want := range []string{"report 3", "report 4"} {
		m, err := s.WaitForUserMessage(ctx, nil)
		if err != nil || m.Text() != want {
			t.Fatalf("WaitForUserMessage = %q, %v; want %q", m.Text(), err, want)
		}
	}

	// Messages the host had on its console are no loss when they leave
	// the inbox.
	var console consoleBuffer
	s = newSociety(t, as.Config{Logger: slog.New(rec), UserInbox: 2, UserConsole: &console})
	lead, _ = hostLead(t, s, "t", "worker")
	for i := range 5 {
		if _, err := lead.SendText(ctx, as.UserID, "report "+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "five reports on the console", func() bool { return strings.Count(console.String(), "report ") == 5 })
	if n := s.DroppedUserMessages(); n != 0 {
		t.Fatalf("%d messages the host had on its console counted as dropped", n)
	}
}

// On a volatile store the reports the host never had are queued again at
// Close, and a society reopened on the store in the same process delivers
// them.
func TestUserMessage_UnclaimedOutliveCloseOnAVolatileStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	mem := store.NewMemory()
	leaveReportUnclaimed(ctx, t, mem)
	s, err := as.New(ctx, as.Config{Store: mem, Logger: quiet, Root: answerUser})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	m, err := s.WaitForUserMessage(ctx, nil)
	if err != nil || m.Text() != "the final answer to x" {
		t.Fatalf("after reopening: %q, %v; want the report", m.Text(), err)
	}
}

// leaveReportUnclaimed runs a society on mem that answers a requirement
// to user, and closes it with the answer in the user inbox, unclaimed.
func leaveReportUnclaimed(ctx context.Context, t *testing.T, mem store.Store) {
	t.Helper()
	s, err := as.New(ctx, as.Config{Store: mem, Logger: quiet, Root: answerUser})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubmitRequirement(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the report in the user inbox", func() bool { return rootReportInInbox(ctx, s) })
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// rootReportInInbox reports whether s's user inbox holds a message from
// root: the filter of a WaitForUserMessage that gives up at once sees the
// inbox without claiming anything.
func rootReportInInbox(ctx context.Context, s *as.Society) bool {
	found := false
	done, cancel := context.WithCancel(ctx)
	cancel()
	s.WaitForUserMessage(done, func(m as.Message) bool { found = found || m.From == as.RootID; return false })
	return found
}

// TestConfigOnUserMessage_HasTheRestoredMessages: a callback given in
// Config is registered before the society restores its store, so it is
// called with the messages to user the store held pending, which a
// callback registered after New would miss. The host has them: a society
// opened again does not deliver them again.
func TestConfigOnUserMessage_HasTheRestoredMessages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	mem := store.NewMemory()
	leaveReportUnclaimed(ctx, t, mem)
	got := make(chan as.Message, 1)
	s, err := as.New(ctx, as.Config{Store: mem, Logger: quiet, Root: answerUser, OnUserMessage: func(m as.Message) { got <- m }})
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, got, "the restored report"); m.Text() != "the final answer to x" {
		t.Fatalf("the callback got %q, want the report", m.Text())
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := mem.Load(ctx); err != nil || len(st.Pending) != 0 {
		t.Fatalf("after the callback had it, the store holds %d pending messages (%v), want none", len(st.Pending), err)
	}
}

// TestWaitForUserMessage_PanickingFilter: a filter that panics returns the
// panic to its caller as ErrInvalidArgument and is logged; the endpoint
// keeps working: the message it looked at goes on to another waiter or
// the inbox, other waiters get their messages, and later messages arrive.
func TestWaitForUserMessage_PanickingFilter(t *testing.T) {
	ctx := context.Background()
	logs := &logRecorder{}
	s := newSociety(t, as.Config{Logger: slog.New(logs)})
	say := func(text string) { sendAs(t, s, as.RootID, as.UserID, text) }
	text := func(m as.Message) string { return m.Text() }

	// A filter that panics on a message already in the inbox, or on one
	// that comes while it waits: the message stays for the next call.
	say("first")
	if _, err := s.WaitForUserMessage(ctx, func(as.Message) bool { panic("filter bug") }); err == nil || !strings.Contains(err.Error(), "filter bug") {
		t.Fatalf("the panicking filter's call returned %v", err)
	} else {
		wantCode(t, err, as.ErrInvalidArgument)
	}
	if m, err := s.WaitForUserMessage(ctx, nil); err != nil || text(m) != "first" {
		t.Fatalf("after the panic, got %q, %v; want first", text(m), err)
	}

	// Two waiters, one whose filter panics on all but the marker. Each
	// signals when its filter sees the marker: by then it is registered.
	seen := make(chan string, 2)
	type result struct {
		m   as.Message
		err error
	}
	panicky, picky := make(chan result, 1), make(chan result, 1)
	go func() {
		m, err := s.WaitForUserMessage(ctx, func(m as.Message) bool {
			if text(m) == "marker" {
				seen <- "panicky"
				return false
			}
			panic("filter bug")
		})
		panicky <- result{m, err}
	}()
	go func() {
		m, err := s.WaitForUserMessage(ctx, func(m as.Message) bool {
			if text(m) == "marker" {
				seen <- "picky"
				return false
			}
			return text(m) == "second"
		})
		picky <- result{m, err}
	}()
	say("marker")
	recv(t, seen, "a waiter seeing the marker")
	recv(t, seen, "the other waiter seeing the marker")
	say("second")
	if r := recv(t, picky, "the picky waiter"); r.err != nil || text(r.m) != "second" {
		t.Fatalf("the picky waiter got %q, %v", text(r.m), r.err)
	}
	say("third") // the panicky waiter, if "second" went to the picky one first
	if r := recv(t, panicky, "the panicky waiter"); r.err == nil {
		t.Fatalf("the panicky waiter got %q", text(r.m))
	} else {
		wantCode(t, r.err, as.ErrInvalidArgument)
	}
	for _, want := range []string{"marker", "third"} {
		if m, err := s.WaitForUserMessage(ctx, nil); err != nil || text(m) != want {
			t.Fatalf("got %q, %v; want %s", text(m), err, want)
		}
	}
	say("fourth")
	if m, err := s.WaitForUserMessage(ctx, func(m as.Message) bool { return text(m) == "fourth" }); err != nil || text(m) != "fourth" {
		t.Fatalf("a later message: got %q, %v", text(m), err)
	}
	if n := len(logs.records("WaitForUserMessage filter panicked; its caller gets the error")); n < 2 {
		t.Errorf("%d panics logged, want 2 or more", n)
	}
}

// TestOnUserMessage_NotCalledOnceUnregistered: once unregister has
// returned, the callback is not called again, even with a message whose
// delivery had begun: a callback that forwards to a channel its host
// stops reading once it unregistered would otherwise block the endpoint,
// and Close with it.
func TestOnUserMessage_NotCalledOnceUnregistered(t *testing.T) {
	s := newSociety(t, as.Config{})
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	s.OnUserMessage(func(as.Message) { // the first callback holds the delivery
		entered <- struct{}{}
		<-release
	})
	var unregistered, calledAfter atomic.Bool
	unregister := s.OnUserMessage(func(as.Message) {
		if unregistered.Load() {
			calledAfter.Store(true)
		}
	})
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "", nil).ID)
	if _, err := lead.SendText(ctx, as.UserID, "hello"); err != nil {
		t.Fatal(err)
	}
	recv(t, entered, "the first callback to have the message")
	unregister()
	unregistered.Store(true)
	close(release)
	userMessage(t, s) // the delivery is over once the inbox has it
	if calledAfter.Load() {
		t.Fatal("a callback was called after its unregister returned")
	}
}

// TestOnUserMessage_Nil: registering a nil callback registers nothing: a
// message to user is not taken as had by it (it counts as dropped when
// the inbox overflows) and no callback panic is logged.
func TestOnUserMessage_Nil(t *testing.T) {
	ctx := context.Background()
	rec := &logRecorder{}
	s := newSociety(t, as.Config{Logger: slog.New(rec), UserInbox: 1})
	unregister := s.OnUserMessage(nil)
	lead, _ := hostLead(t, s, "t", "worker")
	for i := range 2 {
		if _, err := lead.SendText(ctx, as.UserID, "report "+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the first report dropped", func() bool {
		return s.DroppedUserMessages() == 1 || len(rec.records("OnUserMessage callback panicked")) > 0
	})
	if n := len(rec.records("OnUserMessage callback panicked")); n > 0 {
		t.Fatalf("a nil callback was called: %d panics logged", n)
	}
	unregister()
	unregister()
}

// TestSubmitRequirement_NilOption: a nil RequirementOption is no option,
// not a panic.
func TestSubmitRequirement_NilOption(t *testing.T) {
	s := newSociety(t, as.Config{})
	if _, err := s.SubmitRequirement(context.Background(), "a calculator", nil, as.WithBudget(as.Budget{}), nil); err != nil {
		t.Fatal(err)
	}
}
