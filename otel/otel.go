// Package otel turns a society's events into OpenTelemetry spans that follow
// the GenAI semantic conventions.
//
// [Follow] watches a live society; [Trace] turns any sequence of events, a
// recorded log read with Society.Events for instance, into the same spans.
// Each task is one trace:
//
//   - invoke_workflow: the task, the root of its trace, from the first event
//     of the task until the task has no turn under way and no message in
//     flight. When the host submitted the task under a span of its own,
//     with a context made by [Inject], the workflow span is that span's
//     child, in the host's trace. A turn of a task that goes on after its
//     workflow span ended (a follow-up message) hangs under that span, in
//     the task's trace; once a few thousand tasks have ended since, the
//     tracer has forgotten the span, and the task goes on under a new
//     workflow span, in a new trace with the same gen_ai.conversation.id.
//   - invoke_agent {role}: a turn, the handling of one message by an agent.
//     Its parent is the turn that sent the message, so a trace shows who
//     caused what across the asynchronous hop of a message; a message the
//     host sent (the requirement, say) hangs under the workflow span, linked
//     to the host's span when it was sent with a context made by Inject. A
//     message sent from another task's turn starts under the workflow span
//     of its own task, linked to the turn that sent it.
//   - chat: a model call, with gen_ai.usage.input_tokens and output_tokens;
//     execute_tool {tool}: a tool call; create_agent {role}: a spawn. They
//     are children of the turn they happened in.
//
// Everything else a turn does (a message sent, an artifact stored, a request
// opened or settled, a refusal, a thought) is an event on the turn's span. A
// failed turn, model call or tool call sets its span's status to Error with
// error.type set to the society's error code.
//
// Spans carry the times of the events, not the time they are exported, so a
// log traced after the fact shows when things happened. Message text, tool
// arguments, thoughts, console output and the text of errors are recorded
// only when Options.RecordContent is set.
//
// This package is the only one of the module that imports OpenTelemetry.
package otel

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"iter"
	"slices"
	"time"

	as "agentsociety"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The attribute names of the OpenTelemetry GenAI semantic conventions this
// package sets. The Go semconv module does not carry them.
const (
	AttrOperationName       = "gen_ai.operation.name"
	AttrAgentID             = "gen_ai.agent.id"
	AttrAgentName           = "gen_ai.agent.name"
	AttrConversationID      = "gen_ai.conversation.id"
	AttrUsageInputTokens    = "gen_ai.usage.input_tokens"
	AttrUsageOutputTokens   = "gen_ai.usage.output_tokens"
	AttrToolName            = "gen_ai.tool.name"
	AttrToolType            = "gen_ai.tool.type"
	AttrToolCallArguments   = "gen_ai.tool.call.arguments" // content: only with RecordContent
	AttrInputMessages       = "gen_ai.input.messages"      // content: only with RecordContent
	AttrErrorType           = "error.type"
	OperationInvokeWorkflow = "invoke_workflow"
	OperationInvokeAgent    = "invoke_agent"
	OperationCreateAgent    = "create_agent"
	OperationChat           = "chat"
	OperationExecuteTool    = "execute_tool"
)

// The attribute names this package sets that the conventions do not name:
// the society's own ids and facts.
const (
	AttrMessageID   = "agentsociety.message.id"
	AttrMessageType = "agentsociety.message.type"
	AttrMessageFrom = "agentsociety.message.from"
	AttrMessageTo   = "agentsociety.message.to"
	AttrParentID    = "agentsociety.parent.id"
	AttrRoleID      = "agentsociety.role.id"
	AttrAttempt     = "agentsociety.attempt"
	AttrRequestID   = "agentsociety.request.id"
	AttrStatus      = "agentsociety.status"
	AttrArtifactID  = "agentsociety.artifact.id"
	AttrName        = "agentsociety.name"
	AttrCode        = "agentsociety.code"
	AttrDetail      = "agentsociety.detail"
	AttrCount       = "agentsociety.count"
	AttrText        = "agentsociety.text" // content: only with RecordContent
	AttrEventSeq    = "agentsociety.event.seq"
	// AttrUnfinished marks a span that was still open when the events
	// ended (the society closed, or the follow stopped): it ends at the
	// time of the last event seen.
	AttrUnfinished = "agentsociety.unfinished"
)

// ScopeName is the instrumentation scope of the tracer this package uses.
const ScopeName = "agentsociety/otel"

// Options configure [Follow] and [Trace].
type Options struct {
	// TracerProvider makes the tracer; nil means the global one
	// (go.opentelemetry.io/otel.GetTracerProvider).
	TracerProvider trace.TracerProvider
	// RecordContent records what models and agents said: message text,
	// tool arguments, thoughts, console output and the requirement, and
	// the text of a failed model call or turn (a provider's or a
	// behaviour's error may quote them), which is otherwise described by
	// its error code alone. It is off by default, as the conventions ask:
	// content may be sensitive.
	RecordContent bool
	// From is the sequence number of the first event to trace; 0 or 1
	// means every event the society keeps. Follow starts watching there;
	// Trace skips the events before it.
	From uint64
}

// Inject returns a copy of ctx that carries the span in ctx to the society
// (see agentsociety.WithTrace), in the W3C trace context format: the task a
// requirement submitted with it opens is traced under that span, and a turn
// a message sent with it causes is linked to it. A ctx without a valid span
// is returned as it is.
func Inject(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return as.WithTrace(ctx, carrier.Get("traceparent"))
}

// hostSpan returns the host's span an event's Trace names, or an invalid
// span context when it names none.
func hostSpan(e as.Event) trace.SpanContext {
	if e.Trace == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": e.Trace})
	return trace.SpanContextFromContext(ctx)
}

// Follow turns the events of s into spans, from Options.From on, as they
// happen, until ctx ends or s is closed; then it ends the spans still open
// and returns. It returns nil when s was closed, ctx.Err() when ctx ended,
// and the error that ended the event stream otherwise: reading a store that
// keeps events failed, or, at once, s keeps no events (an error with code
// agentsociety.ErrEventsOff). Events the society no longer keeps are skipped: a
// turn whose sender was skipped hangs under its task's workflow span.
//
// Run it in its own goroutine, started before the work to trace, and
// read its error once the society is closed:
//
//	followed := make(chan error, 1)
//	go func() { followed <- otel.Follow(ctx, s, otel.Options{}) }()
//	// ... the work, then s.Close(ctx)
//	if err := <-followed; err != nil {
//		log.Print("tracing: ", err)
//	}
func Follow(ctx context.Context, s *as.Society, opts Options) error {
	t := newTracer(opts)
	t.name = func(id string) string {
		if a, ok := s.Agent(id); ok {
			if r, ok := s.Role(a.RoleID); ok {
				return r.Name
			}
		}
		return ""
	}
	next := max(opts.From, 1)
	err := t.consume(s.WatchEvents(ctx, next), &next) // to the society's last event
	t.finish()
	if err != nil {
		return err
	}
	return ctx.Err()
}

// Trace turns events into spans, then ends the spans still open. It returns
// the first error in events other than a [as.MissedEventsError], whose
// events it skips.
func Trace(events iter.Seq2[as.Event, error], opts Options) error {
	t := newTracer(opts)
	next := max(opts.From, 1)
	err := t.consume(events, &next)
	t.finish()
	return err
}

// tracer turns events into spans. It is used by one goroutine.
type tracer struct {
	tr      trace.Tracer
	content bool
	// name returns the role name of an agent it has not seen spawned, or "".
	name func(id string) string

	// What the tracer keeps is what can still be used: a task while
	// something of it is under way, an agent until it is terminated, a
	// turn, message or model call until it ends. A society that runs for
	// months keeps it small.
	tasks    map[string]*taskSpan
	ended    endedTasks                 // the workflow spans of the tasks that ended last
	turns    map[string]*turnSpan       // open turns, by turn (message) id
	sent     map[string]sentBy          // messages accepted and not yet delivered
	queued   map[string][]string        // agent id → the messages in sent to it, in the order accepted
	chats    map[string]trace.Span      // open model calls, by turn id
	roles    map[string]string          // agent id → role name, of the agents seen spawned and not terminated
	children map[string]map[string]bool // agent id → the agents it spawned that are not terminated
	active   map[string]string          // agent id → its open turn
	last     time.Time
}

// taskSpan is the workflow span of a task while something of it is under
// way, or of a task that ended and goes on (done is set then, and span
// records nothing).
type taskSpan struct {
	id   string
	span trace.Span
	sc   trace.SpanContext
	done bool
	open int // turns under way and messages in flight
	last time.Time
}

// endedTasksKept is how many ended tasks the tracer remembers the workflow
// spans of: a turn of a task that goes on later (a follow-up message)
// hangs under its workflow span, in the task's trace, while the task is
// among them, and under a new workflow span, in a new trace, once it is
// not.
const endedTasksKept = 4096

// endedTasks remembers the workflow spans of the last endedTasksKept
// tasks that ended, the oldest first.
type endedTasks struct {
	order list.List // of endedTask
	byID  map[string]*list.Element
}

type endedTask struct {
	id string
	sc trace.SpanContext
}

// get returns the workflow span of ended task id.
func (l *endedTasks) get(id string) (trace.SpanContext, bool) {
	if el, ok := l.byID[id]; ok {
		return el.Value.(endedTask).sc, true
	}
	return trace.SpanContext{}, false
}

// add remembers that task id ended, forgetting the task that ended first
// when there are more than endedTasksKept.
func (l *endedTasks) add(id string, sc trace.SpanContext) {
	if el, ok := l.byID[id]; ok {
		l.order.MoveToBack(el)
		return
	}
	l.byID[id] = l.order.PushBack(endedTask{id, sc})
	if l.order.Len() > endedTasksKept {
		delete(l.byID, l.order.Remove(l.order.Front()).(endedTask).id)
	}
}

type turnSpan struct {
	span  trace.Span
	sc    trace.SpanContext
	task  string
	ts    *taskSpan // task's workflow span, which the turn keeps open
	agent string
	name  string // agent's role name
	by    sentBy // what the turn hangs under and links to
}

// sentBy is what a turn needs of the message that opened it: its parent,
// and a link to the turn of another task that sent it, or to the host's
// span the host sent it under; and the message's receiver and task, which
// it keeps open while in flight.
type sentBy struct {
	parent trace.SpanContext
	link   trace.SpanContext
	to     string
	ts     *taskSpan
}

func newTracer(opts Options) *tracer {
	tp := opts.TracerProvider
	if tp == nil {
		tp = gotel.GetTracerProvider()
	}
	return &tracer{
		tr:       tp.Tracer(ScopeName),
		content:  opts.RecordContent,
		name:     func(string) string { return "" },
		tasks:    map[string]*taskSpan{},
		ended:    endedTasks{byID: map[string]*list.Element{}},
		turns:    map[string]*turnSpan{},
		sent:     map[string]sentBy{},
		queued:   map[string][]string{},
		chats:    map[string]trace.Span{},
		roles:    map[string]string{as.RootID: as.RootID, as.UserID: as.UserID},
		children: map[string]map[string]bool{},
		active:   map[string]string{},
	}
}

// consume records the events from *next on, advancing *next past each.
func (t *tracer) consume(events iter.Seq2[as.Event, error], next *uint64) error {
	for e, err := range events {
		if err != nil {
			if _, missed := errors.AsType[*as.MissedEventsError](err); missed {
				continue
			}
			return err
		}
		if e.Seq < *next {
			continue
		}
		*next = e.Seq + 1
		t.record(e)
	}
	return nil
}

// record turns one event into spans or span events.
func (t *tracer) record(e as.Event) {
	t.last = e.Time
	at := trace.WithTimestamp(e.Time)
	switch e.Kind {
	case as.EventTaskSubmitted:
		ts := t.task(e)
		if t.content {
			ts.span.SetAttributes(attribute.String(AttrInputMessages, inputMessages(e.Detail)))
		}
	case as.EventMessageAccepted:
		t.accepted(e)
	case as.EventMessageDelivered:
		t.delivered(e)
	case as.EventMessageHandled:
		t.handled(e)
	case as.EventModelCallStarted:
		_, span := t.tr.Start(t.under(e), OperationChat, at, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(t.common(e, OperationChat)...),
			trace.WithAttributes(attribute.Int(AttrAttempt, e.Attempt)))
		if old, ok := t.chats[e.Turn]; ok { // its finish was missed
			old.SetAttributes(attribute.Bool(AttrUnfinished, true))
			old.End(at)
		}
		t.chats[e.Turn] = span
	case as.EventModelCallFinished:
		span, ok := t.chats[e.Turn]
		if !ok { // started before the events traced
			_, span = t.tr.Start(t.under(e), OperationChat, trace.WithTimestamp(e.Time.Add(-e.Duration)),
				trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(t.common(e, OperationChat)...))
		}
		delete(t.chats, e.Turn)
		if e.Usage != nil {
			span.SetAttributes(attribute.Int(AttrUsageInputTokens, e.Usage.InputTokens), attribute.Int(AttrUsageOutputTokens, e.Usage.OutputTokens))
		}
		t.fail(span, e.Code, e.Detail)
		span.End(at)
	case as.EventToolCalled:
		_, span := t.tr.Start(t.under(e), OperationExecuteTool+" "+e.Name, trace.WithTimestamp(e.Time.Add(-e.Duration)),
			trace.WithAttributes(t.common(e, OperationExecuteTool)...),
			trace.WithAttributes(attribute.String(AttrToolName, e.Name), attribute.String(AttrToolType, "function")))
		if t.content && len(e.Args) > 0 {
			span.SetAttributes(attribute.String(AttrToolCallArguments, string(e.Args)))
		}
		t.fail(span, e.Code, "")
		span.End(at)
	case as.EventAgentSpawned:
		t.roles[e.Target] = e.Name
		if t.children[e.Agent] == nil {
			t.children[e.Agent] = map[string]bool{}
		}
		t.children[e.Agent][e.Target] = true
		_, span := t.tr.Start(t.under(e), OperationCreateAgent+" "+e.Name, at,
			trace.WithAttributes(
				attribute.String(AttrOperationName, OperationCreateAgent),
				attribute.String(AttrConversationID, e.Task),
				attribute.String(AttrAgentID, e.Target),
				attribute.String(AttrAgentName, e.Name),
				attribute.String(AttrRoleID, e.Role),
				attribute.String(AttrParentID, e.Agent),
				attribute.Int64(AttrEventSeq, int64(e.Seq))))
		span.End(at)
	case as.EventAgentTerminated:
		if span := t.spanOf(e); span != nil {
			span.AddEvent(string(e.Kind), at, trace.WithAttributes(t.eventAttrs(e)...))
		}
		t.terminated(e.Agent, e.Target)
	case as.EventRefused:
		// A refusal names no task or turn: it belongs to the turn its
		// agent has under way, if any.
		if ts := t.turns[t.active[e.Agent]]; ts != nil {
			ts.span.AddEvent(string(e.Kind), at, trace.WithAttributes(t.eventAttrs(e)...))
		}
	default:
		if span := t.spanOf(e); span != nil {
			span.AddEvent(string(e.Kind), at, trace.WithAttributes(t.eventAttrs(e)...))
		}
	}
}

// accepted records that a message was accepted: an event on the turn that
// sent it, and what the turn that will handle it hangs under.
func (t *tracer) accepted(e as.Event) {
	m := e.Message
	if m == nil { // the event did not encode: its delivery is traced as of a message accepted before
		if span := t.spanOf(e); span != nil {
			span.AddEvent(string(e.Kind), trace.WithTimestamp(e.Time), trace.WithAttributes(t.eventAttrs(e)...))
		}
		return
	}
	ts := t.task(e)
	ts.open++
	by := sentBy{parent: ts.sc, link: hostSpan(e), to: m.To, ts: ts}
	if sender := t.turns[e.Turn]; sender != nil {
		if sender.task == m.TaskID {
			by.parent = sender.sc
		} else {
			by.link = sender.sc
		}
	}
	t.sent[m.ID] = by
	t.queued[m.To] = append(t.queued[m.To], m.ID)
	if span := t.spanOf(e); span != nil {
		span.AddEvent(string(e.Kind), trace.WithTimestamp(e.Time), trace.WithAttributes(t.eventAttrs(e)...))
	}
}

// delivered starts the span of the turn that handles e.Message.
func (t *tracer) delivered(e as.Event) {
	m := e.Message
	if m == nil { // the event did not encode: all that is known is the turn
		m = &as.Message{ID: e.Turn, TaskID: e.Task}
	}
	// ts is the workflow span the turn keeps open: where its message was
	// counted when it was accepted, or now.
	var ts *taskSpan
	by, sent := t.sent[m.ID]
	old := t.turns[e.Turn]
	switch {
	case sent:
		t.dequeue(by.to, m.ID, e.Time)
		delete(t.sent, m.ID)
		ts = by.ts
		if old != nil { // a turn of the same id under way: it ended, missed
			t.endTurn(e.Turn, e.Time, "", "", true)
		}
	case old != nil: // delivered again: the first handling never finished
		by, ts = old.by, old.ts
		if t.active[old.agent] == e.Turn {
			delete(t.active, old.agent)
		}
		old.span.SetAttributes(attribute.Bool(AttrUnfinished, true))
		old.span.End(trace.WithTimestamp(e.Time))
	default: // accepted before the events traced
		ts = t.task(e)
		ts.open++
		by.parent = ts.sc
	}
	if prev, ok := t.active[e.Agent]; ok && prev != e.Turn {
		// An agent handles one message at a time: its previous turn
		// ended, and the end was missed. (This turn keeps ts open.)
		t.endTurn(prev, e.Time, "", "", true)
	}
	name := t.role(e.Agent)
	opts := []trace.SpanStartOption{trace.WithTimestamp(e.Time),
		trace.WithAttributes(t.commonNamed(e, OperationInvokeAgent, name)...),
		trace.WithAttributes(
			attribute.String(AttrMessageID, m.ID),
			attribute.String(AttrMessageType, string(m.Type)),
			attribute.String(AttrMessageFrom, m.From))}
	if by.link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: by.link}))
	}
	_, span := t.tr.Start(trace.ContextWithSpanContext(context.Background(), by.parent), spanName(OperationInvokeAgent, name), opts...)
	if t.content && e.Message != nil {
		span.SetAttributes(attribute.String(AttrInputMessages, inputMessages(payloadText(*m))))
	}
	t.turns[e.Turn] = &turnSpan{span: span, sc: span.SpanContext(), task: e.Task, ts: ts, agent: e.Agent, name: name, by: by}
	t.active[e.Agent] = e.Turn
}

// handled ends the span of turn e.Turn, and the task's workflow span when
// nothing of the task is under way any more.
func (t *tracer) handled(e as.Event) {
	if t.turns[e.Turn] != nil {
		t.endTurn(e.Turn, e.Time, e.Code, e.Detail, false)
		return
	}
	// Delivered before the events traced, or its delivery was missed.
	if by, ok := t.sent[e.Turn]; ok { // accepted traced, delivery missed
		t.dequeue(by.to, e.Turn, e.Time)
		delete(t.sent, e.Turn)
		t.settle(by.ts, e.Time)
	}
}

// dequeue takes message id, in flight to agent to, off to's queue. An agent
// is handed its messages one at a time in the order they were accepted:
// those accepted for it before id and still in flight were delivered and
// handled in events that were missed, and stop keeping their tasks open at
// time at.
func (t *tracer) dequeue(to, id string, at time.Time) {
	q := t.queued[to]
	i := slices.Index(q, id)
	if i < 0 {
		return
	}
	for _, old := range q[:i] {
		if by, ok := t.sent[old]; ok {
			delete(t.sent, old)
			t.settle(by.ts, at)
		}
	}
	if q = q[i+1:]; len(q) == 0 {
		delete(t.queued, to)
	} else {
		t.queued[to] = q
	}
}

// endTurn ends the span of turn id at time at, failed with code, and the
// span of its model call if that is still open. unfinished says the
// turn's end was missed. The turn no longer keeps its task open.
func (t *tracer) endTurn(id string, at time.Time, code as.Code, detail string, unfinished bool) {
	turn := t.turns[id]
	if turn == nil {
		return
	}
	delete(t.turns, id)
	if t.active[turn.agent] == id {
		delete(t.active, turn.agent)
	}
	if chat, ok := t.chats[id]; ok { // its finish was missed
		delete(t.chats, id)
		chat.SetAttributes(attribute.Bool(AttrUnfinished, true))
		chat.End(trace.WithTimestamp(at))
	}
	if unfinished {
		turn.span.SetAttributes(attribute.Bool(AttrUnfinished, true))
	}
	t.fail(turn.span, code, detail)
	turn.span.End(trace.WithTimestamp(at))
	t.settle(turn.ts, at)
}

// settle counts one turn or message of ts as no longer under way, and ends
// ts's workflow span at time at when it was the last.
func (t *tracer) settle(ts *taskSpan, at time.Time) {
	if ts.open--; ts.open > 0 {
		return
	}
	if !ts.done {
		ts.span.End(trace.WithTimestamp(at))
	}
	// Nothing of the task is under way: what is kept of it is its
	// workflow span, for a follow-up.
	delete(t.tasks, ts.id)
	t.ended.add(ts.id, ts.sc)
}

// taskID returns the task e belongs to: its message's, or its own.
func taskID(e as.Event) string {
	if e.Message != nil && e.Message.TaskID != "" {
		return e.Message.TaskID
	}
	return e.Task
}

// task returns the workflow span of e's task, to count what e opens in it.
// A task that ended is taken up again under its workflow span, which
// stays ended; a task the tracer does not know gets a workflow span
// starting at e. An event with no task gets a span of its own task "".
func (t *tracer) task(e as.Event) *taskSpan {
	id := taskID(e)
	ts := t.tasks[id]
	if ts == nil {
		if sc, ok := t.ended.get(id); ok {
			ts = &taskSpan{id: id, span: trace.SpanFromContext(trace.ContextWithSpanContext(context.Background(), sc)), sc: sc, done: true}
		} else {
			parent := trace.ContextWithRemoteSpanContext(context.Background(), hostSpan(e))
			_, span := t.tr.Start(parent, OperationInvokeWorkflow, trace.WithTimestamp(e.Time),
				trace.WithAttributes(attribute.String(AttrOperationName, OperationInvokeWorkflow), attribute.String(AttrConversationID, id)))
			ts = &taskSpan{id: id, span: span, sc: span.SpanContext()}
		}
		t.tasks[id] = ts
	}
	ts.last = e.Time
	return ts
}

// workflow returns the workflow span of e's task without taking up a task
// that ended: its span context, and the span while it is open (nil once
// it ended).
func (t *tracer) workflow(e as.Event) (trace.SpanContext, trace.Span) {
	if _, ok := t.tasks[taskID(e)]; !ok {
		if sc, ok := t.ended.get(taskID(e)); ok {
			return sc, nil
		}
	}
	ts := t.task(e)
	if ts.done {
		return ts.sc, nil
	}
	return ts.sc, ts.span
}

// under returns a context holding the span e happened under: its turn, or
// its task's workflow span.
func (t *tracer) under(e as.Event) context.Context {
	if turn := t.turns[e.Turn]; turn != nil {
		return trace.ContextWithSpanContext(context.Background(), turn.sc)
	}
	sc, _ := t.workflow(e)
	return trace.ContextWithSpanContext(context.Background(), sc)
}

// spanOf returns the span an event of e's kind is added to: e's turn, or
// its task's workflow span while that is open, or nil.
func (t *tracer) spanOf(e as.Event) trace.Span {
	if turn := t.turns[e.Turn]; turn != nil {
		return turn.span
	}
	if e.Task == "" && e.Message == nil {
		return nil
	}
	_, span := t.workflow(e)
	return span
}

// terminated forgets agent id and the agents under it, terminated with it;
// parent is id's parent. Their turns still under way end as they do.
func (t *tracer) terminated(parent, id string) {
	if kids := t.children[parent]; kids != nil {
		if delete(kids, id); len(kids) == 0 {
			delete(t.children, parent)
		}
	}
	ids := []string{id}
	for len(ids) > 0 {
		id, ids = ids[len(ids)-1], ids[:len(ids)-1]
		for kid := range t.children[id] {
			ids = append(ids, kid)
		}
		delete(t.children, id)
		if id != as.RootID && id != as.UserID {
			delete(t.roles, id)
		}
	}
}

// common returns the attributes of an operation by e's agent in e's task.
func (t *tracer) common(e as.Event, op string) []attribute.KeyValue {
	if turn := t.turns[e.Turn]; turn != nil && turn.agent == e.Agent {
		return t.commonNamed(e, op, turn.name)
	}
	return t.commonNamed(e, op, t.role(e.Agent))
}

// commonNamed is common for an agent whose role is named name.
func (t *tracer) commonNamed(e as.Event, op, name string) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		attribute.String(AttrOperationName, op),
		attribute.String(AttrConversationID, e.Task),
		attribute.String(AttrAgentID, e.Agent),
		attribute.Int64(AttrEventSeq, int64(e.Seq)),
	}
	if name != "" {
		kv = append(kv, attribute.String(AttrAgentName, name))
	}
	return kv
}

// eventAttrs returns the attributes of a span event for e: the fields e's
// kind sets, content only when it is recorded.
func (t *tracer) eventAttrs(e as.Event) []attribute.KeyValue {
	kv := []attribute.KeyValue{attribute.Int64(AttrEventSeq, int64(e.Seq))}
	add := func(k, v string) {
		if v != "" {
			kv = append(kv, attribute.String(k, v))
		}
	}
	add(AttrAgentID, e.Agent)
	add(AttrName, e.Name)
	add(AttrRoleID, e.Role)
	add(AttrRequestID, e.Request)
	add(AttrArtifactID, e.Artifact)
	add(AttrStatus, e.Status)
	add(AttrCode, string(e.Code))
	if m := e.Message; m != nil {
		add(AttrMessageID, m.ID)
		add(AttrMessageType, string(m.Type))
		add(AttrMessageTo, m.To)
		if t.content {
			add(AttrText, payloadText(*m))
		}
	} else {
		add(AttrMessageTo, e.Target)
	}
	switch e.Kind {
	case as.EventThought, as.EventConsole: // what a model said
		if t.content {
			add(AttrText, e.Detail)
		}
	default:
		add(AttrDetail, e.Detail)
	}
	if e.Count > 0 {
		kv = append(kv, attribute.Int(AttrCount, e.Count))
	}
	return kv
}

// role returns the role name of agent id, or "" when it is not known. The
// name of an agent not seen spawned is asked for each time, not kept: a
// turn keeps its agent's.
func (t *tracer) role(id string) string {
	if name, ok := t.roles[id]; ok {
		return name
	}
	return t.name(id)
}

// finish ends every span still open at the time of the last event seen.
func (t *tracer) finish() {
	at := trace.WithTimestamp(t.last)
	unfinished := attribute.Bool(AttrUnfinished, true)
	for _, span := range t.chats {
		span.SetAttributes(unfinished)
		span.End(at)
	}
	for _, turn := range t.turns {
		turn.span.SetAttributes(unfinished)
		turn.span.End(at)
	}
	for _, ts := range t.tasks {
		if !ts.done {
			if ts.open > 0 {
				ts.span.SetAttributes(unfinished)
				ts.span.End(at)
			} else {
				ts.span.End(trace.WithTimestamp(ts.last))
			}
		}
	}
	clear(t.chats)
	clear(t.turns)
	clear(t.tasks)
}

// fail sets span's status to Error when code is set, described by detail
// when content is recorded and by code otherwise: detail is the text of an
// error from outside the society (a model provider's, a behaviour's),
// which may quote what was said.
func (t *tracer) fail(span trace.Span, code as.Code, detail string) {
	if code == "" {
		return
	}
	span.SetAttributes(attribute.String(AttrErrorType, string(code)))
	if detail == "" || !t.content {
		detail = string(code)
	}
	span.SetStatus(codes.Error, detail)
}

// spanName returns "op name", or op when name is empty.
func spanName(op, name string) string {
	if name == "" {
		return op
	}
	return op + " " + name
}

// payloadText returns a message's text, or its whole payload when it has
// no text (a Task Brief, a request).
func payloadText(m as.Message) string {
	if s := m.Text(); s != "" {
		return s
	}
	return string(m.Payload)
}

// inputMessages returns text as the value of gen_ai.input.messages: one
// user message with one text part, in the conventions' JSON form.
func inputMessages(text string) string {
	type part struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	}
	type message struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	b, _ := json.Marshal([]message{{Role: "user", Parts: []part{{Type: "text", Content: text}}}}) // strings always encode
	return string(b)
}
