package otel_test

import (
	"strings"

	"go.opentelemetry.io/otel/codes"
	"testing"

	as "agentsociety"
	"agentsociety/otel"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
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
