package agentsociety_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	as "agentsociety"
	"agentsociety/store"
)

// The ends of handled messages are written behind, and Close writes every
// one: a society closed after root handled its requirements leaves none of
// them pending in a durable store, however the store's writes interleave.
func TestClose_RecordsEveryHandledMessage(t *testing.T) {
	const rounds, each = 20, 30
	for range rounds {
		st := &slowStore{Store: store.NewMemory()}
		handled := make(chan string, each)
		s, closeIt := openSociety(t, as.Config{Store: st, Root: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
			handled <- m.ID
			return nil
		})})
		for range each {
			if _, err := s.SubmitRequirement(context.Background(), "r"); err != nil {
				t.Fatal(err)
			}
		}
		for range each {
			recv(t, handled, "root's handling of a requirement")
		}
		closeIt()
		loaded, err := st.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(loaded.Pending) != 0 {
			t.Fatalf("after Close, %d handled messages are still pending in the store", len(loaded.Pending))
		}
	}
}

// failingFinishes is an in-memory store, not volatile, whose Applies that
// only finish messages fail while fail is set; failed receives the ids of
// each one that failed.
type failingFinishes struct {
	store.Store
	fail   atomic.Bool
	failed chan []string
}

func (f *failingFinishes) Apply(ctx context.Context, c store.Change) error {
	rest := c
	rest.Finished = nil
	if f.fail.Load() && len(c.Finished) > 0 && rest.Empty() {
		f.failed <- c.Finished
		return errors.New("the store is unreachable for a while")
	}
	return f.Store.Apply(ctx, c)
}

// A write of handled messages' ends that fails is made again: the next
// one, or Close's, carries them. They were dropped, so that a store that
// failed once left the messages pending, and a society reopened on it
// handled them again.
func TestFinisher_FailedWriteIsMadeAgain(t *testing.T) {
	ctx := context.Background()
	st := &failingFinishes{Store: store.NewMemory(), failed: make(chan []string, 16)}
	st.fail.Store(true)
	handled := make(chan string, 16)
	s, closeIt := openSociety(t, as.Config{Store: st, Root: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		handled <- m.Text()
		return nil
	})})
	if _, err := s.SubmitRequirement(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	recv(t, handled, "root's handling of the first requirement")
	recv(t, st.failed, "the failed write of its end")
	st.fail.Store(false)
	if _, err := s.SubmitRequirement(ctx, "second"); err != nil {
		t.Fatal(err)
	}
	recv(t, handled, "root's handling of the second requirement")
	closeIt()
	if p := pendingTexts(t, st); len(p) != 0 {
		t.Fatalf("after Close, handled messages pending in the store: %q", p)
	}

	// The same, with Close's write the first after the failure.
	st = &failingFinishes{Store: store.NewMemory(), failed: make(chan []string, 16)}
	st.fail.Store(true)
	s, closeIt = openSociety(t, as.Config{Store: st, Root: as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		handled <- m.Text()
		return nil
	})})
	if _, err := s.SubmitRequirement(ctx, "only"); err != nil {
		t.Fatal(err)
	}
	recv(t, handled, "root's handling of the requirement")
	recv(t, st.failed, "the failed write of its end")
	st.fail.Store(false)
	closeIt()
	if p := pendingTexts(t, st); len(p) != 0 {
		t.Fatalf("after Close, handled messages pending in the store: %q", p)
	}
}

// The record that the host has a message to user is made again when it
// fails once, as the ends of handled messages are: it was given up, so
// that the message stayed pending and the host had it again from a society
// reopened on the store.
func TestUserMessageEndThatFailedIsRecordedAgain(t *testing.T) {
	ctx := context.Background()
	st := &failingFinishes{Store: store.NewMemory(), failed: make(chan []string, 16)}
	got := make(chan as.Message, 16)
	s, closeIt := openSociety(t, as.Config{Store: st, Root: noop, OnUserMessage: func(m as.Message) { got <- m }})
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "", noop).ID)
	st.fail.Store(true)
	m, err := lead.SendText(ctx, as.UserID, "report")
	if err != nil {
		t.Fatal(err)
	}
	recv(t, got, "the report to user")
	if ids := recv(t, st.failed, "the failed record that the host has it"); len(ids) != 1 || ids[0] != m.ID {
		t.Fatalf("the failed record finishes %q, want the report %s", ids, m.ID)
	}
	st.fail.Store(false)
	closeIt()
	if p := pendingTexts(t, st); len(p) != 0 {
		t.Fatalf("after Close, messages pending in the store: %q", p)
	}
}
