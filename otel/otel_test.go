package otel_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/internal/demo"
	"agentsociety/otel"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// hangGuard only keeps a broken test from hanging; tests wait for
// conditions.
const hangGuard = time.Minute

// newSociety returns a society on the demo model, closed when t ends.
func newSociety(t testing.TB) *as.Society {
	t.Helper()
	s, err := as.New(context.Background(), as.Config{Model: demo.Model(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// runQuickstart runs the quick start on s and returns the task once every
// message of the task was handled.
func runQuickstart(t testing.TB, s *as.Society) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	task, _, err := demo.Run(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	waitSettled(t, s)
	return task
}

// waitSettled waits until every message s accepted was handled, failing
// after hangGuard.
func waitSettled(t testing.TB, s *as.Society) {
	t.Helper()
	for start := time.Now(); !settled(s); time.Sleep(time.Millisecond) {
		if time.Since(start) > hangGuard {
			t.Fatal("the society did not settle")
		}
	}
}

// settled reports whether every message s accepted was handled.
func settled(s *as.Society) bool {
	open := map[string]bool{}
	for e, err := range s.Events(context.Background(), 1) {
		if err != nil {
			return false
		}
		switch e.Kind {
		case as.EventMessageAccepted:
			open[e.Message.ID] = true
		case as.EventMessageHandled:
			delete(open, e.Turn)
		}
	}
	return len(open) == 0
}

// tree indexes ended spans.
type tree struct {
	spans []*tracetest.SpanStub
	byID  map[trace.SpanID]*tracetest.SpanStub
}

func newTree(stubs tracetest.SpanStubs) *tree {
	tr := &tree{byID: map[trace.SpanID]*tracetest.SpanStub{}}
	for i := range stubs {
		s := &stubs[i]
		tr.spans = append(tr.spans, s)
		tr.byID[s.SpanContext.SpanID()] = s
	}
	return tr
}

// parent returns s's parent span, or nil for a root.
func (tr *tree) parent(s *tracetest.SpanStub) *tracetest.SpanStub {
	return tr.byID[s.Parent.SpanID()]
}

// turn returns the invoke_agent span of the turn handling message msg.
func (tr *tree) turn(t *testing.T, msg string) *tracetest.SpanStub {
	t.Helper()
	for _, s := range tr.spans {
		if attr(s, otel.AttrMessageID) == msg && attr(s, otel.AttrOperationName) == otel.OperationInvokeAgent {
			return s
		}
	}
	t.Fatalf("no invoke_agent span for message %s", msg)
	return nil
}

// attr returns span s's attribute key as a string, "" if it has none.
func attr(s *tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// TestFollow_Quickstart follows the quick start live and checks the span
// tree parent by parent: the whole task is one trace under its workflow
// span, each turn hangs under the turn that sent its message, and model
// calls, tool calls and spawns under the turn they happened in.
func TestFollow_Quickstart(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx := context.Background()
	s := newSociety(t)
	done := make(chan error, 1)
	go func() { done <- otel.Follow(ctx, s, otel.Options{TracerProvider: tp}) }()
	task := runQuickstart(t, s)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Follow: %v", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Follow did not return after Close")
	}

	// What the event log says happened, to check the spans against.
	var events []as.Event
	for e, err := range s.Events(ctx, 1) {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	tr := newTree(exp.GetSpans())
	var workflow *tracetest.SpanStub
	for _, sp := range tr.spans {
		if sp.Name == otel.OperationInvokeWorkflow {
			if workflow != nil {
				t.Fatal("two workflow spans for one task")
			}
			workflow = sp
		}
	}
	if workflow == nil || workflow.Parent.IsValid() {
		t.Fatalf("the workflow span is missing or not a root: %v", workflow)
	}
	if got := attr(workflow, otel.AttrConversationID); got != task {
		t.Errorf("workflow %s = %q, want the task %q", otel.AttrConversationID, got, task)
	}
	for _, sp := range tr.spans {
		if sp.SpanContext.TraceID() != workflow.SpanContext.TraceID() {
			t.Errorf("span %q is in trace %s, not the task's %s", sp.Name, sp.SpanContext.TraceID(), workflow.SpanContext.TraceID())
		}
		if sp != workflow && tr.parent(sp) == nil {
			t.Errorf("span %q has no parent among the spans", sp.Name)
		}
		if attr(sp, otel.AttrOperationName) == "" || attr(sp, otel.AttrConversationID) != task {
			t.Errorf("span %q lacks %s or %s: %v", sp.Name, otel.AttrOperationName, otel.AttrConversationID, sp.Attributes)
		}
		if attr(sp, otel.AttrUnfinished) != "" {
			t.Errorf("span %q was left unfinished", sp.Name)
		}
		if sp.EndTime.Before(sp.StartTime) {
			t.Errorf("span %q ends before it starts", sp.Name)
		}
	}

	// Each turn against the events: its parent is the turn that sent its
	// message, or the workflow span for the host's requirement; what
	// happened in a turn is its child.
	sentIn := map[string]string{} // message id → the turn that sent it
	counts := map[string]int{}
	for _, e := range events {
		switch e.Kind {
		case as.EventMessageAccepted:
			sentIn[e.Message.ID] = e.Turn
		case as.EventMessageDelivered:
			counts[otel.OperationInvokeAgent]++
			sp := tr.turn(t, e.Turn)
			if got := attr(sp, otel.AttrAgentID); got != e.Agent {
				t.Errorf("turn %s: %s = %q, want %q", e.Turn, otel.AttrAgentID, got, e.Agent)
			}
			if !sp.StartTime.Equal(e.Time) {
				t.Errorf("turn %s starts at %v, delivered at %v", e.Turn, sp.StartTime, e.Time)
			}
			want := workflow
			if from := sentIn[e.Turn]; from != "" {
				want = tr.turn(t, from)
			}
			if got := tr.parent(sp); got != want {
				t.Errorf("turn %s (%s) is under %q, want %q", e.Turn, sp.Name, got.Name, want.Name)
			}
		case as.EventModelCallStarted, as.EventToolCalled, as.EventAgentSpawned:
			counts[string(e.Kind)]++
		}
	}
	root := tr.turn(t, events[2].Turn) // user's requirement, delivered to root
	if root.Name != "invoke_agent root" || tr.parent(root) != workflow {
		t.Errorf("the first turn is %q under %q; want root's turn under the workflow", root.Name, tr.parent(root).Name)
	}
	var leadBrief *tracetest.SpanStub
	for _, sp := range tr.spans {
		if attr(sp, otel.AttrMessageType) == string(as.TaskAssignment) && attr(sp, otel.AttrAgentName) == "lead" {
			leadBrief = sp
		}
	}
	if leadBrief == nil || tr.parent(leadBrief) != root || leadBrief.Name != "invoke_agent lead" {
		t.Fatalf("the lead's brief turn is missing or not under root's turn")
	}
	byOp := map[string]int{}
	for _, sp := range tr.spans {
		op := attr(sp, otel.AttrOperationName)
		byOp[op]++
		parent := tr.parent(sp)
		switch op {
		case otel.OperationChat, otel.OperationExecuteTool, otel.OperationCreateAgent:
			if attr(parent, otel.AttrOperationName) != otel.OperationInvokeAgent {
				t.Errorf("%q is under %q, not a turn", sp.Name, parent.Name)
			}
		}
		switch op {
		case otel.OperationChat:
			if attr(sp, otel.AttrUsageInputTokens) == "" || attr(sp, otel.AttrUsageOutputTokens) == "" || attr(sp, otel.AttrAgentID) != attr(parent, otel.AttrAgentID) {
				t.Errorf("chat span %v: no usage or another agent than its turn's", sp.Attributes)
			}
		case otel.OperationExecuteTool:
			if attr(sp, otel.AttrToolName) == "" || sp.Name != "execute_tool "+attr(sp, otel.AttrToolName) || sp.Status.Code == codes.Error {
				t.Errorf("tool span %q: %v, status %v", sp.Name, sp.Attributes, sp.Status)
			}
		case otel.OperationCreateAgent:
			if attr(sp, otel.AttrAgentName) == "" || attr(sp, otel.AttrAgentID) == "" || attr(sp, otel.AttrParentID) != attr(parent, otel.AttrAgentID) {
				t.Errorf("create_agent span %v", sp.Attributes)
			}
		}
	}
	for op, kind := range map[string]as.EventKind{otel.OperationChat: as.EventModelCallStarted, otel.OperationExecuteTool: as.EventToolCalled, otel.OperationCreateAgent: as.EventAgentSpawned} {
		if byOp[op] != counts[string(kind)] || byOp[op] == 0 {
			t.Errorf("%d %s spans for %d %s events", byOp[op], op, counts[string(kind)], kind)
		}
	}
	if byOp[otel.OperationInvokeAgent] != counts[otel.OperationInvokeAgent] {
		t.Errorf("%d turns, %d deliveries", byOp[otel.OperationInvokeAgent], counts[otel.OperationInvokeAgent])
	}
	if n := len(tr.spans); n != 1+byOp[otel.OperationInvokeAgent]+byOp[otel.OperationChat]+byOp[otel.OperationExecuteTool]+byOp[otel.OperationCreateAgent] {
		t.Errorf("%d spans with other operations: %v", n, byOp)
	}
}

// contentKeys are the attributes that hold what agents and models said.
var contentKeys = []string{otel.AttrInputMessages, otel.AttrToolCallArguments, otel.AttrText}

// TestTrace_Content traces the quick start's log twice and checks that
// message text, tool arguments and thoughts are recorded only when the host
// opts in.
func TestTrace_Content(t *testing.T) {
	s := newSociety(t)
	runQuickstart(t, s)
	for _, record := range []bool{false, true} {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		if err := otel.Trace(s.Events(context.Background(), 1), otel.Options{TracerProvider: tp, RecordContent: record}); err != nil {
			t.Fatal(err)
		}
		found := map[string]bool{}
		texts := ""
		check := func(kvs []attribute.KeyValue) {
			for _, kv := range kvs {
				if slices.Contains(contentKeys, string(kv.Key)) {
					found[string(kv.Key)] = true
				}
				texts += kv.Value.Emit() + "\n"
			}
		}
		for _, sp := range exp.GetSpans() {
			check(sp.Attributes)
			for _, ev := range sp.Events {
				check(ev.Attributes)
			}
		}
		hasRequirement := strings.Contains(texts, demo.Requirement) || strings.Contains(texts, jsonString(demo.Requirement))
		if !record {
			if len(found) > 0 || hasRequirement || strings.Contains(texts, "calculate(") {
				t.Errorf("content recorded without opting in: %v", found)
			}
			continue
		}
		for _, k := range contentKeys {
			if !found[k] {
				t.Errorf("with RecordContent, no %s anywhere", k)
			}
		}
		if !hasRequirement {
			t.Error("with RecordContent, the requirement is nowhere")
		}
	}
}

// jsonString returns s as JSON encodes it inside a string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return strings.Trim(string(b), `"`)
}

// TestTrace_Failures checks spans built from a hand-made log: a failed model
// call, a failed tool call, a refusal and a failed turn set error statuses;
// a message sent from another task's turn starts a turn in its own task's
// trace, linked to the sender; a turn still open at the end is marked
// unfinished.
func TestTrace_Failures(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	msg := func(id, from, to, task string) *as.Message {
		return &as.Message{ID: id, From: from, To: to, TaskID: task, Type: as.General, Payload: as.Text("hi")}
	}
	events := []as.Event{
		{Kind: as.EventMessageAccepted, Task: "A", Agent: as.UserID, Target: "agent-1", Message: msg("m1", as.UserID, "agent-1", "A")},
		{Kind: as.EventMessageDelivered, Task: "A", Agent: "agent-1", Turn: "m1", Message: msg("m1", as.UserID, "agent-1", "A")},
		{Kind: as.EventModelCallStarted, Task: "A", Agent: "agent-1", Turn: "m1", Attempt: 1},
		{Kind: as.EventModelCallFinished, Task: "A", Agent: "agent-1", Turn: "m1", Attempt: 1, Code: as.ErrModel, Detail: "rate limited", Duration: time.Second},
		{Kind: as.EventToolCalled, Task: "A", Agent: "agent-1", Turn: "m1", Name: "send_message", Code: as.ErrUnknownContact, Duration: time.Second, Args: json.RawMessage(`{"to":"x"}`)},
		{Kind: as.EventRefused, Agent: "agent-1", Name: "send_message", Code: as.ErrUnknownContact, Detail: "no such contact"},
		{Kind: as.EventMessageAccepted, Task: "B", Agent: "agent-1", Turn: "m1", Target: "agent-2", Message: msg("m2", "agent-1", "agent-2", "B")},
		{Kind: as.EventMessageHandled, Task: "A", Agent: "agent-1", Turn: "m1", Code: as.ErrModel, Detail: "the model call failed", Message: msg("m1", as.UserID, "agent-1", "A")},
		{Kind: as.EventMessageDelivered, Task: "B", Agent: "agent-2", Turn: "m2", Message: msg("m2", "agent-1", "agent-2", "B")},
	}
	for i := range events {
		events[i].Seq, events[i].Time = uint64(i+1), at(i)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	if err := otel.Trace(seqOf(events), otel.Options{TracerProvider: tp}); err != nil {
		t.Fatal(err)
	}
	tr := newTree(exp.GetSpans())
	m1, m2 := tr.turn(t, "m1"), tr.turn(t, "m2")
	if m1.Status.Code != codes.Error || attr(m1, otel.AttrErrorType) != string(as.ErrModel) {
		t.Errorf("failed turn: status %v, %v", m1.Status, m1.Attributes)
	}
	if !m1.EndTime.Equal(at(7)) {
		t.Errorf("turn m1 ends at %v, want %v", m1.EndTime, at(7))
	}
	refused := false
	for _, ev := range m1.Events {
		refused = refused || ev.Name == string(as.EventRefused)
	}
	if !refused {
		t.Error("the refusal is not an event of the turn it happened in")
	}
	for _, sp := range tr.spans {
		switch attr(sp, otel.AttrOperationName) {
		case otel.OperationChat:
			if sp.Status.Code != codes.Error || attr(sp, otel.AttrErrorType) != string(as.ErrModel) || !sp.StartTime.Equal(at(2)) || !sp.EndTime.Equal(at(3)) {
				t.Errorf("failed model call: %v %v, %v to %v", sp.Status, sp.Attributes, sp.StartTime, sp.EndTime)
			}
		case otel.OperationExecuteTool:
			if sp.Status.Code != codes.Error || attr(sp, otel.AttrErrorType) != string(as.ErrUnknownContact) || !sp.StartTime.Equal(at(3)) {
				t.Errorf("failed tool call: %v %v from %v", sp.Status, sp.Attributes, sp.StartTime)
			}
			if attr(sp, otel.AttrToolCallArguments) != "" {
				t.Error("tool arguments recorded without RecordContent")
			}
		}
	}
	if m2.SpanContext.TraceID() == m1.SpanContext.TraceID() {
		t.Error("task B's turn is in task A's trace")
	}
	if p := tr.parent(m2); p == nil || p.Name != otel.OperationInvokeWorkflow || attr(p, otel.AttrConversationID) != "B" {
		t.Errorf("task B's turn is not under task B's workflow span")
	}
	if links := m2.Links; len(links) != 1 || links[0].SpanContext.SpanID() != m1.SpanContext.SpanID() {
		t.Errorf("task B's turn links to %v, want the turn that sent its message", links)
	}
	if attr(m2, otel.AttrUnfinished) != "true" || !m2.EndTime.Equal(at(8)) {
		t.Errorf("a turn open at the end: unfinished %q, ends at %v", attr(m2, otel.AttrUnfinished), m2.EndTime)
	}
}

// seqOf returns events as an event sequence with no errors.
func seqOf(events []as.Event) func(func(as.Event, error) bool) {
	return func(yield func(as.Event, error) bool) {
		for _, e := range events {
			if !yield(e, nil) {
				return
			}
		}
	}
}

// TestFollow_UnderHostSpan checks that a requirement submitted under the
// host's span, with otel.Inject, is traced in the host's trace: the
// workflow span is the host span's child, and the turns the host's
// messages start are linked to the span each was sent under.
func TestFollow_UnderHostSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	s := newSociety(t)
	done := make(chan error, 1)
	go func() { done <- otel.Follow(context.Background(), s, otel.Options{TracerProvider: tp}) }()

	ctx, host := tp.Tracer("host").Start(context.Background(), "host request")
	ctx, cancel := context.WithTimeout(otel.Inject(ctx), hangGuard)
	defer cancel()
	task, _, err := demo.Run(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	host.End()
	ctx2, later := tp.Tracer("host").Start(context.Background(), "host follow-up")
	followUp, err := s.SendTextToAgent(otel.Inject(ctx2), as.RootID, "how is it going?", task)
	if err != nil {
		t.Fatal(err)
	}
	later.End()
	waitSettled(t, s)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Follow: %v", err)
	}

	tr := newTree(exp.GetSpans())
	spans := map[string]*tracetest.SpanStub{}
	for _, sp := range tr.spans {
		spans[sp.Name] = sp
	}
	hostSpan, laterSpan, workflow := spans["host request"], spans["host follow-up"], spans[otel.OperationInvokeWorkflow]
	if hostSpan == nil || laterSpan == nil || workflow == nil {
		t.Fatalf("spans missing: host %v, follow-up %v, workflow %v", hostSpan != nil, laterSpan != nil, workflow != nil)
	}
	if workflow.Parent.SpanID() != hostSpan.SpanContext.SpanID() || !workflow.Parent.IsRemote() {
		t.Errorf("the workflow span's parent is %v, want the host's span %v (remote)", workflow.Parent, hostSpan.SpanContext)
	}
	for _, sp := range tr.spans {
		if sp != laterSpan && sp.SpanContext.TraceID() != hostSpan.SpanContext.TraceID() {
			t.Errorf("span %q is in trace %s, not the host's %s", sp.Name, sp.SpanContext.TraceID(), hostSpan.SpanContext.TraceID())
		}
	}
	linked := func(sp *tracetest.SpanStub, to *tracetest.SpanStub) bool {
		return slices.ContainsFunc(sp.Links, func(l sdktrace.Link) bool { return l.SpanContext.SpanID() == to.SpanContext.SpanID() })
	}
	if turn := tr.turn(t, followUp.ID); tr.parent(turn) != workflow || !linked(turn, laterSpan) || linked(turn, hostSpan) {
		t.Errorf("the follow-up's turn: parent %v, links %v; want the workflow span, linked to the follow-up's host span", turn.Parent, turn.Links)
	}
}

// TestFollow_EventsOff checks that Follow on a society that keeps no events
// returns at once with an error saying so, not nil, which would read as
// the society's closing.
func TestFollow_EventsOff(t *testing.T) {
	s, err := as.New(context.Background(), as.Config{Model: demo.Model(), EventRetention: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	done := make(chan error, 1)
	go func() { done <- otel.Follow(context.Background(), s, otel.Options{TracerProvider: tp}) }()
	select {
	case err := <-done:
		if !errors.Is(err, as.ErrEventsOff) {
			t.Fatalf("Follow = %v, want an error with code %s", err, as.ErrEventsOff)
		}
	case <-time.After(hangGuard):
		t.Fatal("Follow on a society without events did not return")
	}
}
