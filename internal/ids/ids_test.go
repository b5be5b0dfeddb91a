package ids

import (
	"strings"
	"testing"
)

func TestSequenceObserveContinuesAfterTheHighest(t *testing.T) {
	s := NewSequence("agent")
	for _, id := range []string{"agent-7", "agent-x", "role-99", "agent-3", "agent-"} {
		s.Observe(id)
	}
	if got := s.Next(); got != "agent-8" {
		t.Fatalf("Next = %q, want agent-8", got)
	}
}

func TestEpochIDsShareAPrefixAndDifferAcrossEpochs(t *testing.T) {
	a, b := NewEpoch("msg"), NewEpoch("msg")
	if !strings.HasPrefix(a.ID(1), "msg-") || !strings.HasSuffix(a.ID(42), "-42") {
		t.Fatalf("unexpected id form %q", a.ID(42))
	}
	if a.ID(1) == b.ID(1) {
		t.Fatalf("two epochs made the same id %q", a.ID(1))
	}
}

func TestRandomIsUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := Random("a")
		if seen[id] {
			t.Fatalf("Random repeated %q", id)
		}
		seen[id] = true
	}
}

func TestSequenceLast(t *testing.T) {
	s := NewSequence("agent")
	if got := s.Last(); got != "" {
		t.Fatalf("Last of a new sequence = %q", got)
	}
	s.Next()
	s.Observe("agent-41")
	if got := s.Last(); got != "agent-41" {
		t.Fatalf("Last = %q, want agent-41", got)
	}
	if got := s.Next(); got != "agent-42" {
		t.Fatalf("Next = %q", got)
	}
}
