package agentsociety_test

// The tests of each feature are in the _test.go file beside its source
// file: spawning in agent_test.go, delivery in delivery_test.go, and so on.
// The helpers the tests of more than one file share are here; a helper
// only one file's tests use stays in that file. TestPropertyN checks
// correctness property N of the seed (seed 001), in the file of the
// feature the property is about.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
	"agentsociety/store"
	"agentsociety/store/filestore"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/tiktoken-go/tokenizer"
	"pgregory.net/rapid"
)

// TestMain runs the tests, or, in a child of BenchmarkSpawnFresh (see
// spawnChildEnv), the child's work instead.
func TestMain(m *testing.M) {
	if what := os.Getenv(spawnChildEnv); what != "" {
		os.Exit(spawnChild(what))
	}
	os.Exit(m.Run())
}

// ---------------------------------------------------------------------------
// Waiting.

// hangGuard bounds every wait of the tests. They wait for what they expect
// (a delivery, a model call, a condition), which normally takes
// milliseconds, and never for a fixed time: only a broken library, not a
// loaded machine, makes them reach it.
const hangGuard = time.Minute

// recv returns the next value from ch, failing the test after hangGuard.
func recv[T any](t rapid.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangGuard):
		t.Fatalf("timed out after %v waiting for %s", hangGuard, what)
	}
	panic("unreachable")
}

// poll calls cond until it holds, for up to hangGuard, and reports whether
// it held.
func poll(cond func() bool) bool {
	for deadline := time.Now().Add(hangGuard); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return cond()
		}
	}
	return true
}

// waitFor waits until cond holds, failing the test after hangGuard.
func waitFor(t rapid.TB, what string, cond func() bool) {
	t.Helper()
	if !poll(cond) {
		t.Fatalf("timed out after %v waiting for %s", hangGuard, what)
	}
}

// waitQuiet waits until nothing can happen in s until the host acts (see
// Society.Quiet), failing the test after hangGuard: a society that never
// goes quiet is busy for ever, as agents that answer each other without end
// would be.
func waitQuiet(t testing.TB, s *as.Society) {
	t.Helper()
	waitFor(t, "the society to go quiet", s.Quiet)
}

// waitGoroutines waits until no more than base goroutines run, failing the
// test with every goroutine's stack after hangGuard.
func waitGoroutines(t testing.TB, base int) {
	t.Helper()
	if !poll(func() bool { return runtime.NumGoroutine() <= base }) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%d goroutines after %v, %d before the society started:\n%s", runtime.NumGoroutine(), hangGuard, base, buf)
	}
}

// userMessage returns the next message to user, failing the test after
// hangGuard.
func userMessage(t testing.TB, s *as.Society) as.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	m, err := s.WaitForUserMessage(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ---------------------------------------------------------------------------
// Societies.

// quiet is a logger for tests: records are checked where they matter, not
// printed.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newSociety starts a society that the test closes when it ends.
func newSociety(t testing.TB, cfg as.Config) *as.Society {
	t.Helper()
	s, done := openSociety(t, cfg)
	t.Cleanup(done)
	return s
}

// openSociety starts a society and returns it with the function that closes
// it. Rapid checks use it: newSociety's cleanup runs at the end of the
// whole test, not of each check.
func openSociety(t rapid.TB, cfg as.Config) (*as.Society, func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := as.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, func() { closeSociety(t, s) }
}

// closeSociety closes s, failing the test unless it closes cleanly within
// hangGuard.
func closeSociety(t rapid.TB, s *as.Society) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// openFS opens a file store in dir under sync, and a society on it with
// cfg; closeFS closes both.
func openFS(tb testing.TB, dir string, sync filestore.SyncMode, cfg as.Config) (*as.Society, *filestore.Store) {
	tb.Helper()
	st, err := filestore.Open(dir, filestore.Options{Sync: sync, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Store = st
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := as.New(context.Background(), cfg)
	if err != nil {
		st.Close()
		tb.Fatal(err)
	}
	return s, st
}

// closeFS closes a society, then its file store.
func closeFS(tb testing.TB, s *as.Society, st *filestore.Store) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		tb.Fatal(err)
	}
	if err := st.Close(); err != nil {
		tb.Fatal(err)
	}
}

// copyDir copies the directories and regular files under src into dst.
func copyDir(tb testing.TB, src, dst string) {
	tb.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(path, to)
	})
	if err != nil {
		tb.Fatal(err)
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// ---------------------------------------------------------------------------
// Briefs and organisations.

// validBrief returns a brief with the five required fields, changed by each
// edit in turn.
func validBrief(edits ...func(b *as.TaskBrief)) *as.TaskBrief {
	b := &as.TaskBrief{
		Objective:          "build a calculator",
		Constraints:        []string{"HTML + JavaScript", "static page"},
		Inputs:             "numbers and operators typed by the user",
		Outputs:            "the result on the page",
		CompletionCriteria: "the four operations work",
	}
	for _, edit := range edits {
		edit(b)
	}
	return b
}

// withObjective is an edit of validBrief that sets the objective.
func withObjective(objective string) func(b *as.TaskBrief) {
	return func(b *as.TaskBrief) { b.Objective = objective }
}

// minimal is an edit of validBrief that leaves the smallest valid brief, for
// the benchmarks that count what an idle agent costs.
func minimal(b *as.TaskBrief) {
	*b = as.TaskBrief{Objective: "idle", Constraints: []string{}, Inputs: "none", Outputs: "none", CompletionCriteria: "none"}
}

// noop is a behaviour that handles every message by doing nothing.
var noop = as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil })

// actorOf returns a handle acting as agent id.
func actorOf(t rapid.TB, s *as.Society, id string) *as.Actor {
	t.Helper()
	x, err := s.Actor(id)
	if err != nil {
		t.Fatalf("Actor(%q): %v", id, err)
	}
	return x
}

// rootSpawn has root create (or reuse) a role and spawn an agent on it for
// task, driven by beh (nil: the society's default).
func rootSpawn(t testing.TB, s *as.Society, task, roleName, rolePrompt string, beh as.Behavior) as.Agent {
	t.Helper()
	ctx := context.Background()
	root := actorOf(t, s, as.RootID).WithTask(task)
	role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: roleName, Prompt: rolePrompt})
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: beh})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// hostLead has the host, acting as root on task, create a "lead" role and
// spawn one lead agent on it (root keeps one child per task), then create a
// role owned by that lead. It returns a handle acting as the lead and the id
// of the lead's role, on which the lead may spawn as many agents as needed.
func hostLead(tb testing.TB, s *as.Society, task, childRole string) (lead *as.Actor, roleID string) {
	tb.Helper()
	lead = actorOf(tb, s, rootSpawn(tb, s, task, "lead", "lead the task", nil).ID)
	role, _, err := lead.CreateRole(context.Background(), as.RoleSpec{Name: childRole, Prompt: "do the work"})
	if err != nil {
		tb.Fatal(err)
	}
	return lead, role.ID
}

// spawnWith spawns a child of lead on roleID driven by b.
func spawnWith(t testing.TB, s *as.Society, lead *as.Actor, roleID string, b as.Behavior) *as.Actor {
	t.Helper()
	a, _, err := lead.SpawnAgent(context.Background(), as.SpawnSpec{RoleID: roleID, Brief: validBrief(), Behavior: b})
	if err != nil {
		t.Fatal(err)
	}
	return actorOf(t, s, a.ID)
}

// askedInVain has a lead on task "t" of s spawn a worker and a helper
// that never answers, and the worker ask the helper for collaboration with
// a timeout of an hour. It returns the worker and the helper.
func askedInVain(t testing.TB, s *as.Society) (worker, helper *as.Actor) {
	t.Helper()
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", noop).ID)
	role, _, _ := lead.CreateRole(context.Background(), as.RoleSpec{Name: "w"})
	worker = spawnWith(t, s, lead, role.ID, noop)
	helper = spawnWith(t, s, lead, role.ID, noop)
	if _, err := worker.RequestCollaboration(context.Background(), helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "help"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	return worker, helper
}

// terminateAndWait terminates agent id and waits until it has ended.
func terminateAndWait(t testing.TB, s *as.Society, id string) {
	t.Helper()
	if err := s.Terminate(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, id+" to end", func() bool {
		a, _ := s.Agent(id)
		return a.Status == as.StatusTerminated
	})
}

// waitTaskStopped waits, for what, until task is no longer running.
func waitTaskStopped(t testing.TB, s *as.Society, task, what string) {
	t.Helper()
	waitFor(t, what, func() bool {
		for _, info := range s.Tasks() {
			if info.ID == task {
				return info.State != as.TaskRunning
			}
		}
		return false
	})
}

// chain spawns root -> a -> b, on task "t", b driven by bb and a by the
// society's default, and returns actors for a and b.
func chain(t testing.TB, s *as.Society, bb as.Behavior) (*as.Actor, *as.Actor) {
	t.Helper()
	aa := actorOf(t, s, rootSpawn(t, s, "t", "a", "", nil).ID)
	rb, _, err := aa.CreateRole(context.Background(), as.RoleSpec{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	return aa, spawnWith(t, s, aa, rb.ID, bb)
}

// sendAs sends text from agent from to agent to, on from's task.
func sendAs(t testing.TB, s *as.Society, from, to, text string) as.Message {
	t.Helper()
	x := actorOf(t, s, from)
	if a, ok := s.Agent(to); ok && from == as.RootID {
		x = x.WithTask(a.TaskID)
	}
	m, err := x.SendText(context.Background(), to, text)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var (
	leadSpec     = &as.InterfaceSpec{Services: "owns one requirement", InputFormat: "a task brief", OutputFormat: "a status report"}
	reviewerSpec = &as.InterfaceSpec{Services: "代码评审", InputFormat: "artifact 引用", OutputFormat: "评审意见", Examples: []string{"collaboration_request{subtask_description: review artifact:x}"}}
)

// smallOrg is a small organisation:
//
//	root ─┬─ a (role lead, task t1) ── g (role worker, a's)
//	      └─ b (role reviewer, task t2)
//
// root owns lead and reviewer, a owns worker, g owns intern. Every agent,
// user included, records what it receives in rec.
type smallOrg struct {
	s                   *as.Society
	rec                 *mailboxes
	root, user, a, b, g *as.Actor
	lead, reviewer      as.Role
	worker, intern      as.Role
}

func newSmallOrg(t *testing.T, cfg as.Config) *smallOrg {
	t.Helper()
	ctx := context.Background()
	rec := newMailboxes()
	cfg.Root = rec.behavior()
	s := newSociety(t, cfg)
	rec.watchUser(s)
	f := &smallOrg{s: s, rec: rec, root: actorOf(t, s, as.RootID), user: actorOf(t, s, as.UserID)}
	role := func(x *as.Actor, name string, spec *as.InterfaceSpec) as.Role {
		t.Helper()
		r, _, err := x.CreateRole(ctx, as.RoleSpec{Name: name, Prompt: "you are a " + name, InterfaceSpec: spec})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	f.lead = role(f.root, "lead", leadSpec)
	f.reviewer = role(f.root, "reviewer", reviewerSpec)
	f.a = spawnWith(t, s, f.root.WithTask("t1"), f.lead.ID, rec.behavior())
	f.b = spawnWith(t, s, f.root.WithTask("t2"), f.reviewer.ID, rec.behavior())
	f.worker = role(f.a, "worker", nil)
	f.g = spawnWith(t, s, f.a, f.worker.ID, rec.behavior())
	f.intern = role(f.g, "intern", nil)
	return f
}

// assertQuiet checks that no agent has a message waiting: a marker sent to
// each one now is the next message it sees. (A mailbox is a FIFO, so a
// message queued by the refused operation would come first.)
func (f *smallOrg) assertQuiet(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, x := range []*as.Actor{f.root, f.a, f.b, f.g} {
		m, err := f.user.SendText(ctx, x.ID(), "marker")
		if err != nil {
			t.Fatalf("marker to %s: %v", x.ID(), err)
		}
		f.rec.expect(t, x.ID(), m.ID)
	}
	m, err := f.root.SendText(ctx, as.UserID, "marker")
	if err != nil {
		t.Fatalf("marker to user: %v", err)
	}
	f.rec.expect(t, as.UserID, m.ID)
}

// request makes from send to to a collaboration request with id, and waits
// until to has received it.
func (f *smallOrg) request(t *testing.T, from, to *as.Actor, id string) {
	t.Helper()
	m, err := from.Send(context.Background(), as.Outgoing{To: to.ID(), Type: as.CollaborationRequest,
		Payload: as.CollaborationRequestPayload{RequestID: id, SubtaskDescription: "review the page"}})
	if err != nil {
		t.Fatal(err)
	}
	f.rec.expect(t, to.ID(), m.ID)
}

// spawnErr spawns and returns the error, checking that a refused spawn
// returns no agent.
func spawnErr(ctx context.Context, x *as.Actor, spec as.SpawnSpec) error {
	c, reused, err := x.SpawnAgent(ctx, spec)
	if err != nil && (c.ID != "" || reused) {
		return fmt.Errorf("a refused spawn returned %+v, reused=%v: %w", c, reused, err)
	}
	return err
}

// sendErr sends and returns the error, checking that a refused send
// returns no message.
func sendErr(ctx context.Context, x *as.Actor, out as.Outgoing) error {
	m, err := x.Send(ctx, out)
	if err != nil && m.ID != "" {
		return fmt.Errorf("a refused send returned message %+v: %w", m, err)
	}
	return err
}

// ---------------------------------------------------------------------------
// What the society shows.

// contactsOf returns agent id's registry.
func contactsOf(t rapid.TB, s *as.Society, id string) []as.Contact {
	t.Helper()
	c, err := s.Contacts(id)
	if err != nil {
		t.Fatalf("Contacts(%q): %v", id, err)
	}
	return c
}

// allContacts returns the registry of every agent, root and user included.
func allContacts(t rapid.TB, s *as.Society) map[string][]as.Contact {
	t.Helper()
	out := map[string][]as.Contact{
		as.RootID: contactsOf(t, s, as.RootID),
		as.UserID: contactsOf(t, s, as.UserID),
	}
	for _, a := range s.Agents() {
		out[a.ID] = contactsOf(t, s, a.ID)
	}
	return out
}

// findContact returns the entry for id in list.
func findContact(list []as.Contact, id string) (as.Contact, bool) {
	i := slices.IndexFunc(list, func(c as.Contact) bool { return c.ID == id })
	if i < 0 {
		return as.Contact{}, false
	}
	return list[i], true
}

// ignoreAddedAt compares contacts without their timestamps, which a model
// cannot predict.
var ignoreAddedAt = cmpopts.IgnoreFields(as.Contact{}, "AddedAt")

// orgState is what the society shows of its organisation: everything a
// refusal must leave as it was.
type orgState struct {
	Roles    []as.Role
	Agents   []as.Agent
	Contacts map[string][]as.Contact
}

func snapshot(t rapid.TB, s *as.Society) orgState {
	t.Helper()
	return orgState{Roles: s.Roles(), Agents: s.Agents(), Contacts: allContacts(t, s)}
}

// sameState fails the test if the organisation is no longer before.
func sameState(t rapid.TB, before orgState, s *as.Society) {
	t.Helper()
	if diff := cmp.Diff(before, snapshot(t, s)); diff != "" {
		t.Errorf("the organisation changed (-before +after):\n%s", diff)
	}
}

// wantCode checks that err is an *as.Error with code, through errors.As and
// errors.Is both, and returns it.
func wantCode(t rapid.TB, err error, code as.Code) *as.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code)
	}
	var e *as.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *agentsociety.Error", err, err)
	}
	if e.Code != code {
		t.Fatalf("error code %q (%v), want %q", e.Code, err, code)
	}
	if !errors.Is(err, code) {
		t.Fatalf("errors.Is(%v, %s) is false", err, code)
	}
	return e
}

// recordingStore is a store that records every change the society makes,
// so that a test can say exactly what a refused operation did not do.
type recordingStore struct {
	store.Store
	mu       sync.Mutex
	changes  []store.Change
	puts     []store.Artifact
	finished chan string // ids of handled messages, as their handling ends
}

func newRecordingStore() *recordingStore {
	return &recordingStore{Store: store.NewMemory(), finished: make(chan string, 4096)}
}

func (m *recordingStore) Apply(ctx context.Context, c store.Change) error {
	if err := m.Store.Apply(ctx, c); err != nil {
		return err
	}
	m.mu.Lock()
	m.changes = append(m.changes, c)
	m.mu.Unlock()
	for _, id := range c.Finished {
		select {
		case m.finished <- id:
		default:
		}
	}
	return nil
}

func (m *recordingStore) PutArtifact(ctx context.Context, a store.Artifact, data []byte) error {
	if err := m.Store.PutArtifact(ctx, a, data); err != nil {
		return err
	}
	m.mu.Lock()
	m.puts = append(m.puts, a)
	m.mu.Unlock()
	return nil
}

// waitBriefTurn waits until the turn a model-driven child's brief started,
// with its task_assignment, has ended, so that what a test sends next is
// handled on its own.
func (m *recordingStore) waitBriefTurn(t testing.TB, childID string) {
	t.Helper()
	var id string
	m.mu.Lock()
	for _, c := range m.changes {
		for _, msg := range c.Accepted {
			if msg.To == childID && msg.Type == string(as.TaskAssignment) {
				id = msg.ID
			}
		}
	}
	m.mu.Unlock()
	if id == "" {
		t.Fatalf("%s was not sent its brief", childID)
	}
	m.waitFinished(t, id)
}

// mark returns a position in the record of changes, for since.
func (m *recordingStore) mark() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.changes)
}

func (m *recordingStore) since(mark int) []store.Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.changes[mark:])
}

func (m *recordingStore) artifacts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.puts)
}

// waitFinished waits until the handling of message id has ended: its
// handler returned and the society recorded it.
func (m *recordingStore) waitFinished(t testing.TB, id string) {
	t.Helper()
	for {
		if got := recv(t, m.finished, "the end of the handling of "+id); got == id {
			return
		}
	}
}

// assertOnly fails unless the changes since mark are exactly the acceptance
// of the messages in accepted and the end of their handling: no role, agent,
// contact or request was recorded, and no other message was accepted.
func (m *recordingStore) assertOnly(t testing.TB, mark int, accepted ...as.Message) {
	t.Helper()
	want := map[string]bool{}
	for _, msg := range accepted {
		want[msg.ID] = true
	}
	for _, c := range m.since(mark) {
		if len(c.Roles)+len(c.Agents)+len(c.Contacts)+len(c.Requests) > 0 {
			t.Errorf("the society recorded a change to the organisation: %+v", c)
		}
		for _, msg := range c.Accepted {
			if !want[msg.ID] {
				t.Errorf("the society accepted an unexpected message %s from %s to %s (%s): %s", msg.ID, msg.From, msg.To, msg.Type, msg.Payload)
			}
		}
		for _, id := range c.Finished {
			if !want[id] {
				t.Errorf("the society finished an unexpected message %s", id)
			}
		}
	}
}

// logRecorder is a slog.Handler that keeps every record, flattened: its
// message as "_message", its level as "_level", and its attributes.
type logRecorder struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"_message": rec.Message, "_level": rec.Level.String()}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	r.mu.Lock()
	r.recs = append(r.recs, m)
	r.mu.Unlock()
	return nil
}

// records returns the records whose message is msg.
func (r *logRecorder) records(msg string) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, m := range r.recs {
		if m["_message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// find reports whether a record whose message is msg has all of attrs.
func (r *logRecorder) find(msg string, attrs map[string]string) bool {
	return slices.ContainsFunc(r.records(msg), func(m map[string]string) bool {
		for k, v := range attrs {
			if m[k] != v {
				return false
			}
		}
		return true
	})
}

// ---------------------------------------------------------------------------
// Code-driven agents that record what they receive.

// inbox records what the code-driven agents it drives receive, by agent and
// all together in the order of their deliveries.
type inbox struct {
	mu  sync.Mutex
	got map[string][]as.Message
	ch  chan as.Message
}

func newInbox() *inbox {
	return &inbox{got: map[string][]as.Message{}, ch: make(chan as.Message, 1024)}
}

func (in *inbox) behavior() as.Behavior {
	return as.BehaviorFunc(func(_ context.Context, self *as.Actor, m as.Message) error {
		in.mu.Lock()
		in.got[self.ID()] = append(in.got[self.ID()], m)
		in.mu.Unlock()
		in.ch <- m
		return nil
	})
}

// next waits for the next delivery to any of the agents.
func (in *inbox) next(t rapid.TB) as.Message {
	t.Helper()
	return recv(t, in.ch, "a delivery")
}

// mailboxes is a Behavior that records every message delivered to the
// agents it drives, one channel per agent, so a test waits for deliveries
// instead of sleeping.
type mailboxes struct {
	mu    sync.Mutex
	boxes map[string]chan as.Message
	// relayed receives the result of each relay a "relay_to" payload asked for.
	relayed chan relay
}

type relay struct {
	m   as.Message
	err error
}

func newMailboxes() *mailboxes {
	return &mailboxes{boxes: make(map[string]chan as.Message), relayed: make(chan relay, 64)}
}

func (r *mailboxes) box(id string) chan as.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := r.boxes[id]
	if ch == nil {
		ch = make(chan as.Message, 1024)
		r.boxes[id] = ch
	}
	return ch
}

// behavior records each message. A payload with a "relay_to" field makes the
// agent send {"from": <the payload's "from">, "text": "relayed"} to that agent
// first, trying to forge the sender, and report the result on r.relayed.
func (r *mailboxes) behavior() as.Behavior {
	return as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		var p struct {
			RelayTo string `json:"relay_to"`
			From    string `json:"from"`
		}
		if m.Decode(&p) == nil && p.RelayTo != "" {
			out, err := self.Send(ctx, as.Outgoing{To: p.RelayTo, Payload: map[string]string{"from": p.From, "text": "relayed"}})
			r.relayed <- relay{out, err}
		}
		select {
		case r.box(self.ID()) <- m:
		case <-ctx.Done():
		}
		return nil
	})
}

// watchUser records the messages to user too.
func (r *mailboxes) watchUser(s *as.Society) {
	s.OnUserMessage(func(m as.Message) { r.box(as.UserID) <- m })
}

// next waits for the next message delivered to id.
func (r *mailboxes) next(t rapid.TB, id string) as.Message {
	t.Helper()
	return recv(t, r.box(id), "a message delivered to "+id)
}

// expect checks that the next messages delivered to id are exactly wantIDs,
// in order.
func (r *mailboxes) expect(t rapid.TB, id string, wantIDs ...string) {
	t.Helper()
	var got []string
	for range wantIDs {
		got = append(got, r.next(t, id).ID)
	}
	if diff := cmp.Diff(wantIDs, got); diff != "" {
		t.Fatalf("messages delivered to %s (-want +got):\n%s", id, diff)
	}
}

// ---------------------------------------------------------------------------
// A model of the contact registries, for the property tests.

// contactModel predicts every registry from the operations a test
// performed, following DESIGN §3 Contacts.
type contactModel struct {
	role  map[string]string // agent id -> role name
	spec  map[string]*as.InterfaceSpec
	task  map[string]string
	reg   map[string][]as.Contact
	ids   []string                       // user, root, then spawned agents in order
	roles map[[2]string]contactModelRole // (creator, name) -> role
}

type contactModelRole struct {
	id   string
	spec *as.InterfaceSpec
}

func newContactModel() *contactModel {
	return &contactModel{
		role: map[string]string{as.RootID: as.RootID, as.UserID: as.UserID},
		spec: map[string]*as.InterfaceSpec{},
		task: map[string]string{},
		reg: map[string][]as.Contact{
			as.RootID: {{ID: as.UserID, Role: as.UserID, Source: as.SourceSystem}},
			as.UserID: {{ID: as.RootID, Role: as.RootID, Source: as.SourceSystem}},
		},
		ids:   []string{as.UserID, as.RootID},
		roles: map[[2]string]contactModelRole{},
	}
}

func (m *contactModel) knows(owner, id string) bool {
	return slices.ContainsFunc(m.reg[owner], func(c as.Contact) bool { return c.ID == id })
}

// add records c for owner unless owner knows c.ID already: the first entry wins.
func (m *contactModel) add(owner string, c as.Contact) {
	if !m.knows(owner, c.ID) {
		m.reg[owner] = append(m.reg[owner], c)
	}
}

func (m *contactModel) spawned(parent, child, roleName string, spec *as.InterfaceSpec, collabs []as.Collaborator) {
	m.role[child], m.spec[child] = roleName, spec
	m.ids = append(m.ids, child)
	m.add(child, as.Contact{ID: parent, Role: m.role[parent], InterfaceSpec: m.spec[parent], Source: as.SourceParent})
	m.add(parent, as.Contact{ID: child, Role: roleName, InterfaceSpec: spec, Source: as.SourceChild})
	for _, c := range collabs {
		m.add(child, as.Contact{ID: c.AgentID, Role: m.role[c.AgentID], InterfaceSpec: m.spec[c.AgentID], Source: as.SourcePreset, Note: c.Description})
	}
}

// sent records that from sent to to a message: to learns from.
func (m *contactModel) sent(from, to string) {
	m.add(to, as.Contact{ID: from, Role: m.role[from], InterfaceSpec: m.spec[from], Source: as.SourceFirstMessage})
}

// check compares every registry with the model.
func (m *contactModel) check(t rapid.TB, s *as.Society) {
	t.Helper()
	for _, id := range m.ids {
		got := contactsOf(t, s, id)
		if diff := cmp.Diff(m.reg[id], got, ignoreAddedAt); diff != "" {
			t.Fatalf("registry of %s (-model +society):\n%s", id, diff)
		}
		for _, c := range got {
			if c.AddedAt.IsZero() {
				t.Fatalf("registry of %s: entry %s has no AddedAt", id, c.ID)
			}
		}
	}
}

var (
	roleNames = []string{"程序员", "测试员", "UI设计师", "lead", "worker"}
	spaces    = []string{"", " ", "\t", "\n", "\r\n", "\v\f", "\u00a0", "\u3000", "\u2003", " \n\t\u3000 "}
	blanks    = rapid.SampledFrom(spaces)
)

// drawSpec draws an interface spec or nil.
func drawSpec(t *rapid.T, label, name string) *as.InterfaceSpec {
	if !rapid.Bool().Draw(t, label+"?") {
		return nil
	}
	spec := &as.InterfaceSpec{Services: name + "的服务", InputFormat: "文本需求", OutputFormat: "artifact 引用"}
	if rapid.Bool().Draw(t, label+".examples?") {
		spec.Examples = []string{"send_message(to='x', payload={...})"}
	}
	return spec
}

// spawnStep makes parent create (or reuse) a role and spawn a child on it
// with a valid brief, checks the result against the model and records it.
// Root spawns each child on task taskHint, so that no spawn reuses a child.
func spawnStep(t *rapid.T, s *as.Society, m *contactModel, parent, taskHint string, collabs []as.Collaborator, beh as.Behavior) string {
	t.Helper()
	ctx := context.Background()
	name := rapid.SampledFrom(roleNames).Draw(t, "role name")
	spec := drawSpec(t, "role spec", name)
	x := actorOf(t, s, parent)
	role, reused, err := x.CreateRole(ctx, as.RoleSpec{Name: name, Prompt: "你是" + name, InterfaceSpec: spec})
	if err != nil {
		t.Fatalf("%s CreateRole(%q): %v", parent, name, err)
	}
	key := [2]string{parent, name}
	if old, ok := m.roles[key]; ok {
		if !reused || role.ID != old.id {
			t.Fatalf("%s re-creating role %q: got %s reused=%v, want %s reused", parent, name, role.ID, reused, old.id)
		}
		spec = old.spec
	} else {
		if reused {
			t.Fatalf("%s creating a new role %q: reused", parent, name)
		}
		m.roles[key] = contactModelRole{role.ID, spec}
	}
	if role.CreatedBy != parent || role.Name != name || !cmp.Equal(role.InterfaceSpec, spec) {
		t.Fatalf("role %+v, want name %q by %s with spec %+v", role, name, parent, spec)
	}
	wantTask := m.task[parent]
	if parent == as.RootID {
		x = x.WithTask(taskHint)
		wantTask = taskHint
	}
	brief := validBrief()
	brief.Collaborators = collabs
	child, reused, err := x.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: brief, Behavior: beh})
	if err != nil {
		t.Fatalf("%s SpawnAgent: %v", parent, err)
	}
	if reused || child.ParentID != parent || child.RoleID != role.ID || child.TaskID != wantTask || child.Status != as.StatusActive {
		t.Fatalf("spawned %+v (reused=%v), want a new child of %s on role %s, task %q", child, reused, parent, role.ID, wantTask)
	}
	if !cmp.Equal(child.Brief, brief) {
		t.Fatalf("child brief %+v, want %+v", child.Brief, brief)
	}
	m.task[child.ID] = wantTask
	m.spawned(parent, child.ID, name, spec, collabs)
	return child.ID
}

// growTree spawns n agents, each under a random existing agent (root or an
// earlier spawn), and returns root followed by the spawned agents. after, if
// set, runs after each spawn.
func growTree(t *rapid.T, s *as.Society, m *contactModel, n int, beh as.Behavior, after func(parent, child string)) []string {
	t.Helper()
	agents := []string{as.RootID}
	for i := range n {
		parent := rapid.SampledFrom(agents).Draw(t, "parent")
		child := spawnStep(t, s, m, parent, fmt.Sprintf("task-%d", i), nil, beh)
		agents = append(agents, child)
		if after != nil {
			after(parent, child)
		}
	}
	return agents
}

// drawPair draws two different agents from ids.
func drawPair(t *rapid.T, ids []string) (from, to string) {
	from = rapid.SampledFrom(ids).Draw(t, "from")
	to = rapid.SampledFrom(ids).Filter(func(id string) bool { return id != from }).Draw(t, "to")
	return from, to
}

// ---------------------------------------------------------------------------
// Models.

// call is a model reply that makes one tool call.
func call(id, name, args string) *llm.Response {
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: name, Arguments: json.RawMessage(args)}}}}
}

// lastToolResult returns the content of the tool result that ends req, or
// "" if req does not end with one.
func lastToolResult(req *llm.Request) string {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == llm.RoleTool {
		return req.Messages[n-1].Content
	}
	return ""
}

// lastCallAndResult returns the tool result that ends req, with the call it
// answers, failing the test if req does not end with one.
func lastCallAndResult(t testing.TB, req llm.Request) (llm.ToolCall, llm.Message) {
	t.Helper()
	n := len(req.Messages)
	if n < 2 || req.Messages[n-1].Role != llm.RoleTool {
		t.Fatalf("request for %s does not end with a tool result: %+v", req.Agent, req.Messages)
	}
	res := req.Messages[n-1]
	for i := n - 2; i >= 0; i-- {
		for _, c := range req.Messages[i].ToolCalls {
			if c.ID == res.ToolCallID {
				if req.Messages[i].Role != llm.RoleAssistant {
					t.Fatalf("tool call %s is in a %s message", c.ID, req.Messages[i].Role)
				}
				return c, res
			}
		}
	}
	t.Fatalf("tool result %q answers no call of the request", res.ToolCallID)
	return llm.ToolCall{}, llm.Message{}
}

// toolNames returns the names of the tools a request offered.
func toolNames(req llm.Request) []string {
	var out []string
	for _, tl := range req.Tools {
		out = append(out, tl.Name)
	}
	return out
}

// toolError is a failed tool result as the model reads it.
type toolError struct {
	Error         string   `json:"error"`
	Message       string   `json:"message"`
	MissingFields []string `json:"missing_fields"`
	MessageType   string   `json:"message_type"`
	AgentID       string   `json:"agentId"`
}

// cpuTimer measures the CPU time the process spends, user and system, over
// a benchmark's timed part: on a shared machine it varies less than the
// wall time.
type cpuTimer struct {
	b     *testing.B
	start time.Duration
}

func startCPU(b *testing.B) cpuTimer { return cpuTimer{b, processCPU(b)} }

// report adds the CPU time per operation to b's metrics, as cpu-ns/op.
func (c cpuTimer) report() {
	c.b.ReportMetric(float64(processCPU(c.b)-c.start)/float64(c.b.N), "cpu-ns/op")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// idleOnBrief is a rule for scripted models: the turn an agent's brief
// starts does nothing, so that a test drives the agent by what it sends it.
var idleOnBrief = llmtest.Rule{Name: "brief", LastContains: "message_type: task_assignment", Response: llmtest.Say("")}

// toolCall is a tool call a scripted model makes: a tool's name and its
// JSON arguments.
type toolCall struct{ name, args string }

// callTools has the model-driven agent of a new society make calls, one per
// step of the turn a message "go" starts (its brief's turn does nothing),
// and returns the results the model read, in order. The
// agent is agent-1, root's child on task "t"; agent-2, its child, is driven
// by helper. cfg's Model is replaced.
func callTools(t *testing.T, cfg as.Config, helper as.Behavior, calls ...toolCall) []string {
	t.Helper()
	var mu sync.Mutex
	var results []string
	done := make(chan struct{})
	cfg.Model = llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		if last := req.Messages[len(req.Messages)-1]; strings.Contains(last.Content, "message_type: task_assignment") {
			return llmtest.Say(""), nil // the brief's turn: the calls wait for "go"
		}
		if r := lastToolResult(req); r != "" {
			results = append(results, r)
		}
		if n := len(results); n < len(calls) {
			return call(fmt.Sprintf("c%d", n+1), calls[n].name, calls[n].args), nil
		}
		close(done)
		return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "done"}}, nil
	})
	if cfg.MaxSteps == 0 {
		cfg.MaxSteps = len(calls) + 1
	}
	s := newSociety(t, cfg)
	lead, _ := chain(t, s, helper)
	if lead.ID() != "agent-1" {
		t.Fatalf("the model-driven agent is %s, want agent-1", lead.ID())
	}
	if _, err := s.SendTextToAgent(context.Background(), lead.ID(), "go", ""); err != nil {
		t.Fatal(err)
	}
	recv(t, done, "the end of agent-1's turn")
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(results)
}

// ---------------------------------------------------------------------------
// A competent scripted society for whole jobs.
//
// jobModel plays, through the built-in tools, every agent of the two jobs
// the misbehaviour suite and the context benchmark run: seed 001's
// calculator (root → lead → tester and developer) and a translation job of
// 50 documents (root → lead → translators, each with a batch of documents;
// the lead assembles the report). Like a real model, it decides each step
// from the request alone: its role and brief, the message that opened the
// turn, and what its tools returned. It never assumes an id, and it picks
// up where it left off whatever happened in between, so that a model that
// misbehaves at one step (see llmtest's personalities) does not derail it
// at the next.

// The two jobs' requirements. docsRequirement carries the documents'
// references and the number of translators; both reach the lead in its
// brief and are read back by the script.
const calcRequirement = "请做一个计算器：静态网页，用 HTML + JavaScript 实现，支持加减乘除。"

func docsRequirement(refs []string, workers int) string {
	return fmt.Sprintf("请把以下 %d 篇英文文档译成中文，每篇一份译文工件，最后汇编成一份报告交给我。请分 %d 批交给译员（0 表示你自己做）。WORKERS=%d DOCS=%s",
		len(refs), workers, workers, strings.Join(refs, ","))
}

// calcPage is the calculator page the developer stores.
const calcPage = `<!doctype html>
<html lang="zh"><head><meta charset="utf-8"><title>计算器</title></head>
<body><input id="a" type="number"> <select id="op"><option>+</option><option>-</option><option>*</option><option>/</option></select>
<input id="b" type="number"> <button id="eq">=</button> <output id="r"></output>
<script>
function calculate(a, op, b) {
  switch (op) { case '+': return a + b; case '-': return a - b; case '*': return a * b; case '/': return b === 0 ? NaN : a / b; }
}
document.getElementById('eq').onclick = function () {
  var r = calculate(+document.getElementById('a').value, document.getElementById('op').value, +document.getElementById('b').value);
  document.getElementById('r').textContent = isFinite(r) ? String(r) : '错误';
};
</script></body></html>
`

// jobDoc returns document i (0-based) of the translation job: English text
// of 1 to 3 KB, different for each i.
func jobDoc(i int) string {
	words := strings.Fields("the agents of a society share work through messages and artifacts while each one keeps only the context its task needs " +
		"a lead splits the job into parts and every worker reports its result to the parent that assigned it " +
		"documents are translated one by one and the report lists every translation with a short summary")
	size := 1024 + (i*733)%2048
	var b strings.Builder
	fmt.Fprintf(&b, "Document %d.", i+1)
	for w := i; b.Len() < size; w++ {
		b.WriteByte(' ')
		b.WriteString(words[(w*7+i)%len(words)])
		if w%13 == 12 {
			b.WriteByte('.')
		}
	}
	return b.String()[:size]
}

// jobDict is the translators' dictionary.
var jobDict = map[string]string{
	"the": "该", "agents": "智能体", "of": "之", "a": "一", "society": "社会", "share": "分担", "work": "工作", "through": "经由",
	"messages": "消息", "and": "与", "artifacts": "工件", "while": "而", "each": "每个", "one": "一个", "keeps": "保留", "only": "仅",
	"context": "上下文", "its": "其", "task": "任务", "needs": "所需", "lead": "负责人", "splits": "拆分", "job": "工作", "into": "成",
	"parts": "部分", "every": "每个", "worker": "工人", "reports": "汇报", "result": "结果", "to": "给", "parent": "父级", "that": "那",
	"assigned": "分派", "it": "它", "documents": "文档", "are": "被", "translated": "翻译", "by": "按", "report": "报告",
	"lists": "列出", "translation": "译文", "with": "附", "short": "简短", "summary": "摘要",
}

// jobTranslate translates a document with jobDict: 1 to 2 KB of Chinese.
func jobTranslate(doc string) string {
	var b strings.Builder
	for _, w := range strings.Fields(doc) {
		word, stop := strings.CutSuffix(w, ".")
		if zh, ok := jobDict[word]; ok {
			b.WriteString(zh)
		} else {
			b.WriteString(word)
		}
		if stop {
			b.WriteString("。")
		}
	}
	out := b.String()
	for len(out) > 2048 {
		_, size := utf8.DecodeLastRuneInString(out)
		out = out[:len(out)-size]
	}
	return out
}

// jobSummary is the one-line summary of a translation.
func jobSummary(translation string) string {
	r := []rune(translation)
	return string(r[:min(len(r), 16)])
}

var (
	jobRoleRe     = regexp.MustCompile(`(?m)^- ID：[^；\n]+；岗位：([^；\n]+)`)
	jobParentRe   = regexp.MustCompile(`(?m)^- 父级：([^（\s]+)`)
	jobHintRe     = regexp.MustCompile(`send_message\(to='([^']+)'`)
	jobTypeRe     = regexp.MustCompile(`(?m)^message_type: (\w+)$`)
	jobRefRe      = regexp.MustCompile(`artifact:[A-Za-z0-9_-]+`)
	jobDocsRe     = regexp.MustCompile(`DOCS=(\S+)`)
	jobWorkersRe  = regexp.MustCompile(`WORKERS=(\d+)`)
	jobTesterRe   = regexp.MustCompile(`TESTER=(\S+)`)
	jobBatchRe    = regexp.MustCompile(`第 (\d+)/(\d+) 批`)
	jobDoneRe     = regexp.MustCompile(`DONE (artifact:\S+) (artifact:\S+) (\S+)`)
	jobChildrenRe = regexp.MustCompile(`(?m)^- 子级（(.+?)）：(.+)$`)
	jobIDRangeRe  = regexp.MustCompile(`agent-(\d+)(?:\.\.agent-(\d+))?`)
	jobReqIDRe    = regexp.MustCompile(`"request_id": "([^"]+)"`)
	jobStatusRe   = regexp.MustCompile(`"status": "([^"]+)"`)
)

// jobCall is a tool call of the conversation with its result.
type jobCall struct {
	name   string
	args   map[string]any
	result map[string]any
	ok     bool // the result is not an error
}

// jobTurn is what the script reads of a request.
type jobTurn struct {
	jobScript
	req     *llm.Request
	role    string // the agent's role; "root" for root
	text    string // the system prompt and every message, in order
	brief   string // the task_assignment that is the first message, or ""
	opened  string // the delivered message that opened the turn
	from    string // its sender: the id in its reply hint, or user
	mtype   string // its message_type, "" for a general message
	calls   []jobCall
	last    []jobCall // the calls of the turn's last step
	history []jobCall
}

func readJobTurn(req *llm.Request, script jobScript) *jobTurn {
	t := &jobTurn{jobScript: script, req: req, role: firstMatch(jobRoleRe, req.System)}
	if req.Agent == as.RootID {
		t.role = as.RootID
	}
	var b strings.Builder
	b.WriteString(req.System)
	start, step := 0, -1
	for i, m := range req.Messages {
		b.WriteString("\n")
		b.WriteString(m.Content)
		for _, c := range m.ToolCalls {
			b.WriteString("\n")
			b.Write(c.Arguments)
		}
		switch m.Role {
		case llm.RoleUser:
			start = i
			if t.brief == "" && firstMatch(jobTypeRe, m.Content) == string(as.TaskAssignment) {
				t.brief = m.Content
			}
		case llm.RoleAssistant:
			step = i
		}
	}
	t.text = b.String()
	if len(req.Messages) > 0 {
		t.opened = req.Messages[start].Content
		if strings.HasPrefix(t.opened, "【来自用户的消息】") {
			t.from = as.UserID
		}
		if m := jobHintRe.FindAllStringSubmatch(t.opened, -1); m != nil {
			t.from = m[len(m)-1][1]
		}
		t.mtype = firstMatch(jobTypeRe, t.opened)
	}
	pending := map[string]*jobCall{}
	for i, m := range req.Messages {
		for _, c := range m.ToolCalls {
			jc := &jobCall{name: c.Name}
			json.Unmarshal(c.Arguments, &jc.args)
			pending[c.ID] = jc
		}
		if m.Role != llm.RoleTool || pending[m.ToolCallID] == nil {
			continue
		}
		jc := pending[m.ToolCallID]
		json.Unmarshal([]byte(m.Content), &jc.result)
		_, failed := jc.result["error"]
		jc.ok = !failed
		t.history = append(t.history, *jc)
		if i > start {
			t.calls = append(t.calls, *jc)
		}
		if i > step && step > start {
			t.last = append(t.last, *jc)
		}
	}
	return t
}

func firstMatch(re *regexp.Regexp, s string) string {
	if m := re.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

// did returns the successful calls of tool name this turn.
func (t *jobTurn) did(name string) []jobCall { return okCalls(t.calls, name) }

// ever returns the successful calls of tool name in the whole history.
func (t *jobTurn) ever(name string) []jobCall { return okCalls(t.history, name) }

func okCalls(calls []jobCall, name string) []jobCall {
	var out []jobCall
	for _, c := range calls {
		if c.ok && c.name == name {
			out = append(out, c)
		}
	}
	return out
}

// stuck returns the error of a tool that failed twice this turn: the
// script does not try a third time.
func (t *jobTurn) stuck() string {
	failed := map[string]int{}
	for _, c := range t.calls {
		if !c.ok {
			if failed[c.name]++; failed[c.name] == 2 {
				return fmt.Sprint(c.name, ": ", c.result["message"])
			}
		}
	}
	return ""
}

// parent returns the agent's parent.
func (t *jobTurn) parent() string { return firstMatch(jobParentRe, t.req.System) }

// children returns the agent's children by role name, from the children
// lines of its system prompt ("- 子级（translator）：已汇报 agent-2..agent-4；
// 未汇报 agent-5") and from what it spawned in its history.
func (t *jobTurn) children() map[string][]string {
	out := map[string][]string{}
	seen := map[string]bool{}
	add := func(id, role string) {
		if id != "" && !seen[id] {
			seen[id] = true
			out[role] = append(out[role], id)
		}
	}
	for _, line := range jobChildrenRe.FindAllStringSubmatch(t.req.System, -1) {
		for _, ids := range jobIDRangeRe.FindAllStringSubmatch(line[2], -1) {
			lo, _ := strconv.Atoi(ids[1])
			hi := lo
			if ids[2] != "" {
				hi, _ = strconv.Atoi(ids[2])
			}
			for n := lo; n <= hi; n++ {
				add(fmt.Sprintf("agent-%d", n), line[1])
			}
		}
	}
	roles := map[string]string{}
	for _, c := range t.ever("create_role") {
		roles[str(c.result["roleId"])] = str(c.result["name"])
	}
	for _, c := range t.ever("spawn_agent") {
		add(str(c.result["agentId"]), roles[str(c.result["roleId"])])
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// roleID returns the id of the role named name that create_role returned
// this turn, or "".
func (t *jobTurn) roleID(name string) string {
	for _, c := range t.did("create_role") {
		if str(c.result["name"]) == name {
			return str(c.result["roleId"])
		}
	}
	return ""
}

// sent reports whether the agent sent, this turn, a message to to.
func (t *jobTurn) sent(to string) bool {
	return slices.ContainsFunc(t.did("send_message"), func(c jobCall) bool { return c.args["to"] == to })
}

// end returns c as the call that ends its turn: with end_turn set, unless
// the script does without it (then the turn takes one more model call,
// which answers without a tool call).
func (t *jobTurn) end(c llm.ToolCall) llm.ToolCall {
	if !t.endTurn {
		return c
	}
	var args map[string]any
	if err := json.Unmarshal(c.Arguments, &args); err != nil {
		panic(err)
	}
	args["end_turn"] = true
	return jobToolCall(c.Name, args)
}

func jobCalls(calls ...llm.ToolCall) *llm.Response { return llmtest.Calls(calls...) }

// jobToolCall is a call of tool name with args written as models write
// JSON: "<" stays "<".
func jobToolCall(name string, args any) llm.ToolCall {
	return llm.ToolCall{Name: name, Arguments: json.RawMessage(wireJSON(args))}
}

func jobSend(to, text string) llm.ToolCall {
	return jobToolCall("send_message", map[string]any{"to": to, "payload": map[string]string{"text": text}})
}

func jobReport(to, status, text string) llm.ToolCall {
	return jobToolCall("send_message", map[string]any{"to": to, "message_type": as.StatusReport, "payload": map[string]string{"status": status, "text": text}})
}

// jobScript is how the competent script writes its calls.
type jobScript struct {
	// endTurn sets end_turn on the call that ends a turn with a send or a
	// spawn, as the prompts ask. Without it such a turn takes one more model
	// call, which only ends it: the benchmark counts the difference.
	endTurn bool
}

// jobModel returns a new competent model for the jobs.
func jobModel() *llmtest.Model { return jobScript{endTurn: true}.model() }

// model returns a new competent model for the jobs that writes its calls
// as j says.
func (j jobScript) model() *llmtest.Model {
	return llmtest.New(llmtest.Rule{Name: "competent", Reply: func(req *llm.Request) (*llm.Response, error) {
		t := readJobTurn(req, j)
		if why := t.stuck(); why != "" {
			return llmtest.Say("无法完成这一步：" + why), nil
		}
		switch t.role {
		case as.RootID:
			return jobRoot(t), nil
		case "lead":
			if strings.Contains(t.brief, "DOCS=") {
				return docsLead(t), nil
			}
			return calcLead(t), nil
		case "developer":
			return calcDeveloper(t), nil
		case "tester":
			return calcTester(t), nil
		case "translator":
			return translator(t), nil
		}
		return nil, fmt.Errorf("jobModel: agent %s has no role the script knows (%q)", req.Agent, t.role)
	}})
}

// ---- root ----

// jobRoot hands a requirement to a new lead, whose brief starts it, and
// passes on to user any report that reaches root.
func jobRoot(t *jobTurn) *llm.Response {
	switch {
	case t.from == as.UserID && len(t.did("spawn_agent")) == 0:
		text, _ := strings.CutPrefix(t.opened, "【来自用户的消息】\n")
		id := t.roleID("lead")
		if id == "" {
			return jobCalls(jobToolCall("create_role", map[string]string{"name": "lead",
				"rolePrompt": "你是需求负责人：组建团队完成用户需求，把结果用 send_message 发给 user；无法完成时如实告诉 user 是谁、出了什么问题。"}))
		}
		var constraints []string
		for word, c := range map[string]string{"HTML": "HTML + JavaScript", "静态": "静态网页，无后端", "译成中文": "译文为简体中文，每篇一份工件"} {
			if strings.Contains(text, word) {
				constraints = append(constraints, c)
			}
		}
		slices.Sort(constraints)
		return jobCalls(t.end(jobToolCall("spawn_agent", map[string]any{"roleId": id, "taskBrief": as.TaskBrief{
			Objective: "交付用户的需求", Constraints: constraints, Inputs: text,
			Outputs: "结果（工件引用）用 send_message 发给 user", CompletionCriteria: "用户收到满足全部约束的结果",
		}})))
	case t.mtype == string(as.StatusReport) && !t.sent(as.UserID):
		return jobCalls(t.end(jobSend(as.UserID, "负责人 "+t.from+" 汇报："+t.opened)))
	}
	return llmtest.Say("")
}

// ---- the calculator ----

// calcLead builds a tester and a developer, whose briefs start them, and
// reports the developer's result to user.
func calcLead(t *jobTurn) *llm.Response {
	if t.mtype == string(as.StatusReport) && t.from != t.parent() {
		switch ref := jobRefRe.FindString(t.opened); {
		case t.sent(as.UserID):
			return llmtest.Say("")
		case ref != "" && firstMatch(jobStatusRe, t.opened) == string(as.StatusCompleted):
			return jobCalls(t.end(jobReport(as.UserID, string(as.StatusCompleted), "您的计算器已完成并通过测试："+ref+"（静态网页，HTML + JavaScript）。")))
		default:
			return jobCalls(t.end(jobReport(as.UserID, string(as.StatusError), "计算器未能完成："+t.from+" 报告了问题："+t.opened)))
		}
	}
	kids := t.children()
	if len(kids["tester"]) > 0 && len(kids["developer"]) > 0 {
		return llmtest.Say("")
	}
	tester, developer := t.roleID("tester"), t.roleID("developer")
	if tester == "" || developer == "" {
		return jobCalls(
			jobToolCall("create_role", map[string]string{"name": "tester", "rolePrompt": "你是测试员：收到 collaboration_request 后读取工件、逐项检查约束，再用 collaboration_response 答复。"}),
			jobToolCall("create_role", map[string]string{"name": "developer", "rolePrompt": "你是前端开发：实现页面并 put_artifact，请测试员测试，再用 status_report 向父级汇报。"}))
	}
	constraints := []string{"HTML + JavaScript", "静态网页，无后端"}
	if len(kids["tester"]) == 0 {
		return jobCalls(jobToolCall("spawn_agent", map[string]any{"roleId": tester, "taskBrief": as.TaskBrief{
			Objective: "测试计算器页面", Constraints: constraints, Inputs: "开发者发来的工件引用",
			Outputs: "collaboration_response：verdict pass|fail", CompletionCriteria: "每条约束都检查过",
		}}))
	}
	return jobCalls(t.end(jobToolCall("spawn_agent", map[string]any{"roleId": developer, "taskBrief": as.TaskBrief{
		Objective: "实现支持加减乘除的计算器网页", Constraints: constraints, Inputs: "TESTER=" + kids["tester"][0],
		Outputs: "页面工件引用，测试通过后 status_report 给父级", CompletionCriteria: "测试员结论为 pass",
		Collaborators: []as.Collaborator{{AgentID: kids["tester"][0], Role: "tester", Description: "写好后请它测试"}},
	}})))
}

// calcDeveloper stores the page on its brief, asks the tester to test it,
// and reports the verdict to its parent.
func calcDeveloper(t *jobTurn) *llm.Response {
	switch {
	case t.mtype == string(as.CollaborationResponse) && !t.sent(t.parent()):
		ref := jobRefRe.FindString(t.opened)
		if firstMatch(jobStatusRe, t.opened) == string(as.StatusCompleted) && strings.Contains(t.opened, `"verdict": "pass"`) && ref != "" {
			return jobCalls(t.end(jobReport(t.parent(), string(as.StatusCompleted), "计算器页面 "+ref+" 已通过测试。")))
		}
		return jobCalls(t.end(jobReport(t.parent(), string(as.StatusError), "测试未通过："+t.opened)))
	case t.mtype == string(as.TaskAssignment) && len(t.did("send_message")) == 0:
		puts := t.did("put_artifact")
		if len(puts) == 0 {
			return jobCalls(jobToolCall("put_artifact", map[string]string{"name": "calculator.html", "media_type": "text/html", "content": calcPage}))
		}
		ref := str(puts[0].result["ref"])
		return jobCalls(t.end(jobToolCall("send_message", map[string]any{"to": firstMatch(jobTesterRe, t.brief),
			"message_type": as.CollaborationRequest, "payload": map[string]string{"subtask_description": "测试计算器页面 " + ref, "context": ref}})))
	}
	return llmtest.Say("")
}

// calcTester tests the page a collaboration request names and answers it.
func calcTester(t *jobTurn) *llm.Response {
	if t.mtype != string(as.CollaborationRequest) || t.sent(t.from) {
		return llmtest.Say("")
	}
	got := t.did("get_artifact")
	if len(got) == 0 {
		return jobCalls(jobToolCall("get_artifact", map[string]string{"ref": jobRefRe.FindString(t.opened)}))
	}
	verdict := "fail"
	if page := str(got[0].result["content"]); strings.Contains(page, "<script>") && strings.Contains(page, "case '/'") {
		verdict = "pass"
	}
	return jobCalls(t.end(jobToolCall("send_message", map[string]any{"to": t.from, "message_type": as.CollaborationResponse,
		"payload": map[string]any{"request_id": firstMatch(jobReqIDRe, t.opened), "status": as.StatusCompleted,
			"result_data": map[string]string{"artifact": str(got[0].result["ref"]), "verdict": verdict}}})))
}

// ---- the translation job ----

// jobBatch is how many documents the script reads in one step: few enough
// that a step's results stay within the default history budget, and enough
// that the lead alone gets through 50 within a turn's model calls.
const jobBatch = 5

// translate is the translators' work, and the lead's when it works alone.
// It reads the documents jobBatch at a time and stores each one's
// translation in the next step, noting in the text of its reply a DONE
// line for each translation stored: the text of a reply stays in the
// history when a long turn's earlier tool results are elided, so the notes
// are what the script remembers. It returns the next step's reply, or nil
// and the DONE lines of docs, in order, once every translation is stored.
func translate(t *jobTurn, docs []string) (*llm.Response, []string) {
	done := map[string]string{} // document → DONE line
	for _, m := range jobDoneRe.FindAllStringSubmatch(t.text, -1) {
		done[m[1]] = m[0]
	}
	var notes []string
	var calls []llm.ToolCall
	reading := map[string]bool{}
	for _, c := range t.last {
		if !c.ok {
			continue
		}
		switch c.name {
		case "put_artifact":
			if doc, ok := strings.CutPrefix(str(c.args["name"]), "译文-"); ok && done[doc] == "" {
				done[doc] = "DONE " + doc + " " + str(c.result["ref"]) + " " + jobSummary(str(c.args["content"]))
				notes = append(notes, done[doc])
			}
		case "get_artifact":
			if doc := str(c.result["ref"]); done[doc] == "" {
				reading[doc] = true
				calls = append(calls, jobToolCall("put_artifact", map[string]string{"name": "译文-" + doc, "content": jobTranslate(str(c.result["content"]))}))
			}
		}
	}
	gets := 0
	for _, d := range docs {
		if done[d] == "" && !reading[d] && gets < jobBatch {
			gets++
			calls = append(calls, jobToolCall("get_artifact", map[string]string{"ref": d}))
		}
	}
	if len(calls) > 0 {
		resp := jobCalls(calls...)
		resp.Message.Content = strings.Join(notes, "\n")
		return resp, nil
	}
	var lines []string
	for _, d := range docs {
		lines = append(lines, done[d])
	}
	return nil, lines
}

// translator translates the batch its brief names and reports it.
func translator(t *jobTurn) *llm.Response {
	if t.mtype != string(as.TaskAssignment) || t.sent(t.parent()) {
		return llmtest.Say("")
	}
	next, done := translate(t, strings.Split(firstMatch(jobDocsRe, t.brief), ","))
	if next != nil {
		return next
	}
	return jobCalls(t.end(jobReport(t.parent(), string(as.StatusCompleted), "本批译文：\n"+strings.Join(done, "\n"))))
}

// docsLead splits the documents among translators, whose briefs start
// them, or translates them itself, then stores the report and sends it to
// user.
func docsLead(t *jobTurn) *llm.Response {
	docs := strings.Split(firstMatch(jobDocsRe, t.brief), ",")
	workers, _ := strconv.Atoi(firstMatch(jobWorkersRe, t.brief))
	switch {
	case t.sent(as.UserID) || slices.ContainsFunc(t.ever("send_message"), func(c jobCall) bool {
		return c.args["to"] == as.UserID && strings.Contains(fmt.Sprint(c.args["payload"]), "翻译报告")
	}):
		return llmtest.Say("") // reported
	case t.mtype == string(as.StatusReport) && firstMatch(jobStatusRe, t.opened) == string(as.StatusError) && t.from != t.parent():
		return jobCalls(t.end(jobReport(as.UserID, string(as.StatusError), "翻译出了问题："+t.from+" 报告失败："+t.opened)))
	}
	// The report, once stored, goes to user.
	for _, c := range t.last {
		if c.ok && c.name == "put_artifact" && c.args["name"] == "翻译报告.md" {
			return jobCalls(t.end(jobReport(as.UserID, string(as.StatusCompleted), fmt.Sprintf("翻译报告：%s（%d 篇，全部完成）", str(c.result["ref"]), len(docs)))))
		}
	}
	// The DONE line of every document: the lead's own notes when it works
	// alone, the translators' reports when it does not.
	var done []string
	if workers == 0 {
		if t.mtype != string(as.TaskAssignment) {
			return llmtest.Say("")
		}
		next, lines := translate(t, docs)
		if next != nil {
			return next
		}
		done = lines
	} else {
		if kids := t.children()["translator"]; len(kids) < workers {
			return spawnTranslators(t, docs, workers, len(kids))
		}
		outputs := map[string]string{}
		for _, m := range jobDoneRe.FindAllStringSubmatch(t.text, -1) {
			outputs[m[1]] = m[0]
		}
		var known []string
		for _, d := range docs {
			if outputs[d] != "" {
				known = append(known, outputs[d])
			}
		}
		if len(known) < len(docs) {
			// Waiting for reports, the lead notes what it has: the text of
			// its reply stays in the history when older turns, the reports
			// among them, are dropped to keep within the budget.
			return llmtest.Say(fmt.Sprintf("已收到 %d/%d 篇：\n%s", len(known), len(docs), strings.Join(known, "\n")))
		}
		done = known
	}
	var b strings.Builder
	b.WriteString("# 翻译报告\n")
	for i, line := range done {
		m := jobDoneRe.FindStringSubmatch(line)
		fmt.Fprintf(&b, "%d. %s → %s：%s\n", i+1, m[1], m[2], m[3])
	}
	return jobCalls(jobToolCall("put_artifact", map[string]string{"name": "翻译报告.md", "content": b.String()}))
}

// spawnTranslators creates the translator role, then spawns the
// translators from the one-th on, each with its batch in its brief.
func spawnTranslators(t *jobTurn, docs []string, workers, from int) *llm.Response {
	id := t.roleID("translator")
	if id == "" {
		return jobCalls(jobToolCall("create_role", map[string]string{"name": "translator",
			"rolePrompt": "你是译员：读取委托书列出的文档，逐篇译成中文并各存一份工件，完成后用 status_report 向父级汇报每篇的 DONE 行。"}))
	}
	var calls []llm.ToolCall
	for b := from; b < workers; b++ {
		lo, hi := b*len(docs)/workers, (b+1)*len(docs)/workers
		calls = append(calls, jobToolCall("spawn_agent", map[string]any{"roleId": id, "taskBrief": as.TaskBrief{
			Objective: fmt.Sprintf("翻译第 %d/%d 批文档", b+1, workers), Constraints: []string{"译文为简体中文，每篇一份工件"},
			Inputs: "DOCS=" + strings.Join(docs[lo:hi], ","), Outputs: "每篇一行：DONE <原文引用> <译文引用> <摘要>，用 status_report 发给父级",
			CompletionCriteria: "每篇都有译文工件",
		}}))
	}
	calls[len(calls)-1] = t.end(calls[len(calls)-1])
	return jobCalls(calls...)
}

// ---------------------------------------------------------------------------
// Prompts on the wire, in tokens.

// o200kCodec is the tokenizer of OpenAI's current models, loaded once.
var o200kCodec = sync.OnceValues(func() (tokenizer.Codec, error) { return tokenizer.Get(tokenizer.O200kBase) })

// o200k returns the number of o200k tokens of s.
func o200k(t testing.TB, s string) int {
	t.Helper()
	codec, err := o200kCodec()
	if err != nil {
		t.Fatal(err)
	}
	n, err := codec.Count(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// wireFunction is a function as a chat completion request carries it: a
// tool's schema, or a call's arguments.
type wireFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Arguments   string          `json:"arguments,omitempty"`
}

type wireTool struct {
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

// wireJSON encodes v as a request body does: "<" stays "<".
func wireJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func toWireTools(tools []llm.Tool) []wireTool {
	var out []wireTool
	for _, t := range tools {
		out = append(out, wireTool{"function", wireFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
	}
	return out
}

// wireTools returns the tools field of an OpenAI-compatible chat
// completion request that offers tools.
func wireTools(tools []llm.Tool) string { return wireJSON(toWireTools(tools)) }

// wireRequest returns req as an OpenAI-compatible chat completion request
// carries it: the system prompt as the first message, tool calls as
// function calls, and the tools' schemas.
func wireRequest(req *llm.Request) string {
	type toolCall struct {
		ID       string       `json:"id"`
		Type     string       `json:"type"`
		Function wireFunction `json:"function"`
	}
	type message struct {
		Role       string     `json:"role"`
		Content    string     `json:"content"`
		ToolCalls  []toolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
	}
	var w struct {
		Messages []message  `json:"messages"`
		Tools    []wireTool `json:"tools,omitempty"`
	}
	w.Messages = append(w.Messages, message{Role: "system", Content: req.System})
	for _, m := range req.Messages {
		wm := message{Role: string(m.Role), Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			wm.ToolCalls = append(wm.ToolCalls, toolCall{ID: c.ID, Type: "function", Function: wireFunction{Name: c.Name, Arguments: string(c.Arguments)}})
		}
		w.Messages = append(w.Messages, wm)
	}
	w.Tools = toWireTools(req.Tools)
	return wireJSON(w)
}

// syncSlice is a slice that goroutines append to, such as the messages an
// OnUserMessage callback collects.
type syncSlice[T any] struct {
	mu    sync.Mutex
	items []T
}

func (s *syncSlice[T]) add(v T) {
	s.mu.Lock()
	s.items = append(s.items, v)
	s.mu.Unlock()
}

// all returns a copy of the items.
func (s *syncSlice[T]) all() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.items)
}
