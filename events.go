package agentsociety

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"agentsociety/llm"
	"agentsociety/store"
)

// EventKind names what an [Event] records. Kinds are stable strings: they
// are what the event log keeps.
type EventKind string

// The kinds of event, one for each fact the society logs. Each says which
// of the event's fields it sets, besides Seq, Time, Kind and, where there
// is one, Task and Turn.
const (
	// EventTaskSubmitted: a task starts: user's first message to root on it
	// (SubmitRequirement, or SendTextToAgent to root) was accepted; Agent is
	// "user", Detail the requirement. Its message_accepted follows.
	EventTaskSubmitted EventKind = "task_submitted"
	// EventRoleCreated: Agent created role Role, named Name.
	EventRoleCreated EventKind = "role_created"
	// EventAgentSpawned: Agent spawned Target on role Role (named Name).
	EventAgentSpawned EventKind = "agent_spawned"
	// EventMessageAccepted: Message was accepted for delivery, from Agent to
	// Target. Request is set when the message opens or answers a request.
	EventMessageAccepted EventKind = "message_accepted"
	// EventMessageDelivered: Agent starts handling Message; its handling is
	// the turn named Message.ID.
	EventMessageDelivered EventKind = "message_delivered"
	// EventMessageHandled: Agent finished handling Message, after Duration;
	// Code and Detail say why the handling failed, if it did.
	EventMessageHandled EventKind = "message_handled"
	// EventRefused: an operation Name by Agent was refused with Code, for
	// the reason in Detail; nothing changed.
	EventRefused EventKind = "refused"
	// EventModelCallStarted: Agent called the model (attempt Attempt).
	EventModelCallStarted EventKind = "model_call_started"
	// EventModelCallFinished: Agent's model call returned after Duration,
	// with Usage, or failed with Code and Detail.
	EventModelCallFinished EventKind = "model_call_finished"
	// EventThought: Agent's model answered Detail without a tool call; the
	// text reached nobody.
	EventThought EventKind = "thought"
	// EventToolCalled: Agent's tool Name ran with Args, for Duration; Code
	// is the error code of its result when it failed.
	EventToolCalled EventKind = "tool_called"
	// EventArtifactStored: Agent stored artifact Artifact, named Name.
	EventArtifactStored EventKind = "artifact_stored"
	// EventRequestOpened: Agent asked Target for collaboration, in request
	// Request (the message is Message).
	EventRequestOpened EventKind = "request_opened"
	// EventRequestSettled: request Request from Target to Agent ended with
	// Status, answered by Message; Detail says so when the society settled
	// it for Agent (a timeout, or Agent ended).
	EventRequestSettled EventKind = "request_settled"
	// EventStateSet: Agent set key Name of state scope Detail.
	EventStateSet EventKind = "state_set"
	// EventAgentTerminated: Target ended, after its handoff turn, with
	// Count descendants; Agent is its parent.
	EventAgentTerminated EventKind = "agent_terminated"
	// EventConsole: Agent printed Detail to the console.
	EventConsole EventKind = "console"
	// EventBudgetExhausted: the budget named Name ran out of Detail.
	EventBudgetExhausted EventKind = "budget_exhausted"
	// EventLoopDetected: the loop guard refused Agent's message to Target,
	// for the pattern in Detail.
	EventLoopDetected EventKind = "loop_detected"
	// EventRequestStuck: request Request from Agent to Target has waited
	// longer than Config.StuckAfter.
	EventRequestStuck EventKind = "request_stuck"
	// EventTaskQuiet: the task stopped with nothing under way and nothing
	// told to the user; Detail says what it waits for.
	EventTaskQuiet EventKind = "task_quiet"
	// EventTaskStalled: the task had work in flight and no delivery of its
	// messages for Config.StuckAfter; Detail says what it waits for, and
	// Count how many agents.
	EventTaskStalled EventKind = "task_stalled"
)

// Event is one fact of the society's life, numbered in the order the
// society recorded it. Fields that do not apply to a kind are empty; see
// the [EventKind] constants for which apply.
//
// An Event and what it points to are shared by every reader: do not
// modify them.
type Event struct {
	// Seq numbers the events of a society from 1, with no gaps, in the
	// order they happened; a society reopened on a store that keeps its
	// events goes on from the last. After a crash, or a Close that could
	// not write the last events, it goes on past every number given
	// before, lost events included, so that no number is given twice
	// (unless the store had stopped taking events for more than 32,768 of
	// them before the crash): a reader is told of the gap (see
	// MissedEventsError).
	Seq uint64 `json:"seq"`
	// Time is when the event happened, never before the previous
	// event's: a message_accepted's is its message's SentAt, unless that
	// is before the previous event's; the others are the wall clock's
	// time, which the society reads through the monotonic clock (cheaper
	// to read) between readings of the wall clock a second apart. It
	// carries no monotonic clock reading.
	Time time.Time `json:"time"`
	Kind EventKind `json:"kind"`
	// Task is the task the event belongs to, if any.
	Task string `json:"task,omitempty"`
	// Agent is the agent that acted.
	Agent string `json:"agent,omitempty"`
	// Turn is the id of the message whose handling the event happened in,
	// or "" when the host caused it directly. Together with the Turn of a
	// message's EventMessageAccepted, it links each turn to the turn that
	// caused it, across the asynchronous hop of a message.
	Turn string `json:"turn,omitempty"`
	// Target is the other agent involved: a message's receiver, a spawned
	// or terminated agent, the agent asked for collaboration.
	Target string `json:"target,omitempty"`
	Role   string `json:"role,omitempty"`
	Name   string `json:"name,omitempty"`
	// Trace is the host's trace context, a W3C traceparent, that the
	// host's call carried (see WithTrace): on the message_accepted and
	// task_submitted events of a message the host sent.
	Trace string `json:"trace,omitempty"`
	// Message is the message accepted, delivered or refused. It is shared
	// with the society, which hands it to its receiver: read it, never
	// change it.
	Message  *Message        `json:"message,omitempty"`
	Request  string          `json:"request,omitempty"`
	Artifact string          `json:"artifact,omitempty"`
	Status   string          `json:"status,omitempty"`
	Code     Code            `json:"code,omitempty"`
	Detail   string          `json:"detail,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	Usage    *llm.Usage      `json:"usage,omitempty"`
	Attempt  int             `json:"attempt,omitempty"`
	Count    int             `json:"count,omitempty"`
	Duration time.Duration   `json:"duration,omitempty"`
}

// ErrEventsMissed: events a reader asked for are no longer kept; see
// [MissedEventsError].
const ErrEventsMissed Code = "events_missed"

// MissedEventsError is what [Society.Events] yields when the events from
// From on are not kept: because they are older than
// Config.EventRetention, because a reader fell so far behind that they
// were dropped before it read them, or because they were lost with a
// crash (see Event.Seq). The iteration goes on from Oldest, the oldest
// event kept after From. errors.Is(err, ErrEventsMissed) reports true.
type MissedEventsError struct {
	From, Oldest uint64
}

// Error says which events were missed.
func (e *MissedEventsError) Error() string {
	return fmt.Sprintf("%s: events %d to %d are not kept; the oldest kept is %d", ErrEventsMissed, e.From, e.Oldest-1, e.Oldest)
}

// Missed returns how many events were missed.
func (e *MissedEventsError) Missed() uint64 { return e.Oldest - e.From }

// Is reports whether target is ErrEventsMissed.
func (e *MissedEventsError) Is(target error) bool { return target == ErrEventsMissed }

// ErrEventsOff: the society keeps no events (Config.EventRetention is
// below zero), so there are none to read or follow.
const ErrEventsOff Code = "events_off"

// Events returns the events from sequence number from on (1 for all that
// are kept), in order, ending with the newest event there is when the
// iteration reaches it. [Society.WatchEvents] follows the society live
// instead.
//
// Events older than what is kept in memory are read from the store, if it
// keeps events (store.EventLog); those it does not keep either are
// reported with a [MissedEventsError], and the iteration goes on from the
// oldest kept. An error reading the store ends the iteration, and so does
// one with code [ErrEventsOff], the only thing a society that keeps no
// events yields. It is safe to call from any goroutine, and a slow reader
// never holds the society up.
func (s *Society) Events(ctx context.Context, from uint64) iter.Seq2[Event, error] {
	return s.events.read(ctx, from, nil)
}

// WatchEvents is [Society.Events], except that after the newest event it
// waits for the next ones, until ctx ends or the society has closed. Once
// Close has begun, the iteration ends when the handlers and changes Close
// waits for have returned and every event they logged was yielded: the
// last events of a turn under way at Close (its message_handled) are in
// the stream.
func (s *Society) WatchEvents(ctx context.Context, from uint64) iter.Seq2[Event, error] {
	return s.events.read(ctx, from, s.halted)
}

// LastEvent returns the sequence number of the newest event, 0 if there is
// none.
func (s *Society) LastEvent() uint64 {
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	return s.events.next - 1
}

// DefaultEventRetention is how many events a society keeps when
// Config.EventRetention is zero.
const DefaultEventRetention = 10_000

// eventLog keeps the newest events in a ring, numbers them, wakes readers,
// and writes them behind to a store that keeps events.
//
// add may be called with s.mu held: the lock order is s.mu, then
// eventLog.mu. Nothing under eventLog.mu calls out.
type eventLog struct {
	mu   sync.Mutex
	ring [][]entry // blocks of ringBlock entries; event seq is at *slot(seq)
	held uint64    // the events the ring holds: it grows to keep, block by block
	base uint64    // the seq of the first event the ring held
	keep uint64    // the retention, read without the lock
	next uint64    // the seq of the next event
	// clock is the events' clock; last is the time of the last event, in
	// Unix nanoseconds: times follow seqs.
	clock clock
	last  int64
	// saved is the last seq the writer has taken for the store; unsaved
	// events after it.
	saved uint64
	// saving is what the writer took and the store does not have yet:
	// readers read there the events of it the ring has dropped since.
	// taken is the buffer the writer takes each batch into.
	saving, taken []Event
	// shut is set once the writer has written the last events, as the
	// society closes: an event after it would be numbered and never
	// stored.
	shut bool
	// wake is closed, and replaced, when an event is added while someone
	// waits on it (watched).
	wake    chan struct{}
	watched bool

	off   bool           // Config.EventRetention < 0: no events
	store store.EventLog // nil when events are kept only in memory
	// states is the society's store, in which the writer records how far
	// the events may have been numbered (see reserve); reserved is that
	// number, the writer's own once the society is open.
	states   store.Store
	reserved uint64
	// skipped are the numbers a reopened society skipped (see resume),
	// from skipFrom to skipTo: no event has them. Set before the writer
	// starts, read by it.
	skipFrom, skipTo uint64
	log              *slog.Logger
	// first is the oldest seq the store keeps; the writer's own.
	first uint64
	// stop asks the writer to write what is left and return; it closes
	// stopped when it has.
	stop, stopped chan struct{}

	// testFollowWait, set by a test before it reads, runs as a follower
	// is about to wait for the next event.
	testFollowWait func()
}

// newEventLog returns a log keeping retention events, writing them to st if
// st is not nil, numbering from next.
func newEventLog(retention int, st store.EventLog, next uint64, log *slog.Logger) *eventLog {
	l := &eventLog{base: next, next: next, saved: next - 1, wake: make(chan struct{}), store: st, log: log, clock: newClock()}
	if retention < 0 {
		l.off = true
		return l
	}
	if retention == 0 {
		retention = DefaultEventRetention
	}
	l.keep = uint64(retention) // the ring grows as events come
	return l
}

// entry is an event as the ring keeps it. The garbage collector scans the
// whole ring at each of its cycles, and the three events of every message
// (accepted, delivered, handled) are most of it: they are kept in a short
// form, the message and what is not in it, with three pointers where an
// Event has seventeen. Every other event is kept whole.
type entry struct {
	seq   uint64
	at    int64 // the event's time, in Unix nanoseconds
	dur   time.Duration
	msg   *Message
	turn  string
	whole *Event
	kind  entryKind
}

// An entryKind says which event an entry holds.
type entryKind uint8

const (
	entryWhole     entryKind = iota // the event is whole
	entryAccepted                   // message_accepted of msg, sent in turn, neither opening nor answering a request
	entryDelivered                  // message_delivered of msg
	entryHandled                    // message_handled of msg, after dur, without an error
)

// event returns the event x holds.
func (x *entry) event() Event {
	if x.kind == entryWhole {
		return *x.whole
	}
	m := x.msg
	e := Event{Seq: x.seq, Time: time.Unix(0, x.at), Task: m.TaskID}
	switch x.kind {
	case entryAccepted:
		e.Kind, e.Agent, e.Turn, e.Target, e.Message = EventMessageAccepted, m.From, x.turn, m.To, m
	case entryDelivered:
		e.Kind, e.Agent, e.Turn, e.Message = EventMessageDelivered, m.To, m.ID, m
	case entryHandled:
		e.Kind, e.Agent, e.Turn, e.Duration = EventMessageHandled, m.To, m.ID, x.dur
	}
	return e
}

// add adds the event fill makes to the log, numbered and stamped with the
// time. fill runs under l.mu, must only set fields, and may read Seq and
// Time.
func (l *eventLog) add(fill func(e *Event)) { l.addAt(0, fill) }

// addAt is add with the event's time given, in Unix nanoseconds, unless at
// is 0. An event's time is never before the previous event's.
func (l *eventLog) addAt(at int64, fill func(e *Event)) {
	if l.off {
		return
	}
	var mono time.Duration
	if at == 0 {
		mono = l.clock.mono()
	}
	e := new(Event)
	l.mu.Lock()
	x := l.push(entry{kind: entryWhole, whole: e}, mono, at)
	if x == nil {
		l.mu.Unlock()
		return
	}
	e.Seq, e.Time = x.seq, time.Unix(0, x.at)
	fill(e)
	l.unlockAndWake()
}

// addMessage adds event kind of message m in the ring's short form:
// entryAccepted at m's time, sent in turn; entryDelivered now;
// entryHandled now, after its delivery at since, the time addMessage
// returned for it. It returns the event's time, or 0 when the log takes no
// event (events are off, or the society has closed).
func (l *eventLog) addMessage(kind entryKind, m *Message, turn string, since int64) int64 {
	if l.off {
		return 0
	}
	var mono time.Duration
	at := int64(0)
	if kind == entryAccepted {
		at = m.SentAt.UnixNano()
	} else {
		mono = l.clock.mono()
	}
	l.mu.Lock()
	x := l.push(entry{kind: kind, msg: m, turn: turn}, mono, at)
	if x == nil {
		l.mu.Unlock()
		return 0
	}
	if kind == entryHandled {
		x.dur = time.Duration(x.at - since)
	}
	at = x.at
	l.unlockAndWake()
	return at
}

// push puts x in the ring, numbered, at time at, or the time of the
// monotonic clock's reading mono when at is 0, and returns where it is, or
// nil if the log takes no more events. Called with l.mu held.
func (l *eventLog) push(x entry, mono time.Duration, at int64) *entry {
	if l.shut {
		return nil
	}
	x.seq = l.next
	l.next++
	if l.held < l.keep {
		if l.held%ringBlock == 0 {
			l.ring = append(l.ring, make([]entry, min(ringBlock, l.keep-l.held)))
		}
		l.held++
	}
	if at == 0 {
		at = l.clock.wall(mono)
	}
	x.at = max(at, l.last)
	l.last = x.at
	e := l.slot(x.seq)
	*e = x
	return e
}

// unlockAndWake releases l.mu, and wakes the readers waiting for an event.
func (l *eventLog) unlockAndWake() {
	var wake chan struct{}
	if l.watched {
		wake = l.wake
		l.wake, l.watched = make(chan struct{}), false
	}
	l.mu.Unlock()
	if wake != nil {
		close(wake)
	}
}

// clock tells the events' times: the wall clock, read through the
// monotonic clock, which costs half as much to read, from a reading of the
// wall clock at most clockAnchor old. Its zero value is not usable: make it
// with newClock.
type clock struct {
	start time.Time // holds the monotonic clock's reading that mono counts from
	// anchorWall is the wall clock's time, in Unix nanoseconds, when the
	// monotonic clock read anchorMono. Guarded by the eventLog's mu.
	anchorWall int64
	anchorMono time.Duration
}

// clockAnchor is how long the clock goes on from one reading of the wall
// clock: long enough that reading it costs nothing, short enough that
// a change of the wall clock shows in the events' times at once.
const clockAnchor = time.Second

func newClock() clock {
	now := time.Now()
	return clock{start: now, anchorWall: now.UnixNano()}
}

// mono reads the monotonic clock. It needs no lock.
func (c *clock) mono() time.Duration { return time.Since(c.start) }

// wall returns the wall clock's time, in Unix nanoseconds, at the
// monotonic clock's reading mono, reading the wall clock again when the
// last reading is older than clockAnchor. Called with the eventLog's mu
// held.
func (c *clock) wall(mono time.Duration) int64 {
	if d := mono - c.anchorMono; d >= 0 && d < clockAnchor {
		return c.anchorWall + int64(d)
	}
	now := time.Now()
	c.anchorWall, c.anchorMono = now.UnixNano(), now.Sub(c.start)
	return c.anchorWall
}

// ringBlock is how many events a block of the ring holds: the ring grows
// by a block at a time, so that it never copies what it holds.
const ringBlock = 256

// slot returns where in the ring event seq is. Called with l.mu held.
func (l *eventLog) slot(seq uint64) *entry {
	i := (seq - l.base) % l.keep
	return &l.ring[i/ringBlock][i%ringBlock]
}

// oldest returns the oldest seq in the ring. Called with l.mu held.
func (l *eventLog) oldest() uint64 { return l.next - l.held }

// fromRing copies into buf the events from seq from on that the ring holds,
// at most cap(buf) of them. It returns the events, the oldest seq kept in
// memory at or before from (from itself when it is), and the channel
// closed at the next event. Events the ring dropped while the writer was
// storing them are read from the writer's batch.
func (l *eventLog) fromRing(from uint64, buf []Event) ([]Event, uint64, chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watched = true
	buf = buf[:0]
	oldest := l.oldest()
	if n := len(l.saving); n > 0 && from < oldest && l.saving[0].Seq < oldest {
		first, last := l.saving[0].Seq, l.saving[n-1].Seq
		switch {
		case from < first:
			return buf, first, l.wake // older ones are the store's
		case from <= last:
			for _, e := range l.saving[from-first:] {
				if e.Seq >= oldest || len(buf) == cap(buf) {
					break
				}
				buf = append(buf, e)
			}
			return buf, from, l.wake
		}
	}
	if from < oldest {
		from = oldest
	}
	for seq := from; seq < l.next && len(buf) < cap(buf); seq++ {
		buf = append(buf, l.slot(seq).event())
	}
	return buf, oldest, l.wake
}

// read yields the events from seq from on; see Society.Events. If follow is
// not nil, it waits for new events until ctx ends or follow is closed.
func (l *eventLog) read(ctx context.Context, from uint64, follow <-chan struct{}) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if from == 0 {
			from = 1
		}
		if l.off {
			yield(Event{}, &Error{Code: ErrEventsOff, Message: "the society keeps no events: its Config.EventRetention is below zero"})
			return
		}
		buf := make([]Event, 0, 256)
		for ctx.Err() == nil {
			batch, oldest, wake := l.fromRing(from, buf)
			if from < oldest {
				var err error
				if from, err = l.fromStore(ctx, from, oldest, yield); err != nil {
					if err != errStopped {
						yield(Event{}, err)
					}
					return
				}
				continue
			}
			for _, e := range batch {
				if !yield(e, nil) {
					return
				}
				from = e.Seq + 1
			}
			if len(batch) > 0 {
				continue
			}
			if follow == nil {
				return
			}
			if l.testFollowWait != nil {
				l.testFollowWait()
			}
			select {
			case <-wake:
			case <-follow:
				// The society stopped: yield what it logged since, then
				// end, whichever of wake and follow this wait picked.
				follow = nil
			case <-ctx.Done():
				return
			}
		}
	}
}

var errStopped = errors.New("stopped") // the reader stopped the iteration

// fromStore yields the events from seq from on, up to the ring's oldest,
// from the store, and returns where the ring takes over. Events the store
// does not have either are reported missed.
func (l *eventLog) fromStore(ctx context.Context, from, oldest uint64, yield func(Event, error) bool) (uint64, error) {
	if l.store != nil {
		evs, err := l.store.ReadEvents(ctx, from, int(min(oldest-from, 1024)))
		if err != nil {
			if ctx.Err() != nil {
				return from, errStopped // the reader's own context ended it
			}
			return from, &Error{Code: ErrStore, Message: "reading events failed", Err: err}
		}
		progressed := false
		for _, r := range evs {
			if r.Seq >= oldest {
				break
			}
			var e Event
			if err := json.Unmarshal(r.Data, &e); err != nil {
				return from, &Error{Code: ErrStore, Message: fmt.Sprintf("event %d does not parse", r.Seq), Err: err}
			}
			if e.Seq > from && from < oldest {
				if !yield(Event{}, &MissedEventsError{From: from, Oldest: e.Seq}) {
					return from, errStopped
				}
			}
			if !yield(e, nil) {
				return from, errStopped
			}
			from, progressed = e.Seq+1, true
		}
		if progressed && from < oldest {
			return from, nil // more to read from the store
		}
	}
	if from < oldest {
		if !yield(Event{}, &MissedEventsError{From: from, Oldest: oldest}) {
			return from, errStopped
		}
	}
	return oldest, nil
}

// openEventLog returns the society's event log: kept in memory, and written
// behind to the store if it keeps events and is not volatile. Its numbering
// goes on from the store's last event.
func openEventLog(ctx context.Context, cfg *Config, volatile bool) (*eventLog, error) {
	st, ok := cfg.Store.(store.EventLog)
	if !ok || volatile || cfg.EventRetention < 0 {
		return newEventLog(cfg.EventRetention, nil, 1, cfg.Logger), nil
	}
	first, last, err := st.EventBounds(ctx)
	if err != nil {
		return nil, fmt.Errorf("agentsociety: reading the store's event bounds: %w", err)
	}
	l := newEventLog(cfg.EventRetention, st, last+1, cfg.Logger)
	l.first = first
	l.stop, l.stopped = make(chan struct{}), make(chan struct{})
	l.states = cfg.Store
	return l, nil
}

// Events are numbered without waiting for the store, so a society that
// stops without writing its last events (a crash, or a store that failed
// the last batch) has given out numbers the store does not know. So that
// a society reopened on the store never gives them out again, the store
// keeps, as a state entry, a number the events may have been numbered up
// to: eventReserve ahead of the last number given out while the society
// runs, and that number itself once it has closed and written them all.
// A society reopened on the store numbers its events from after it; the
// events lost, if any, are then a gap that readers are told of.
const (
	eventsScope  = "events:"
	eventsKey    = "reserved"
	eventReserve = 1 << 16
)

// resume numbers the events from after reserved, the number the store
// says the events may have been numbered up to, if that is past the last
// event the store keeps. Called while the society opens, before any
// event.
func (l *eventLog) resume(reserved uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.store != nil && l.held == 0 && reserved >= l.next {
		l.skipFrom, l.skipTo = l.next, reserved
		l.base, l.next, l.saved = reserved+1, reserved+1, reserved
	}
}

// reserve records in the store that the events may be numbered up to n.
// It runs in New, before the writer starts, and then in the writer's
// goroutine, which then owns l.reserved.
func (l *eventLog) reserve(ctx context.Context, n uint64) error {
	err := l.states.Apply(ctx, store.Change{States: []store.StateEntry{{
		Scope: eventsScope, Key: eventsKey, Value: strconv.AppendUint(nil, n, 10), Writer: RootID, UpdatedAt: time.Now(),
	}}})
	if err == nil {
		l.reserved = n
	}
	return err
}

// reserveAhead records, when the events are numbered close to what the
// store has reserved, a number eventReserve ahead.
func (l *eventLog) reserveAhead(ctx context.Context) error {
	l.mu.Lock()
	next := l.next
	l.mu.Unlock()
	if next+eventReserve/2 < l.reserved {
		return nil
	}
	return l.reserve(ctx, next+eventReserve)
}

// writeBehind writes the events to the store, in batches, until stop is
// closed; then it writes what is left and closes stopped. It trims the
// store to the retention as it goes. It runs in its own goroutine when the
// store keeps events, started by New and stopped by Close once every other
// goroutine of the society has returned.
func (l *eventLog) writeBehind() {
	defer close(l.stopped)
	ctx := context.Background() // the last events are written even as Close gives up waiting
	for {
		batch, lost, wake := l.unsaved(512, false)
		if lost > 0 {
			l.log.LogAttrs(ctx, slog.LevelError, "events dropped before the store had them: the store is slower than the society", slog.Uint64("dropped", lost))
		}
		if len(batch) == 0 {
			select {
			case <-wake:
				continue
			case <-l.stop:
				if batch, _, _ = l.unsaved(512, true); len(batch) == 0 {
					// No event is numbered after these: the next society
					// on the store numbers from here.
					l.mu.Lock()
					last := l.next - 1
					l.mu.Unlock()
					if last != l.reserved {
						if err := l.reserve(ctx, last); err != nil {
							l.log.LogAttrs(ctx, slog.LevelWarn, "recording the last event number failed; the society reopened on the store numbers its events past a gap", slog.String("err", err.Error()))
						}
					}
					return
				}
			}
		}
		l.save(ctx, batch)
		if err := l.reserveAhead(ctx); err != nil {
			l.log.LogAttrs(ctx, slog.LevelWarn, "reserving event numbers failed; after a crash, a reopened society may number events as those it lost", slog.String("err", err.Error()))
		}
	}
}

// Trying a batch of events again after the store failed to append it
// (see save): the first wait, which doubles after each try, and how many
// tries in all: a little over 6 s of trying, or, once the society is
// closing, eventTriesAtEnd tries eventRetryFirst apart.
const (
	eventRetryFirst = 50 * time.Millisecond
	eventTries      = 8
	eventTriesAtEnd = 4
)

// save appends batch to the store, and trims the store to the retention.
// An append that fails is tried again, with the events the store does
// not have yet (it may have appended a part), up to eventTries times in
// all (eventTriesAtEnd once the society is closing); then the batch is
// given up, and the store's log has a gap.
func (l *eventLog) save(ctx context.Context, batch []store.Event) {
	defer func() {
		l.mu.Lock()
		l.saving = nil
		l.mu.Unlock()
	}()
	first, last := batch[0].Seq, batch[len(batch)-1].Seq
	wait := eventRetryFirst
	for tries := 1; len(batch) > 0; tries++ {
		err := l.store.AppendEvents(ctx, batch)
		if err == nil {
			break
		}
		closing := false
		select {
		case <-l.stop:
			closing = true
		default:
		}
		if tries >= eventTries || closing && tries >= eventTriesAtEnd {
			l.log.LogAttrs(ctx, slog.LevelError, "recording events failed; they are kept in memory only", slog.Int("events", len(batch)), slog.Int("tries", tries), slog.String("err", err.Error()))
			return
		}
		if tries == 1 {
			l.log.LogAttrs(ctx, slog.LevelWarn, "recording events failed; trying again", slog.Int("events", len(batch)), slog.String("err", err.Error()))
		}
		if closing {
			time.Sleep(eventRetryFirst) // Close waits for these tries
		} else {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.stop: // the society began closing: try again now
				t.Stop()
			}
			wait *= 2
		}
		if _, kept, err := l.store.EventBounds(ctx); err == nil {
			for len(batch) > 0 && batch[0].Seq <= kept {
				batch = batch[1:]
			}
		}
	}
	l.trim(ctx, first, last)
}

// unsaved returns, encoded for the store, up to n events the store does not
// have yet, and marks them saved; lost counts the events the ring dropped
// before they could be written. wake is closed at the next event. The
// events are encoded after l.mu is released, so that add, which may run
// under s.mu, never waits for the encoding.
//
// With last, called as the society closes, it finds the events all taken
// when there are none left, and the log then takes no more (see shut).
func (l *eventLog) unsaved(n int, last bool) (batch []store.Event, lost uint64, wake chan struct{}) {
	l.mu.Lock()
	if oldest := l.oldest(); l.saved+1 < oldest {
		lost = oldest - l.saved - 1
		l.saved = oldest - 1
	}
	evs := l.taken[:0]
	for seq := l.saved + 1; seq < l.next && len(evs) < n; seq++ {
		evs = append(evs, l.slot(seq).event())
	}
	l.saved += uint64(len(evs))
	l.saving, l.taken = evs, evs
	l.shut = last && len(evs) == 0
	l.watched = true
	wake = l.wake
	l.mu.Unlock()
	var buf []byte // events are encoded one after the other into it, a chunk at a time
	batch = make([]store.Event, 0, len(evs))
	for i := range evs {
		e := &evs[i]
		if cap(buf)-len(buf) < eventChunk/8 {
			buf = make([]byte, 0, eventChunk)
		}
		start := len(buf)
		var ok bool
		if buf, ok = appendEvent(buf, e); !ok {
			// The society checks what it puts in events; keep what encodes.
			_, err := json.Marshal(e)
			data, _ := json.Marshal(Event{Seq: e.Seq, Time: e.Time, Kind: e.Kind, Task: e.Task, Agent: e.Agent, Turn: e.Turn, Detail: fmt.Sprint("the event did not encode: ", err)})
			buf = append(buf, data...)
		}
		batch = append(batch, store.Event{Seq: e.Seq, Data: buf[start:len(buf):len(buf)]})
	}
	return batch, lost, wake
}

// eventChunk is the size of the buffers unsaved encodes events into.
const eventChunk = 32 << 10

// trim trims the store to the retention, once it has the events first to
// last.
func (l *eventLog) trim(ctx context.Context, first, last uint64) {
	if l.first == 0 {
		l.first = first
	}
	kept, after := last-l.first+1, last-l.first+1 // events kept, and kept after the numbers skipped
	if l.skipTo >= l.first {
		kept -= l.skipTo - max(l.skipFrom, l.first) + 1
		after = last - l.skipTo
	}
	if kept > l.keep+l.keep/4 { // trim in steps, not at every batch
		before := last - l.keep + 1
		if after < l.keep { // some of those kept are before the numbers skipped
			before = l.skipFrom - (l.keep - after)
		}
		if err := l.store.TrimEvents(ctx, before); err != nil {
			l.log.LogAttrs(ctx, slog.LevelError, "trimming the store's events failed", slog.Uint64("before", before), slog.String("err", err.Error()))
			return
		}
		l.first = before
	}
}

// close stops the writer, if there is one, and waits until it wrote what
// is left: Close's caller may stop waiting for Close, but Close itself
// finishes only once the store has every event.
func (l *eventLog) close() {
	if l.stop == nil {
		return
	}
	close(l.stop)
	<-l.stopped
}

// emit adds e to the society's event log, numbered and stamped there.
func (s *Society) emit(e Event) {
	s.events.add(func(x *Event) {
		e.Seq, e.Time = x.Seq, x.Time
		*x = e
	})
}

// traceKey is the context key of WithTrace.
type traceKey struct{}

// WithTrace returns a copy of ctx carrying traceparent, the host's own
// trace context in the W3C format ("00-<trace id>-<span id>-<flags>"). A
// message the host sends with such a context (SubmitRequirement,
// SendTextToAgent, an Actor's Send outside a turn) records it on its
// events (Event.Trace), so that a tracer can hang the society's work under
// the host's span; package otel's Inject makes the context from a span.
// The society stores the string and does not check it.
func WithTrace(ctx context.Context, traceparent string) context.Context {
	return context.WithValue(ctx, traceKey{}, traceparent)
}

// TraceFromContext returns the trace context ctx carries (see WithTrace),
// or "": for a host that passes a call on, to another process say.
func TraceFromContext(ctx context.Context) string {
	t, _ := ctx.Value(traceKey{}).(string)
	return t
}

// restoreEvents takes back how far the events may have been numbered,
// reporting whether e says it. Called while the society opens.
func (s *Society) restoreEvents(e store.StateEntry) bool {
	if e.Scope != eventsScope || e.Key != eventsKey {
		return false
	}
	if n, err := strconv.ParseUint(string(e.Value), 10, 64); err == nil {
		s.events.resume(n)
	}
	return true
}
