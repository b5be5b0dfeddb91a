package agentsociety

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"time"

	"agentsociety/store"
)

// Delivery: each agent with messages queued has one drainer goroutine,
// which hands them to the agent's behaviour one at a time, in the order
// they were queued, and stops when the queue is empty. An idle agent has no
// goroutine. The mailbox knows whether a drainer runs (see
// internal/mailbox), so the send that finds none starts one. A drainer
// whose queue is empty yields once before it looks again and stops, so
// that an answer to what it just handled, which often comes meanwhile,
// needs no new goroutine.

// enqueue queues m for a and reports whether a needs a drainer, which the
// caller starts with startDrainer once it has released s.mu; the drainer is
// counted in s.wg already, so that Close waits for it. Called with s.mu
// held, by a change's commit; once the society is closed the message stays
// queued and no drainer starts (a durable store keeps it pending; Close
// records a volatile store's queue).
func (s *Society) enqueue(a *agent, m *Message) (start bool) {
	if s.queue(a, m) && !s.closed.Load() {
		s.wg.Add(1) // counted now, started by startDrainer once s.mu is released
		return true
	}
	return false
}

// queue puts m in a's mailbox, counted as work of its task, and reports
// whether a needs a drainer started. Called with s.mu held.
func (s *Society) queue(a *agent, m *Message) (start bool) {
	if a != s.user.self {
		t := s.busier(m.TaskID)
		if a.info.TaskID != m.TaskID && s.cfg.StuckAfter >= 0 { // for the watchdog only
			if t.foreign == nil {
				t.foreign = make(map[*agent]struct{})
			}
			t.foreign[a] = struct{}{}
		}
	}
	return a.inbox().Push(m)
}

// startDrainer starts the drainer of a that enqueue (or goexited) counted. Called with
// s.mu released: starting a goroutine need not hold up every other change.
func (s *Society) startDrainer(a *agent) {
	go s.run(func() { s.drain(a) })
}

// goFunc runs f in a new goroutine that Close waits for. Every goroutine of
// the society starts here, in armTimeout, or in startDrainer; and it is
// counted in s.wg before Close can wait: here and in armTimeout with s.mu
// held and s.closed false, by enqueue likewise for startDrainer, or by
// goexited while the drainer it replaces is still counted.
func (s *Society) goFunc(f func()) {
	s.wg.Add(1)
	go s.run(f)
}

// run runs f and marks one goroutine of s.wg done.
func (s *Society) run(f func()) {
	defer s.wg.Done()
	f()
}

// drain handles a's messages one at a time until a's queue is empty or the
// society closes.
func (s *Society) drain(a *agent) {
	box := a.inbox()
	var done idleTask
	defer func() {
		if done.set {
			s.mu.Lock()
			s.idler(done.task)
			s.mu.Unlock()
		}
	}()
	for !s.closed.Load() {
		if box.Len() == 0 {
			// Let the agents just sent to run first: an answer that
			// comes meanwhile is handled here, without a new goroutine.
			runtime.Gosched()
		}
		m, ok := box.Next()
		if !ok {
			return
		}
		if !s.deliver(a, m, &done) {
			return // another drainer goes on (see goexited)
		}
	}
	box.Stop()
}

// idleTask is the task of the message a drainer handled last, whose end
// is counted (see idler) when the drainer next takes s.mu: with the next
// message's, or as it stops. A delivery then takes the lock once.
type idleTask struct {
	task string
	set  bool
}

// deliver hands m, addressed to a, to a's behaviour and records that its
// handling ended, with the history of a model-driven agent's turn, so that
// after a crash the message is handled again from the history before it.
// The user endpoint records the end of its messages itself, when the host
// has them (see userEndpoint). It reports false when the drainer is to stop
// because another took its place (see goexited).
func (s *Society) deliver(a *agent, m *Message, done *idleTask) bool {
	ctx := s.runCtx
	s.logMessage(ctx, "message delivered", m)
	start := s.emitDelivered(m)
	report := reportStatus(m) == StatusStalled // the watchdog's report of a stall
	s.mu.Lock()
	if done.set {
		s.idler(done.task)
		done.set = false
	}
	s.touch(m, report)
	status, handoff := a.info.Status, s.handoffs[a.info.ID] == m.ID
	s.mu.Unlock()
	var err error
	if status == StatusTerminated {
		s.dropped(ctx, slog.LevelInfo, a, m.ID, "message dropped: the agent was terminated")
	} else {
		err = s.handle(ctx, a, m, start)
		if err == errHandedOver {
			return false
		}
	}
	if s.ended(a, m, start, handoff, err) && a != s.user.self {
		*done = idleTask{m.TaskID, true}
	}
	return true
}

// errGoexit is the error a handling ends with when the behaviour, or the
// model or a tool it calls, calls runtime.Goexit, as t.FailNow does in a
// test helper.
var errGoexit = errors.New("runtime.Goexit was called (t.FailNow and t.SkipNow call it)")

// errHandedOver is what handle returns when its behaviour stopped as if
// it called runtime.Goexit, and yet handle returns: a panic(nil) that a
// host's GODEBUG=panicnil=1 lets recover take for no panic. goexited ended
// the delivery and started another drainer, so this one stops.
var errHandedOver = errors.New("handed over to another drainer")

// goexited ends the delivery of m to a, started at start, whose behaviour
// called runtime.Goexit. The drainer's goroutine ends whatever its deferred
// calls do, so the handling ends here, failed with errGoexit as a panic's
// fails, and a new drainer takes up the rest of a's queue.
func (s *Society) goexited(a *agent, m *Message, start int64) {
	s.mu.Lock()
	handoff := s.handoffs[a.info.ID] == m.ID
	s.mu.Unlock()
	if s.ended(a, m, start, handoff, errGoexit) && a != s.user.self {
		s.mu.Lock()
		s.idler(m.TaskID)
		s.mu.Unlock()
	}
	// This goroutine is counted in s.wg until its deferred calls end, so
	// Close cannot be past its Wait; once the society is closed, the new
	// drainer stops at once and leaves the queue as it is.
	s.wg.Add(1)
	s.startDrainer(a)
}

// ended records that the handling of m by a, started at start, ended with
// err, reports a failure to a's parent, and finishes a's termination if m
// was its handoff. It reports false if Close cut the handling short: then
// nothing is recorded, and the message is handled again on reopening.
func (s *Society) ended(a *agent, m *Message, start int64, handoff bool, err error) bool {
	ctx := s.runCtx
	if ctx.Err() != nil || s.closed.Load() && errors.Is(err, ErrClosed) {
		return false
	}
	s.handled(ctx, a, m.ID)
	s.emitHandled(m, start, err)
	if err != nil && !errors.Is(err, errTold) { // the budget's running out was reported, once
		s.reportFailure(a, *m, err)
	}
	if handoff {
		if err := s.finishTermination(ctx, a); err != nil && !errors.Is(err, ErrClosed) {
			s.log.LogAttrs(ctx, slog.LevelError, "recording a termination failed; the agents stay terminating until the society is opened again",
				slog.String("agent", a.info.ID), slog.String("err", err.Error()))
		}
	}
	return true
}

// emitDelivered adds to the event log that a starts handling m, which is
// addressed to a, and returns the time it started, in Unix nanoseconds.
func (s *Society) emitDelivered(m *Message) int64 {
	return s.events.addMessage(entryDelivered, m, "", 0)
}

// emitHandled adds to the event log that the agent m is addressed to
// finished handling it, which it started at start (Unix nanoseconds), with
// err.
func (s *Society) emitHandled(m *Message, start int64, err error) {
	if s.events.off {
		return
	}
	if err == nil {
		s.events.addMessage(entryHandled, m, "", start)
		return
	}
	code, detail := toolError(err).Code, err.Error()
	s.events.add(func(e *Event) {
		e.Kind, e.Task, e.Agent, e.Turn, e.Duration, e.Code, e.Detail = EventMessageHandled, m.TaskID, m.To, m.ID, time.Duration(e.Time.UnixNano()-start), code, detail
	})
}

// handled records that the handling of message id by a ended, with the
// history of a model-driven agent's turn. Nothing is recorded for a
// code-driven agent on a volatile store.
func (s *Society) handled(ctx context.Context, a *agent, id string) {
	var done store.Change
	if !s.volatile && a != s.user.self {
		done.Finished = []string{id}
	}
	h, grew := a.mind.record(a.info.ID)
	switch {
	case grew:
		done.HistoryAppends = []store.HistoryAppend{h}
	case done.Finished != nil:
		s.finishing.add(id) // written behind (see finish.go)
		return
	default:
		return // nothing to record
	}
	if err := s.record(ctx, done); err != nil {
		// The history's append is made again, with the next turn's.
		s.log.LogAttrs(ctx, slog.LevelError, "recording a handled message failed",
			slog.String("msg", id), slog.String("agent", a.info.ID), slog.String("err", err.Error()))
		return
	}
	if grew {
		a.mind.recorded()
	}
}

// dropped logs at level that message id to a was not handled, and why.
func (s *Society) dropped(ctx context.Context, level slog.Level, a *agent, id, why string) {
	s.log.LogAttrs(ctx, level, why, slog.String("msg", id), slog.String("agent", a.info.ID))
}

// handle runs a's behaviour on m, whose delivery started at start, turning
// a panic into an error. A behaviour that calls runtime.Goexit ends its
// goroutine: goexited ends the delivery instead, and drains on in another.
func (s *Society) handle(ctx context.Context, a *agent, m *Message, start int64) (err error) {
	b := a.behavior
	if b == nil {
		b = s.cfg.DefaultBehavior
	}
	if s.modelDriven(a) {
		b = modelBehavior{s}
	}
	if b == nil {
		// The host left the agent without a driver (Config.DefaultBehavior).
		s.dropped(ctx, slog.LevelWarn, a, m.ID, "message dropped: the agent has no behaviour")
		return nil
	}
	returned := false
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		} else if !returned { // runtime.Goexit, or a panic(nil) under GODEBUG=panicnil=1
			s.goexited(a, m, start)
			err = errHandedOver
		}
	}()
	d := &delivery{turn: turn{msgID: m.ID}}
	d.actor = Actor{s: s, a: a, taskID: m.TaskID, turn: &d.turn}
	err = b.HandleMessage(ctx, &d.actor, *m)
	returned = true
	return err
}

// delivery is a behaviour's handle with its turn, allocated together.
type delivery struct {
	actor Actor
	turn  turn
}

// reportFailure logs a failed handler and tells the agent's parent (user,
// for root) with a status_report from the agent, so the failure is not lost.
func (s *Society) reportFailure(a *agent, m Message, err error) {
	id := a.info.ID
	s.log.LogAttrs(s.runCtx, slog.LevelError, "handler failed",
		slog.String("agent", id), slog.String("msg", m.ID), slog.String("err", err.Error()))
	parent := a.info.ParentID
	if id == RootID {
		parent = UserID
	}
	if parent == "" {
		return // user: nobody above to tell
	}
	report := StatusReportPayload{Status: string(StatusError), Text: s.lang.failureReport(m, err)}
	if _, serr := s.sendOwn(s.runCtx, &Actor{s: s, a: a, taskID: m.TaskID}, Outgoing{To: parent, Type: StatusReport, Payload: report}); serr != nil {
		s.log.LogAttrs(s.runCtx, slog.LevelWarn, "reporting a failure failed",
			slog.String("agent", id), slog.String("to", parent), slog.String("err", serr.Error()))
	}
}
