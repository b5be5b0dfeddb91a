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

// A record with no id is refused whole: Memory finds records by id, and
// one with none would be lost among the removed.
func TestMemory_RefusesRecordsWithoutAnID(t *testing.T) {
	for name, c := range map[string]store.Change{
		"role":    {Roles: []store.Role{{Name: "writer"}}},
		"agent":   {Agents: []store.Agent{{RoleID: "r"}}},
		"request": {Requests: []store.Request{{From: "a"}}},
		"owner":   {Contacts: []store.ContactEntry{{Contact: store.Contact{ID: "a"}}}},
		"contact": {Contacts: []store.ContactEntry{{Owner: "a"}}},
	} {
		s := store.NewMemory()
		c.Agents = append(c.Agents, store.Agent{ID: "kept-out"})
		if err := s.Apply(t.Context(), c); err == nil {
			t.Errorf("a %s with no id: Apply succeeded", name)
		}
		if st, _ := s.Load(t.Context()); len(st.Agents)+len(st.Roles)+len(st.Requests)+len(st.Contacts) != 0 {
			t.Errorf("a %s with no id: the refused change left %+v", name, st)
		}
	}
}
