package natsstore_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/internal/demo"
	"agentsociety/internal/script"
	"agentsociety/store/natsstore"
	"agentsociety/store/natsstore/natstest"
)

// The quick start's scenario runs on a society kept in NATS JetStream, and
// a society opened again on the same bucket, through a store of its own,
// goes on from it: it has the organisation and the artifact the first one
// made, and a second requirement builds on them (root's lead role is
// reused, the new agents' ids follow the old ones).
func TestDemo_OnNATSStore_Reopened(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second) // a hang guard
	defer cancel()
	url := natstest.Server(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func() (*as.Society, *natsstore.Store) {
		t.Helper()
		st, err := natsstore.New(ctx, natsstore.Options{URL: url, Bucket: "demo"})
		if err != nil {
			t.Fatal(err)
		}
		s, err := as.New(ctx, as.Config{Model: demo.Model(), Store: st, Logger: quiet})
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		return s, st
	}
	// play submits the requirement and returns the artifact the answer
	// names.
	play := func(s *as.Society) as.Artifact {
		t.Helper()
		task, err := s.SubmitRequirement(ctx, demo.Requirement)
		if err != nil {
			t.Fatal(err)
		}
		reply, err := s.WaitForUserMessage(ctx, func(m as.Message) bool {
			return m.TaskID == task && strings.Contains(m.Text(), as.ArtifactRefPrefix)
		})
		if err != nil {
			t.Fatalf("waiting for the answer: %v", err)
		}
		ref := script.RefIn(reply.Text())
		a, data, err := s.GetArtifact(ctx, ref)
		if err != nil {
			t.Fatalf("GetArtifact(%q): %v", ref, err)
		}
		if string(data) != demo.Page {
			t.Fatalf("artifact %s holds %q, want the demo page", ref, data)
		}
		return a
	}

	s, st := open()
	page := play(s)
	agents, roles := s.Agents(), s.Roles()
	if len(agents) != 3 || len(roles) != 3 {
		t.Fatalf("after the first run: %d agents and %d roles, want 3 and 3", len(agents), len(roles))
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()
	events := readEvents(t, s)

	s, st = open()
	defer st.Close()
	defer s.Close(context.Background())
	if got := s.Agents(); !slices.EqualFunc(got, agents, sameAgent) {
		t.Fatalf("reopened, the society has agents\n%+v\nwant\n%+v", got, agents)
	}
	if _, data, err := s.GetArtifact(ctx, as.ArtifactRefPrefix+page.ID); err != nil || string(data) != demo.Page {
		t.Fatalf("reopened, artifact %s: %q, %v", page.ID, data, err)
	}

	// The event log goes on from the first run's, which it keeps.
	if got := readEvents(t, s); len(got) < len(events) || !slices.Equal(got[:len(events)], events) {
		t.Fatalf("reopened, the events are %v, want %v first", got, events)
	}
	second := play(s)
	if got := readEvents(t, s); len(got) <= len(events) || got[len(events)] != events[len(events)-1]+1 {
		t.Errorf("the second run's events do not follow the first's %d", len(events))
	}
	if second.ID == page.ID {
		t.Errorf("the second run's artifact reuses the id %s", page.ID)
	}
	after := s.Agents()
	if len(after) != 6 {
		t.Fatalf("after the second run: %d agents, want 6", len(after))
	}
	seen := map[string]bool{}
	for _, a := range after {
		if seen[a.ID] {
			t.Errorf("agent id %s is used twice", a.ID)
		}
		seen[a.ID] = true
	}
	leads := 0
	for _, r := range s.Roles() {
		if r.Name == "lead" {
			leads++
		}
	}
	if leads != 1 {
		t.Errorf("%d lead roles, want root's one, reused", leads)
	}
}

// sameAgent compares the records of an agent, not its live status.
func sameAgent(a, b as.Agent) bool {
	return a.ID == b.ID && a.RoleID == b.RoleID && a.ParentID == b.ParentID && a.TaskID == b.TaskID && a.CreatedAt.Equal(b.CreatedAt)
}

// readEvents returns the Seqs of every event s can read, failing t on a
// gap or an error.
func readEvents(t *testing.T, s *as.Society) []uint64 {
	t.Helper()
	var seqs []uint64
	for e, err := range s.Events(t.Context(), 1) {
		if err != nil {
			t.Fatal(err)
		}
		if len(seqs) > 0 && e.Seq != seqs[len(seqs)-1]+1 {
			t.Fatalf("event %d follows %d", e.Seq, seqs[len(seqs)-1])
		}
		seqs = append(seqs, e.Seq)
	}
	if len(seqs) == 0 || seqs[0] != 1 {
		t.Fatalf("the events start at %v, want 1", seqs)
	}
	return seqs
}
