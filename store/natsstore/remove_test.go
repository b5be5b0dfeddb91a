package natsstore_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"agentsociety/store"
	"agentsociety/store/natsstore"
	"agentsociety/store/natsstore/natstest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var removeAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func agentRec(id, status string) store.Agent {
	return store.Agent{ID: id, RoleID: "r", ParentID: "root", Status: status, CreatedAt: removeAt}
}

func contactOf(owner, id string) store.ContactEntry {
	return store.ContactEntry{Owner: owner, Contact: store.Contact{ID: id, Role: "r", Source: "introduction", AddedAt: removeAt}}
}

func pendingMsg(id string) store.Message {
	return store.Message{ID: id, Seq: 1, From: "user", To: "root", Type: "general", SentAt: removeAt}
}

func mustApply(t *testing.T, s *natsstore.Store, c store.Change) {
	t.Helper()
	if err := s.Apply(t.Context(), c); err != nil {
		t.Fatal(err)
	}
}

func checkLoad(t *testing.T, s *natsstore.Store, want store.State) {
	t.Helper()
	got, err := s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.EquateApproxTime(0)); diff != "" {
		t.Errorf("Load mismatch (-want +got):\n%s", diff)
	}
}

// A change that finishes a message and removes an agent is one change, not
// a change that only finishes messages (which the store may write message
// by message): its removal is written, and tried again when it lost to
// another store's write, as any record's.
func TestRemove_WithFinished(t *testing.T) {
	url := natstest.Server(t)
	a := open(t, url, natsstore.Options{Bucket: "shared"})
	b := open(t, url, natsstore.Options{Bucket: "shared"})
	mustApply(t, a, store.Change{Agents: []store.Agent{agentRec("a1", "idle")}, Accepted: []store.Message{pendingMsg("m1")}})
	if _, err := b.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	// b's knowledge of a1 is stale now.
	mustApply(t, a, store.Change{Agents: []store.Agent{agentRec("a1", "busy")}})
	mustApply(t, b, store.Change{Finished: []string{"m1"}, Remove: store.Removal{Agents: []string{"a1"}}})
	checkLoad(t, a, store.State{})
}

// bucketKeys returns the keys that hold a value in bucket, read with a
// connection of the test's own.
func bucketKeys(t *testing.T, url, bucket string) []string {
	t.Helper()
	js := jetStream(t, url)
	kv, err := js.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	lister, err := kv.ListKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// keysOf returns the keys of agent id's records among keys: its record,
// the registry it owns, its history's head and messages.
func keysOf(keys []string, id string) []string {
	t := base64.RawURLEncoding.EncodeToString([]byte(id))
	var out []string
	for _, k := range keys {
		if k == "a."+t || k == "h."+t || strings.HasPrefix(k, "c."+t+".") || strings.HasPrefix(k, "hm."+t+".") {
			out = append(out, k)
		}
	}
	return out
}

// A removal survives the store: a store opened again on the bucket finds
// what was removed gone, and removes in turn what it found, registries of
// owners without a record included, leaving no key of theirs behind.
func TestRemove_SurvivesReopen(t *testing.T) {
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprintf("Fence=%v", fence), func(t *testing.T) {
			url := natstest.Server(t)
			opts := natsstore.Options{Bucket: "again", Fence: fence}
			first := open(t, url, opts)
			mustApply(t, first, store.Change{
				Agents:   []store.Agent{agentRec("a1", "idle"), agentRec("a2", "idle"), agentRec("a3", "idle")},
				Contacts: []store.ContactEntry{contactOf("a1", "root"), contactOf("a2", "root"), contactOf("a2", "a1"), contactOf("ghost", "a3"), contactOf("root", "a1"), contactOf("root", "a2")},
				HistoryAppends: []store.HistoryAppend{
					{AgentID: "a1", Messages: msgs("1", "2")},
					{AgentID: "a2", Messages: msgs("3")},
				},
			})
			mustApply(t, first, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a2", Drop: 1, Messages: msgs("4", "5")}}})
			mustApply(t, first, store.Change{Remove: store.Removal{Agents: []string{"a1"}, Contacts: []store.ContactKey{{Owner: "root", ID: "a1"}, {Owner: "a2", ID: "a1"}}}})
			first.Close()

			second := open(t, url, opts)
			checkLoad(t, second, store.State{
				Agents:    []store.Agent{agentRec("a2", "idle"), agentRec("a3", "idle")},
				Contacts:  map[string][]store.Contact{"a2": {contactOf("a2", "root").Contact}, "ghost": {contactOf("ghost", "a3").Contact}, "root": {contactOf("root", "a2").Contact}},
				Histories: []store.History{{AgentID: "a2", Messages: msgs("4", "5"), Dropped: 1}},
			})
			mustApply(t, second, store.Change{Remove: store.Removal{Agents: []string{"a2", "ghost"}, Contacts: []store.ContactKey{{Owner: "root", ID: "a2"}}}})
			checkLoad(t, second, store.State{Agents: []store.Agent{agentRec("a3", "idle")}})
			keys := bucketKeys(t, url, "again")
			for _, id := range []string{"a1", "a2", "ghost"} {
				if left := keysOf(keys, id); len(left) > 0 {
					t.Errorf("the bucket holds keys of %s, removed: %q", id, left)
				}
			}
		})
	}
}

// A history removed leaves none of its messages in the bucket, though
// there are more than a batch takes beside the change, and a history the
// agent starts again after its removal holds only its own messages, on
// keys of its own: the deletions of the old ones cannot reach them.
func TestRemove_HistoryMessagesGo(t *testing.T) {
	url := natstest.Server(t)
	s := open(t, url, natsstore.Options{Bucket: "hist", MaxBatch: 8})
	for i := range 4 {
		mustApply(t, s, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a1", Messages: msgs(fmt.Sprint(i), "x", "y", "z", "w")}}})
	}
	old := keysOf(bucketKeys(t, url, "hist"), "a1")
	if len(old) != 21 {
		t.Fatalf("the history of 20 messages is %d keys, want 21: %q", len(old), old)
	}
	mustApply(t, s, store.Change{Agents: []store.Agent{agentRec("a1", "idle")}})
	mustApply(t, s, store.Change{Remove: store.Removal{Agents: []string{"a1"}}})
	if left := keysOf(bucketKeys(t, url, "hist"), "a1"); len(left) > 0 {
		t.Errorf("the bucket holds keys of a1, removed: %q", left)
	}
	mustApply(t, s, store.Change{Agents: []store.Agent{agentRec("a1", "busy")}, HistoryAppends: []store.HistoryAppend{{AgentID: "a1", Messages: msgs("new")}}})
	checkLoad(t, s, store.State{Agents: []store.Agent{agentRec("a1", "busy")}, Histories: []store.History{{AgentID: "a1", Messages: msgs("new")}}})
	for _, k := range keysOf(bucketKeys(t, url, "hist"), "a1") {
		if strings.HasPrefix(k, "hm.") && slices.Contains(old, k) {
			t.Errorf("the new history has its message on key %s, which the removed one had", k)
		}
	}
}

// A removed record does not come back once the marker its deletion left
// has expired, and is a new one when added again after that, listed
// last: the store expected the marker's revision, which the bucket no
// longer has, and learns it.
func TestRemove_MarkerExpired(t *testing.T) {
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprintf("Fence=%v", fence), func(t *testing.T) {
			url := natstest.Server(t)
			bucket := fmt.Sprintf("ttl%v", fence)
			s := open(t, url, natsstore.Options{Bucket: bucket, Fence: fence, MarkerTTL: time.Second})
			mustApply(t, s, store.Change{
				Agents:   []store.Agent{agentRec("a1", "idle"), agentRec("a2", "idle")},
				Contacts: []store.ContactEntry{contactOf("a1", "root"), contactOf("root", "a1"), contactOf("root", "a2")},
			})
			mustApply(t, s, store.Change{Remove: store.Removal{Agents: []string{"a1"}, Contacts: []store.ContactKey{{Owner: "root", ID: "a1"}}}})
			waitExpired(t, url, bucket, "a."+base64.RawURLEncoding.EncodeToString([]byte("a1")))
			checkLoad(t, s, store.State{
				Agents:   []store.Agent{agentRec("a2", "idle")},
				Contacts: map[string][]store.Contact{"root": {contactOf("root", "a2").Contact}},
			})
			mustApply(t, s, store.Change{
				Agents:   []store.Agent{agentRec("a1", "busy")},
				Contacts: []store.ContactEntry{contactOf("root", "a1")},
			})
			checkLoad(t, s, store.State{
				Agents:   []store.Agent{agentRec("a2", "idle"), agentRec("a1", "busy")},
				Contacts: map[string][]store.Contact{"root": {contactOf("root", "a2").Contact, contactOf("root", "a1").Contact}},
			})
		})
	}
}

// waitExpired waits until the bucket's stream holds nothing for key: the
// marker of its deletion has expired.
func waitExpired(t *testing.T, url, bucket, key string) {
	t.Helper()
	js := jetStream(t, url)
	stream, err := js.Stream(t.Context(), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := stream.GetLastMsgForSubject(t.Context(), "$KV."+bucket+"."+key)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the marker of %s has not expired", key)
		}
	}
}

// A deposed store's removal is refused and removes nothing.
func TestFence_DeposedStoreRemovesNothing(t *testing.T) {
	url := natstest.Server(t)
	old := open(t, url, natsstore.Options{Bucket: "fenced", Fence: true})
	mustApply(t, old, store.Change{
		Agents:         []store.Agent{agentRec("a1", "idle")},
		Contacts:       []store.ContactEntry{contactOf("a1", "root"), contactOf("root", "a1")},
		HistoryAppends: []store.HistoryAppend{{AgentID: "a1", Messages: msgs("1")}},
	})
	next := open(t, url, natsstore.Options{Bucket: "fenced", Fence: true})
	for _, r := range []store.Removal{
		{Agents: []string{"a1"}},
		{Contacts: []store.ContactKey{{Owner: "root", ID: "a1"}}},
	} {
		if err := old.Apply(t.Context(), store.Change{Remove: r}); !errors.Is(err, natsstore.ErrFenced) {
			t.Errorf("removal %+v by the deposed store: %v, want ErrFenced", r, err)
		}
	}
	checkLoad(t, next, store.State{
		Agents:    []store.Agent{agentRec("a1", "idle")},
		Contacts:  map[string][]store.Contact{"a1": {contactOf("a1", "root").Contact}, "root": {contactOf("root", "a1").Contact}},
		Histories: []store.History{{AgentID: "a1", Messages: msgs("1")}},
	})
}

// Removals go out in the group commit with the changes queued with them,
// in order: a change on keys a removal deletes waits for it, and a
// removal sent after a change the server refused (with Fence, refused
// with it) is tried again whole. The bucket's messages are limited to
// 1 KB, so that the server itself refuses a change.
func TestRemove_GroupCommit(t *testing.T) {
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprintf("Fence=%v", fence), func(t *testing.T) {
			url := natstest.Server(t)
			bucket := fmt.Sprintf("limited%v", fence)
			limitedBucket(t, url, bucket)
			log := &records{}
			s := open(t, url, natsstore.Options{Bucket: bucket, Fence: fence, Logger: slog.New(log)})
			mustApply(t, s, store.Change{
				Agents:   []store.Agent{agentRec("a1", "idle"), agentRec("a2", "idle"), agentRec("a3", "idle")},
				Contacts: []store.ContactEntry{contactOf("a1", "root"), contactOf("root", "a1"), contactOf("root", "a2")},
				Accepted: []store.Message{pendingMsg("m1")},
			})
			big := `"` + strings.Repeat("x", 2000) + `"`
			errs := s.ApplyAll(t.Context(), []store.Change{
				{Remove: store.Removal{Agents: []string{"a1"}, Contacts: []store.ContactKey{{Owner: "root", ID: "a1"}}}},
				{States: []store.StateEntry{state("s", "big", big)}}, // refused by the server
				{Finished: []string{"m1"}, Remove: store.Removal{Agents: []string{"a2"}}},
				{Remove: store.Removal{Agents: []string{"a3"}, Contacts: []store.ContactKey{{Owner: "root", ID: "a2"}}}},
				{Agents: []store.Agent{agentRec("a1", "busy")}, Contacts: []store.ContactEntry{contactOf("root", "a1")}},
			})
			for i, err := range errs {
				if (err != nil) != (i == 1) {
					t.Errorf("change %d: %v", i, err)
				}
			}
			checkLoad(t, s, store.State{
				Agents:   []store.Agent{agentRec("a1", "busy")},
				Contacts: map[string][]store.Contact{"root": {contactOf("root", "a1").Contact}},
			})
			select {
			case <-s.Fenced():
				t.Fatal("the store fenced itself over a change the server refused")
			default:
			}
			if fence && len(log.msgs) == 0 {
				t.Error("no change was tried again after the refused one")
			}
		})
	}
}

// The index lists a registry's keys so that removing its owner costs the
// registry: entries removed one by one, and added again, leave a list
// that follows the entries live, and none once the owner is removed.
func TestRemove_RegistryIndex(t *testing.T) {
	s := open(t, natstest.Server(t), natsstore.Options{})
	const n = 200
	var add store.Change
	for i := range n {
		add.Contacts = append(add.Contacts, contactOf("root", fmt.Sprint("a", i)))
	}
	mustApply(t, s, add)
	live := n
	check := func() {
		t.Helper()
		keys, dead := s.Registry("root")
		if keys-dead != live || keys > 2*live+1 {
			t.Fatalf("the index lists %d keys under root, %d of them dead, for %d entries", keys, dead, live)
		}
	}
	check()
	for round := range 3 {
		for i := 0; i < n; i += 10 {
			var r store.Removal
			for j := i; j < i+9; j++ { // nine of ten
				r.Contacts = append(r.Contacts, store.ContactKey{Owner: "root", ID: fmt.Sprint("a", j)})
			}
			mustApply(t, s, store.Change{Remove: r})
			live -= 9
			check()
		}
		if round < 2 {
			mustApply(t, s, add)
			live = n
			check()
		}
	}
	var want []store.Contact
	for i := 9; i < n; i += 10 {
		want = append(want, contactOf("root", fmt.Sprint("a", i)).Contact)
	}
	checkLoad(t, s, store.State{Contacts: map[string][]store.Contact{"root": want}})
	mustApply(t, s, store.Change{Remove: store.Removal{Agents: []string{"root"}}})
	if keys, dead := s.Registry("root"); keys != 0 || dead != 0 {
		t.Errorf("the index lists %d keys under root, %d of them dead, after root's removal", keys, dead)
	}
	checkLoad(t, s, store.State{})
}

// manyAgents returns a change adding n agents, each with a registry of
// one entry, an entry in root's and a history of two messages.
func manyAgents(n int) (store.Change, []string) {
	var c store.Change
	var ids []string
	for i := range n {
		id := fmt.Sprintf("a%02d", i)
		ids = append(ids, id)
		c.Agents = append(c.Agents, agentRec(id, "idle"))
		c.Contacts = append(c.Contacts, contactOf(id, "root"), contactOf("root", id))
		c.HistoryAppends = append(c.HistoryAppends, store.HistoryAppend{AgentID: id, Messages: msgs("1", "2")})
	}
	return c, ids
}

// removeAll returns the removal of ids with their entries in root's
// registry.
func removeAll(ids []string) store.Removal {
	r := store.Removal{Agents: ids}
	for _, id := range ids {
		r.Contacts = append(r.Contacts, store.ContactKey{Owner: "root", ID: id})
	}
	return r
}

// A removal of more records than one atomic batch takes is written all
// the same, as one change: what it removes is gone, with the rest of the
// change, and the bucket keeps nothing of it.
func TestRemove_BeyondOneBatch(t *testing.T) {
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprintf("Fence=%v", fence), func(t *testing.T) {
			url := natstest.Server(t)
			bucket := fmt.Sprintf("big%v", fence)
			s := open(t, url, natsstore.Options{Bucket: bucket, Fence: fence, MaxBatch: 200})
			add, ids := manyAgents(30) // 6 writes each
			mustApply(t, s, add)
			s.SetMaxBatch(10)
			c := store.Change{
				Agents: []store.Agent{agentRec("b", "idle")},
				Remove: removeAll(ids[1:]),
			}
			mustApply(t, s, c)
			want := store.State{
				Agents:    []store.Agent{agentRec("a00", "idle"), agentRec("b", "idle")},
				Contacts:  map[string][]store.Contact{"a00": {contactOf("a00", "root").Contact}, "root": {contactOf("root", "a00").Contact}},
				Histories: []store.History{{AgentID: "a00", Messages: msgs("1", "2")}},
			}
			checkLoad(t, s, want)
			keys := bucketKeys(t, url, bucket)
			for _, id := range ids[1:] {
				if left := keysOf(keys, id); len(left) > 0 {
					t.Errorf("the bucket holds keys of %s, removed: %q", id, left)
				}
			}
			for _, k := range keys {
				if strings.HasPrefix(k, "rm.") {
					t.Errorf("the bucket holds the journal key %s after the removal", k)
				}
			}
			// The rest of the change alone over the limit is refused whole.
			var big store.Change
			for i := range 11 {
				big.Agents = append(big.Agents, agentRec(fmt.Sprint("c", i), "idle"))
			}
			big.Remove = store.Removal{Agents: []string{"a00"}}
			if err := s.Apply(t.Context(), big); err == nil {
				t.Error("a change of 11 records and a removal, with MaxBatch 10: got no error")
			}
			checkLoad(t, s, want)
		})
	}
}

// A removal beyond one batch that stopped after its first (the process
// died) is whole all the same: Load does not list what it removes, and
// the store that loads the bucket deletes it. A record added again
// meanwhile is a new one, which the deletions leave.
func TestRemove_BeyondOneBatchStopped(t *testing.T) {
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprintf("Fence=%v", fence), func(t *testing.T) {
			url := natstest.Server(t)
			bucket := fmt.Sprintf("stopped%v", fence)
			opts := natsstore.Options{Bucket: bucket, Fence: fence}
			first := open(t, url, opts)
			add, ids := manyAgents(30)
			mustApply(t, first, add)
			first.SetMaxBatch(10)
			first.StopAfterJournal(true)
			mustApply(t, first, store.Change{Remove: removeAll(ids[1:])})
			want := store.State{
				Agents:    []store.Agent{agentRec("a00", "idle")},
				Contacts:  map[string][]store.Contact{"a00": {contactOf("a00", "root").Contact}, "root": {contactOf("root", "a00").Contact}},
				Histories: []store.History{{AgentID: "a00", Messages: msgs("1", "2")}},
			}
			checkLoad(t, first, want)
			if left := keysOf(bucketKeys(t, url, bucket), "a01"); len(left) == 0 {
				t.Fatal("the first store deleted a01's keys: it did not stop")
			}
			// a05 again, with a registry and a history of its own.
			mustApply(t, first, store.Change{
				Agents:         []store.Agent{agentRec("a05", "busy")},
				Contacts:       []store.ContactEntry{contactOf("a05", "a00"), contactOf("root", "a05")},
				HistoryAppends: []store.HistoryAppend{{AgentID: "a05", Messages: msgs("new")}},
			})
			want.Agents = append(want.Agents, agentRec("a05", "busy"))
			want.Contacts["a05"] = []store.Contact{contactOf("a05", "a00").Contact}
			want.Contacts["root"] = append(want.Contacts["root"], contactOf("root", "a05").Contact)
			want.Histories = append(want.Histories, store.History{AgentID: "a05", Messages: msgs("new")})
			checkLoad(t, first, want)
			first.Close()

			second := open(t, url, opts)
			checkLoad(t, second, want) // and deletes what the first left
			keys := bucketKeys(t, url, bucket)
			for _, id := range ids[1:] {
				if left := keysOf(keys, id); len(left) > 0 && id != "a05" {
					t.Errorf("the bucket holds keys of %s, removed: %q", id, left)
				}
			}
			for _, k := range keys {
				if strings.HasPrefix(k, "rm.") {
					t.Errorf("the bucket holds the journal key %s after the removal", k)
				}
			}
			checkLoad(t, second, want)
			// And the records left behave as any.
			mustApply(t, second, store.Change{Remove: store.Removal{Agents: []string{"a05"}, Contacts: []store.ContactKey{{Owner: "root", ID: "a05"}}}})
			want.Agents = want.Agents[:1]
			delete(want.Contacts, "a05")
			want.Contacts["root"] = want.Contacts["root"][:1]
			want.Histories = want.Histories[:1]
			checkLoad(t, second, want)
		})
	}
}

// A removal beyond one batch queued with other changes is written on its
// own, after those before it and before those after it, in flights and
// in the rounds of a bucket of several replicas.
func TestRemove_BeyondOneBatchInGroupCommit(t *testing.T) {
	for _, replicated := range []bool{false, true} {
		t.Run(fmt.Sprintf("Replicated=%v", replicated), func(t *testing.T) {
			opts := natsstore.Options{Bucket: "queued", Fence: true, MaxBatch: 200}
			var url string
			if replicated {
				url = natstest.Cluster(t, 3)[0]
				opts.Replicas, opts.Storage = 3, jetstream.MemoryStorage
			} else {
				url = natstest.Server(t)
			}
			s := open(t, url, opts)
			add, ids := manyAgents(30)
			mustApply(t, s, add)
			s.SetMaxBatch(10)
			errs := s.ApplyAll(t.Context(), []store.Change{
				{Agents: []store.Agent{agentRec("a01", "busy")}},
				{Agents: []store.Agent{agentRec("b", "idle")}},
				{Remove: removeAll(ids[1:])},
				{Agents: []store.Agent{agentRec("a02", "busy")}},
			})
			for i, err := range errs {
				if err != nil {
					t.Errorf("change %d: %v", i, err)
				}
			}
			checkLoad(t, s, store.State{
				Agents:    []store.Agent{agentRec("a00", "idle"), agentRec("b", "idle"), agentRec("a02", "busy")},
				Contacts:  map[string][]store.Contact{"a00": {contactOf("a00", "root").Contact}, "root": {contactOf("root", "a00").Contact}},
				Histories: []store.History{{AgentID: "a00", Messages: msgs("1", "2")}},
			})
			if got := keysOf(bucketKeys(t, url, "queued"), "a01"); len(got) > 0 {
				t.Errorf("the bucket holds keys of a01, removed: %q", got)
			}
		})
	}
}

// The deletions that follow a removal's journal expect the revisions it
// removed: a record another store wrote again meanwhile is not deleted.
func TestRemove_BeyondOneBatchRacing(t *testing.T) {
	url := natstest.Server(t)
	a := open(t, url, natsstore.Options{Bucket: "race"})
	b := open(t, url, natsstore.Options{Bucket: "race"})
	add, ids := manyAgents(30)
	mustApply(t, a, add)
	a.SetMaxBatch(10)
	a.StopAfterJournal(true)
	mustApply(t, a, store.Change{Remove: removeAll(ids)})
	// b reads the bucket, journal included, and writes a05 again.
	mustApply(t, b, store.Change{Agents: []store.Agent{agentRec("a05", "busy")}, Contacts: []store.ContactEntry{contactOf("a05", "root")}})
	a.StopAfterJournal(false)
	a.Cleanup(t.Context()) // a knows a05 at the revision removed
	want := store.State{
		Agents:   []store.Agent{agentRec("a05", "busy")},
		Contacts: map[string][]store.Contact{"a05": {contactOf("a05", "root").Contact}},
	}
	keys := bucketKeys(t, url, "race")
	for _, k := range keys {
		if strings.HasPrefix(k, "rm.") {
			t.Errorf("the bucket holds the journal key %s after the removal", k)
		}
	}
	if got := keysOf(keys, "a05"); len(got) != 2 {
		t.Errorf("the bucket holds keys %q of a05, want its record and its registry's entry", got)
	}
	checkLoad(t, a, want)
	checkLoad(t, b, want)
}

// The index forgets a key deleted once its marker has expired: it does
// not grow with every message handled and every record removed.
func TestIndex_ForgetsExpiredMarkers(t *testing.T) {
	url := natstest.Server(t)
	s := open(t, url, natsstore.Options{Bucket: "forget", MarkerTTL: time.Second})
	add, ids := manyAgents(20)
	add.Accepted = []store.Message{pendingMsg("m1")}
	mustApply(t, s, add)
	mustApply(t, s, store.Change{Finished: []string{"m1"}, Remove: removeAll(ids)})
	if n := s.IndexLen(); n < 60 {
		t.Fatalf("the index knows %d keys after the removal, want the 60 deleted at least", n)
	}
	waitExpired(t, url, "forget", "m."+base64.RawURLEncoding.EncodeToString([]byte("m1")))
	mustApply(t, s, store.Change{Agents: []store.Agent{agentRec("b", "idle")}})
	if n := s.IndexLen(); n != 1 {
		t.Errorf("the index knows %d keys once the markers expired, want 1", n)
	}
	// Written again, a removed record is new.
	mustApply(t, s, store.Change{Agents: []store.Agent{agentRec("a03", "busy")}})
	checkLoad(t, s, store.State{Agents: []store.Agent{agentRec("b", "idle"), agentRec("a03", "busy")}})
}

// stateKeys returns the keys of state entries among keys.
func stateKeys(keys []string) []string {
	var out []string
	for _, k := range keys {
		if strings.HasPrefix(k, "s.") {
			out = append(out, k)
		}
	}
	return out
}

// withNotes returns add with a private state entry for each of ids, and
// the change that deletes them.
func withNotes(add store.Change, ids []string) (store.Change, []store.StateEntry) {
	var del []store.StateEntry
	for _, id := range ids {
		add.States = append(add.States, store.StateEntry{Scope: "agent:" + id, Key: "notes", Value: []byte(`"x"`), Writer: id, UpdatedAt: removeAt})
		del = append(del, store.StateEntry{Scope: "agent:" + id, Key: "notes"})
	}
	return add, del
}

// The state entries a change deletes with its removal (the private state
// of the agents it removes, say) go with the removal: a change whose
// deletions are over one batch is written all the same, through the
// journal, and leaves nothing of them in the bucket, whatever the rest of
// the change writes.
func TestRemove_WithStateDeletionsBeyondABatch(t *testing.T) {
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprintf("Fence=%v", fence), func(t *testing.T) {
			url := natstest.Server(t)
			bucket := fmt.Sprintf("states%v", fence)
			opts := natsstore.Options{Bucket: bucket, Fence: fence, MaxBatch: 1000}
			s := open(t, url, opts)
			add, ids := manyAgents(30)
			add, del := withNotes(add, ids)
			add.States = append(add.States, state("ids:", "agent", `"a29"`))
			add.Accepted = []store.Message{pendingMsg("m1")}
			mustApply(t, s, add)
			s.SetMaxBatch(10)
			c := store.Change{
				States:   append(del, state("ids:", "agent", `"a30"`)),
				Finished: []string{"m1"},
				Remove:   removeAll(ids),
			}
			if err := s.Apply(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			want := store.State{States: []store.StateEntry{state("ids:", "agent", `"a30"`)}}
			checkLoad(t, s, want)
			keys := bucketKeys(t, url, bucket)
			if got := stateKeys(keys); len(got) != 1 {
				t.Errorf("the bucket holds state keys %q, want the one of ids:", got)
			}
			for _, k := range keys {
				if strings.HasPrefix(k, "rm.") || strings.HasPrefix(k, "m.") {
					t.Errorf("the bucket holds the key %s after the removal", k)
				}
			}
			s.Close()
			checkLoad(t, open(t, url, opts), want)
		})
	}
}

// A removal that stopped after its journal (the process died) leaves the
// state entries deleted with it hidden from Load, and the next store to
// load the bucket deletes them; an entry written again meanwhile is a new
// one, which stays.
func TestRemove_WithStateDeletionsStopped(t *testing.T) {
	for _, fence := range []bool{false, true} {
		t.Run(fmt.Sprintf("Fence=%v", fence), func(t *testing.T) {
			url := natstest.Server(t)
			bucket := fmt.Sprintf("statesstopped%v", fence)
			opts := natsstore.Options{Bucket: bucket, Fence: fence}
			first := open(t, url, opts)
			add, ids := manyAgents(30)
			add, del := withNotes(add, ids)
			mustApply(t, first, add)
			first.SetMaxBatch(10)
			first.StopAfterJournal(true)
			mustApply(t, first, store.Change{States: del, Remove: removeAll(ids)})
			checkLoad(t, first, store.State{})
			if got := stateKeys(bucketKeys(t, url, bucket)); len(got) != 30 {
				t.Fatalf("the bucket holds %d state keys, want the 30 the journal names: the first store did not stop", len(got))
			}
			again := store.StateEntry{Scope: "agent:a05", Key: "notes", Value: []byte(`"y"`), Writer: "root", UpdatedAt: removeAt}
			mustApply(t, first, store.Change{States: []store.StateEntry{again}})
			want := store.State{States: []store.StateEntry{again}}
			checkLoad(t, first, want)
			first.Close()

			second := open(t, url, opts)
			checkLoad(t, second, want) // and deletes what the first left
			keys := bucketKeys(t, url, bucket)
			if got := stateKeys(keys); len(got) != 1 {
				t.Errorf("the bucket holds state keys %q, want a05's written again", got)
			}
			for _, k := range keys {
				if strings.HasPrefix(k, "rm.") {
					t.Errorf("the bucket holds the journal key %s after the removal", k)
				}
			}
			checkLoad(t, second, want)
			mustApply(t, second, store.Change{States: []store.StateEntry{{Scope: "agent:a05", Key: "notes"}}})
			checkLoad(t, second, store.State{})
		})
	}
}

// The batches that delete what a removal beyond one batch removed leave
// the store to other calls in between: a change applied then that writes
// a removed record again keeps it, and a Load lists none of the others
// and deletes them itself.
func TestRemove_BeyondOneBatchLetsOthersIn(t *testing.T) {
	for _, fence := range []bool{false, true} {
		for _, load := range []bool{false, true} {
			t.Run(fmt.Sprintf("Fence=%v/Load=%v", fence, load), func(t *testing.T) {
				url := natstest.Server(t)
				bucket := fmt.Sprintf("between%v%v", fence, load)
				s := open(t, url, natsstore.Options{Bucket: bucket, Fence: fence})
				add, ids := manyAgents(30)
				add, del := withNotes(add, ids)
				mustApply(t, s, add)
				s.SetMaxBatch(10)
				var calls int
				want := store.State{Agents: []store.Agent{agentRec("a29", "busy")}}
				s.BetweenBatches(func() {
					calls++
					if calls > 1 {
						return
					}
					if !s.Unlocked() {
						t.Error("the store is locked between the batches of a removal")
						return
					}
					mustApply(t, s, store.Change{Agents: []store.Agent{agentRec("a29", "busy")}})
					if load {
						checkLoad(t, s, want)
					}
				})
				mustApply(t, s, store.Change{States: del, Remove: removeAll(ids)})
				if calls == 0 || load && calls > 1 {
					t.Errorf("called %d times between the batches", calls)
				}
				checkLoad(t, s, want)
				keys := bucketKeys(t, url, bucket)
				if got := keysOf(keys, "a29"); len(got) != 1 {
					t.Errorf("the bucket holds keys %q of a29, want its record", got)
				}
				for _, id := range ids[:29] {
					if left := keysOf(keys, id); len(left) > 0 {
						t.Errorf("the bucket holds keys of %s, removed: %q", id, left)
					}
				}
				for _, k := range keys {
					if strings.HasPrefix(k, "rm.") || strings.HasPrefix(k, "s.") {
						t.Errorf("the bucket holds the key %s after the removal", k)
					}
				}
			})
		}
	}
}

// jetStream returns a JetStream client of the test's own on url, closed
// when t ends.
func jetStream(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// limitedBucket makes bucket on url with its messages limited to 1 KB, so
// that the server itself refuses a change with a larger value.
func limitedBucket(t *testing.T, url, bucket string) {
	t.Helper()
	if _, err := jetStream(t, url).CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: bucket, History: 1, MaxValueSize: 1024}); err != nil {
		t.Fatal(err)
	}
}

// Two stores without Fence: a history that another store appends to while
// this one removes its agent through a journal keeps the messages its new
// head covers, and the bucket still loads.
func TestRemove_JournalLeavesAHistoryWrittenAgain(t *testing.T) {
	url := natstest.Server(t)
	a := open(t, url, natsstore.Options{Bucket: "h"})
	b := open(t, url, natsstore.Options{Bucket: "h"})
	add, ids := manyAgents(30)
	mustApply(t, a, add)
	if _, err := b.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	a.SetMaxBatch(10)
	a.BetweenBatches(func() {
		a.BetweenBatches(nil)
		mustApply(t, b, store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a05", Messages: msgs("3")}}})
	})
	mustApply(t, a, store.Change{Remove: removeAll(ids)})
	for _, s := range []*natsstore.Store{a, b} {
		if _, err := s.Load(t.Context()); err != nil {
			t.Errorf("Load: %v", err)
		}
	}
}
