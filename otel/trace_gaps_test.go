package otel_test

import (
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/otel"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func eventAt(i int) time.Time { return time.Date(2025, 1, 1, 0, 0, i, 0, time.UTC) }

// seqWithMiss yields events, with a MissedEventsError before the event at index miss.
func seqWithMiss(events []as.Event, miss int) func(func(as.Event, error) bool) {
	return func(yield func(as.Event, error) bool) {
		for i, e := range events {
			if i == miss {
				if !yield(as.Event{}, &as.MissedEventsError{From: events[i-1].Seq + 1, Oldest: e.Seq}) {
					return
				}
			}
			if !yield(e, nil) {
				return
			}
		}
	}
}

func unended(rec *tracetest.SpanRecorder) []string {
	ended := map[string]bool{}
	for _, s := range rec.Ended() {
		ended[s.SpanContext().SpanID().String()] = true
	}
	var out []string
	for _, s := range rec.Started() {
		if !ended[s.SpanContext().SpanID().String()] {
			out = append(out, s.Name())
		}
	}
	return out
}

// TestTrace_ChatAfterMissedEvents: a model call whose finish was missed, then
// the next attempt of the same turn: the first chat span must still end.
func TestTrace_ChatAfterMissedEvents(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	m := &as.Message{ID: "m1", TaskID: "t1", From: as.UserID, To: as.RootID}
	events := []as.Event{
		{Seq: 1, Time: eventAt(1), Kind: as.EventMessageAccepted, Task: "t1", Agent: as.UserID, Target: as.RootID, Message: m},
		{Seq: 2, Time: eventAt(2), Kind: as.EventMessageDelivered, Task: "t1", Agent: as.RootID, Turn: "m1", Message: m},
		{Seq: 3, Time: eventAt(3), Kind: as.EventModelCallStarted, Task: "t1", Agent: as.RootID, Turn: "m1", Attempt: 1},
		// seq 4, model_call_finished of attempt 1, is missed
		{Seq: 5, Time: eventAt(5), Kind: as.EventModelCallStarted, Task: "t1", Agent: as.RootID, Turn: "m1", Attempt: 2},
		{Seq: 6, Time: eventAt(6), Kind: as.EventModelCallFinished, Task: "t1", Agent: as.RootID, Turn: "m1", Duration: time.Second},
		{Seq: 7, Time: eventAt(7), Kind: as.EventMessageHandled, Task: "t1", Agent: as.RootID, Turn: "m1", Message: m},
	}
	if err := otel.Trace(seqWithMiss(events, 4), otel.Options{TracerProvider: tp}); err != nil {
		t.Fatal(err)
	}
	if u := unended(rec); len(u) > 0 {
		t.Errorf("spans started and never ended: %q", u)
	}
}

// TestTrace_RedeliveredTurn: delivery is at least once; a turn cut by a
// crash is delivered again after reopening. The first turn span must end,
// and the task must end when its one message is handled.
func TestTrace_RedeliveredTurn(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	m := &as.Message{ID: "m1", TaskID: "t1", From: as.UserID, To: as.RootID}
	events := []as.Event{
		{Seq: 1, Time: eventAt(1), Kind: as.EventMessageAccepted, Task: "t1", Agent: as.UserID, Target: as.RootID, Message: m},
		{Seq: 2, Time: eventAt(2), Kind: as.EventMessageDelivered, Task: "t1", Agent: as.RootID, Turn: "m1", Message: m},
		// crash; reopened: m1 delivered again
		{Seq: 3, Time: eventAt(3), Kind: as.EventMessageDelivered, Task: "t1", Agent: as.RootID, Turn: "m1", Message: m},
		{Seq: 4, Time: eventAt(4), Kind: as.EventMessageHandled, Task: "t1", Agent: as.RootID, Turn: "m1", Message: m},
	}
	if err := otel.Trace(seqOf(events), otel.Options{TracerProvider: tp}); err != nil {
		t.Fatal(err)
	}
	if u := unended(rec); len(u) > 0 {
		t.Errorf("spans started and never ended: %q", u)
	}
	for _, s := range rec.Ended() {
		if s.Name() == otel.OperationInvokeWorkflow {
			for _, kv := range s.Attributes() {
				if string(kv.Key) == otel.AttrUnfinished {
					t.Errorf("the workflow is marked unfinished though its only message was handled")
				}
			}
		}
	}
}

// TestTrace_DeliveryMissed: accepted seen, its delivery missed, its
// handling seen: the task has nothing under way, its workflow span must not
// be left open (unfinished) until the follow stops.
func TestTrace_DeliveryMissed(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	m := &as.Message{ID: "m1", TaskID: "t1", From: as.UserID, To: as.RootID}
	events := []as.Event{
		{Seq: 1, Time: eventAt(1), Kind: as.EventMessageAccepted, Task: "t1", Agent: as.UserID, Target: as.RootID, Message: m},
		// seq 2, delivered, missed
		{Seq: 3, Time: eventAt(3), Kind: as.EventMessageHandled, Task: "t1", Agent: as.RootID, Turn: "m1", Message: m},
		{Seq: 4, Time: eventAt(9), Kind: as.EventStateSet, Agent: as.RootID, Name: "k"},
	}
	if err := otel.Trace(seqWithMiss(events, 1), otel.Options{TracerProvider: tp}); err != nil {
		t.Fatal(err)
	}
	for _, s := range rec.Ended() {
		if s.Name() == otel.OperationInvokeWorkflow {
			for _, kv := range s.Attributes() {
				if string(kv.Key) == otel.AttrUnfinished {
					t.Errorf("workflow span left open until the end (unfinished), ends %v; want it ended at %v", s.EndTime(), eventAt(3))
				}
			}
		}
	}
}
