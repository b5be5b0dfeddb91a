package agentsociety_test

import (
	"context"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/store"
)

// TestWatchdog_StalledTask: a worker whose behaviour hangs, with a message
// queued behind, leaves its task with work in flight and nothing handled;
// after Config.StuckAfter user is told, by root, which agent the task waits
// for, and the worker's parent, by the worker; once: the watchdog does not
// look again until the task moves. Released, the task finishes with no
// other report.
func TestWatchdog_StalledTask(t *testing.T) {
	ctx := context.Background()
	parent := newInbox()
	s := newSociety(t, as.Config{Language: as.English, Root: noop, StuckAfter: 100 * time.Millisecond})
	inbox := userInbox(s)
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", parent.behavior()).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "worker"})
	release := make(chan struct{})
	worker := spawnWith(t, s, lead, role.ID, as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if m.Text() == "hang" {
			<-release
		}
		return nil
	}))
	sendAs(t, s, lead.ID(), worker.ID(), "hang")
	sendAs(t, s, lead.ID(), worker.ID(), "then this")

	m := recv(t, inbox, "the stall report to user")
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || m.From != as.RootID || p.Status != as.StatusStalled || m.TaskID != "t" ||
		!strings.Contains(p.Text, worker.ID()+" (worker), busy, with 1 messages queued") {
		t.Fatalf("user got %+v (%s)", m, m.Payload)
	}
	m = parent.next(t)
	if err := m.Decode(&p); err != nil || m.From != worker.ID() || p.Status != as.StatusStalled || !strings.Contains(p.Text, "1 messages queued") {
		t.Fatalf("the parent got %+v (%s)", m, m.Payload)
	}
	var stalls int
	for e, err := range s.Events(ctx, 0) {
		if err == nil && e.Kind == as.EventTaskStalled && e.Task == "t" && e.Count == 1 {
			stalls++
		}
	}
	if stalls != 1 {
		t.Errorf("%d task_stalled events, want 1", stalls)
	}
	waitFor(t, "the watchdog to stop looking", func() bool { return !s.StallWatched("t") })
	close(release)
	waitQuiet(t, s)
	waitFor(t, "the watchdog's last look", func() bool { return !s.StallWatched("t") })
	closeSociety(t, s)
	select {
	case m := <-inbox:
		t.Errorf("a second message to user: %+v (%s)", m, m.Payload)
	case m := <-parent.ch:
		t.Errorf("a second message to the parent: %+v (%s)", m, m.Payload)
	default:
	}
}

// TestWatchdog_StuckRequestIsReportedOnce: a request the watchdog reported
// stuck is not reported again by a society reopened on the store; one made
// after reopening is.
func TestWatchdog_StuckRequestIsReportedOnce(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	parent := newInbox()
	cfg := as.Config{Store: st, Root: noop, StuckAfter: 100 * time.Millisecond, Logger: quiet}
	s, err := as.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", parent.behavior()).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "w"})
	asker := spawnWith(t, s, lead, role.ID, noop)
	silent := spawnWith(t, s, lead, role.ID, noop)
	old, err := asker.RequestCollaboration(ctx, silent.ID(), as.CollaborationRequestPayload{SubtaskDescription: "never answered"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m := parent.next(t); !strings.Contains(m.Text(), old) {
		t.Fatalf("the parent got %+v (%s), want %s reported", m, m.Payload, old)
	}
	closeSociety(t, s)

	parent2 := newInbox()
	cfg.RestoreBehavior = func(a as.Agent, _ as.Role) as.Behavior {
		if a.ID == lead.ID() {
			return parent2.behavior()
		}
		return noop
	}
	s2 := newSociety(t, cfg)
	// The old request, were it watched again, would be reported at once,
	// before the new one.
	fresh, err := actorOf(t, s2, asker.ID()).RequestCollaboration(ctx, silent.ID(), as.CollaborationRequestPayload{SubtaskDescription: "also unanswered"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m := parent2.next(t); !strings.Contains(m.Text(), fresh) {
		t.Fatalf("after reopening the parent got %+v (%s), want only %s reported", m, m.Payload, fresh)
	}
	closeSociety(t, s2)
	select {
	case m := <-parent2.ch:
		t.Errorf("another report after reopening: %+v (%s)", m, m.Payload)
	default:
	}
}

// TestQuiet_AfterReopening: a task user wrote to and nothing answered when
// the society stopped is reported quiet by the society reopened on the
// store, with a model to drive root; one that was answered is not.
func TestQuiet_AfterReopening(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	root := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if strings.Contains(m.Text(), "answer me") {
			_, err := self.Send(ctx, as.Outgoing{To: as.UserID, Payload: as.Text("answered")})
			return err
		}
		return nil // code, which the quiet watch leaves alone
	})
	s, err := as.New(ctx, as.Config{Store: st, Root: root, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	inbox := userInbox(s)
	unanswered, err := s.SubmitRequirement(ctx, "ignore me")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubmitRequirement(ctx, "answer me"); err != nil {
		t.Fatal(err)
	}
	recv(t, inbox, "the answer")
	waitQuiet(t, s)
	closeSociety(t, s)

	s2 := newSociety(t, as.Config{Store: st, Model: busyModel(), Logger: quiet})
	m := userMessage(t, s2) // sent as the society opens: waiting for the host
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || p.Status != as.StatusQuiet || m.TaskID != unanswered {
		t.Fatalf("user got %+v (%s), want %s reported quiet", m, m.Payload, unanswered)
	}
	waitQuiet(t, s2)
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	if m, err := s2.WaitForUserMessage(ctx, nil); err == nil {
		t.Errorf("another message to user: %+v (%s)", m, m.Payload)
	}
}

// TestWatchdog_StallOfAMessageHeldByAnotherTasksAgent: the lead of task x
// sends a message on task x to the lead of task y, whose behaviour hangs on
// it, with a second one queued behind. Task x has work in flight and
// nothing handled: user should be told that x stalled.
func TestWatchdog_StallOfAMessageHeldByAnotherTasksAgent(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s := newSociety(t, as.Config{Language: as.English, Root: noop, StuckAfter: 100 * time.Millisecond})
	inbox := userInbox(s)
	lx := rootSpawn(t, s, "x", "lead", "lead", noop)
	ly := rootSpawn(t, s, "y", "lead", "lead", as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if m.Text() == "hang" {
			<-release
		}
		return nil
	}))
	if m := sendAs(t, s, lx.ID, ly.ID, "hang"); m.TaskID != "x" {
		t.Fatalf("the message is on task %q", m.TaskID)
	}
	sendAs(t, s, lx.ID, ly.ID, "then this")
	m := recv(t, inbox, "the report that task x, whose message hangs in "+ly.ID+"'s behaviour, stalled")
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || p.Status != as.StatusStalled || m.TaskID != "x" {
		t.Fatalf("user got %+v (%s)", m, m.Payload)
	}
}

// TestWatchdog_StallOnNoTask: root's handle of no task spawns a worker,
// which is then of no task too, and writes to it; the worker hangs. The
// watchdog finds it among the agents of no task, as it finds a task's own.
func TestWatchdog_StallOnNoTask(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	defer close(release)
	s := newSociety(t, as.Config{Language: as.English, Root: noop, StuckAfter: 100 * time.Millisecond})
	inbox := userInbox(s)
	root := actorOf(t, s, as.RootID)
	role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	worker := spawnWith(t, s, root, role.ID, as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if m.Text() == "hang" {
			<-release
		}
		return nil
	}))
	if worker.TaskID() != "" {
		t.Fatalf("the worker is of task %q", worker.TaskID())
	}
	sendAs(t, s, as.RootID, worker.ID(), "hang")
	m := recv(t, inbox, "the stall report to user")
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || p.Status != as.StatusStalled || m.TaskID != "" || !strings.Contains(p.Text, worker.ID()+" (worker)") {
		t.Fatalf("user got %+v (%s)", m, m.Payload)
	}
}

// TestWatchdog_ForgetsWhomATaskWroteTo: a task's message to an agent of
// another task, which hangs on it, makes the watchdog keep that agent
// among those the task may wait for; once the agent is done with it, the
// watchdog's next look drops it while the task stays busy (a request
// waits an hour), or the task going idle does. With the watchdog off,
// nothing is kept.
func TestWatchdog_ForgetsWhomATaskWroteTo(t *testing.T) {
	for _, c := range []struct {
		name       string
		stuckAfter time.Duration
		busy       bool // task t stays busy, on a request with an hour's timeout
	}{
		{"at the watchdog's look", 50 * time.Millisecond, true},
		{"when the task goes idle", time.Hour, false},
		{"watchdog off", -1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			release := make(chan struct{})
			s := newSociety(t, as.Config{Root: noop, StuckAfter: c.stuckAfter})
			var from *as.Actor
			if c.busy {
				worker, _ := askedInVain(t, s)
				from = worker
			} else {
				from = actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", noop).ID)
			}
			hung := make(chan struct{}, 1)
			other := rootSpawn(t, s, "other", "lead", "lead", as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
				hung <- struct{}{}
				<-release
				return nil
			}))
			if _, err := from.SendText(context.Background(), other.ID, "hang"); err != nil {
				t.Fatal(err)
			}
			recv(t, hung, "the agent of the other task to hang on the message")
			want := 1
			if c.stuckAfter < 0 {
				want = 0
			}
			if got := s.Held()["foreign"]; got != want {
				t.Errorf("while it hangs, the society keeps %d agents of other tasks for the watchdog; want %d", got, want)
			}
			close(release)
			waitFor(t, "the agent of the other task to be dropped", func() bool { return s.Held()["foreign"] == 0 })
		})
	}
}

// TestWatchdog_NoStallForATaskThatOnlyWaitsForATimeout: root hangs on
// user's message of task y; task x has nothing in flight but a request
// with a long timeout. Only y stalled: x waits for its timeout, not for
// root.
func TestWatchdog_NoStallForATaskThatOnlyWaitsForATimeout(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	defer close(release)
	root := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if m.Text() == "hang" {
			<-release
		}
		return nil
	})
	s := newSociety(t, as.Config{Language: as.English, Root: root, StuckAfter: 100 * time.Millisecond})
	inbox := userInbox(s)
	lx := actorOf(t, s, rootSpawn(t, s, "x", "lead", "lead", noop).ID)
	role, _, _ := lx.CreateRole(ctx, as.RoleSpec{Name: "helper"})
	h := spawnWith(t, s, lx, role.ID, noop) // handles the request and answers later
	if _, err := lx.RequestCollaboration(ctx, h.ID(), as.CollaborationRequestPayload{SubtaskDescription: "later"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	y, err := s.SubmitRequirement(ctx, "hang")
	if err != nil {
		t.Fatal(err)
	}
	// x's watchdog was armed before y's, with the same StuckAfter: by the
	// time y is reported stalled, x's has looked at least once.
	for {
		m := recv(t, inbox, "the report that task y stalled")
		var p as.StatusReportPayload
		if m.Decode(&p) != nil || p.Status != as.StatusStalled {
			continue
		}
		if m.TaskID != y {
			t.Fatalf("task %s, which only waits for a timeout, was reported stalled: %s", m.TaskID, p.Text)
		}
		return
	}
}

// TestWatchdog_AMessageToUserIsNoProgress: a lead told that its worker
// stalled tells user so. That message's delivery to user is not the task
// moving: the worker still hangs, and the stall, reported once, is not
// reported again, where each such message started a new episode, reported
// StuckAfter later, which the lead told user of again, for as long as the
// worker hung.
func TestWatchdog_AMessageToUserIsNoProgress(t *testing.T) {
	ctx := context.Background()
	const after = 50 * time.Millisecond
	s := newSociety(t, as.Config{Root: noop, StuckAfter: after, Logger: quiet})
	inbox := userInbox(s)
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		var p as.StatusReportPayload
		if m.Decode(&p) == nil && p.Status == as.StatusStalled {
			_, err := self.SendText(ctx, as.UserID, "my worker is stuck; I am waiting for it")
			return err
		}
		return nil
	})).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "worker"})
	release := make(chan struct{})
	defer close(release)
	worker := spawnWith(t, s, lead, role.ID, as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if m.Text() == "hang" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}))
	sendAs(t, s, lead.ID(), worker.ID(), "hang")
	stalls := 0
	for told := false; !told; {
		m := recv(t, inbox, "the stall report and the lead's message to user")
		var p as.StatusReportPayload
		if m.Decode(&p) == nil && p.Status == as.StatusStalled {
			stalls++
		}
		told = m.From == lead.ID()
	}
	// The watchdog looks again once, for the report to the lead, and
	// then no more; a second report would come within two looks.
	waitFor(t, "the watchdog to stop looking", func() bool { return !s.StallWatched("t") })
	for deadline := time.Now().Add(4 * after); time.Now().Before(deadline); {
		select {
		case m := <-inbox:
			var p as.StatusReportPayload
			if m.Decode(&p) == nil && p.Status == as.StatusStalled {
				stalls++
			}
		case <-time.After(time.Until(deadline)):
		}
	}
	if stalls != 1 {
		t.Errorf("user was told %d times that the task stalled, for one worker that hung once", stalls)
	}
}

// BenchmarkWaitingFor measures what the watchdog and the report of a quiet
// task spend, with the society's lock held, finding the agents a task
// waits for: a task of three agents, one of them hanging with a message in
// hand, on a society that holds only the idle leads of spawnParents other
// tasks ("alone", the baseline), or spawnScale idle agents of theirs too.
func BenchmarkWaitingFor(b *testing.B) {
	for _, c := range []struct {
		name   string
		others int
	}{{"alone", 0}, {"beside-100000", spawnScale}} {
		b.Run(c.name, func(b *testing.B) {
			s, parents, roles, err := idleSociety(c.others + spawnParents + 4)
			if err != nil {
				b.Fatal(err)
			}
			defer closeSociety(b, s)
			if err := spawnIdle(parents, roles, idleBrief(), c.others); err != nil {
				b.Fatal(err)
			}
			release, hung := make(chan struct{}), make(chan struct{})
			defer close(release)
			lead := actorOf(b, s, rootSpawn(b, s, "t", "lead", "lead", noop).ID)
			role, _, err := lead.CreateRole(context.Background(), as.RoleSpec{Name: "worker"})
			if err != nil {
				b.Fatal(err)
			}
			spawnWith(b, s, lead, role.ID, noop)
			w := spawnWith(b, s, lead, role.ID, as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
				close(hung)
				<-release
				return nil
			}))
			sendAs(b, s, lead.ID(), w.ID(), "hang")
			recv(b, hung, "the worker to hang")
			b.ResetTimer()
			cpu := startCPU(b)
			for range b.N {
				if stalled, unreported := s.WaitingFor("t"); stalled != 1 || unreported != 3 {
					b.Fatalf("the task waits for %d agents holding its messages and %d that have not reported; want 1 and 3", stalled, unreported)
				}
			}
			cpu.report()
		})
	}
}
