package otel_test

import (
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
