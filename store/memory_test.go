package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"agentsociety/store"
	"agentsociety/store/storetest"
)

func TestMemory_Conformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return store.NewMemory() })
}

// BenchmarkMemoryApply measures the hot path a message takes through the
// store: one Apply accepting it and one Apply finishing it.
func BenchmarkMemoryApply(b *testing.B) {
	s := store.NewMemory()
	ctx := b.Context()
	msg := store.Message{
		ID:      "m",
		From:    "agent-a",
		To:      "agent-b",
		TaskID:  "task-1",
		Type:    "text",
		Payload: json.RawMessage(`{"text":"hello"}`),
		SentAt:  time.Now(),
	}
	accept := store.Change{Accepted: []store.Message{msg}}
	finish := store.Change{Finished: []string{msg.ID}}
	b.ReportAllocs()
	for b.Loop() {
		accept.Accepted[0].Seq++
		if err := s.Apply(ctx, accept); err != nil {
			b.Fatal(err)
		}
		if err := s.Apply(ctx, finish); err != nil {
			b.Fatal(err)
		}
	}
}
