package agentsociety_test

import (
	"context"
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
