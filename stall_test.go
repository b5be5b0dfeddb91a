package agentsociety_test

import (
	"context"
	"strings"
	"testing"
	"time"

	as "agentsociety"
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
	s := newSociety(t, as.Config{Root: noop, StuckAfter: 100 * time.Millisecond})
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
