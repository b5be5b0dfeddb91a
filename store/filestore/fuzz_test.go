package filestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"agentsociety/store"
)

var fuzzOpts = Options{Logger: quiet, CompactAfter: -1, CompactAfterBytes: -1}

// FuzzJournalDecode opens a directory whose journal holds arbitrary bytes.
// Open must not panic; it fails, naming the journal and leaving it as it
// was, or it gives a store whose Load works and that takes a change and
// keeps it across a Close and reopen.
func FuzzJournalDecode(f *testing.F) {
	for _, seed := range journalSeeds(f) {
		f.Add(seed.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		openJournal(t, data)
	})
}

// openJournal opens a directory whose journal is data, and checks what
// FuzzJournalDecode says.
func openJournal(t *testing.T, data []byte) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, journalName)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, fuzzOpts)
	if err != nil {
		if !strings.Contains(err.Error(), journalName) {
			t.Fatalf("Open's error does not name the journal: %v", err)
		}
		if after, rerr := os.ReadFile(path); rerr != nil || !bytes.Equal(after, data) {
			t.Fatalf("Open failed (%v) and changed the journal from %d bytes to %d (%v)", err, len(data), len(after), rerr)
		}
		return
	}
	checkRoundTrip(t, s, dir)
}

// FuzzJournalRecords is FuzzJournalDecode past the checksums, which random
// bytes rarely get through: each line of the input becomes a record's
// payload, framed with its right length and checksum, so that what is
// fuzzed is the decoding and replay of the records.
func FuzzJournalRecords(f *testing.F) {
	for _, seed := range recordSeeds(f) {
		f.Add(seed.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var journal []byte
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			journal = binary.LittleEndian.AppendUint32(journal, uint32(len(line)))
			journal = binary.LittleEndian.AppendUint32(journal, crc32.Checksum(line, castagnoli))
			journal = append(journal, line...)
		}
		openJournal(t, journal)
	})
}

// FuzzOrgJSON opens a directory whose org.json holds arbitrary bytes. Open
// must not panic; it fails with an error naming org.json, or it gives a
// store whose Load works and whose state survives being written back.
// Since arbitrary bytes rarely begin with the right checksum, an input
// that begins like a JSON object is also tried with its checksum put in
// front as the store writes it, so that what is fuzzed past the checksum
// is the decoding.
func FuzzOrgJSON(f *testing.F) {
	for _, seed := range orgSeeds(f) {
		f.Add(seed.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		openOrg(t, data)
		if len(data) > 0 && data[0] == '{' {
			openOrg(t, seal(data, false))
		}
	})
}

// openOrg opens a directory whose org.json is data, and checks what
// FuzzOrgJSON says.
func openOrg(t *testing.T, data []byte) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, orgName)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, fuzzOpts)
	if err != nil {
		if !strings.Contains(err.Error(), orgName) {
			t.Fatalf("Open's error does not name org.json: %v", err)
		}
		if after, rerr := os.ReadFile(path); rerr != nil || !bytes.Equal(after, data) {
			t.Fatalf("Open failed (%v) and changed org.json (%v)", err, rerr)
		}
		return
	}
	checkRoundTrip(t, s, dir)
}

// checkRoundTrip loads s, applies a change, closes it (which writes fresh
// snapshots) and reopens it: the reopened store must hold what the memory
// store fed the first state and the change holds.
func checkRoundTrip(t *testing.T, s *Store, dir string) {
	t.Helper()
	st, err := s.Load(context.Background())
	if err != nil {
		s.Close()
		t.Fatalf("Open succeeded but Load failed: %v", err)
	}
	probe := store.Change{
		Agents:   []store.Agent{{ID: "fuzz-probe", Status: "idle"}},
		Accepted: []store.Message{message("fuzz-probe-"+fmt.Sprint(len(st.Pending)), 1<<40)},
	}
	if slices.ContainsFunc(st.Pending, func(m store.Message) bool { return m.ID == probe.Accepted[0].ID }) {
		probe.Accepted = nil
	}
	if err := s.Apply(context.Background(), probe); err != nil {
		s.Close()
		t.Fatalf("Apply to an opened store: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	first := store.Change{Roles: st.Roles, Agents: st.Agents, Requests: st.Requests, Accepted: st.Pending, States: st.States, Histories: st.Histories}
	for owner, list := range st.Contacts {
		for _, c := range list {
			first.Contacts = append(first.Contacts, store.ContactEntry{Owner: owner, Contact: c})
		}
	}
	want := memoryState(t, []store.Change{first, probe})
	r, err := Open(dir, fuzzOpts)
	if err != nil {
		t.Fatalf("reopening what the store wrote: %v", err)
	}
	defer r.Close()
	checkState(t, r, want)
}

type seed struct {
	name string
	data []byte
}

// journalSeeds returns journals to start fuzzing from: valid ones, and
// the ways a journal breaks.
func journalSeeds(tb testing.TB) []seed {
	dir := tb.TempDir()
	s := open(tb, dir, fuzzOpts)
	g := newGen(2026)
	for range 6 {
		apply(tb, s, g.change())
	}
	abandon(s)
	valid, err := os.ReadFile(filepath.Join(dir, journalName))
	if err != nil {
		tb.Fatal(err)
	}
	offs := frames(tb, valid)
	last := offs[len(offs)-1]
	badSum := slices.Clone(valid)
	badSum[offs[2]+5] ^= 1 // intact records follow: Open refuses
	badSumLast := slices.Clone(valid)
	badSumLast[last+5] ^= 1 // a torn tail: Open cuts it off
	huge := slices.Clone(valid[:last])
	huge = binary.LittleEndian.AppendUint32(huge, 1<<31)
	huge = append(huge, 0, 0, 0, 0, '{')
	gap := appendFrame(slices.Clone(valid), 9, []byte(`{}`))
	dup := appendFrame(nil, 1, []byte(`{"accepted":[{"id":"m","seq":1},{"id":"m","seq":2}]}`))
	return []seed{
		{"empty", nil},
		{"valid", valid},
		{"torn-header", valid[:last+3]},
		{"torn-payload", valid[:len(valid)-7]},
		{"bad-checksum", badSum},
		{"bad-checksum-last", badSumLast},
		{"huge-length", huge},
		{"bad-json", appendFrame(slices.Clone(valid[:last]), uint64(len(offs)), []byte(`{"roles":[1]}`))},
		{"sequence-gap", gap},
		{"duplicate-message", dup},
		{"zeros", make([]byte, 64)},
		{"text", []byte("not a journal at all\n")},
	}
}

// recordSeeds returns the payloads of journalSeeds' valid journal, one a
// line, as FuzzJournalRecords reads them, and a few variations.
func recordSeeds(tb testing.TB) []seed {
	valid := journalSeeds(tb)[1].data
	var lines [][]byte
	for _, off := range frames(tb, valid) {
		n := binary.LittleEndian.Uint32(valid[off:])
		lines = append(lines, valid[off+frameHeader:off+frameHeader+int64(n)])
	}
	join := func(ls ...[]byte) []byte { return bytes.Join(ls, []byte("\n")) }
	return []seed{
		{"records", join(lines...)},
		{"reordered", join(lines[1], lines[0])},
		{"replayed", join(append(slices.Clone(lines), lines[0])...)},
		{"finish-then-accept", []byte(`{"lsn":1,"finished":["m"]}` + "\n" + `{"lsn":2,"accepted":[{"id":"m","seq":1,"payload":{"a":[1,2]}}]}`)},
		{"remove-then-add", []byte(`{"lsn":1,"agents":[{"id":"a"}],"contacts":[{"owner":"a","id":"b"},{"owner":"b","id":"a"}],"histories":[{"agentId":"a","messages":[1]}]}` + "\n" +
			`{"lsn":2,"remove":{"agents":["a","x"],"roles":["r"],"requests":["q"],"contacts":[{"owner":"b","id":"a"}]}}` + "\n" +
			`{"lsn":3,"agents":[{"id":"a"}],"historyAppends":[{"agentId":"a","messages":[2]}]}`)},
	}
}

// orgSeeds returns org.json files to start fuzzing from: one the store
// wrote, seed 001's example, and broken ones.
func orgSeeds(tb testing.TB) []seed {
	dir := tb.TempDir()
	s := open(tb, dir, fuzzOpts)
	g := newGen(1)
	for range 12 {
		c := g.change()
		c.Accepted, c.Finished = nil, nil
		apply(tb, s, c)
	}
	closeStore(tb, s)
	written, err := os.ReadFile(filepath.Join(dir, orgName))
	if err != nil {
		tb.Fatal(err)
	}
	return []seed{
		{"written", written},
		{"seed-001", []byte(seed001)},
		{"empty-object", []byte(`{}`)},
		{"empty", nil},
		{"null", []byte(`null`)},
		{"wrong-types", []byte(`{"roles":{"id":1},"agents":"x"}`)},
		{"bad-time", []byte(`{"agents":[{"id":"a","createdAt":"2026-13-45T99:00:00Z"}]}`)},
		{"truncated", written[:len(written)/2]},
		{"flipped", flip(written, int64(len(written)/2))},
		{"future-version", []byte(`{"version":3}`)},
		{"version-1", []byte(`{"version":1,"journalSeq":0,"roles":[]}`)},
	}
}

// seed001 is the contact registry example of seed 001's "Data Models".
const seed001 = `{
  "contactRegistries": {
    "agent-xxx": [
      {
        "id": "agent-yyy",
        "role": "程序员",
        "source": "parent",
        "addedAt": "2026-01-05T12:00:00.000+08:00"
      },
      {
        "id": "agent-zzz",
        "role": "测试员",
        "interfaceSpec": {
          "services": "代码测试服务",
          "input_format": "代码文件路径",
          "output_format": "测试报告"
        },
        "source": "introduction",
        "introducedBy": "agent-yyy",
        "addedAt": "2026-01-05T12:30:00.000+08:00"
      }
    ]
  }
}
`

// TestWriteFuzzCorpus writes the seeds above into testdata/fuzz, where go
// test finds them. It runs only when FILESTORE_WRITE_CORPUS is set:
//
//	FILESTORE_WRITE_CORPUS=1 go test -run TestWriteFuzzCorpus ./store/filestore
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("FILESTORE_WRITE_CORPUS") == "" {
		t.Skip("set FILESTORE_WRITE_CORPUS=1 to rewrite testdata/fuzz")
	}
	for name, seeds := range map[string][]seed{
		"FuzzJournalDecode":  journalSeeds(t),
		"FuzzJournalRecords": recordSeeds(t),
		"FuzzOrgJSON":        orgSeeds(t),
	} {
		dir := filepath.Join("testdata", "fuzz", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.data)
			if err := os.WriteFile(filepath.Join(dir, s.name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestSeedExample checks that seed 001's example org.json opens as the
// registry it describes.
func TestSeedExample(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, orgName), []byte(seed001), 0o600); err != nil {
		t.Fatal(err)
	}
	s := open(t, dir, Options{})
	defer closeStore(t, s)
	st := load(t, s)
	reg := st.Contacts["agent-xxx"]
	if len(reg) != 2 || reg[0].ID != "agent-yyy" || reg[1].IntroducedBy != "agent-yyy" || reg[1].Source != "introduction" ||
		string(reg[1].InterfaceSpec) != `{"services":"代码测试服务","input_format":"代码文件路径","output_format":"测试报告"}` ||
		reg[1].AddedAt.Unix() != 1767587400 {
		t.Errorf("seed 001's registry loaded as %+v", reg)
	}
}
