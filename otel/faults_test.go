package otel_test

// Tests of the tracer on logs that are not whole or well formed (events
// missed, missing or in any order), of the content it must not record
// without the host's consent, and of what it keeps as a society runs on.

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/otel"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// traceRecorded traces events and returns what the tracer started and
// ended.
func traceRecorded(t *testing.T, events []as.Event, opts otel.Options) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	opts.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	if err := otel.Trace(seqOf(events), opts); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestTrace_EventWithoutMessage: a message event whose message is missing
// (the society stores such an event when it did not encode, and a host may
// trace a log it decoded itself) must not panic; the turn is still traced.
func TestTrace_EventWithoutMessage(t *testing.T) {
	events := []as.Event{
		{Seq: 1, Time: eventAt(1), Kind: as.EventMessageAccepted, Task: "t1", Agent: as.UserID, Target: as.RootID, Detail: "the event did not encode"},
		{Seq: 2, Time: eventAt(2), Kind: as.EventMessageDelivered, Task: "t1", Agent: as.RootID, Turn: "m1", Detail: "the event did not encode"},
		{Seq: 3, Time: eventAt(3), Kind: as.EventMessageHandled, Task: "t1", Agent: as.RootID, Turn: "m1"},
	}
	rec := traceRecorded(t, events, otel.Options{RecordContent: true})
	if u := unended(rec); len(u) > 0 {
		t.Errorf("spans started and never ended: %q", u)
	}
	turns := 0
	for _, s := range rec.Ended() {
		switch s.Name() {
		case otel.OperationInvokeAgent + " root":
			turns++
			if !s.EndTime().Equal(eventAt(3)) {
				t.Errorf("the turn ends at %v, want %v", s.EndTime(), eventAt(3))
			}
		case otel.OperationInvokeWorkflow:
			if !s.EndTime().Equal(eventAt(3)) {
				t.Errorf("the workflow ends at %v, want %v", s.EndTime(), eventAt(3))
			}
		}
	}
	if turns != 1 {
		t.Errorf("%d turn spans, want 1", turns)
	}
}

// TestTrace_ErrorTextIsContent: the text of a failed model call (the
// provider's error, which may quote the prompt) and of a failed turn (a
// behaviour's error, which may quote the message) is recorded only with
// RecordContent; without it a span's status says the error code.
func TestTrace_ErrorTextIsContent(t *testing.T) {
	const secret = "my card number is 4111"
	m := &as.Message{ID: "m1", TaskID: "t1", From: as.UserID, To: as.RootID, Type: as.General, Payload: as.Text(secret)}
	events := []as.Event{
		{Seq: 1, Time: eventAt(1), Kind: as.EventMessageAccepted, Task: "t1", Agent: as.UserID, Target: as.RootID, Message: m},
		{Seq: 2, Time: eventAt(2), Kind: as.EventMessageDelivered, Task: "t1", Agent: as.RootID, Turn: "m1", Message: m},
		{Seq: 3, Time: eventAt(3), Kind: as.EventModelCallStarted, Task: "t1", Agent: as.RootID, Turn: "m1", Attempt: 1},
		{Seq: 4, Time: eventAt(4), Kind: as.EventModelCallFinished, Task: "t1", Agent: as.RootID, Turn: "m1", Attempt: 1, Code: as.ErrModel,
			Detail: "openai: chat completion: bad request: content filtered: " + secret},
		{Seq: 5, Time: eventAt(5), Kind: as.EventMessageHandled, Task: "t1", Agent: as.RootID, Turn: "m1", Code: as.ErrToolFailed,
			Detail: "cannot parse the order " + secret},
	}
	for _, record := range []bool{false, true} {
		rec := traceRecorded(t, events, otel.Options{RecordContent: record})
		failed := 0
		for _, s := range rec.Ended() {
			texts := s.Status().Description + "\n"
			for _, kv := range s.Attributes() {
				texts += kv.Value.Emit() + "\n"
			}
			for _, ev := range s.Events() {
				for _, kv := range ev.Attributes {
					texts += kv.Value.Emit() + "\n"
				}
			}
			if s.Status().Code == codes.Error {
				failed++
				if s.Status().Description == "" {
					t.Errorf("span %q failed with no description", s.Name())
				}
			}
			switch has := strings.Contains(texts, secret); {
			case !record && has:
				t.Errorf("without RecordContent, span %q records the content: %q", s.Name(), texts)
			case record && s.Status().Code == codes.Error && !strings.Contains(s.Status().Description, secret):
				t.Errorf("with RecordContent, span %q's status %q lacks the error's text", s.Name(), s.Status().Description)
			}
		}
		if failed != 2 {
			t.Errorf("%d failed spans, want the model call and the turn", failed)
		}
	}
}

// ended returns the ended span named name, failing the test when there is
// not exactly one.
func ended(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d ended spans named %q, want 1", len(found), name)
	}
	return found[0]
}

// unfinished reports whether s is marked unfinished.
func unfinished(s sdktrace.ReadOnlySpan) bool {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == otel.AttrUnfinished {
			return kv.Value.AsBool()
		}
	}
	return false
}

// TestTrace_HandledMissed: the end of a turn was missed (a slow reader lost
// it); the agent's next delivery shows the turn ended, since an agent
// handles one message at a time. The missed turn ends there, unfinished,
// and the task's workflow span ends when its last turn is handled, not
// when the trace stops.
func TestTrace_HandledMissed(t *testing.T) {
	m1 := &as.Message{ID: "m1", TaskID: "t1", From: as.UserID, To: "agent-1"}
	m2 := &as.Message{ID: "m2", TaskID: "t1", From: as.UserID, To: "agent-1"}
	events := []as.Event{
		{Seq: 1, Time: eventAt(1), Kind: as.EventMessageAccepted, Task: "t1", Agent: as.UserID, Target: "agent-1", Message: m1},
		{Seq: 2, Time: eventAt(2), Kind: as.EventMessageAccepted, Task: "t1", Agent: as.UserID, Target: "agent-1", Message: m2},
		{Seq: 3, Time: eventAt(3), Kind: as.EventMessageDelivered, Task: "t1", Agent: "agent-1", Turn: "m1", Message: m1},
		{Seq: 4, Time: eventAt(4), Kind: as.EventModelCallStarted, Task: "t1", Agent: "agent-1", Turn: "m1", Attempt: 1},
		// seqs 5 and 6, the model call's finish and m1 handled, are missed
		{Seq: 7, Time: eventAt(7), Kind: as.EventMessageDelivered, Task: "t1", Agent: "agent-1", Turn: "m2", Message: m2},
		{Seq: 8, Time: eventAt(8), Kind: as.EventMessageHandled, Task: "t1", Agent: "agent-1", Turn: "m2"},
		{Seq: 9, Time: eventAt(20), Kind: as.EventRoleCreated, Agent: as.RootID, Role: "r", Name: "other"},
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	if err := otel.Trace(seqWithMiss(events, 4), otel.Options{TracerProvider: tp}); err != nil {
		t.Fatal(err)
	}
	var turns []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == otel.OperationInvokeAgent {
			turns = append(turns, s)
		}
	}
	if len(turns) != 2 {
		t.Fatalf("%d turns, want 2", len(turns))
	}
	for _, s := range turns {
		id := ""
		for _, kv := range s.Attributes() {
			if string(kv.Key) == otel.AttrMessageID {
				id = kv.Value.AsString()
			}
		}
		if id == "m1" && (!unfinished(s) || !s.EndTime().Equal(eventAt(7))) {
			t.Errorf("the turn whose end was missed ends at %v, unfinished %v; want at the next delivery, %v, unfinished", s.EndTime(), unfinished(s), eventAt(7))
		}
	}
	if chat := ended(t, rec, otel.OperationChat); !unfinished(chat) || !chat.EndTime().Equal(eventAt(7)) {
		t.Errorf("the model call whose finish was missed ends at %v, unfinished %v; want with its turn, at %v", chat.EndTime(), unfinished(chat), eventAt(7))
	}
	if w := ended(t, rec, otel.OperationInvokeWorkflow); unfinished(w) || !w.EndTime().Equal(eventAt(8)) {
		t.Errorf("the workflow ends at %v, unfinished %v; want at the last turn's end, %v", w.EndTime(), unfinished(w), eventAt(8))
	}
}

// TestTrace_ChatFinishMissed: a model call whose finish was missed ends
// with its turn, not when the trace stops.
func TestTrace_ChatFinishMissed(t *testing.T) {
	m := &as.Message{ID: "m1", TaskID: "t1", From: as.UserID, To: as.RootID}
	events := []as.Event{
		{Seq: 1, Time: eventAt(1), Kind: as.EventMessageAccepted, Task: "t1", Agent: as.UserID, Target: as.RootID, Message: m},
		{Seq: 2, Time: eventAt(2), Kind: as.EventMessageDelivered, Task: "t1", Agent: as.RootID, Turn: "m1", Message: m},
		{Seq: 3, Time: eventAt(3), Kind: as.EventModelCallStarted, Task: "t1", Agent: as.RootID, Turn: "m1", Attempt: 1},
		// seq 4, the model call's finish, is missed
		{Seq: 5, Time: eventAt(5), Kind: as.EventMessageHandled, Task: "t1", Agent: as.RootID, Turn: "m1"},
		{Seq: 6, Time: eventAt(20), Kind: as.EventRoleCreated, Agent: as.RootID, Role: "r", Name: "other"},
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	if err := otel.Trace(seqWithMiss(events, 3), otel.Options{TracerProvider: tp}); err != nil {
		t.Fatal(err)
	}
	if chat := ended(t, rec, otel.OperationChat); !unfinished(chat) || !chat.EndTime().Equal(eventAt(5)) {
		t.Errorf("the model call ends at %v, unfinished %v; want with its turn, at %v", chat.EndTime(), unfinished(chat), eventAt(5))
	}
}

// taskEvents returns the events of task i of a long-running society, from
// seq on: the requirement to root, which spawns a lead and briefs it; the
// lead calls a tool and answers user; root terminates the lead. Nothing of
// the task is under way at the end.
func taskEvents(i int, seq uint64) []as.Event {
	task, lead := fmt.Sprintf("task-%d", i), fmt.Sprintf("agent-%d", i)
	req := &as.Message{ID: task + "-req", TaskID: task, From: as.UserID, To: as.RootID, Type: as.General, Payload: as.Text("req")}
	brief := &as.Message{ID: task + "-brief", TaskID: task, From: as.RootID, To: lead, Type: as.General, Payload: as.Text("brief")}
	answer := &as.Message{ID: task + "-answer", TaskID: task, From: lead, To: as.UserID, Type: as.General, Payload: as.Text("answer")}
	events := []as.Event{
		{Kind: as.EventTaskSubmitted, Task: task, Agent: as.UserID, Detail: "req"},
		{Kind: as.EventMessageAccepted, Task: task, Agent: as.UserID, Target: as.RootID, Message: req},
		{Kind: as.EventMessageDelivered, Task: task, Agent: as.RootID, Turn: req.ID, Message: req},
		{Kind: as.EventModelCallStarted, Task: task, Agent: as.RootID, Turn: req.ID, Attempt: 1},
		{Kind: as.EventModelCallFinished, Task: task, Agent: as.RootID, Turn: req.ID, Attempt: 1, Duration: time.Millisecond},
		{Kind: as.EventAgentSpawned, Task: task, Agent: as.RootID, Turn: req.ID, Target: lead, Role: "role-lead", Name: "lead"},
		{Kind: as.EventMessageAccepted, Task: task, Agent: as.RootID, Turn: req.ID, Target: lead, Message: brief},
		{Kind: as.EventMessageHandled, Task: task, Agent: as.RootID, Turn: req.ID},
		{Kind: as.EventMessageDelivered, Task: task, Agent: lead, Turn: brief.ID, Message: brief},
		{Kind: as.EventToolCalled, Task: task, Agent: lead, Turn: brief.ID, Name: "put_artifact", Duration: time.Millisecond},
		{Kind: as.EventMessageAccepted, Task: task, Agent: lead, Turn: brief.ID, Target: as.UserID, Message: answer},
		{Kind: as.EventMessageHandled, Task: task, Agent: lead, Turn: brief.ID},
		{Kind: as.EventMessageDelivered, Task: task, Agent: as.UserID, Turn: answer.ID, Message: answer},
		{Kind: as.EventMessageHandled, Task: task, Agent: as.UserID, Turn: answer.ID},
		{Kind: as.EventAgentTerminated, Task: task, Agent: as.RootID, Target: lead},
	}
	for j := range events {
		events[j].Seq = seq + uint64(j)
		events[j].Time = eventAt(0).Add(time.Duration(events[j].Seq) * time.Millisecond)
	}
	return events
}

// followUp returns the events of a follow-up message from user to root on
// task i, from seq on.
func followUp(i int, seq uint64) []as.Event {
	task := fmt.Sprintf("task-%d", i)
	m := &as.Message{ID: task + "-more", TaskID: task, From: as.UserID, To: as.RootID, Type: as.General, Payload: as.Text("and?")}
	events := []as.Event{
		{Kind: as.EventMessageAccepted, Task: task, Agent: as.UserID, Target: as.RootID, Message: m},
		{Kind: as.EventMessageDelivered, Task: task, Agent: as.RootID, Turn: m.ID, Message: m},
		{Kind: as.EventMessageHandled, Task: task, Agent: as.RootID, Turn: m.ID},
	}
	for j := range events {
		events[j].Seq = seq + uint64(j)
		events[j].Time = eventAt(0).Add(time.Duration(events[j].Seq) * time.Millisecond)
	}
	return events
}

// TestTrace_KeepsWhatCanBeUsed: a society that runs many tasks, each of
// which ends and whose agents are terminated, leaves the tracer keeping
// nothing of them but the workflow spans of the tasks that ended last, a
// bounded number.
func TestTrace_KeepsWhatCanBeUsed(t *testing.T) {
	n := otel.EndedTasksKept + 500
	var events []as.Event
	for i := range n {
		events = append(events, taskEvents(i, uint64(len(events)+1))...)
	}
	events = append(events, followUp(0, uint64(len(events)+1))...)   // long forgotten
	events = append(events, followUp(n-1, uint64(len(events)+1))...) // ended last
	kept := otel.TraceKept(seqOf(events), otel.Options{TracerProvider: sdktrace.NewTracerProvider()})
	want := map[string]int{"tasks": 0, "turns": 0, "sent": 0, "queued": 0, "chats": 0, "active": 0, "children": 0, "roles": 2, "ended": otel.EndedTasksKept}
	for k, v := range want {
		if kept[k] != v {
			t.Errorf("after %d tasks, the tracer keeps %d %s, want %d", n, kept[k], k, v)
		}
	}
}

// TestTrace_FollowUpAfterEnd: a follow-up message to a task that ended
// hangs under the task's workflow span, in its trace, while the tracer
// remembers the task; once it does not, under a new workflow span of the
// same conversation. Either way every span ends.
func TestTrace_FollowUpAfterEnd(t *testing.T) {
	n := otel.EndedTasksKept + 2
	var events []as.Event
	for i := range n {
		events = append(events, taskEvents(i, uint64(len(events)+1))...)
	}
	events = append(events, followUp(0, uint64(len(events)+1))...)
	events = append(events, followUp(n-1, uint64(len(events)+1))...)
	rec := traceRecorded(t, events, otel.Options{})
	if u := unended(rec); len(u) > 0 {
		t.Fatalf("%d spans started and never ended: %q", len(u), u[:min(len(u), 5)])
	}
	spans := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	workflows := map[string][]sdktrace.ReadOnlySpan{}
	turns := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.SpanContext().SpanID()] = s
		kv := map[string]string{}
		for _, a := range s.Attributes() {
			kv[string(a.Key)] = a.Value.Emit()
		}
		switch kv[otel.AttrOperationName] {
		case otel.OperationInvokeWorkflow:
			workflows[kv[otel.AttrConversationID]] = append(workflows[kv[otel.AttrConversationID]], s)
			if unfinished(s) {
				t.Errorf("workflow of %s left unfinished", kv[otel.AttrConversationID])
			}
		case otel.OperationInvokeAgent:
			turns[kv[otel.AttrMessageID]] = s
		}
	}
	last := fmt.Sprintf("task-%d", n-1)
	if w := workflows[last]; len(w) != 1 || turns[last+"-more"].Parent().SpanID() != w[0].SpanContext().SpanID() {
		t.Errorf("the follow-up to the task that ended last is not under its one workflow span (%d workflow spans)", len(w))
	}
	if w := workflows["task-0"]; len(w) != 2 || turns["task-0-more"].Parent().SpanID() != w[1].SpanContext().SpanID() || !w[1].EndTime().Equal(turns["task-0-more"].EndTime()) {
		t.Errorf("the follow-up to a forgotten task is not under a new workflow span of the task, ended with it (%d workflow spans)", len(w))
	}
	if p := spans[turns[last+"-more"].Parent().SpanID()]; p == nil {
		t.Error("the follow-up's parent is not among the spans")
	}
}

// TestTrace_DeliveryAndHandlingMissed: a message's delivery and handling
// were both missed (a slow reader's gap). The next delivery to the same
// agent shows the message was handled, since an agent handles its
// messages in the order they were accepted: the task's workflow span ends
// when its last turn is handled, and the tracer keeps nothing of it.
func TestTrace_DeliveryAndHandlingMissed(t *testing.T) {
	m1 := &as.Message{ID: "m1", TaskID: "t1", From: as.UserID, To: "agent-1"}
	m2 := &as.Message{ID: "m2", TaskID: "t1", From: as.UserID, To: "agent-1"}
	m3 := &as.Message{ID: "m3", TaskID: "t1", From: as.UserID, To: "agent-2"}
	events := []as.Event{
		{Seq: 1, Time: eventAt(1), Kind: as.EventMessageAccepted, Task: "t1", Agent: as.UserID, Target: "agent-1", Message: m1},
		{Seq: 2, Time: eventAt(2), Kind: as.EventMessageAccepted, Task: "t1", Agent: as.UserID, Target: "agent-2", Message: m3},
		{Seq: 3, Time: eventAt(3), Kind: as.EventMessageAccepted, Task: "t1", Agent: as.UserID, Target: "agent-1", Message: m2},
		// seqs 4 and 5, m1 delivered and handled, are missed
		{Seq: 6, Time: eventAt(6), Kind: as.EventMessageDelivered, Task: "t1", Agent: "agent-1", Turn: "m2", Message: m2},
		{Seq: 7, Time: eventAt(7), Kind: as.EventMessageHandled, Task: "t1", Agent: "agent-1", Turn: "m2"},
		{Seq: 8, Time: eventAt(8), Kind: as.EventMessageDelivered, Task: "t1", Agent: "agent-2", Turn: "m3", Message: m3},
		{Seq: 9, Time: eventAt(9), Kind: as.EventMessageHandled, Task: "t1", Agent: "agent-2", Turn: "m3"},
		{Seq: 10, Time: eventAt(20), Kind: as.EventRoleCreated, Agent: as.RootID, Role: "r", Name: "other"},
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	if err := otel.Trace(seqWithMiss(events, 3), otel.Options{TracerProvider: tp}); err != nil {
		t.Fatal(err)
	}
	if w := ended(t, rec, otel.OperationInvokeWorkflow); unfinished(w) || !w.EndTime().Equal(eventAt(9)) {
		t.Errorf("the workflow ends at %v, unfinished %v; want at the last turn's end, %v", w.EndTime(), unfinished(w), eventAt(9))
	}
	kept := otel.TraceKept(seqWithMiss(events, 3), otel.Options{TracerProvider: sdktrace.NewTracerProvider()})
	if kept["tasks"] != 0 || kept["sent"] != 0 || kept["queued"] != 0 {
		t.Errorf("the tracer keeps %d tasks and %d messages (%d queues), want none", kept["tasks"], kept["sent"], kept["queued"])
	}
}

// TestTrace_AnyOrder traces many made-up logs in which events come in any
// order, repeated, or without what they point to (a log read past gaps,
// across reopenings, or decoded by a host): the tracer must not panic,
// and every span it starts must end.
func TestTrace_AnyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	kinds := []as.EventKind{as.EventTaskSubmitted, as.EventMessageAccepted, as.EventMessageDelivered, as.EventMessageHandled,
		as.EventModelCallStarted, as.EventModelCallFinished, as.EventToolCalled, as.EventAgentSpawned, as.EventAgentTerminated,
		as.EventRefused, as.EventThought, as.EventTaskQuiet, as.EventStateSet}
	for run := range 3000 {
		var events []as.Event
		for i := range 2 + r.IntN(30) {
			e := as.Event{Seq: uint64(i + 1), Time: eventAt(i), Kind: kinds[r.IntN(len(kinds))],
				Task: pick("t1", "t2", ""), Agent: pick(as.RootID, as.UserID, "a1", "a2"), Turn: pick("m1", "m2", "m3", ""),
				Target: pick("a1", "a2", as.UserID, as.RootID), Name: "x", Attempt: 1}
			if r.IntN(4) > 0 {
				e.Message = &as.Message{ID: pick("m1", "m2", "m3"), TaskID: pick("t1", "t2", ""), From: e.Agent, To: e.Target}
			}
			if r.IntN(5) == 0 {
				e.Code, e.Detail = as.ErrModel, "failed"
			}
			events = append(events, e)
		}
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("run %d: panic %v on events:\n%+v", run, p, events)
				}
			}()
			if err := otel.Trace(seqOf(events), otel.Options{TracerProvider: tp, RecordContent: run%2 == 0}); err != nil {
				t.Fatal(err)
			}
		}()
		if u := unended(rec); len(u) > 0 {
			t.Fatalf("run %d: spans started and never ended: %q", run, u)
		}
	}
}
