package filestore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"agentsociety/store"
)

// Environment of the writer process that TestCrashSafety_KillDuringWrites
// starts and kills.
const (
	crashDirEnv  = "FILESTORE_CRASH_DIR"
	crashSyncEnv = "FILESTORE_CRASH_SYNC"
	crashIterEnv = "FILESTORE_CRASH_ITERATIONS"
)

// crashChange returns the n-th change the writer applies (n from 1). Every
// change sets the agent "counter" to n, so a recovered store says how many
// changes it holds; the rest exercise every kind of record, replacement,
// removal, and messages that stay pending or are finished later.
func crashChange(n int) store.Change {
	at := base.Add(time.Duration(n) * time.Second)
	c := store.Change{
		Agents:   []store.Agent{{ID: "counter", RoleID: "role-0", ParentID: "root", Status: strconv.Itoa(n), CreatedAt: base}},
		Accepted: []store.Message{{ID: fmt.Sprintf("m-%d", n), Seq: uint64(n), From: "agent-1", To: "agent-2", Type: "general", Payload: json.RawMessage(fmt.Sprintf(`{"text":"message %d"}`, n)), SentAt: at}},
	}
	if n > 3 && (n-3)%50 != 0 {
		c.Finished = []string{fmt.Sprintf("m-%d", n-3)}
	}
	if n%7 == 0 {
		c.Agents = append(c.Agents, store.Agent{ID: fmt.Sprintf("agent-%d", n%13), RoleID: "role-0", ParentID: "root", Brief: json.RawMessage(`{"objective":"o"}`), Status: strconv.Itoa(n), CreatedAt: at})
	}
	if n%5 == 0 {
		c.Contacts = []store.ContactEntry{{Owner: fmt.Sprintf("agent-%d", n%13), Contact: store.Contact{ID: fmt.Sprintf("agent-%d", n%11), Role: "role-0", Source: "first_message", Note: strconv.Itoa(n), AddedAt: at}}}
	}
	if n%3 == 0 {
		c.Requests = []store.Request{{ID: fmt.Sprintf("req-%d", n%17), From: "agent-1", To: "agent-2", Status: strconv.Itoa(n), CreatedAt: at}}
	}
	if n%4 == 0 {
		c.States = []store.StateEntry{{Scope: fmt.Sprintf("task:task-%d", n%3), Key: fmt.Sprintf("key-%d", n%6), Value: json.RawMessage(strconv.Itoa(n)), Writer: "agent-1", UpdatedAt: at}}
		if n%24 == 0 {
			c.States[0].Value = nil // deletes the key
		}
	}
	if n%6 == 0 {
		c.Histories = []store.History{{AgentID: fmt.Sprintf("agent-%d", n%5), Summary: "so far", Messages: []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"role":"user","content":%q}`, strings.Repeat("turn ", n%40)))}}}
	}
	if n%6 == 3 {
		c.HistoryAppends = []store.HistoryAppend{{AgentID: fmt.Sprintf("agent-%d", n%5), Drop: n % 3, SetSummary: n%4 == 3, Summary: strconv.Itoa(n), Messages: []json.RawMessage{json.RawMessage(strconv.Itoa(n))}}}
	}
	if n%100 == 1 {
		c.Roles = []store.Role{{ID: fmt.Sprintf("role-%d", n%5), Name: "writer", Prompt: "Write.", CreatedBy: "root", CreatedAt: at}}
	}
	if n%9 == 0 {
		c.Remove = store.Removal{
			Agents:   []string{fmt.Sprintf("agent-%d", n/9%13)},
			Requests: []string{fmt.Sprintf("req-%d", n%17)},
			Contacts: []store.ContactKey{{Owner: fmt.Sprintf("agent-%d", n%13), ID: fmt.Sprintf("agent-%d", n%11)}},
		}
		if n%200 == 0 {
			c.Remove.Roles = []string{fmt.Sprintf("role-%d", n/200%5)}
		}
	}
	return c
}

// counter returns how many crash changes st holds.
func counter(t testing.TB, st store.State) int {
	for _, a := range st.Agents {
		if a.ID == "counter" {
			n, err := strconv.Atoi(a.Status)
			if err != nil {
				t.Fatalf("counter: %v", err)
			}
			return n
		}
	}
	return 0
}

func crashArtifact(n int) (store.Artifact, []byte) {
	data := []byte(strings.Repeat(fmt.Sprintf("artifact %d\n", n), 50))
	return store.Artifact{ID: fmt.Sprintf("x-%d", n), Name: "x.txt", MediaType: "text/plain", Size: int64(len(data)), CreatedAt: base}, data
}

// TestHelperWriter is the process TestCrashSafety_KillDuringWrites kills.
// It opens the store, goes on from the changes it holds, and prints "ack n"
// after Apply of change n returns (and "art n" after its artifact is put)
// until it is killed.
func TestHelperWriter(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("the writer process of TestCrashSafety_KillDuringWrites")
	}
	opts := Options{CompactAfter: 25, CompactAfterBytes: -1, Logger: quiet}
	if os.Getenv(crashSyncEnv) == "batched" {
		opts.Sync, opts.SyncInterval = SyncBatched, 2*time.Millisecond
	}
	s, err := Open(dir, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer: Open:", err)
		os.Exit(3)
	}
	st, err := s.Load(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer: Load:", err)
		os.Exit(3)
	}
	fmt.Fprintln(os.Stdout, "ready")
	for n := counter(t, st) + 1; ; n++ {
		if err := s.Apply(context.Background(), crashChange(n)); err != nil {
			fmt.Fprintln(os.Stderr, "writer: Apply:", err)
			os.Exit(4)
		}
		fmt.Fprintf(os.Stdout, "ack %d\n", n)
		if n%10 == 0 {
			a, data := crashArtifact(n)
			if err := s.PutArtifact(context.Background(), a, data); err != nil {
				fmt.Fprintln(os.Stderr, "writer: PutArtifact:", err)
				os.Exit(4)
			}
			fmt.Fprintf(os.Stdout, "art %d\n", n)
		}
	}
}

// TestCrashSafety_KillDuringWrites runs a writer process, kills it with
// SIGKILL at a random moment (while it opens and recovers the store,
// appends, compacts or puts an artifact), and checks that the directory
// opens and holds every change the writer was told had been applied, in
// order: the state is exactly that after the first k changes, where k is
// the last acknowledged change or the one after it. The next writer goes on
// from the directory as the killed one left it, and the check opens a copy,
// so every writer also recovers what its predecessor left.
//
// A kill stops the process, not the machine: the check holds for both
// sync modes. FILESTORE_CRASH_ITERATIONS sets the number of kills
// (default 20).
func TestCrashSafety_KillDuringWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	iterations := 20
	if v := os.Getenv(crashIterEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", crashIterEnv, v)
		}
		iterations = n
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	ref := store.NewMemory() // the state after the first refN changes
	refN, prevK, acks, earlyKills, torn, midCompactions := 0, 0, 0, 0, 0, 0
	start := time.Now()

	for i := range iterations {
		mode := "every-record"
		if i%2 == 1 {
			mode = "batched"
		}
		cmd := exec.Command(exe, "-test.run=^TestHelperWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashSyncEnv+"="+mode)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		// Most kills land while the writer writes; one in five while it
		// starts, opens and recovers.
		var kill <-chan time.Time
		early := i%5 == 4
		if early {
			kill = time.After(time.Duration(r.IntN(40)) * time.Millisecond)
		}
		maxAck, arts := 0, []int{}
		guard := time.After(hangGuard) // the writer never got to be killed
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				switch f := strings.Fields(line); {
				case line == "ready" && kill == nil:
					kill = time.After(time.Duration(5+r.IntN(60)) * time.Millisecond)
				case len(f) == 2 && f[0] == "ack":
					n, _ := strconv.Atoi(f[1])
					if want := max(maxAck, prevK) + 1; n != want {
						t.Fatalf("kill %d: the writer acknowledged change %d, want %d", i, n, want)
					}
					maxAck = n
					acks++
				case len(f) == 2 && f[0] == "art":
					n, _ := strconv.Atoi(f[1])
					arts = append(arts, n)
				}
			case <-kill:
				cmd.Process.Kill() // SIGKILL
				kill = nil
			case <-guard:
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("kill %d: the writer neither said it was ready nor stopped within %v:\n%s", i, hangGuard, stderr.String())
			}
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(interface{ Signaled() bool }); !ok || !ws.Signaled() {
			t.Fatalf("kill %d: the writer was not killed: %v\n%s", i, err, stderr.String())
		}
		if maxAck == 0 && early {
			earlyKills++
		}

		// Check a copy, as the killed writer left the directory.
		check := t.TempDir()
		copyDir(t, dir, check)
		if midCompaction(t, check) {
			midCompactions++
		}
		var logs logBuffer
		s, err := Open(check, Options{Logger: logs.logger()})
		if err != nil {
			t.Fatalf("kill %d (%s): Open after the kill: %v", i, mode, err)
		}
		if strings.Contains(logs.String(), "torn") {
			torn++
		}
		st := load(t, s)
		k := counter(t, st)
		lo := max(prevK, maxAck)
		if k < lo || k > lo+1 {
			t.Fatalf("kill %d (%s): the store holds %d changes; acknowledged %d (before: %d)", i, mode, k, maxAck, prevK)
		}
		for ; refN < k; refN++ {
			apply(t, ref, crashChange(refN+1))
		}
		checkState(t, s, load(t, ref))
		for _, n := range arts {
			want, wantData := crashArtifact(n)
			got, data, err := s.GetArtifact(context.Background(), want.ID)
			if err != nil || string(data) != string(wantData) || got.ID != want.ID {
				t.Fatalf("kill %d (%s): acknowledged artifact %s: %v", i, mode, want.ID, err)
			}
		}
		closeStore(t, s)
		prevK = k
	}
	t.Logf("%d kills (%d before the writer acknowledged anything, %d during a compaction), %d acknowledged changes, %d changes held, %d torn tails cut, %v",
		iterations, earlyKills, midCompactions, acks, prevK, torn, time.Since(start).Round(time.Millisecond))
}

// midCompaction reports whether dir shows a compaction cut short: a
// temporary file, snapshots of different records, or a journal that was
// not restarted after the snapshots.
func midCompaction(t testing.TB, dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			return true
		}
	}
	var seqs []uint64
	for _, p := range parts {
		var h fileHeader
		data, err := os.ReadFile(filepath.Join(dir, p.name))
		if err != nil {
			return len(seqs) > 0 // some snapshots written, not all
		}
		if err := json.Unmarshal(data, &h); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		seqs = append(seqs, h.JournalSeq)
	}
	if slices.Min(seqs) != slices.Max(seqs) {
		return true
	}
	journal, err := os.ReadFile(filepath.Join(dir, journalName))
	if err != nil || len(journal) < frameHeader {
		return false
	}
	n := binary.LittleEndian.Uint32(journal)
	var rec struct{ LSN uint64 }
	if frameHeader+int(n) <= len(journal) && json.Unmarshal(journal[frameHeader:frameHeader+int(n)], &rec) == nil {
		return rec.LSN <= seqs[0]
	}
	return false
}

// Environment of the process TestDurability_NewDirectoriesAreSynced traces.
const (
	dirSyncDirEnv  = "FILESTORE_DIRSYNC_DIR"
	dirSyncCaseEnv = "FILESTORE_DIRSYNC_CASE"
)

// TestHelperDirSync is the process TestDurability_NewDirectoriesAreSynced
// runs under strace: it opens the store, makes one change of the kind
// asked, prints "acked" once it returned, and exits without Close (a crash
// of the machine may follow any acknowledgement).
func TestHelperDirSync(t *testing.T) {
	dir := os.Getenv(dirSyncDirEnv)
	if dir == "" {
		t.Skip("the traced process of TestDurability_NewDirectoriesAreSynced")
	}
	ctx := context.Background()
	s, err := Open(dir, Options{Logger: quiet}) // SyncEveryRecord
	if err != nil {
		t.Fatal(err)
	}
	switch os.Getenv(dirSyncCaseEnv) {
	case "events":
		err = s.AppendEvents(ctx, eventBatch(1, 1))
	case "apply":
		err = s.Apply(ctx, store.Change{Accepted: []store.Message{message("m-1", 1)}})
	}
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("acked\n")
	os.Exit(0)
}

// TestDurability_NewDirectoriesAreSynced checks, with strace, that under
// SyncEveryRecord every directory the store created is made durable in
// its parent (fsync of the parent) before the call that relies on it
// returns: a directory entry created and not synced can vanish with a
// crash of the machine, and every file under it with it.
func TestDurability_NewDirectoriesAreSynced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	stracePath, err := exec.LookPath("strace")
	if err != nil {
		t.Fatal("this test traces the store's writes with strace (Debian's strace package, which .ci/run installs)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		dir     string
		prepare func(dir string)
		kind    string
		created []string // directories the traced process creates
		synced  []string // directories it must sync before the acknowledgement
	}{
		{
			// A store that has no event log's directory yet (one that
			// never kept an event, or made before the event log was)
			// gets one for its first event.
			name: "events directory",
			dir:  filepath.Join(tmp, "s1"),
			prepare: func(dir string) {
				s := open(t, dir, Options{})
				apply(t, s, store.Change{Accepted: []store.Message{message("m-0", 1)}})
				closeStore(t, s)
				if err := os.RemoveAll(filepath.Join(dir, eventsName)); err != nil {
					t.Fatal(err)
				}
			},
			kind:    "events",
			created: []string{filepath.Join(tmp, "s1", eventsName)},
		},
		{
			// Open creates the directory, and its missing parents.
			name:    "nested store directory",
			dir:     filepath.Join(tmp, "a", "b"),
			prepare: func(string) {},
			kind:    "apply",
			created: []string{filepath.Join(tmp, "a"), filepath.Join(tmp, "a", "b")},
		},
		{
			// A store whose previous process was killed after a rename
			// (restartJournal's of journal.log, a snapshot's, a sidecar's)
			// and before the directory's sync looks like any other: Open
			// must make the entries it finds durable before it appends
			// to them, or an acknowledged record can go with the entry.
			name: "reopened store",
			dir:  filepath.Join(tmp, "s3"),
			prepare: func(dir string) {
				s := open(t, dir, Options{})
				apply(t, s, store.Change{Accepted: []store.Message{message("m-0", 1)}})
				closeStore(t, s)
			},
			kind:   "apply",
			synced: []string{filepath.Join(tmp, "s3"), filepath.Join(tmp, "s3", artifactsName)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.prepare(tc.dir)
			trace := filepath.Join(tmp, filepath.Base(tc.dir)+".trace")
			cmd := exec.Command(stracePath, "-f", "-qq", "-y", "-s", "256", "-e", "trace=mkdirat,fsync,fdatasync,write", "-o", trace,
				exe, "-test.run=^TestHelperDirSync$", "-test.count=1")
			cmd.Env = append(os.Environ(), dirSyncDirEnv+"="+tc.dir, dirSyncCaseEnv+"="+tc.kind)
			if out, err := cmd.CombinedOutput(); err != nil || !bytes.Contains(out, []byte("acked")) {
				t.Fatalf("traced process: %v\n%s", err, out)
			}
			data, err := os.ReadFile(trace)
			if err != nil {
				t.Fatal(err)
			}
			// Only what happened before the acknowledgement counts.
			lines := strings.Split(string(data), "\n")
			ack := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, `"acked\n"`) })
			if ack < 0 {
				t.Fatalf("no acknowledgement in the trace:\n%s", data)
			}
			lines = lines[:ack]
			for _, d := range tc.created {
				made := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "mkdirat(") && strings.Contains(l, `, "`+d+`", `) })
				if made < 0 {
					t.Errorf("%s was not created before the acknowledgement", d)
					continue
				}
				synced := slices.ContainsFunc(lines[made:], func(l string) bool {
					return strings.Contains(l, "fsync(") && strings.Contains(l, "<"+filepath.Dir(d)+">")
				})
				if !synced {
					t.Errorf("%s was created, and its parent %s not synced before the call returned", d, filepath.Dir(d))
				}
			}
			for _, d := range tc.synced {
				if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "fsync(") && strings.Contains(l, "<"+d+">") }) {
					t.Errorf("%s was not synced before the call returned", d)
				}
			}
		})
	}
}
