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
