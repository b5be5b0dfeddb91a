package agentsociety

import (
	"cmp"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"agentsociety/store"
)

// A task goes quiet when none of its messages is queued or being handled
// and none of its collaboration requests waits for a timeout: nothing more
// happens in it until someone writes to it. A task that goes quiet after
// the user wrote to it, with nothing of it having reached the user since,
// has stopped without an answer, and nobody would know: a model-driven
// agent ended its turn with words that reached nobody, or waits for a
// report that will never come. The society tells the user then, with one
// status_report from root (status "quiet") naming the agents whose last
// turn ended in words that reached nobody, with those words, or, when none
// did, the agents the task waits for: its lead and those that have not
// reported. A task that
// no model-driven agent took part in is left alone: code does what it says.

// StatusQuiet is the status of the report that tells user a task went
// quiet without an answer (see [Society.SubmitRequirement]).
const StatusQuiet = "quiet"

// activity is what the society follows of a task's work, to see it go
// quiet. Guarded by s.mu; a task has one while it is busy or about to be
// reported, and, up to keptQuietTasks, while it is quiet.
type activity struct {
	busy     int               // its messages queued or being handled (not user's), and its request timers armed
	awaiting bool              // user wrote to it, and nothing of it reached user since
	modelled bool              // a model-driven agent handled one of its messages
	mute     map[string]string // agent id -> the words its last turn ended with, which reached nobody
	stuck    bool              // it went quiet unanswered and was reported; until user writes again
	saved    bool              // the store holds that it is awaited (see awaitingEntry)

	// The watchdog's (see stall.go).
	ticks   uint64      // deliveries of its messages begun
	seen    uint64      // ticks when watch was armed
	watch   *time.Timer // fires Config.StuckAfter after it was armed; nil when none is armed
	stalled bool        // reported stalled; until a delivery of its messages begins

	// foreign are the agents of other tasks given a message of it since
	// it was last idle, while the watchdog is on: root, an agent or a
	// collaborator of another task it wrote to, one a host's WithTask
	// handle wrote to. With its own agents (Society.taskAgents), they are
	// those that may hold its messages (see stalledAgents). Each look of
	// the watchdog drops those that hold none.
	foreign map[*agent]struct{}
}

// activityOf returns task's activity, starting one. Called with s.mu held.
func (s *Society) activityOf(task string) *activity {
	t := s.tasks[task]
	if t == nil {
		t = &activity{}
		s.tasks[task] = t
	}
	return t
}

// busier counts one more piece of task's work in flight, and arms the
// watchdog if it is not. It returns the task's activity. Called with s.mu
// held.
func (s *Society) busier(task string) *activity {
	t := s.activityOf(task)
	t.busy++
	if t.watch == nil {
		s.armStall(task, t)
	}
	return t
}

// idler counts one piece of task's work done and, if the task went quiet
// awaited, starts the report to the user. Called with s.mu held.
func (s *Society) idler(task string) {
	t := s.tasks[task]
	if t == nil {
		return
	}
	if t.busy--; t.busy > 0 {
		return
	}
	t.foreign = nil // none holds a message of it
	if l := s.ledgers["task:"+task]; l != nil {
		l.quiet = time.Now() // kept for Retention from now, once it has no agents (see prune.go)
	}
	if !s.hasAgents(task) {
		s.retireTask(task) // it may have ended (see prune.go), reported or not
	}
	if t.awaiting && t.modelled && !s.closed.Load() {
		s.goFunc(func() { s.reportQuiet(task) })
		return
	}
	// Nothing to watch while the task is quiet. Its entry is kept for the
	// next message, so that a busy task does not make and drop one per
	// message, unless the society holds many.
	if len(s.tasks) > keptQuietTasks && !t.saved { // the store's record stays true to it
		s.dropActivity(task, t)
	}
}

// dropActivity forgets t, task's activity, which has nothing in flight,
// and stops its watchdog. Called with s.mu held.
func (s *Society) dropActivity(task string, t *activity) {
	s.stopStall(t)
	if s.tasks[task] == t {
		delete(s.tasks, task)
	}
}

// keptQuietTasks is how many quiet tasks' entries idler keeps.
const keptQuietTasks = 1024

// reachesNobody reports whether a call of the built-in tool name, when it
// succeeds, tells no other agent or person anything.
func reachesNobody(name string) bool {
	switch name {
	case "find_role_by_name", "create_role", "put_artifact", "get_artifact":
		return true
	}
	return false
}

// noteTurn records how a model-driven agent's turn on a message of task
// ended: words that reached nobody (mute, with the words) or not.
func (s *Society) noteTurn(task, agentID string, mute bool, words string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.activityOf(task)
	t.modelled = true
	switch {
	case mute:
		if t.mute == nil {
			t.mute = map[string]string{}
		}
		t.mute[agentID] = clip(words, 300)
	case t.mute != nil:
		delete(t.mute, agentID)
	}
}

// sentToTask updates task's activity for a message accepted: one from user
// awaits an answer, one to user gives it. Called with s.mu held.
func (s *Society) sentToTask(p *pendingSend) {
	m := p.msg
	switch {
	case m.From == UserID:
		t := s.activityOf(m.TaskID)
		t.awaiting, t.stuck = true, false
		t.saved = t.saved || m.TaskID != ""
	case m.To == UserID:
		if t := s.tasks[m.TaskID]; t != nil {
			t.awaiting, t.saved = false, false
			t.mute = nil
			if !p.own {
				t.stuck = false // the task answered after all
			}
		}
	}
}

// The store keeps that a task is awaited (user wrote to it, and nothing of
// it reached user since) as a state entry under this scope prefix and the
// task's id, written only when that changes, so that a society reopened
// on it still tells user when the task goes quiet unanswered.
const (
	awaitingScope = "awaiting:"
	awaitingKey   = "awaiting"
)

// awaiting adds to c, the change accepting p, the record that p's task
// becomes awaited, or stops being, when it does. Called with s.mu held,
// by a check: it changes nothing.
func (s *Society) awaiting(c *change, p *pendingSend) {
	m := p.msg
	if m.TaskID == "" {
		return
	}
	t := s.tasks[m.TaskID]
	saved := t != nil && t.saved
	if (m.From == UserID) == saved || (m.From != UserID && m.To != UserID) {
		return
	}
	e := store.StateEntry{Scope: awaitingScope + m.TaskID, Key: awaitingKey, Writer: RootID, UpdatedAt: m.SentAt}
	if !saved {
		e.Value = []byte("true")
	}
	c.claims = append(c.claims, claimState(e.Scope, e.Key))
	c.record.States = append(c.record.States, e)
}

// restoreAwaiting takes back that a task is awaited, reporting whether e
// says so. Called with s.mu held, while the society opens.
func (s *Society) restoreAwaiting(e store.StateEntry) bool {
	task, ok := strings.CutPrefix(e.Scope, awaitingScope)
	if !ok || e.Key != awaitingKey {
		return false
	}
	t := s.activityOf(task)
	t.awaiting, t.saved = true, true
	return true
}

// watchRestored makes quiet detection work for the tasks awaited when the
// society stopped: a task counts as model-driven when root or one of its
// agents is, and one that is quiet already is reported now. Called with
// s.mu held, once the restored agents have their behaviours.
func (s *Society) watchRestored() {
	var awaited map[string]bool
	for task, t := range s.tasks {
		if t.awaiting {
			if awaited == nil {
				awaited = map[string]bool{}
			}
			awaited[task] = s.modelDriven(s.agents[RootID])
		}
	}
	if awaited == nil {
		return
	}
	for _, a := range s.agents {
		if _, ok := awaited[a.info.TaskID]; ok && s.modelDriven(a) {
			awaited[a.info.TaskID] = true
		}
	}
	for task, modelled := range awaited {
		t := s.tasks[task]
		t.modelled = modelled
		if t.busy == 0 && modelled {
			s.goFunc(func() { s.reportQuiet(task) })
		}
	}
}

// reportQuiet tells user that task went quiet without an answer, if it
// still is: a message may have come meanwhile.
func (s *Society) reportQuiet(task string) {
	s.mu.Lock()
	t := s.tasks[task]
	if t == nil || t.busy > 0 || !t.awaiting {
		s.mu.Unlock()
		return
	}
	var waiting []string
	if len(t.mute) == 0 {
		waiting = s.unreported(task)
	}
	roleOf := func(id string) string {
		if a := s.agents[id]; a != nil {
			return a.roleName()
		}
		return "unknown"
	}
	text := s.lang.quietReport(task, t.mute, waiting, roleOf)
	t.awaiting, t.mute, t.stuck = false, nil, true
	root := &Actor{s: s, a: s.agents[RootID], taskID: task}
	s.mu.Unlock()
	ctx := s.runCtx
	s.log.LogAttrs(ctx, slog.LevelWarn, "task went quiet without an answer", slog.String("task", task))
	s.emit(Event{Kind: EventTaskQuiet, Task: task, Agent: RootID, Detail: text})
	if _, err := s.sendOwn(ctx, root, Outgoing{To: UserID, Type: StatusReport, Payload: StatusReportPayload{Status: StatusQuiet, Text: text}}); err != nil && !errors.Is(err, ErrClosed) {
		s.log.LogAttrs(ctx, slog.LevelWarn, "telling the user of a quiet task failed", slog.String("task", task), slog.String("err", err.Error()))
	}
}

// unreported returns the agents of task, root's child for it first, then
// the others in the order they were made, that have not reported to their
// parent: those the task waits for. Called with s.mu held.
func (s *Society) unreported(task string) []string {
	var out []string
	if id, ok := s.rootKids[task]; ok {
		if a := s.agents[id]; a != nil && a.info.Status == StatusActive {
			out = append(out, id)
		}
	}
	var rest []*agent
	for _, a := range s.taskAgents[task] {
		if a.info.ParentID != RootID && a.info.ID != RootID && a.info.Status == StatusActive && !a.reported {
			rest = append(rest, a)
		}
	}
	slices.SortFunc(rest, func(x, y *agent) int { return cmp.Compare(x.order, y.order) })
	for _, a := range rest {
		out = append(out, a.info.ID)
	}
	return out
}

// clip returns s cut to at most n runes, marked … when cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
