package agentsociety_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/store"
	"agentsociety/store/filestore"
)

// The benchmarks of the society on the durable file store.
//
// BenchmarkFileStoreSpawn and BenchmarkFileStoreMessage run on societies
// pre-filled with fsSizes idle agents, under each sync policy, and report on
// the largest size the time per op divided by the time at the smallest
// ("x-vs-5000"; the goal is at most 1.5). BenchmarkStoreMessages compares
// messages per second on the memory store and the file store.
// BenchmarkFileStoreRecovery times Open on a journal of fsRecoveryRecords
// records.

// fsSizes are the organisation sizes the file store benchmarks run at: this
// many idle agents, besides their fsParents parents.
var fsSizes = []int{5_000, 50_000}

// fsPolicies are the sync policies the file store benchmarks run under.
var fsPolicies = []struct {
	name string
	sync filestore.SyncMode
}{
	{"SyncEveryRecord", filestore.SyncEveryRecord},
	{"SyncBatched", filestore.SyncBatched},
}

const (
	// fsParents is how many agents (root's children on as many tasks)
	// spawned the pre-filled agents, each an equal share.
	fsParents = spawnParents
	// fsGrowth bounds how much a measured society grows: after size/fsGrowth
	// spawns, BenchmarkFileStoreSpawn starts again (timer stopped) from a
	// fresh copy of the pre-filled directory, so that every spawn measured
	// at size n happens on an organisation of n to n+n/fsGrowth agents.
	fsGrowth = 10
	// fsMaxAgents is the society's cap: far above any size here.
	fsMaxAgents = 1 << 20
	// fsRecoveryRecords is the number of records in the journal
	// BenchmarkFileStoreRecovery opens.
	fsRecoveryRecords = 1_000_000
)

// fsOrg is a closed file store directory holding a pre-filled organisation:
// agents idle agents, spawned by the leads on their roles.
type fsOrg struct {
	dir    string
	agents int
	leads  []string
	roles  []string
	bytes  int64 // the directory's size
}

// fsOrgs builds the pre-filled directories one benchmark's sub-benchmarks
// share, each on first use, in the benchmark's temporary directory.
type fsOrgs struct {
	b    *testing.B
	orgs map[int]*fsOrg
}

func newFSOrgs(b *testing.B) *fsOrgs { return &fsOrgs{b: b, orgs: make(map[int]*fsOrg)} }

func (o *fsOrgs) get(tb testing.TB, n int) *fsOrg {
	if org := o.orgs[n]; org != nil {
		return org
	}
	org := buildOrg(tb, o.b.TempDir(), n)
	o.orgs[n] = org
	return org
}

// buildOrg fills dir with n idle agents under fsParents parents, through
// the public API, on a store under SyncBatched (the directory's contents do
// not depend on the policy, and n fsyncs would make the fill slow), and
// closes it: the store compacts on Close, so dir holds snapshots and a
// journal with no record they lack.
func buildOrg(tb testing.TB, dir string, n int) *fsOrg {
	tb.Helper()
	ctx := context.Background()
	t0 := time.Now()
	s, st := openFS(tb, dir, filestore.SyncBatched, as.Config{MaxAgents: fsMaxAgents})
	org := &fsOrg{dir: dir, agents: n}
	parents := make([]*as.Actor, fsParents)
	for i := range fsParents {
		var role string
		parents[i], role = hostLead(tb, s, "fill-"+strconv.Itoa(i), "idle")
		org.leads = append(org.leads, parents[i].ID())
		org.roles = append(org.roles, role)
	}
	brief := validBrief(minimal)
	for i := range n {
		p := i % fsParents
		if _, _, err := parents[p].SpawnAgent(ctx, as.SpawnSpec{RoleID: org.roles[p], Brief: brief}); err != nil {
			tb.Fatal(err)
		}
	}
	if got, want := len(s.Agents()), n+fsParents; got != want {
		tb.Fatalf("filled %d agents, want %d", got, want)
	}
	closeFS(tb, s, st)
	org.bytes = dirSize(tb, dir)
	tb.Logf("filled %d agents in %v; the directory takes %.1f MB", n, time.Since(t0).Round(time.Millisecond), float64(org.bytes)/1e6)
	return org
}

// fsSociety is a society open on a copy of an fsOrg's directory.
type fsSociety struct {
	dir     string
	st      *filestore.Store
	s       *as.Society
	parents []*as.Actor
	roles   []string
}

// open copies org's directory into a fresh one under base and opens a
// society on it under the sync policy given.
func (org *fsOrg) open(tb testing.TB, base string, sync filestore.SyncMode) *fsSociety {
	tb.Helper()
	dir, err := os.MkdirTemp(base, "org-")
	if err != nil {
		tb.Fatal(err)
	}
	copyDir(tb, org.dir, dir)
	s, st := openFS(tb, dir, sync, as.Config{MaxAgents: fsMaxAgents})
	if got, want := len(s.Agents()), org.agents+fsParents; got != want {
		tb.Fatalf("reopened %d agents, want %d", got, want)
	}
	x := &fsSociety{dir: dir, st: st, s: s, roles: org.roles}
	for _, id := range org.leads {
		x.parents = append(x.parents, actorOf(tb, s, id))
	}
	return x
}

// close closes the society, then its store, and removes the directory.
func (x *fsSociety) close(tb testing.TB) {
	tb.Helper()
	closeFS(tb, x.s, x.st)
	if err := os.RemoveAll(x.dir); err != nil {
		tb.Fatal(err)
	}
}

func dirSize(tb testing.TB, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// fsRatios notes each size's time per op in a sub-benchmark and reports,
// on every size after the first, its time per op divided by the first's.
type fsRatios map[int]float64

func (r fsRatios) report(b *testing.B, n, ops int) {
	if ops == 0 {
		return
	}
	ns := float64(b.Elapsed().Nanoseconds()) / float64(ops)
	r[n] = ns
	if first := fsSizes[0]; n != first && r[first] > 0 {
		b.ReportMetric(ns/r[first], "x-vs-"+strconv.Itoa(first))
	}
}

// BenchmarkFileStoreSpawn measures one spawn through the public API
// (SpawnAgent by one of fsParents parents, in turn) on a file store holding
// an organisation of fsSizes idle agents, under each sync policy.
func BenchmarkFileStoreSpawn(b *testing.B) {
	ctx := context.Background()
	orgs := newFSOrgs(b)
	for _, p := range fsPolicies {
		b.Run(p.name, func(b *testing.B) {
			ratios := fsRatios{}
			for _, n := range fsSizes {
				b.Run("agents="+strconv.Itoa(n), func(b *testing.B) {
					org := orgs.get(b, n)
					base := b.TempDir()
					so := org.open(b, base, p.sync)
					defer func() { so.close(b) }()
					brief := validBrief(minimal)
					grown, resets := 0, 0
					b.ReportAllocs()
					for b.Loop() {
						if grown == n/fsGrowth {
							b.StopTimer()
							so.close(b)
							so = org.open(b, base, p.sync)
							grown = 0
							resets++
							b.StartTimer()
						}
						i := grown % fsParents
						if _, _, err := so.parents[i].SpawnAgent(ctx, as.SpawnSpec{RoleID: so.roles[i], Brief: brief}); err != nil {
							b.Fatal(err)
						}
						grown++
					}
					ratios.report(b, n, b.N)
					b.ReportMetric(float64(resets), "refills")
				})
			}
		})
	}
}

// BenchmarkFileStoreMessage measures one message between two code-driven
// agents on a file store holding an organisation of fsSizes idle agents,
// under each sync policy: per op the sender (acted as by the host through
// its Actor, as a behaviour acts) sends a message and waits until the
// receiver's behaviour has it. The receiver records the message's end (the
// store's second Apply) after its behaviour returns, overlapping the next
// op's send.
func BenchmarkFileStoreMessage(b *testing.B) {
	ctx := context.Background()
	orgs := newFSOrgs(b)
	for _, p := range fsPolicies {
		b.Run(p.name, func(b *testing.B) {
			ratios := fsRatios{}
			for _, n := range fsSizes {
				b.Run("agents="+strconv.Itoa(n), func(b *testing.B) {
					org := orgs.get(b, n)
					so := org.open(b, b.TempDir(), p.sync)
					defer so.close(b)

					got := make(chan struct{}, 1)
					recv := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
						got <- struct{}{}
						return nil
					})
					spawn := func(bh as.Behavior) *as.Actor {
						a, _, err := so.parents[0].SpawnAgent(ctx, as.SpawnSpec{RoleID: so.roles[0], Brief: validBrief(minimal), Behavior: bh})
						if err != nil {
							b.Fatal(err)
						}
						x, err := so.s.Actor(a.ID)
						if err != nil {
							b.Fatal(err)
						}
						return x
					}
					from, to := spawn(noop), spawn(recv)
					out := as.Outgoing{To: to.ID(), Payload: benchPayloadAny}
					// Warm up: the first message adds the sender to the
					// receiver's contacts, under the write lock.
					for range 2 {
						if _, err := from.Send(ctx, out); err != nil {
							b.Fatal(err)
						}
						<-got
					}
					b.ReportAllocs()
					for b.Loop() {
						if _, err := from.Send(ctx, out); err != nil {
							b.Fatal(err)
						}
						<-got
					}
					ratios.report(b, n, b.N)
				})
			}
		})
	}
}

// BenchmarkStoreMessages is BenchmarkRoute on each store: messages
// delivered per second between benchPairs pairs of code-driven agents that
// each bounce one message, on the memory store and on the file store under
// each sync policy. The file store's runs report their rate as a fraction
// of the memory store's ("x-vs-memory").
func BenchmarkStoreMessages(b *testing.B) {
	var memRate float64
	for _, c := range []struct {
		name string
		open func(b *testing.B) store.Store
	}{
		{"memory", func(*testing.B) store.Store { return store.NewMemory() }},
		{"filestore-batched", fsStore(filestore.SyncBatched)},
		{"filestore-every", fsStore(filestore.SyncEveryRecord)},
	} {
		b.Run(c.name, func(b *testing.B) {
			rate := routePairs(b, as.Config{Store: c.open(b)})
			b.ReportMetric(rate, "msgs/s")
			if c.name == "memory" {
				memRate = rate
			} else if memRate > 0 {
				b.ReportMetric(rate/memRate, "x-vs-memory")
			}
		})
	}
}

// fsStore returns a function opening a file store in a temporary directory
// that is closed when the benchmark's function returns (after the society,
// whose cleanup is registered later and so runs first).
func fsStore(sync filestore.SyncMode) func(b *testing.B) store.Store {
	return func(b *testing.B) store.Store {
		st, err := filestore.Open(b.TempDir(), filestore.Options{Sync: sync, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := st.Close(); err != nil {
				b.Error(err)
			}
		})
		return st
	}
}

// BenchmarkFileStoreRecovery times filestore.Open on a directory whose
// journal holds fsRecoveryRecords records and no snapshots.
//
// The journal is written once with the store's Apply under SyncBatched,
// with both compaction triggers off: message i is accepted and then
// finished, except the last two messages, which stay pending, so that
// the reopened state shows the replay reached the journal's end. Close
// always compacts (it rewrites the snapshots and replaces journal.log by
// a new file renamed over it), so before Close the journal is
// hard-linked aside: the rename leaves the linked file as it was. Each op
// links that file into a fresh directory and opens it; the Close after
// it (untimed) replaces the link, never the file.
func BenchmarkFileStoreRecovery(b *testing.B) {
	ctx := context.Background()
	base := b.TempDir()
	build := filepath.Join(base, "build")
	saved := filepath.Join(base, "journal-1M.log")

	t0 := time.Now()
	st, err := filestore.Open(build, filestore.Options{Sync: filestore.SyncBatched, CompactAfter: -1, CompactAfterBytes: -1, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	msg := store.Message{From: "agent-1", To: "agent-2", TaskID: "task-1", Type: "general", Payload: json.RawMessage(`{"text":"ping"}`), SentAt: time.Now()}
	accept := store.Change{Accepted: []store.Message{msg}}
	finish := store.Change{Finished: []string{""}}
	var lastIDs []string
	for rec, i := 0, 0; rec < fsRecoveryRecords; i++ {
		id := "msg-" + strconv.Itoa(i)
		accept.Accepted[0].ID, accept.Accepted[0].Seq = id, uint64(i+1)
		if err := st.Apply(ctx, accept); err != nil {
			b.Fatal(err)
		}
		rec++
		if rec >= fsRecoveryRecords-1 { // the last two records accept two messages
			lastIDs = append(lastIDs, id)
			continue
		}
		finish.Finished[0] = id
		if err := st.Apply(ctx, finish); err != nil {
			b.Fatal(err)
		}
		rec++
	}
	if err := os.Link(filepath.Join(build, "journal.log"), saved); err != nil {
		b.Fatal(err)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	records, last, size := countRecords(b, saved)
	if records != fsRecoveryRecords || last != fsRecoveryRecords {
		b.Fatalf("the journal holds %d records, the last numbered %d; want %d", records, last, fsRecoveryRecords)
	}
	b.Logf("wrote %d records (%.1f MB) in %v", records, float64(size)/1e6, time.Since(t0).Round(time.Millisecond))

	var opens int
	for b.Loop() {
		b.StopTimer()
		dir := filepath.Join(base, "open-"+strconv.Itoa(opens))
		if err := os.Mkdir(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.Link(saved, filepath.Join(dir, "journal.log")); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		st, err := filestore.Open(dir, filestore.Options{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}

		b.StopTimer()
		state, err := st.Load(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(state.Pending) != 2 || state.Pending[0].ID != lastIDs[0] || state.Pending[1].ID != lastIDs[1] {
			b.Fatalf("reopened with %d pending messages, want %v", len(state.Pending), lastIDs)
		}
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		opens++
		b.StartTimer()
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(opens), "s/open")
	b.ReportMetric(float64(records)*float64(opens)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(size)/1e6, "journal-MB")
}

// countRecords walks the frames of the journal at path (length, checksum,
// payload; see the filestore package documentation) and returns how many
// there are, the last one's number and the file's size.
func countRecords(tb testing.TB, path string) (records int, last uint64, size int64) {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		tb.Fatal(err)
	}
	var hdr [8]byte
	var payload []byte
	for off := int64(0); off < fi.Size(); {
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			tb.Fatalf("reading a record header at %d: %v", off, err)
		}
		n := int64(binary.LittleEndian.Uint32(hdr[:4]))
		off += int64(len(hdr))
		if payload == nil || records%100_000 == 0 || off+n == fi.Size() {
			// Check a sample of the payloads, and the last one's number.
			payload = make([]byte, n)
			if _, err := f.ReadAt(payload, off); err != nil {
				tb.Fatalf("reading a record at %d: %v", off, err)
			}
			var rec struct {
				LSN uint64 `json:"lsn"`
			}
			if err := json.Unmarshal(payload, &rec); err != nil {
				tb.Fatalf("record at %d: %v", off, err)
			}
			if rec.LSN != uint64(records+1) {
				tb.Fatalf("record %d is numbered %d", records+1, rec.LSN)
			}
			last = rec.LSN
		}
		off += n
		records++
	}
	return records, last, fi.Size()
}
