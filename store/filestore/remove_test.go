package filestore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"agentsociety/store"
)

// removeFixture returns changes that build an organisation, remove part of
// it (agents with their registries and histories, a role, a request, single
// contact entries), and add some of it again.
func removeFixture() []store.Change {
	agent := func(id, status string) store.Agent {
		return store.Agent{ID: id, RoleID: "r1", ParentID: "root", Status: status, Brief: json.RawMessage(`{"objective":"` + id + `"}`), CreatedAt: base}
	}
	contact := func(owner, id, note string) store.ContactEntry {
		return store.ContactEntry{Owner: owner, Contact: store.Contact{ID: id, Role: "r1", Source: "introduction", Note: note, AddedAt: base}}
	}
	return []store.Change{
		{
			Roles:     []store.Role{{ID: "r1", Name: "writer"}, {ID: "r2", Name: "critic"}},
			Agents:    []store.Agent{agent("a1", "idle"), agent("a2", "idle"), agent("a3", "idle")},
			Contacts:  []store.ContactEntry{contact("a1", "root", "old"), contact("a2", "a1", ""), contact("root", "a1", "old"), contact("root", "a2", ""), contact("ghost", "a2", "")},
			Requests:  []store.Request{{ID: "q1", From: "a1", To: "a2", Status: "open"}, {ID: "q2", From: "a2", To: "a3", Status: "open"}},
			Histories: []store.History{{AgentID: "a1", Summary: "old", Messages: raws(`"a1 old"`)}, {AgentID: "a2", Messages: raws(`"a2"`)}},
			States:    []store.StateEntry{{Scope: "agent:a1", Key: "k", Value: json.RawMessage(`1`)}},
		},
		{HistoryAppends: []store.HistoryAppend{{AgentID: "a1", Messages: raws(`"a1 turn"`)}}},
		// Only a removal: the record must not pass for the journal's
		// marker, which holds no change.
		{Remove: store.Removal{
			Agents:   []string{"a1", "ghost", "nobody"},
			Roles:    []string{"r1"},
			Requests: []string{"q1"},
			Contacts: []store.ContactKey{{Owner: "root", ID: "a1"}, {Owner: "a2", ID: "a1"}},
		}},
		// Added again: new records, listed last, with nothing of the old.
		{
			Roles:          []store.Role{{ID: "r1", Name: "poet"}},
			Agents:         []store.Agent{agent("a1", "busy")},
			HistoryAppends: []store.HistoryAppend{{AgentID: "a1", Messages: raws(`"a1 new"`)}},
			Contacts:       []store.ContactEntry{contact("root", "a1", "new")},
		},
		// Added and removed in one change: absent after it.
		{
			Agents:   []store.Agent{agent("a4", "idle")},
			Contacts: []store.ContactEntry{contact("a4", "root", "")},
			Requests: []store.Request{{ID: "q3", Status: "open"}},
			Remove:   store.Removal{Agents: []string{"a4"}, Requests: []string{"q3"}},
		},
	}
}

// TestRemoveDurable checks that removals survive what the store does with
// its files: a crash (the journal replayed over the snapshots), a close
// (compacted into snapshots), a compaction while open, and further
// reopenings; that a removed record is in no snapshot; and that a record
// added again keeps its new place.
func TestRemoveDurable(t *testing.T) {
	cs := removeFixture()
	want := memoryState(t, cs)
	if len(want.Agents) != 3 || want.Agents[2].ID != "a1" || want.Agents[2].Status != "busy" {
		t.Fatalf("the fixture's state is not what this test is about: %+v", want.Agents)
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, v.opts)
			apply(t, s, cs[0], cs[1])
			closeStore(t, s) // the snapshots hold a1, r1, q1 and the rest
			s = open(t, dir, v.opts)
			apply(t, s, cs[2:]...)
			checkState(t, s, want)

			// A crash: the journal's removals replayed over snapshots
			// that hold what they removed.
			c := open(t, crashCopy(t, s), v.opts)
			checkState(t, c, want)
			closeStore(t, c)

			// A compaction while open, then a crash.
			if err := s.compactNow(); err != nil {
				t.Fatal(err)
			}
			c = open(t, crashCopy(t, s), v.opts)
			checkState(t, c, want)
			closeStore(t, c)

			closeStore(t, s)
			for _, name := range []string{orgName, historiesName} {
				data, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				for _, gone := range []string{`"old"`, `a1 old`, `a1 turn`, `"ghost"`, `"q1"`, `"a4"`, `"q3"`, `"critic"`} {
					if name == orgName && gone == `"critic"` {
						continue // r2 is kept
					}
					if bytes.Contains(data, []byte(gone)) {
						t.Errorf("%s holds %s, which was removed:\n%s", name, gone, data)
					}
				}
			}
			for range 2 {
				s = open(t, dir, v.opts)
				checkState(t, s, want)
				closeStore(t, s)
			}
		})
	}
}

// TestRemoveTornTail checks that a removal cut short by a crash is not
// applied, and that the store takes it again.
func TestRemoveTornTail(t *testing.T) {
	cs := removeFixture()
	noCompact := Options{CompactAfter: -1, CompactAfterBytes: -1}
	s := open(t, t.TempDir(), noCompact)
	apply(t, s, cs[:3]...)
	src := crashCopy(t, s)
	closeStore(t, s)
	journal, err := os.ReadFile(filepath.Join(src, journalName))
	if err != nil {
		t.Fatal(err)
	}
	offs := frames(t, journal)
	last := offs[len(offs)-1]
	for _, cut := range []int64{last + 1, last + frameHeader, int64(len(journal)) - 1} {
		c := open(t, tornDir(t, src, journal[:cut]), noCompact)
		checkState(t, c, memoryState(t, cs[:2]))
		apply(t, c, cs[2:]...)
		checkState(t, c, memoryState(t, cs))
		closeStore(t, c)
	}
}

// TestRemoveBetweenSnapshots checks the snapshots of a compaction cut short:
// each part of the state replays the records its snapshot lacks, and a
// removal replayed into one part does not touch another. Here a1 is removed
// and added again between the snapshots' records, so the newer snapshots
// hold the new a1 (its record, registry or history) that replaying the
// removal into the part that lacks it must leave alone.
func TestRemoveBetweenSnapshots(t *testing.T) {
	cs := removeFixture()
	want := memoryState(t, cs)
	noCompact := Options{CompactAfter: -1, CompactAfterBytes: -1}
	dir := t.TempDir()
	s := open(t, dir, noCompact)
	apply(t, s, cs[:2]...)
	if err := s.compactNow(); err != nil {
		t.Fatal(err)
	}
	apply(t, s, cs[2:]...)
	before := crashCopy(t, s) // the snapshots at record 2, the journal from there
	if err := s.compactNow(); err != nil {
		t.Fatal(err)
	}
	after := crashCopy(t, s) // the snapshots at the last record
	closeStore(t, s)

	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.name
	}
	// Every split of the parts into those already written and those not:
	// the store writes them in order, so a crash leaves a prefix written,
	// but Open does not rely on it.
	for mask := 1; mask < 1<<len(parts)-1; mask++ {
		var newer []string
		for i, name := range names {
			if mask&(1<<i) != 0 {
				newer = append(newer, name)
			}
		}
		t.Run(fmt.Sprint(newer), func(t *testing.T) {
			d := t.TempDir()
			copyDir(t, before, d)
			for _, name := range newer {
				data, err := os.ReadFile(filepath.Join(after, name))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d, name), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if !midCompaction(t, d) {
				t.Fatal("the directory does not look like a compaction cut short")
			}
			c := open(t, d, noCompact)
			checkState(t, c, want)
			closeStore(t, c)
			c = open(t, d, noCompact)
			defer closeStore(t, c)
			checkState(t, c, want)
		})
	}
}

// TestRemoveRecordSize checks that a removal costs the journal what it
// removes, however large the organisation.
func TestRemoveRecordSize(t *testing.T) {
	s := open(t, t.TempDir(), Options{CompactAfter: -1, CompactAfterBytes: -1})
	defer closeStore(t, s)
	var big store.Change
	for i := range 3000 {
		id := fmt.Sprintf("agent-%d", i)
		big.Agents = append(big.Agents, store.Agent{ID: id, RoleID: "r", ParentID: "root", Status: "idle"})
		big.Contacts = append(big.Contacts, store.ContactEntry{Owner: id, Contact: store.Contact{ID: "root", Role: "root", Source: "parent"}})
	}
	apply(t, s, big)
	for _, n := range []int{1, 10, 100} {
		var r store.Removal
		for i := range n {
			r.Agents = append(r.Agents, fmt.Sprintf("agent-%d", n*10+i))
		}
		s.mu.Lock()
		before := s.size
		s.mu.Unlock()
		apply(t, s, store.Change{Remove: r})
		s.mu.Lock()
		grew := s.size - before
		s.mu.Unlock()
		if limit := int64(64 + 16*n); grew > limit {
			t.Errorf("removing %d agents took %d bytes of journal, over %d", n, grew, limit)
		}
	}
	if got := len(load(t, s).Agents); got != 3000-111 {
		t.Errorf("%d agents left, want %d", got, 3000-111)
	}
}

// TestRemoveUnstorable checks that a removal naming an id JSON cannot keep
// is refused whole, as any change the store cannot keep faithfully is:
// written as JSON, it would remove another id.
func TestRemoveUnstorable(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	defer closeStore(t, s)
	good := store.Change{Agents: []store.Agent{{ID: "a\ufffd"}}, Roles: []store.Role{{ID: "r"}}}
	apply(t, s, good)
	for name, r := range map[string]store.Removal{
		"agent":         {Agents: []string{"a\xff"}},
		"role":          {Roles: []string{"r", "\xff"}},
		"request":       {Requests: []string{"\xc3"}},
		"contact id":    {Contacts: []store.ContactKey{{Owner: "a", ID: "\xff"}}},
		"contact owner": {Contacts: []store.ContactKey{{Owner: "\xff", ID: "a"}}},
	} {
		if err := s.Apply(t.Context(), store.Change{Remove: r}); err == nil {
			t.Errorf("%s: Apply of a removal naming an id that is not UTF-8 succeeded", name)
		}
	}
	checkState(t, s, memoryState(t, []store.Change{good}))
}

// beforeRemoveDir is a directory written by the store before removals
// were recorded: snapshots at record 30 and a journal of records 31 to 45
// (as a crash leaves it), holding crashChange(1) to crashChange(45)
// without their removals.
const beforeRemoveDir = "testdata/before-remove"

// TestOpenBeforeRemove checks that a directory written before removals
// opens as it did, and takes removals.
func TestOpenBeforeRemove(t *testing.T) {
	var cs []store.Change
	for n := 1; n <= 45; n++ {
		c := crashChange(n)
		c.Remove = store.Removal{}
		cs = append(cs, c)
	}
	dir := t.TempDir()
	copyDir(t, beforeRemoveDir, dir)
	s := open(t, dir, Options{})
	checkState(t, s, memoryState(t, cs))
	st := load(t, s)
	if len(st.Agents) < 3 || len(st.Histories) == 0 || len(st.Requests) == 0 {
		t.Fatalf("the fixture holds too little to remove from: %d agents, %d histories, %d requests", len(st.Agents), len(st.Histories), len(st.Requests))
	}
	var owner string
	for o := range st.Contacts {
		owner = o
	}
	rm := store.Change{Remove: store.Removal{
		Agents:   []string{st.Agents[1].ID, st.Histories[0].AgentID},
		Requests: []string{st.Requests[0].ID},
		Roles:    []string{st.Roles[0].ID},
		Contacts: []store.ContactKey{{Owner: owner, ID: st.Contacts[owner][0].ID}},
	}}
	apply(t, s, rm)
	cs = append(cs, rm)
	want := memoryState(t, cs)
	checkState(t, s, want)
	checkCrashCopy(t, s, want)
	closeStore(t, s)
	s = open(t, dir, Options{})
	defer closeStore(t, s)
	checkState(t, s, want)
	if slices.ContainsFunc(load(t, s).Agents, func(a store.Agent) bool { return a.ID == rm.Remove.Agents[0] }) {
		t.Errorf("agent %s is back", rm.Remove.Agents[0])
	}
}
