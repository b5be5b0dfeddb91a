package filestore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agentsociety/store"
)

// journalFixture returns a store directory whose journal holds 12 records
// and which has no snapshots, the changes the records hold, the journal's
// bytes and the records' offsets.
func journalFixture(t *testing.T) (src string, cs []store.Change, journal []byte, offs []int64) {
	t.Helper()
	s := open(t, t.TempDir(), Options{CompactAfter: -1, CompactAfterBytes: -1})
	cs = newGen(9).changes(12)
	for i := range cs {
		cs[i].Accepted = append(cs[i].Accepted, message(fmt.Sprintf("c-%d", i), uint64(1e6+i)))
	}
	apply(t, s, cs...)
	src = crashCopy(t, s)
	closeStore(t, s)
	journal, err := os.ReadFile(filepath.Join(src, journalName))
	if err != nil {
		t.Fatal(err)
	}
	offs = frames(t, journal)
	if len(offs) != len(cs) {
		t.Fatalf("the journal holds %d records, want %d", len(offs), len(cs))
	}
	return src, cs, journal, offs
}

// flip returns a copy of data with one bit of byte i flipped; which bit
// depends on i, so that a run of bytes sees every bit.
func flip(data []byte, i int64) []byte {
	bad := slices.Clone(data)
	bad[i] ^= 1 << (i % 8)
	return bad
}

// checkRefused checks that Open of dir fails with an error wrapping
// ErrCorrupt that names the file name and contains want, and that it left
// the file's bytes as they were.
func checkRefused(t *testing.T, dir, name, want string) {
	t.Helper()
	path := filepath.Join(dir, name)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	s, err := Open(dir, Options{Logger: logs.logger()})
	if err == nil {
		abandon(s)
		t.Fatalf("Open succeeded; log: %s", logs.String())
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open: %v\nwant an error wrapping ErrCorrupt that names %s and says %q", err, path, want)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatalf("the refused Open changed %s: %d bytes before, %d after", name, len(before), len(after))
	}
	if l := logs.String(); strings.Contains(l, "dropping") {
		t.Fatalf("the refused Open logged a drop: %s", l)
	}
}

// TestJournalBitRot flips one bit, in turn, in every byte of a record in
// the middle of the journal (its length, its checksum, its payload): since
// intact records follow it, that is damage, not a torn write, and Open
// refuses with ErrCorrupt, naming the file and the record's offset, and
// leaves the file as it is. Once the damaged record and those after it are
// cut off by hand, as the error says, the store opens with the records
// before it.
func TestJournalBitRot(t *testing.T) {
	src, cs, journal, offs := journalFixture(t)
	const k = 6
	start, end := offs[k], offs[k+1]
	want := fmt.Sprintf("offset %d is damaged", start)
	d := tornDir(t, src, journal)
	path := filepath.Join(d, journalName)
	for i := start; i < end; i++ {
		if err := os.WriteFile(path, flip(journal, i), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("byte %d", i-start), func(t *testing.T) { checkRefused(t, d, journalName, want) })
	}
	t.Run("zeroed block", func(t *testing.T) {
		bad := slices.Clone(journal)
		clear(bad[start+3 : min(start+515, end)])
		checkRefused(t, tornDir(t, src, bad), journalName, want)
	})
	t.Run("bad JSON with a good checksum", func(t *testing.T) {
		bad := appendFrame(slices.Clone(journal[:start]), k+1, []byte(`{"roles":"not a list"}`))
		bad = append(bad, journal[end:]...)
		checkRefused(t, tornDir(t, src, bad), journalName, "not a record")
	})
	t.Run("cut by hand", func(t *testing.T) {
		d := tornDir(t, src, flip(journal, start+frameHeader+10)[:start])
		s := open(t, d, Options{})
		defer closeStore(t, s)
		checkState(t, s, memoryState(t, cs[:k]))
	})
}

// TestJournalTornLastRecord flips one bit, in turn, in bytes of the
// journal's last record (every byte of its header, every 16th of its
// payload, and its last): nothing intact follows it, so it is a torn tail,
// as a crash mid-write leaves, and Open cuts it off, keeps every record
// before it and logs where.
func TestJournalTornLastRecord(t *testing.T) {
	src, cs, journal, offs := journalFixture(t)
	last := offs[len(offs)-1]
	want := memoryState(t, cs[:len(cs)-1])
	check := func(t *testing.T, bad []byte, reason string) {
		t.Helper()
		d := tornDir(t, src, bad)
		var logs logBuffer
		s := open(t, d, Options{Logger: logs.logger(), CompactAfter: -1, CompactAfterBytes: -1})
		defer abandon(s)
		checkState(t, s, want)
		if l := logs.String(); !strings.Contains(l, fmt.Sprintf("offset=%d", last)) || !strings.Contains(l, reason) {
			t.Errorf("the log does not give offset %d and %q: %s", last, reason, l)
		}
		if fi, err := os.Stat(filepath.Join(d, journalName)); err != nil || fi.Size() != last {
			t.Errorf("the journal is %d bytes after Open (%v), want %d", fi.Size(), err, last)
		}
	}
	for i := last; i < int64(len(journal)); i++ {
		if i-last >= frameHeader && (i-last)%16 != 0 && i != int64(len(journal))-1 {
			continue
		}
		t.Run(fmt.Sprintf("byte %d", i-last), func(t *testing.T) {
			reason := "bad checksum"
			if i-last < 4 && journal[i]&(1<<(i%8)) == 0 {
				reason = "record" // a longer length: a short record, or over the limit
			}
			check(t, flip(journal, i), reason)
		})
	}
	t.Run("bad JSON with a good checksum", func(t *testing.T) {
		check(t, appendFrame(slices.Clone(journal[:last]), uint64(len(offs)), []byte(`{"roles":"not a list"}`)), "not a record")
	})
	t.Run("zeros after the records", func(t *testing.T) {
		// A file system may show a crashed append as zeros.
		d := tornDir(t, src, append(slices.Clone(journal), make([]byte, 100)...))
		s := open(t, d, Options{})
		defer closeStore(t, s)
		checkState(t, s, memoryState(t, cs))
	})
	t.Run("goes on", func(t *testing.T) {
		// The recovered store takes the lost change again and keeps it.
		d := tornDir(t, src, flip(journal, last+frameHeader+3))
		s := open(t, d, Options{})
		apply(t, s, cs[len(cs)-1])
		abandon(s)
		s = open(t, d, Options{})
		defer closeStore(t, s)
		checkState(t, s, memoryState(t, cs))
	})
}

// TestJournalDamageBeforeSnapshots checks the rule's exception: intact
// records that every snapshot includes do not make a damaged record bit
// rot, since cutting them off loses nothing. The directories are those a
// crash leaves after a compaction wrote its snapshots and before it
// restarted the journal.
func TestJournalDamageBeforeSnapshots(t *testing.T) {
	src, cs, journal, offs := journalFixture(t)
	// snapshotsAt returns a directory with snapshots that include the
	// first n records, and the whole journal.
	snapshotsAt := func(n int) string {
		d := tornDir(t, src, journal[:offs[n]])
		closeStore(t, open(t, d, Options{})) // writes snapshots at record n
		if err := os.WriteFile(filepath.Join(d, journalName), flip(journal, offs[4]+20), 0o600); err != nil {
			t.Fatal(err)
		}
		return d
	}
	t.Run("all included", func(t *testing.T) {
		d := snapshotsAt(len(cs) - 1) // holds records 1 to 11; the journal 1 to 12
		if err := os.WriteFile(filepath.Join(d, journalName), flip(journal[:offs[len(cs)-1]], offs[4]+20), 0o600); err != nil {
			t.Fatal(err)
		}
		s := open(t, d, Options{})
		defer closeStore(t, s)
		checkState(t, s, memoryState(t, cs[:len(cs)-1]))
	})
	t.Run("some not included", func(t *testing.T) {
		d := snapshotsAt(8) // records 9 to 12 are only in the journal
		checkRefused(t, d, journalName, fmt.Sprintf("offset %d is damaged", offs[4]))
	})
}

// TestSnapshotBitRot flips one bit, in turn, in every byte of each
// snapshot: Open refuses with ErrCorrupt, naming the file, and leaves it as
// it is. It does the same to an artifact's sidecar, which GetArtifact
// reads.
func TestSnapshotBitRot(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	apply(t, s, store.Change{
		Roles:     []store.Role{{ID: "role-1", Name: "测试员", Prompt: "Test.", CreatedBy: "root", CreatedAt: base}},
		Agents:    []store.Agent{{ID: "agent-1", RoleID: "role-1", ParentID: "root", TaskID: "task-1", Brief: json.RawMessage(`{"objective":"o"}`), Status: "idle", CreatedAt: base}},
		Contacts:  []store.ContactEntry{{Owner: "agent-1", Contact: store.Contact{ID: "root", Role: "root", Source: "parent", AddedAt: base}}},
		Requests:  []store.Request{{ID: "req-1", From: "agent-1", To: "root", Status: "pending", CreatedAt: base}},
		Accepted:  []store.Message{message("m-1", 1)},
		States:    []store.StateEntry{{Scope: "task:task-1", Key: "k", Value: json.RawMessage(`[1]`), Writer: "agent-1", UpdatedAt: base}},
		Histories: []store.History{{AgentID: "agent-1", Summary: "s", Messages: []json.RawMessage{json.RawMessage(`{"role":"user"}`)}}},
	})
	a, content := store.Artifact{ID: "a-1", Name: "r.md", MediaType: "text/markdown", CreatedAt: base}, []byte("hello")
	if err := s.PutArtifact(context.Background(), a, content); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)

	for _, p := range parts {
		path := filepath.Join(dir, p.name)
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range int64(len(orig)) {
			if err := os.WriteFile(path, flip(orig, i), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Run(fmt.Sprintf("%s byte %d", p.name, i), func(t *testing.T) { checkRefused(t, dir, p.name, "") })
		}
		if err := os.WriteFile(path, orig, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	s = open(t, dir, Options{})
	defer closeStore(t, s)
	path := filepath.Join(dir, artifactsName, artifactName(a.ID)+".json")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(len(orig)) {
		if err := os.WriteFile(path, flip(orig, i), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.GetArtifact(context.Background(), a.ID); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Errorf("sidecar byte %d flipped: GetArtifact: %v, want an error wrapping ErrCorrupt naming %s", i, err, path)
		}
	}
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, data, err := s.GetArtifact(context.Background(), a.ID); err != nil || got.ID != a.ID || !bytes.Equal(data, content) {
		t.Errorf("GetArtifact after the repair: %+v %q %v", got, data, err)
	}
}
