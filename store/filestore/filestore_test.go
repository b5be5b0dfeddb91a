package filestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"agentsociety/store"
	"agentsociety/store/storetest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// cmpOpts compares states as the conformance suite does: nil and empty
// are the same, times compare as instants. Pending messages with the same
// Seq, which no order ranks, are ranked by id.
var cmpOpts = cmp.Options{
	cmpopts.EquateEmpty(),
	cmpopts.EquateApproxTime(0),
	cmpopts.SortSlices(func(a, b store.Message) bool { return comparePending(a, b) < 0 }),
}

func comparePending(a, b store.Message) int {
	switch {
	case a.Seq < b.Seq:
		return -1
	case a.Seq > b.Seq:
		return 1
	}
	return strings.Compare(a.ID, b.ID)
}

var quiet = slog.New(slog.DiscardHandler)

// logBuffer collects a store's log for a test to read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

func open(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

func closeStore(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func apply(t testing.TB, s store.Store, cs ...store.Change) {
	t.Helper()
	for i, c := range cs {
		if err := s.Apply(context.Background(), c); err != nil {
			t.Fatalf("Apply #%d: %v", i, err)
		}
	}
}

func load(t testing.TB, s store.Store) store.State {
	t.Helper()
	st, err := s.Load(context.Background())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return st
}

// memoryState returns what the memory store holds after cs.
func memoryState(t testing.TB, cs []store.Change) store.State {
	t.Helper()
	m := store.NewMemory()
	apply(t, m, cs...)
	return load(t, m)
}

func checkState(t testing.TB, s store.Store, want store.State) {
	t.Helper()
	got := load(t, s)
	if canon(t, want) == canon(t, got) {
		return // cmp under the race detector is slow; see canon
	}
	if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
		t.Fatalf("Load mismatch (-want +got):\n%s", diff)
	}
}

// canon returns a form of st that is equal for two states exactly when cmp
// with cmpOpts finds them equal: times as UTC instants, empty as nil.
func canon(t testing.TB, st store.State) string {
	t.Helper()
	raw := func(b json.RawMessage) json.RawMessage {
		if len(b) == 0 {
			return nil
		}
		// As base64, so that the bytes count, not their meaning.
		enc, _ := json.Marshal([]byte(b))
		return enc
	}
	var c store.State
	for _, r := range st.Roles {
		r.InterfaceSpec, r.CreatedAt = raw(r.InterfaceSpec), r.CreatedAt.UTC()
		c.Roles = append(c.Roles, r)
	}
	for _, a := range st.Agents {
		a.Brief, a.CreatedAt = raw(a.Brief), a.CreatedAt.UTC()
		c.Agents = append(c.Agents, a)
	}
	for owner, list := range st.Contacts {
		if len(list) == 0 {
			continue
		}
		if c.Contacts == nil {
			c.Contacts = make(map[string][]store.Contact)
		}
		for _, k := range list {
			k.InterfaceSpec, k.AddedAt = raw(k.InterfaceSpec), k.AddedAt.UTC()
			c.Contacts[owner] = append(c.Contacts[owner], k)
		}
	}
	for _, r := range st.Requests {
		r.CreatedAt, r.Deadline = r.CreatedAt.UTC(), r.Deadline.UTC()
		c.Requests = append(c.Requests, r)
	}
	for _, m := range st.Pending {
		m.Payload, m.SentAt = raw(m.Payload), m.SentAt.UTC()
		c.Pending = append(c.Pending, m)
	}
	slices.SortStableFunc(c.Pending, comparePending)
	for _, h := range st.Histories {
		var msgs []json.RawMessage
		for _, m := range h.Messages {
			msgs = append(msgs, raw(m))
		}
		h.Messages = msgs
		c.Histories = append(c.Histories, h)
	}
	for _, e := range st.States {
		e.Value, e.UpdatedAt = raw(e.Value), e.UpdatedAt.UTC()
		c.States = append(c.States, e)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatalf("canon: %v", err)
	}
	return string(b)
}

// hangGuard bounds how long a test waits for something that happens in
// the background. It only turns a hang into a failure: it is far beyond
// what any machine, however loaded, needs, and no test depends on it.
const hangGuard = 2 * time.Minute

// waitFor returns once cond holds, polling it. If it does not hold within
// hangGuard, the test fails with what describes the state.
func waitFor(t testing.TB, cond func() bool, what func() string) {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > hangGuard {
			t.Fatalf("waited %v: %s", hangGuard, what())
		}
		time.Sleep(time.Millisecond)
	}
}

// abandon closes s as a crash would: no compaction, no sync.
func abandon(s *Store) {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	s.closed = true
	close(s.stop)
	s.wg.Wait()
	s.journal.Close()
	s.lock.Close()
}

// crashCopy copies the store's directory as a crash of the process would
// leave it (every returned Apply is written), with no compaction half done.
func crashCopy(t testing.TB, s *Store) string {
	t.Helper()
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	dst := t.TempDir()
	copyDir(t, s.dir, dst)
	return dst
}

// checkCrashCopy checks that a store opened on a crash copy of s (see
// crashCopy) holds want.
func checkCrashCopy(t *testing.T, s *Store, want store.State) {
	t.Helper()
	c := open(t, crashCopy(t, s), Options{})
	checkState(t, c, want)
	closeStore(t, c)
}

func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if e.IsDir() {
			if err := os.MkdirAll(to, 0o700); err != nil {
				t.Fatal(err)
			}
			copyDir(t, from, to)
			continue
		}
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// gen makes random changes that the memory store accepts: every kind of
// record, replacements, contacts re-added, removals (of records there or
// not, added again later, or in the same change), messages accepted and
// finished (and finished twice, and never accepted), nested JSON of every
// kind (compact, as filestore keeps it), times in several zones and zero.
type gen struct {
	r       *rand.Rand
	seq     uint64
	pending []string
}

func newGen(seed uint64) *gen { return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }

var base = time.Date(2026, 1, 5, 12, 0, 0, 123456789, time.UTC)

func (g *gen) time() time.Time {
	t := base.Add(time.Duration(g.r.IntN(1e6)) * time.Millisecond).Add(time.Duration(g.r.IntN(1000)))
	switch g.r.IntN(5) {
	case 0:
		return time.Time{}
	case 1:
		return t.In(time.FixedZone("CST", 8*3600))
	case 2:
		return t.In(time.FixedZone("LMT", 19*60+32)) // an offset with seconds
	case 3:
		return t.Local()
	}
	return t
}

func (g *gen) doc() json.RawMessage {
	switch g.r.IntN(6) {
	case 0:
		return nil
	case 1:
		return json.RawMessage{}
	case 2:
		return json.RawMessage(`{}`)
	case 3:
		return json.RawMessage(`{"services":"代码测试服务","html":"<b>&</b>","n":` + fmt.Sprint(g.r.IntN(100)) + `}`)
	case 4:
		return json.RawMessage(`[1,"two",null,true,{"x":[]}]`)
	}
	return json.RawMessage(`"a string with \"quotes\" and \u2028"`)
}

func (g *gen) pick(prefix string, n int) string { return fmt.Sprintf("%s%d", prefix, g.r.IntN(n)) }

func (g *gen) change() store.Change {
	var c store.Change
	if g.r.IntN(4) == 0 {
		for range 1 + g.r.IntN(2) {
			c.Roles = append(c.Roles, store.Role{ID: g.pick("role-", 8), Name: g.pick("名字", 20), Prompt: "You are a role.\nLine two.", InterfaceSpec: g.doc(), CreatedBy: g.pick("agent-", 5), CreatedAt: g.time()})
		}
	}
	if g.r.IntN(3) == 0 {
		for range 1 + g.r.IntN(2) {
			c.Agents = append(c.Agents, store.Agent{ID: g.pick("agent-", 20), RoleID: g.pick("role-", 8), ParentID: "root", TaskID: g.pick("task-", 3), Brief: g.doc(), Status: g.pick("status-", 4), CreatedAt: g.time()})
		}
	}
	if g.r.IntN(3) == 0 {
		for range 1 + g.r.IntN(3) {
			c.Contacts = append(c.Contacts, store.ContactEntry{Owner: g.pick("agent-", 10), Contact: store.Contact{
				ID: g.pick("agent-", 20), Role: g.pick("role-", 8), InterfaceSpec: g.doc(), Source: "introduction",
				IntroducedBy: g.pick("agent-", 3), Note: g.pick("note ", 3), AddedAt: g.time(),
			}})
		}
	}
	if g.r.IntN(4) == 0 {
		c.Requests = append(c.Requests, store.Request{ID: g.pick("req-", 6), From: g.pick("agent-", 5), To: g.pick("agent-", 5), TaskID: "task-1", Status: g.pick("status-", 3), CreatedAt: g.time(), Deadline: g.time()})
	}
	if g.r.IntN(4) == 0 {
		for range 1 + g.r.IntN(2) {
			scope := g.pick("task:task-", 3)
			if g.r.IntN(2) == 0 {
				scope = g.pick("agent:agent-", 4)
			}
			c.States = append(c.States, store.StateEntry{Scope: scope, Key: g.pick("key-", 4), Value: g.doc(), Writer: g.pick("agent-", 4), UpdatedAt: g.time()})
		}
	}
	if g.r.IntN(4) == 0 {
		h := store.History{AgentID: g.pick("agent-", 6), Summary: g.pick("summary ", 3)}
		if g.r.IntN(4) > 0 {
			h.Messages = []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"role":"user","content":"turn %d"}`, g.r.IntN(100))), json.RawMessage(`{"role":"assistant","content":"ok <&>"}`)}
		}
		c.Histories = append(c.Histories, h)
	}
	for range g.r.IntN(3) {
		a := store.HistoryAppend{AgentID: g.pick("agent-", 6), Drop: g.r.IntN(4) - 1}
		if g.r.IntN(3) == 0 {
			a.SetSummary, a.Summary = true, g.pick("summary ", 3)
		}
		for range g.r.IntN(3) {
			a.Messages = append(a.Messages, json.RawMessage(fmt.Sprintf(`{"role":"tool","content":"result %d <&>"}`, g.r.IntN(100))))
		}
		c.HistoryAppends = append(c.HistoryAppends, a)
	}
	for range g.r.IntN(3) {
		g.seq++
		id := fmt.Sprintf("m-%d", g.seq)
		c.Accepted = append(c.Accepted, store.Message{ID: id, Seq: g.seq, From: g.pick("agent-", 5), To: g.pick("agent-", 5), TaskID: "task-1", Type: "general", Payload: g.doc(), SentAt: g.time()})
		g.pending = append(g.pending, id)
	}
	for range g.r.IntN(3) {
		if len(g.pending) == 0 || g.r.IntN(5) == 0 {
			c.Finished = append(c.Finished, g.pick("m-never-", 3))
			continue
		}
		i := g.r.IntN(len(g.pending))
		c.Finished = append(c.Finished, g.pending[i])
		if g.r.IntN(4) > 0 { // sometimes finished again later
			g.pending = slices.Delete(g.pending, i, i+1)
		}
	}
	if g.r.IntN(4) == 0 {
		r := &c.Remove
		for range 1 + g.r.IntN(2) {
			r.Agents = append(r.Agents, g.pick("agent-", 20))
		}
		if g.r.IntN(2) == 0 {
			r.Roles = append(r.Roles, g.pick("role-", 8))
		}
		if g.r.IntN(2) == 0 {
			r.Requests = append(r.Requests, g.pick("req-", 6))
		}
		for range g.r.IntN(3) {
			r.Contacts = append(r.Contacts, store.ContactKey{Owner: g.pick("agent-", 10), ID: g.pick("agent-", 20)})
		}
	}
	return c
}

func (g *gen) changes(n int) []store.Change {
	cs := make([]store.Change, n)
	for i := range cs {
		cs[i] = g.change()
	}
	return cs
}

// message is a message record for tests that need a simple one.
// raws returns docs as a history's messages.
func raws(docs ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(docs))
	for i, d := range docs {
		out[i] = json.RawMessage(d)
	}
	return out
}

func message(id string, seq uint64) store.Message {
	return store.Message{ID: id, Seq: seq, From: "agent-1", To: "agent-2", TaskID: "task-1", Type: "general", Payload: json.RawMessage(`{"text":"hi"}`), SentAt: base}
}

var variants = []struct {
	name string
	opts Options
}{
	{"default", Options{}},
	{"batched", Options{Sync: SyncBatched, SyncInterval: time.Millisecond}},
	{"compact-often", Options{CompactAfter: 5}},
	{"compact-by-bytes", Options{CompactAfterBytes: 512, CompactAfter: -1}},
	{"never-compact", Options{CompactAfter: -1, CompactAfterBytes: -1}},
}

func TestConformance(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store {
				s := open(t, t.TempDir(), v.opts)
				t.Cleanup(func() { closeStore(t, s) })
				return s
			})
		})
	}
}

// TestReopen applies random changes in rounds, closing and reopening the
// store between rounds, and checks that it loads what the memory store fed
// the same changes holds.
func TestReopen(t *testing.T) {
	for i, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			g := newGen(uint64(i + 1))
			var all []store.Change
			for round := range 6 {
				s := open(t, dir, v.opts)
				checkState(t, s, memoryState(t, all))
				cs := g.changes(20 + round*10)
				apply(t, s, cs...)
				all = append(all, cs...)
				checkState(t, s, memoryState(t, all))
				closeStore(t, s)
			}
			s := open(t, dir, v.opts)
			defer closeStore(t, s)
			checkState(t, s, memoryState(t, all))
		})
	}
}

// TestReopenAfterCrash reopens copies of the directory taken while the
// store was open, as a crash would leave it.
func TestReopenAfterCrash(t *testing.T) {
	for i, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			s := open(t, t.TempDir(), v.opts)
			defer closeStore(t, s)
			g := newGen(uint64(100 + i))
			var all []store.Change
			for range 5 {
				cs := g.changes(15)
				apply(t, s, cs...)
				all = append(all, cs...)
				c := open(t, crashCopy(t, s), v.opts)
				checkState(t, c, memoryState(t, all))
				// The recovered copy goes on where the original stopped.
				more := g.changes(3)
				apply(t, c, more...)
				closeStore(t, c)
				apply(t, s, more...)
				all = append(all, more...)
			}
		})
	}
}

func TestCompaction(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{CompactAfter: 10, CompactAfterBytes: -1})
	g := newGen(7)
	var all []store.Change
	for range 100 {
		c := g.change()
		c.Accepted = append(c.Accepted, message(fmt.Sprintf("x-%d", len(all)), uint64(1e6+len(all))))
		apply(t, s, c)
		all = append(all, c)
	}
	// Compaction runs in the background; wait for it to catch up. Then
	// the journal is below a trigger: fewer records than CompactAfter, or
	// fewer bytes than the snapshots. (A compaction that ends over a
	// trigger asks for another, so this comes however slow the machine.)
	var records, size, snap int64
	var busy bool
	waitFor(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		records, busy, size, snap = s.records, s.busy, s.size, s.snapBytes
		return !busy && (records < 10 || size < snap) && snap > 0
	}, func() string {
		return fmt.Sprintf("the journal holds %d records, %d bytes; snapshots %d bytes; busy %v", records, size, snap, busy)
	})
	if _, err := os.Stat(filepath.Join(dir, orgName)); err != nil {
		t.Fatalf("no snapshot after compaction: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, journalName))
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	size = s.size
	s.mu.Unlock()
	if fi.Size() != size {
		t.Errorf("journal is %d bytes, the store counts %d", fi.Size(), size)
	}
	checkCrashCopy(t, s, memoryState(t, all))

	closeStore(t, s)
	checkMarkerOnly(t, dir, uint64(len(all)))
	// A store closed as the last compaction left it is not compacted again.
	before, err := os.Stat(filepath.Join(dir, orgName))
	if err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, Options{})
	checkState(t, s, memoryState(t, all))
	closeStore(t, s)
	if after, err := os.Stat(filepath.Join(dir, orgName)); err != nil || !os.SameFile(before, after) {
		t.Errorf("closing a store with nothing applied since its compaction wrote %s again (%v)", orgName, err)
	}
	checkMarkerOnly(t, dir, uint64(len(all)))
	s = open(t, dir, Options{})
	defer closeStore(t, s)
	checkState(t, s, memoryState(t, all))
}

// TestCompactionWaitsForJournal checks the amortisation rule: a journal
// smaller than the snapshots does not trigger a compaction, so a large
// organisation is not rewritten every few records.
func TestCompactionWaitsForJournal(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{CompactAfter: -1, CompactAfterBytes: -1})
	var big store.Change
	for i := range 200 {
		big.Agents = append(big.Agents, store.Agent{ID: fmt.Sprintf("agent-%d", i), RoleID: "role-1", ParentID: "root", Brief: json.RawMessage(`{"objective":"` + strings.Repeat("x", 200) + `"}`), Status: "idle"})
	}
	apply(t, s, big)
	closeStore(t, s) // writes a large org.json

	s = open(t, dir, Options{CompactAfter: 1, CompactAfterBytes: -1})
	defer closeStore(t, s)
	small := store.Change{Finished: []string{"nothing"}}
	apply(t, s, small, small, small)
	s.mu.Lock()
	records, snap, size := s.records, s.snapBytes, s.size
	s.mu.Unlock()
	if records != 3 {
		t.Fatalf("a journal of %d bytes was compacted into snapshots of %d bytes", size, snap)
	}
	for {
		s.mu.Lock()
		size := s.size
		s.mu.Unlock()
		if size >= snap {
			break
		}
		apply(t, s, big) // grows the journal by about the snapshot's size
	}
	waitFor(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		records = s.records
		return records == 0
	}, func() string {
		return fmt.Sprintf("a journal larger than the snapshots was not compacted: it holds %d records", records)
	})
}

// frames returns the offsets of the records in a journal.
func frames(t testing.TB, data []byte) []int64 {
	t.Helper()
	var offs []int64
	for off := int64(0); off < int64(len(data)); {
		offs = append(offs, off)
		n := binary.LittleEndian.Uint32(data[off:])
		off += frameHeader + int64(n)
	}
	return offs
}

// checkMarkerOnly checks that the journal in dir holds what a compaction
// leaves when no record follows it: the marker of the last record the
// snapshots include, lsn (see appendMarker), and nothing else.
func checkMarkerOnly(t testing.TB, dir string, lsn uint64) {
	t.Helper()
	journal, err := os.ReadFile(filepath.Join(dir, journalName))
	if err != nil {
		t.Fatal(err)
	}
	if want := appendMarker(nil, lsn); !bytes.Equal(journal, want) {
		t.Errorf("the journal holds %q, want only the marker %q", journal, want)
	}
}

// tornDir makes a store directory from the files of src with the journal
// replaced by journal.
func tornDir(t testing.TB, src string, journal []byte) string {
	t.Helper()
	dst := t.TempDir()
	copyDir(t, src, dst)
	if err := os.WriteFile(filepath.Join(dst, journalName), journal, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestTornTail cuts the journal at every byte offset inside its last record
// and checks that Open recovers every record before it, cuts the file back
// to the last good record, logs where, and goes on working.
func TestTornTail(t *testing.T) {
	noCompact := Options{CompactAfter: -1, CompactAfterBytes: -1}
	dir := t.TempDir()
	g := newGen(42)
	s := open(t, dir, noCompact)
	first := g.changes(10)
	apply(t, s, first...)
	closeStore(t, s) // snapshots hold the first changes
	s = open(t, dir, noCompact)
	more := g.changes(10)
	last := store.Change{
		Contacts: []store.ContactEntry{{Owner: "agent-1", Contact: store.Contact{ID: "agent-9", Role: "测试员", Source: "first_message", AddedAt: base}}},
		Accepted: []store.Message{message("last", 1e9)},
		Finished: []string{"m-1"},
	}
	apply(t, s, more...)
	apply(t, s, last)
	src := crashCopy(t, s)
	closeStore(t, s)

	journal, err := os.ReadFile(filepath.Join(src, journalName))
	if err != nil {
		t.Fatal(err)
	}
	offs := frames(t, journal)
	if len(offs) != 12 {
		t.Fatalf("journal holds %d records, want 12: the compaction's marker and 11", len(offs))
	}
	start := offs[len(offs)-1]
	want := memoryState(t, append(slices.Clone(first), more...))
	full := memoryState(t, append(append(slices.Clone(first), more...), last))
	for cut := start; cut <= int64(len(journal)); cut++ {
		d := tornDir(t, src, journal[:cut])
		var logs logBuffer
		c := open(t, d, Options{Logger: logs.logger(), CompactAfter: -1, CompactAfterBytes: -1})
		if cut == int64(len(journal)) {
			checkState(t, c, full)
			if logs.String() != "" {
				t.Errorf("an intact journal logged: %s", logs.String())
			}
			abandon(c)
			continue
		}
		checkState(t, c, want)
		if cut > start && !strings.Contains(logs.String(), fmt.Sprintf("offset=%d", start)) {
			t.Errorf("cut at %d: the log does not give the offset %d: %q", cut, start, logs.String())
		}
		fi, err := os.Stat(filepath.Join(d, journalName))
		if err != nil || fi.Size() != start {
			t.Errorf("cut at %d: journal is %d bytes after Open (%v), want %d", cut, fi.Size(), err, start)
		}
		if cut%16 == 0 || cut == start+1 {
			// The recovered store takes the lost change again and keeps it.
			apply(t, c, last)
			abandon(c)
			c = open(t, d, Options{})
			checkState(t, c, full)
		}
		abandon(c)
	}
}

// TestMissingRecords checks that a journal that does not follow its
// snapshots is an error, not a silent loss: here org.json and pending.json
// were deleted after a compaction.
func TestMissingRecords(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	g := newGen(3)
	apply(t, s, g.changes(5)...)
	closeStore(t, s)
	s = open(t, dir, Options{})
	apply(t, s, g.changes(5)...)
	src := crashCopy(t, s)
	closeStore(t, s)
	// After a Close, whose compaction empties the journal.
	closed := t.TempDir()
	copyDir(t, dir, closed)
	for _, src := range []string{src, closed} {
		for _, name := range []string{orgName, pendingName} {
			d := t.TempDir()
			copyDir(t, src, d)
			if err := os.Remove(filepath.Join(d, name)); err != nil {
				t.Fatal(err)
			}
			// A torn tail as well, which the refused Open does not cut.
			jpath := filepath.Join(d, journalName)
			journal, err := os.ReadFile(jpath)
			if err != nil {
				t.Fatal(err)
			}
			journal = append(journal, 7, 0, 0)
			if err := os.WriteFile(jpath, journal, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = Open(d, Options{Logger: quiet})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "records are missing") || !strings.Contains(err.Error(), jpath) {
				t.Errorf("without %s: Open: %v, want an error wrapping ErrCorrupt about missing records in %s", name, err, jpath)
			}
			if after, err := os.ReadFile(jpath); err != nil || !bytes.Equal(after, journal) {
				t.Errorf("without %s: the refused Open changed the journal from %d bytes to %d (%v)", name, len(journal), len(after), err)
			}
		}
	}
}

// TestAllSnapshotsMissing checks that a directory whose every snapshot is
// gone, after a compaction emptied the journal into them, is an error
// wrapping ErrCorrupt, not an empty store: its records are lost, and
// opening it empty would present the loss as a fresh start. A directory
// that never held a record, or whose journal still holds every record,
// opens as before.
func TestAllSnapshotsMissing(t *testing.T) {
	snapshots := []string{orgName, pendingName, statesName, historiesName}
	removeSnapshots := func(t *testing.T, dir string) {
		t.Helper()
		for _, name := range snapshots {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
	g := newGen(11)
	cs := g.changes(10)

	t.Run("compacted", func(t *testing.T) {
		for _, how := range []string{"closed", "compacted while open"} {
			dir := t.TempDir()
			s := open(t, dir, Options{})
			apply(t, s, cs...)
			if how == "closed" {
				closeStore(t, s)
			} else {
				if err := s.compactNow(); err != nil {
					t.Fatal(err)
				}
				c := crashCopy(t, s)
				closeStore(t, s)
				dir = c
			}
			removeSnapshots(t, dir)
			c, err := Open(dir, Options{Logger: quiet})
			if err == nil {
				closeStore(t, c)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Join(dir, journalName)) || !strings.Contains(err.Error(), orgName+" is missing") {
				t.Errorf("%s, every snapshot removed: Open: %v, want an error wrapping ErrCorrupt naming the journal and the missing snapshots", how, err)
			}
		}
	})
	t.Run("one record, a snapshot missing", func(t *testing.T) {
		// The marker is record 1: it must not pass for the record the
		// missing snapshots held.
		for _, gone := range [][]string{snapshots, {orgName}} {
			dir := t.TempDir()
			s := open(t, dir, Options{})
			apply(t, s, cs[0])
			closeStore(t, s)
			for _, name := range gone {
				if err := os.Remove(filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			c, err := Open(dir, Options{Logger: quiet})
			if err == nil {
				closeStore(t, c)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), orgName+" is missing") {
				t.Errorf("one record, %v removed: Open: %v, want an error wrapping ErrCorrupt naming the missing snapshot", gone, err)
			}
		}
	})
	t.Run("compacted by an earlier version", func(t *testing.T) {
		// Its compactions left the journal empty, without a marker: the
		// next Close writes one, with fresh snapshots.
		dir := t.TempDir()
		s := open(t, dir, Options{})
		apply(t, s, cs...)
		closeStore(t, s)
		if err := os.Truncate(filepath.Join(dir, journalName), 0); err != nil {
			t.Fatal(err)
		}
		s = open(t, dir, Options{})
		checkState(t, s, memoryState(t, cs))
		closeStore(t, s)
		checkMarkerOnly(t, dir, uint64(len(cs)))
		removeSnapshots(t, dir)
		if c, err := Open(dir, Options{Logger: quiet}); !errors.Is(err, ErrCorrupt) {
			if err == nil {
				closeStore(t, c)
			}
			t.Errorf("every snapshot removed: Open: %v, want an error wrapping ErrCorrupt", err)
		}
	})
	t.Run("never compacted", func(t *testing.T) {
		// The journal holds every record: nothing is lost.
		s := open(t, t.TempDir(), Options{CompactAfter: -1, CompactAfterBytes: -1})
		apply(t, s, cs...)
		dir := crashCopy(t, s)
		closeStore(t, s)
		removeSnapshots(t, dir)
		s = open(t, dir, Options{})
		checkState(t, s, memoryState(t, cs))
		closeStore(t, s)
	})
	t.Run("new", func(t *testing.T) {
		// Never used, opened and abandoned, opened and closed: empty.
		dir := t.TempDir()
		s := open(t, dir, Options{})
		checkState(t, s, memoryState(t, nil))
		abandon(s)
		s = open(t, dir, Options{})
		checkState(t, s, memoryState(t, nil))
		closeStore(t, s)
		removeSnapshots(t, dir)
		s = open(t, dir, Options{})
		checkState(t, s, memoryState(t, nil))
		closeStore(t, s)
	})
}

// TestBadSnapshot checks that a snapshot that does not parse is an error
// naming the file, never an empty store, and that the failed Open releases
// the directory.
func TestBadSnapshot(t *testing.T) {
	bad := []struct {
		content string
		corrupt bool // whether the error wraps ErrCorrupt
	}{
		{"", true},
		{"garbage", true},
		{"null", true},
		{"[]", true},
		{"{", true},
		{`{"roles": 5}`, true},
		{`{"version": 1}`, false},         // written before snapshots had checksums
		{`{"version": 3}`, false},         // written by a later version
		{`{"version": 2}`, true},          // no checksum
		{`{"crc32c": "00000000",}`, true}, // not a checksum the store writes
		{string(seal([]byte(`{"version":3}`), false)), false},                     // likewise, with a checksum
		{string(seal([]byte(`{"version":2,"journalSeq":1}`), false)) + " ", true}, // a byte added
		{`{"agents": [{"id": "a", "createdAt": "yesterday"}]}`, true},
		{`{"roles": [], "journalSeq": -1}`, true},
		{`{"journalSeq": 18446744073709551615}`, false},
		{"\x00\x01\x02", true},
	}
	for _, name := range []string{orgName, pendingName} {
		for _, b := range bad {
			content := b.content
			if name == pendingName && (strings.Contains(content, "agents") || strings.Contains(content, "roles")) {
				continue // fields pending.json does not have, which it ignores
			}
			dir := t.TempDir()
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Open(dir, Options{Logger: quiet})
			if err == nil {
				t.Errorf("%s = %q: Open succeeded", name, content)
				continue
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("%s = %q: error %q does not name the file", name, content, err)
			}
			if errors.Is(err, ErrCorrupt) != b.corrupt {
				t.Errorf("%s = %q: Open: %v; wraps ErrCorrupt: %v, want %v", name, content, err, !b.corrupt, b.corrupt)
			}
			if errors.Is(err, ErrLocked) {
				t.Errorf("%s = %q: %v", name, content, err)
			}
			// The directory is free again.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			closeStore(t, open(t, dir, Options{}))
		}
	}
	t.Run("duplicate pending", func(t *testing.T) {
		dir := t.TempDir()
		p := seal([]byte(`{"version":2,"journalSeq":0,"messages":[{"id":"m1","seq":1},{"id":"m1","seq":2}]}`), false)
		if err := os.WriteFile(filepath.Join(dir, pendingName), p, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, Options{Logger: quiet})
		if !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), pendingName) {
			t.Errorf("Open: %v, want ErrExists naming %s", err, pendingName)
		}
	})
}

// TestOrgJSONLayout checks org.json against seed 001's layout, and that
// root is never written: the society gives the store only normal agents.
func TestOrgJSONLayout(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	at := time.Date(2026, 1, 5, 12, 0, 0, 0, time.FixedZone("", 8*3600))
	apply(t, s, store.Change{
		Roles: []store.Role{{ID: "role-1", Name: "程序员", Prompt: "Write code.", InterfaceSpec: json.RawMessage(`{"services":"代码"}`), CreatedBy: "root", CreatedAt: at}},
		Agents: []store.Agent{
			{ID: "agent-1", RoleID: "role-1", ParentID: "root", TaskID: "task-1", Brief: json.RawMessage(`{"objective":"x"}`), Status: "idle", CreatedAt: at},
			{ID: "agent-2", RoleID: "role-1", ParentID: "agent-1", TaskID: "task-1", Status: "busy", CreatedAt: at},
		},
		Contacts: []store.ContactEntry{
			{Owner: "agent-1", Contact: store.Contact{ID: "root", Role: "root", Source: "parent", AddedAt: at}},
			{Owner: "agent-1", Contact: store.Contact{ID: "agent-2", Role: "测试员", InterfaceSpec: json.RawMessage(`{"services":"代码测试服务"}`), Source: "introduction", IntroducedBy: "agent-3", AddedAt: at}},
		},
		Requests: []store.Request{{ID: "req-1", From: "agent-1", To: "agent-2", TaskID: "task-1", Status: "pending", CreatedAt: at}},
		Accepted: []store.Message{message("m-1", 1)},
	})
	closeStore(t, s)

	raw, err := os.ReadFile(filepath.Join(dir, orgName))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(v any) []string {
		var ks []string
		for k := range v.(map[string]any) {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	if got, want := keys(doc), []string{"agents", "contactRegistries", "crc32c", "journalSeq", "requests", "roles", "version"}; !slices.Equal(got, want) {
		t.Errorf("org.json keys %v, want %v", got, want)
	}
	// The checksum comes first, and covers what follows its line.
	head, rest, _ := bytes.Cut(raw, []byte(",\n"))
	if want := fmt.Sprintf("{\n  \"crc32c\": \"%08x\"", crc32.Checksum(append([]byte("\n"), rest...), castagnoli)); string(head) != want {
		t.Errorf("org.json begins %q, want %q", head, want)
	}
	for _, a := range doc["agents"].([]any) {
		if id := a.(map[string]any)["id"]; id == "root" || id == "user" {
			t.Errorf("org.json lists %v", id)
		}
	}
	if got, want := keys(doc["agents"].([]any)[0]), []string{"createdAt", "id", "parentAgentId", "roleId", "status", "taskBrief", "taskId"}; !slices.Equal(got, want) {
		t.Errorf("agent keys %v, want %v", got, want)
	}
	if got, want := keys(doc["roles"].([]any)[0]), []string{"createdAt", "createdBy", "id", "interfaceSpec", "name", "rolePrompt"}; !slices.Equal(got, want) {
		t.Errorf("role keys %v, want %v", got, want)
	}
	reg := doc["contactRegistries"].(map[string]any)["agent-1"].([]any)
	if got, want := keys(reg[1]), []string{"addedAt", "id", "interfaceSpec", "introducedBy", "role", "source"}; !slices.Equal(got, want) {
		t.Errorf("contact keys %v, want %v", got, want)
	}
	if got, err := time.Parse(time.RFC3339Nano, reg[1].(map[string]any)["addedAt"].(string)); err != nil || !got.Equal(at) {
		t.Errorf("addedAt = %v (%v), want %v", got, err, at)
	}
	if got := doc["roles"].([]any)[0].(map[string]any)["createdAt"]; got != "2026-01-05T12:00:00+08:00" {
		t.Errorf("createdAt = %v", got)
	}
	if got := reg[1].(map[string]any)["interfaceSpec"].(map[string]any)["services"]; got != "代码测试服务" {
		t.Errorf("interfaceSpec.services = %v", got)
	}
	if bytes.Contains(raw, []byte(`"m-1"`)) {
		t.Error("org.json holds a message")
	}
	pend, err := os.ReadFile(filepath.Join(dir, pendingName))
	if err != nil || !bytes.Contains(pend, []byte(`"m-1"`)) {
		t.Errorf("pending.json does not hold m-1: %s %v", pend, err)
	}
}

// TestStatesAndHistories checks the two records the conformance suite
// does not cover: state entries (set, replaced, deleted by an empty value)
// and histories (replaced by agent id), across a reopen.
func TestStatesAndHistories(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	at := base
	entry := func(scope, key, value string) store.StateEntry {
		e := store.StateEntry{Scope: scope, Key: key, Writer: "agent-1", UpdatedAt: at}
		if value != "" {
			e.Value = json.RawMessage(value)
		}
		return e
	}
	apply(t, s,
		store.Change{States: []store.StateEntry{entry("task:t1", "b", `1`), entry("task:t1", "a", `{"x":[1]}`), entry("agent:a1", "k", `"v"`)}},
		store.Change{States: []store.StateEntry{entry("task:t1", "b", `2`), entry("agent:a1", "k", "")}, Histories: []store.History{{AgentID: "a2", Messages: raws(`1`)}}},
		store.Change{Finished: []string{"m"}, Histories: []store.History{{AgentID: "a1", Summary: "s"}, {AgentID: "a2", Summary: "later", Messages: raws(`1`, `2`)}}},
	)
	want := store.State{
		States:    []store.StateEntry{entry("task:t1", "a", `{"x":[1]}`), entry("task:t1", "b", `2`)},
		Histories: []store.History{{AgentID: "a1", Summary: "s"}, {AgentID: "a2", Summary: "later", Messages: raws(`1`, `2`)}},
	}
	checkState(t, s, want)
	checkCrashCopy(t, s, want)
	closeStore(t, s)
	s = open(t, dir, Options{})
	defer closeStore(t, s)
	checkState(t, s, want)
	for _, name := range []string{statesName, historiesName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("no %s after Close: %v", name, err)
		}
	}
}

// TestHistoryAppends checks that a history append costs the journal what
// it adds, however long the history, and that appends survive a crash (the
// journal is replayed) and compaction (they are folded into
// histories.json), with the messages in order.
func TestHistoryAppends(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{CompactAfter: -1, CompactAfterBytes: -1})
	turn := func(i int) store.Change {
		a := store.HistoryAppend{AgentID: "a", Messages: raws(fmt.Sprintf(`{"role":"user","content":"turn %04d"}`, i), `{"role":"assistant","content":"ok"}`)}
		if i >= 50 {
			a.Drop, a.SetSummary, a.Summary = 2, i%10 == 0, fmt.Sprintf("before %04d", i)
		}
		return store.Change{HistoryAppends: []store.HistoryAppend{a}}
	}
	var changes []store.Change
	record := func(i int) int64 {
		c := turn(i)
		changes = append(changes, c)
		before := s.size
		apply(t, s, c)
		return s.size - before
	}
	first := record(0)
	for i := 1; i < 500; i++ {
		if n := record(i); n > first+40 { // the drop, a summary, longer record numbers
			t.Fatalf("turn %d took %d bytes of journal, the first %d: the record grows with the history", i, n, first)
		}
	}
	want := memoryState(t, changes)
	if got := len(want.Histories[0].Messages); got != 100 {
		t.Fatalf("the history holds %d messages, want the last 50 turns' 100", got)
	}
	checkState(t, s, want)

	checkCrashCopy(t, s, want) // replayed from the journal

	closeStore(t, s) // compacts
	checkMarkerOnly(t, dir, s.lsn)
	s = open(t, dir, Options{})
	defer closeStore(t, s)
	checkState(t, s, want) // from histories.json
	apply(t, s, turn(500))
	want = memoryState(t, append(changes, turn(500)))
	checkState(t, s, want)
}

func TestLock(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	apply(t, s, store.Change{Accepted: []store.Message{message("m-1", 1)}})
	if _, err := Open(dir, Options{Logger: quiet}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	// The refused Open touched nothing.
	checkState(t, s, store.State{Pending: []store.Message{message("m-1", 1)}})
	closeStore(t, s)
	s = open(t, dir, Options{})
	checkState(t, s, store.State{Pending: []store.Message{message("m-1", 1)}})
	closeStore(t, s)
}

func TestClosed(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	closeStore(t, s)
	ctx := context.Background()
	if err := s.Apply(ctx, store.Change{Finished: []string{"x"}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Apply after Close: %v", err)
	}
	if _, err := s.Load(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Load after Close: %v", err)
	}
	if err := s.PutArtifact(ctx, store.Artifact{ID: "x"}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("PutArtifact after Close: %v", err)
	}
	if _, _, err := s.GetArtifact(ctx, "x"); !errors.Is(err, ErrClosed) {
		t.Errorf("GetArtifact after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestArtifactIDs(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "store")
	s := open(t, dir, Options{})
	defer closeStore(t, s)
	ctx := context.Background()
	bad := []string{
		"", "..", "../x", "../../etc/passwd", "a/b", `a\b`, `..\x`, "/etc/passwd", "/", "a\x00b", "\x00",
		"x..", "line\nbreak", "\x7f", strings.Repeat("a", 129), "\xff\xfe", "C:/x",
	}
	for _, id := range bad {
		err := s.PutArtifact(ctx, store.Artifact{ID: id, Name: "n"}, []byte("evil"))
		if err == nil || !errors.Is(err, ErrInvalidArtifactID) {
			t.Errorf("PutArtifact(%q): %v, want ErrInvalidArtifactID", id, err)
		}
		_, _, err = s.GetArtifact(ctx, id)
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetArtifact(%q): %v, want ErrNotFound", id, err)
		}
	}
	// Nothing was written outside the store, nor inside artifacts/.
	if entries, _ := os.ReadDir(parent); len(entries) != 1 {
		t.Errorf("the store's parent holds %d entries", len(entries))
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, artifactsName)); len(entries) != 0 {
		t.Errorf("artifacts/ holds %d entries", len(entries))
	}
	good := []string{"a", strings.Repeat("a", 128), "artifact-123", "名字.v1", ".hidden", "a.b", "CON", "con"}
	for _, id := range good {
		data := []byte("content of " + id)
		a := store.Artifact{ID: id, Name: id, MediaType: "text/plain", Size: int64(len(data)), CreatedAt: base}
		if err := s.PutArtifact(ctx, a, data); err != nil {
			t.Errorf("PutArtifact(%q): %v", id, err)
			continue
		}
		got, gotData, err := s.GetArtifact(ctx, id)
		if err != nil || !bytes.Equal(gotData, data) || got.ID != id {
			t.Errorf("GetArtifact(%q) = %v, %q, %v", id, got, gotData, err)
		}
	}
	// Every file name under artifacts/ is the store's: a hash, and its
	// sidecar.
	entries, _ := os.ReadDir(filepath.Join(dir, artifactsName))
	if len(entries) != 2*len(good) {
		t.Errorf("artifacts/ holds %d entries, want %d", len(entries), 2*len(good))
	}
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".json")
		if len(name) != 64 || strings.Trim(name, "0123456789abcdef") != "" {
			t.Errorf("artifacts/%s is not a name the store chose", e.Name())
		}
	}
}

func TestArtifacts(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	ctx := context.Background()
	at := base.In(time.FixedZone("", -5*3600))
	a := store.Artifact{ID: "a-1", Name: "report.md", MediaType: "text/markdown", CreatedBy: "agent-1", Size: 5, CreatedAt: at}
	if err := s.PutArtifact(ctx, a, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	s = open(t, dir, Options{})
	defer closeStore(t, s)
	got, data, err := s.GetArtifact(ctx, "a-1")
	if err != nil || string(data) != "hello" || !cmp.Equal(got, a, cmpOpts) {
		t.Fatalf("after reopening: %+v %q %v", got, data, err)
	}
	if err := s.PutArtifact(ctx, a, []byte("other")); !errors.Is(err, store.ErrExists) {
		t.Errorf("PutArtifact of an existing id after reopening: %v", err)
	}

	// Content changed behind the store's back is reported, not returned.
	path := filepath.Join(dir, artifactsName, artifactName("a-1"))
	if err := os.WriteFile(path, []byte("hellO"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetArtifact(ctx, "a-1"); !errors.Is(err, ErrCorrupt) || errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), path) {
		t.Errorf("GetArtifact of altered content: %v, want an error wrapping ErrCorrupt naming %s", err, path)
	}
	// A crash between writing content and sidecar leaves content that no
	// one sees and that a later put replaces; a temporary file left by a
	// crash is removed at Open.
	orphan := filepath.Join(dir, artifactsName, artifactName("a-2"))
	if err := os.WriteFile(orphan, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetArtifact(ctx, "a-2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetArtifact of content without a sidecar: %v", err)
	}
	if err := s.PutArtifact(ctx, store.Artifact{ID: "a-2"}, []byte("whole")); err != nil {
		t.Fatal(err)
	}
	if _, data, err := s.GetArtifact(ctx, "a-2"); err != nil || string(data) != "whole" {
		t.Errorf("GetArtifact(a-2) = %q, %v", data, err)
	}
}

func TestTempFilesRemoved(t *testing.T) {
	dir := t.TempDir()
	closeStore(t, open(t, dir, Options{}))
	tmps := []string{
		filepath.Join(dir, "org.json.123.tmp"),
		filepath.Join(dir, "journal.log.9.tmp"),
		filepath.Join(dir, artifactsName, "abc.456.tmp"),
	}
	keep := filepath.Join(dir, "notes.tmp") // not the store's
	for _, p := range append(tmps, keep) {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	closeStore(t, open(t, dir, Options{}))
	for _, p := range tmps {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there (%v)", p, err)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("%s was removed: %v", keep, err)
	}
}

// TestUnstorable checks that a change the store cannot keep faithfully is
// refused whole, leaving neither the state nor the journal changed.
func TestUnstorable(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	defer closeStore(t, s)
	good := store.Change{Accepted: []store.Message{message("m-1", 1)}}
	apply(t, s, good)
	s.mu.Lock()
	size := s.size
	s.mu.Unlock()
	for name, c := range map[string]store.Change{
		"invalid JSON payload": {Accepted: []store.Message{{ID: "m-2", Payload: json.RawMessage(`{"a":`)}}},
		"invalid UTF-8 name":   {Roles: []store.Role{{ID: "r", Name: "\xff"}}},
		"invalid UTF-8 owner":  {Contacts: []store.ContactEntry{{Owner: "\xc3", Contact: store.Contact{ID: "c"}}}},
		"year 10000":           {Agents: []store.Agent{{ID: "a", CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}},
		"invalid brief":        {Agents: []store.Agent{{ID: "a", Brief: json.RawMessage(`not json`)}}},
	} {
		c.Roles = append(c.Roles, store.Role{ID: "must-not-appear"})
		if err := s.Apply(context.Background(), c); err == nil {
			t.Errorf("%s: Apply succeeded", name)
		}
	}
	checkState(t, s, store.State{Pending: good.Accepted})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.size != size {
		t.Errorf("refused changes grew the journal from %d to %d bytes", size, s.size)
	}
}

// TestNormalized checks what the store changes in what it keeps: white
// space in nested documents, and offsets with seconds.
func TestNormalized(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	lmt := time.Date(1900, 1, 1, 0, 0, 0, 1, time.FixedZone("LMT", 1172))
	apply(t, s, store.Change{Accepted: []store.Message{{ID: "m", Payload: json.RawMessage("{ \"text\" : \"a  <b>\" }\n"), SentAt: lmt}}})
	check := func(when string) {
		got := load(t, s).Pending[0]
		if string(got.Payload) != `{"text":"a  <b>"}` {
			t.Errorf("%s: payload %s", when, got.Payload)
		}
		if !got.SentAt.Equal(lmt) {
			t.Errorf("%s: time %v, want %v", when, got.SentAt, lmt)
		}
	}
	check("live")
	closeStore(t, s)
	s = open(t, dir, Options{})
	defer closeStore(t, s)
	check("reopened")
}

// TestSyncBatched checks that a background sync follows a write within the
// interval, and that Close syncs and stops the goroutines without waiting
// for the interval.
func TestSyncBatched(t *testing.T) {
	before := runtime.NumGoroutine()
	dir := t.TempDir()
	s := open(t, dir, Options{Sync: SyncBatched, SyncInterval: 20 * time.Millisecond})
	apply(t, s, store.Change{Accepted: []store.Message{message("m-1", 1)}})
	waitFor(t, func() bool {
		s.syncMu.Lock()
		defer s.syncMu.Unlock()
		return s.synced >= 1
	}, func() string { return "record 1 was not synced" })
	closeStore(t, s)

	// Close returns without waiting for the hour-long interval.
	s = open(t, dir, Options{Sync: SyncBatched, SyncInterval: time.Hour})
	apply(t, s, store.Change{Accepted: []store.Message{message("m-2", 2)}})
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(hangGuard):
		t.Fatalf("Close did not return within %v", hangGuard)
	}
	s = open(t, dir, Options{})
	checkState(t, s, store.State{Pending: []store.Message{message("m-1", 1), message("m-2", 2)}})
	closeStore(t, s)

	// No goroutine of the stores outlives Close.
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before }, func() string {
		buf := make([]byte, 1<<16)
		return fmt.Sprintf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
	})
}

// TestConcurrentWithCompaction runs writers, readers and compactions at
// once, then checks the result after a reopen.
func TestConcurrentWithCompaction(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := v.opts
			if opts.CompactAfter == 0 {
				opts.CompactAfter = 7
			}
			s := open(t, dir, opts)
			const workers, per = 6, 40
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range per {
						id := fmt.Sprintf("w%d-%d", w, i)
						c := store.Change{
							Agents:   []store.Agent{{ID: fmt.Sprintf("agent-%d", w), Status: fmt.Sprint(i)}},
							Contacts: []store.ContactEntry{{Owner: fmt.Sprintf("agent-%d", w), Contact: store.Contact{ID: fmt.Sprintf("c%d", i%5), Note: fmt.Sprint(i)}}},
							Accepted: []store.Message{message(id, uint64(w*per+i+1))},
						}
						if i%2 == 1 {
							c.Finished = []string{fmt.Sprintf("w%d-%d", w, i-1)}
						}
						if err := s.Apply(context.Background(), c); err != nil {
							t.Error(err)
							return
						}
						if i%10 == 0 {
							if _, err := s.Load(context.Background()); err != nil {
								t.Error(err)
								return
							}
						}
					}
				})
			}
			wg.Go(func() {
				for range 5 {
					if err := s.compactNow(); err != nil {
						t.Error(err)
					}
				}
			})
			wg.Wait()
			want := store.State{Contacts: map[string][]store.Contact{}}
			for w := range workers {
				owner := fmt.Sprintf("agent-%d", w)
				want.Agents = append(want.Agents, store.Agent{ID: owner, Status: fmt.Sprint(per - 1)})
				for k := range 5 {
					want.Contacts[owner] = append(want.Contacts[owner], store.Contact{ID: fmt.Sprintf("c%d", k), Note: fmt.Sprint(per - 5 + k)})
				}
				for i := 1; i < per; i += 2 {
					want.Pending = append(want.Pending, message(fmt.Sprintf("w%d-%d", w, i), uint64(w*per+i+1)))
				}
			}
			sortAgents := cmpopts.SortSlices(func(a, b store.Agent) bool { return a.ID < b.ID })
			got := load(t, s)
			if diff := cmp.Diff(want, got, cmpOpts, sortAgents); diff != "" {
				t.Fatalf("live (-want +got):\n%s", diff)
			}
			c := open(t, crashCopy(t, s), opts)
			if diff := cmp.Diff(got, load(t, c), cmpOpts); diff != "" {
				t.Errorf("crash copy (-live +copy):\n%s", diff)
			}
			closeStore(t, c)
			closeStore(t, s)
			s = open(t, dir, opts)
			defer closeStore(t, s)
			if diff := cmp.Diff(got, load(t, s), cmpOpts); diff != "" {
				t.Errorf("reopened (-live +reopened):\n%s", diff)
			}
		})
	}
}

// TestWriteFailure breaks the journal under the store: the Apply fails,
// the store refuses further changes and loads, Close reports the failure
// and releases the directory, and a reopen recovers what was acknowledged.
func TestWriteFailure(t *testing.T) {
	dir := t.TempDir()
	var logs logBuffer
	s := open(t, dir, Options{Logger: logs.logger()})
	ok := store.Change{Accepted: []store.Message{message("m-1", 1)}}
	apply(t, s, ok)
	s.mu.Lock()
	s.journal.Close() // the next write and the undo both fail
	s.mu.Unlock()
	if err := s.Apply(context.Background(), store.Change{Accepted: []store.Message{message("m-2", 2)}}); err == nil {
		t.Fatal("Apply on a broken journal succeeded")
	}
	if err := s.Apply(context.Background(), store.Change{Finished: []string{"m-1"}}); err == nil {
		t.Error("Apply after a failure succeeded")
	}
	if _, err := s.Load(context.Background()); err == nil {
		t.Error("Load after a failure succeeded")
	}
	if err := s.Close(); err == nil {
		t.Error("Close after a failure returned no error")
	}
	if !strings.Contains(logs.String(), "failed") {
		t.Errorf("the failure was not logged: %s", logs.String())
	}
	s = open(t, dir, Options{})
	defer closeStore(t, s)
	checkState(t, s, store.State{Pending: ok.Accepted})
}

func TestOptions(t *testing.T) {
	for _, opts := range []Options{{Sync: 7}, {SyncInterval: -1}} {
		if _, err := Open(t.TempDir(), opts); err == nil {
			t.Errorf("Open with %+v succeeded", opts)
		}
	}
	if got := SyncBatched.String(); got != "SyncBatched" {
		t.Errorf("SyncBatched.String() = %q", got)
	}
}

// TestCancelledApplyWritesNothing checks that an Apply refused for its
// context leaves no record.
func TestCancelledApplyWritesNothing(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	defer closeStore(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Apply(ctx, store.Change{Accepted: []store.Message{message("m", 1)}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.size != 0 {
		t.Errorf("journal holds %d bytes", s.size)
	}
}

// TestUnstorable_SpawnKey: an agent's spawn key that is not UTF-8 is
// refused as every other string of a record is (see TestUnstorable), not
// accepted and kept as something else, which a reopened store would load
// as a key that no longer matches the spawn that made the agent.
func TestUnstorable_SpawnKey(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	c := store.Change{Agents: []store.Agent{{ID: "a", SpawnKey: "m-1\xff#1"}}}
	err := s.Apply(context.Background(), c)
	closeStore(t, s)
	if err == nil {
		s = open(t, dir, Options{})
		defer closeStore(t, s)
		st := load(t, s)
		t.Fatalf("Apply of a spawn key that is not UTF-8 succeeded; reopened, the store holds %q for %q", st.Agents[0].SpawnKey, c.Agents[0].SpawnKey)
	}
}

// TestEmptyIDRefused checks that a record without an id, which the state
// in memory refuses (it finds records by id), is refused before it is
// written: a journaled change that the state then refuses would leave the
// store refusing every change until reopened, and Open refusing the
// journal.
func TestEmptyIDRefused(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	good := store.Change{Agents: []store.Agent{{ID: "a"}}}
	apply(t, s, good)
	for name, c := range map[string]store.Change{
		"role":          {Roles: []store.Role{{Name: "writer"}}},
		"agent":         {Agents: []store.Agent{{Status: "idle"}}},
		"request":       {Requests: []store.Request{{Status: "open"}}},
		"contact":       {Contacts: []store.ContactEntry{{Owner: "a"}}},
		"contact owner": {Contacts: []store.ContactEntry{{Contact: store.Contact{ID: "a"}}}},
	} {
		c.Agents = append(c.Agents, store.Agent{ID: "must-not-appear"})
		if err := s.Apply(t.Context(), c); err == nil {
			t.Errorf("%s without an id: Apply succeeded", name)
		}
	}
	// The store goes on.
	more := store.Change{Agents: []store.Agent{{ID: "b"}}}
	apply(t, s, more)
	want := memoryState(t, []store.Change{good, more})
	checkState(t, s, want)
	closeStore(t, s)
	s = open(t, dir, Options{})
	defer closeStore(t, s)
	checkState(t, s, want)
}

// TestArtifactContentMissing: the content is durable before the sidecar
// that commits the artifact, so a sidecar whose content file is gone is
// damage, reported with an error wrapping ErrCorrupt that names the file,
// as altered content is, and not as an unknown artifact.
func TestArtifactContentMissing(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	defer closeStore(t, s)
	ctx := context.Background()
	if err := s.PutArtifact(ctx, store.Artifact{ID: "a-1", Name: "r.txt", Size: 5}, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, artifactsName, artifactName("a-1"))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, data, err := s.GetArtifact(ctx, "a-1")
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), path) {
		t.Errorf("GetArtifact with its content file gone = %q, %v; want an error wrapping ErrCorrupt naming %s", data, err, path)
	}
}
