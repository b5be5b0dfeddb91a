package agentsociety

import (
	"cmp"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// The watchdog of tasks (see Config.StuckAfter): while a task has work in
// flight, a timer, one per task, looks every StuckAfter whether a delivery
// of one of its messages began since it last looked. When none did and an
// agent of the task has messages in hand or queued, the task has stalled:
// a behaviour or a tool hangs, or an agent's queue does not move. User is
// told once, and the parent of each agent it waits for, below its lead;
// the next delivery of the task's messages to an agent ends the episode.
// The watchdog's own reports to parents are no activity, so that they do
// not end the episode they report, nor are deliveries to user.

// armStall starts t's watchdog timer, unless the watchdog is off or the
// society is closed. Called with s.mu held: the timer is counted in s.wg
// until it fires or is stopped (stopStall), so that none outlives Close.
func (s *Society) armStall(task string, t *activity) {
	if s.cfg.StuckAfter < 0 || s.closed.Load() {
		return
	}
	s.wg.Add(1)
	t.seen = t.ticks
	t.watch = time.AfterFunc(s.cfg.StuckAfter, func() {
		defer s.wg.Done()
		s.checkStall(task, t)
	})
}

// stopStall stops t's watchdog timer, unless it fired already. Called with
// s.mu held.
func (s *Society) stopStall(t *activity) {
	if t.watch != nil && t.watch.Stop() {
		s.wg.Done()
	}
	t.watch = nil
}

// touch counts the delivery of m, which begins, as activity of its task:
// it ends a stall, and arms the watchdog if it is not. The watchdog's own
// report (report, which the caller works out before it takes s.mu, as that
// decodes m) is no activity, nor is a delivery to user: the host takes
// what user is sent, and the task's agents are where they were (a lead
// that tells user of a stall would otherwise end the stall it tells of,
// to be told of it again). Called with s.mu held.
func (s *Society) touch(m *Message, report bool) {
	t := s.tasks[m.TaskID]
	if t == nil || report || m.To == UserID {
		return
	}
	t.ticks++
	t.stalled = false
	if t.watch == nil && t.busy > 0 {
		s.armStall(m.TaskID, t)
	}
}

// checkStall is t's watchdog timer: it looks again later while task has
// work in flight and moves, and reports it once when it stalled.
func (s *Society) checkStall(task string, t *activity) {
	s.mu.Lock()
	if s.tasks[task] != t || s.closed.Load() {
		s.mu.Unlock()
		return
	}
	t.watch = nil
	if t.busy == 0 || t.stalled {
		s.mu.Unlock()
		return // armed again by its next work
	}
	// Those of other tasks that hold none of its messages now are
	// dropped, so that a task busy for good does not keep every agent it
	// ever wrote to; a new message adds them again.
	for a := range t.foreign {
		if !holds(a, task) {
			delete(t.foreign, a)
		}
	}
	var waiting []*agent
	if t.ticks == t.seen {
		waiting = s.stalledAgents(task, t)
	}
	if len(waiting) == 0 { // it moved, or waits only for a timeout
		s.armStall(task, t)
		s.mu.Unlock()
		return
	}
	t.stalled = true
	type report struct {
		from *agent
		to   string
		text string
	}
	after := s.cfg.StuckAfter.String()
	var parts []string
	var reports []report
	str := &s.lang.Strings
	for _, a := range waiting {
		queued := 0
		if b := a.box.Load(); b != nil {
			queued = b.Len()
		}
		parts = append(parts, expand(str.StalledAgent, "id", a.info.ID, "role", s.lang.shownRole(a.roleName()), "queued", itoa(queued)))
		p := a.info.ParentID
		if p == "" || p == RootID || slices.ContainsFunc(waiting, func(w *agent) bool { return w.info.ID == p }) {
			continue // user is told of the lead; a stalled parent could not read it
		}
		reports = append(reports, report{a, p, expand(str.StalledChild, "id", a.info.ID, "task", task, "after", after, "queued", itoa(queued))})
	}
	reports = append(reports, report{s.agents[RootID], UserID, expand(str.Stalled, "task", task, "after", after, "agents", strings.Join(parts, "; "))})
	s.mu.Unlock()
	ctx := s.runCtx
	s.log.LogAttrs(ctx, slog.LevelWarn, "task stalled", slog.String("task", task), slog.Int("agents", len(waiting)))
	s.emit(Event{Kind: EventTaskStalled, Task: task, Agent: RootID, Count: len(waiting), Detail: reports[len(reports)-1].text})
	for _, r := range reports {
		if _, err := s.sendOwn(ctx, &Actor{s: s, a: r.from, taskID: task}, Outgoing{To: r.to, Type: StatusReport, Payload: StatusReportPayload{Status: StatusStalled, Text: r.text}}); err != nil && !errors.Is(err, ErrClosed) {
			s.log.LogAttrs(ctx, slog.LevelWarn, "reporting a stalled task failed", slog.String("task", task), slog.String("to", r.to), slog.String("err", err.Error()))
		}
	}
}

// stalledAgents returns the agents task, whose activity is t, waits for,
// in the order they were made: those of it, and those of other tasks it
// gave messages to (t.foreign), that hold one of its messages. It looks at
// those agents only, not at the whole society. Called with s.mu held.
func (s *Society) stalledAgents(task string, t *activity) []*agent {
	var out []*agent
	for _, a := range s.taskAgents[task] {
		if holds(a, task) {
			out = append(out, a)
		}
	}
	for a := range t.foreign {
		if holds(a, task) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(x, y *agent) int { return cmp.Compare(x.order, y.order) })
	return out
}

// holds reports whether a has a message of task in hand or queued.
func holds(a *agent, task string) bool {
	b := a.box.Load()
	if b == nil || !b.Busy() {
		return false
	}
	onTask := func(m *Message) bool { return m.TaskID == task }
	m, ok := b.Held()
	return ok && onTask(m) || slices.ContainsFunc(b.Items(), onTask)
}
