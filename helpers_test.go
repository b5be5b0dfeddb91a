package agentsociety_test

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
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/store"
	"agentsociety/store/filestore"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"
)

// quiet is a logger for tests: records are checked where they matter, not
// printed.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newSociety(t testing.TB, cfg as.Config) *as.Society {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := as.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func validBrief() *as.TaskBrief {
	return &as.TaskBrief{
		Objective:          "build a calculator",
		Constraints:        []string{"HTML + JavaScript", "static page"},
		Inputs:             "numbers and operators typed by the user",
		Outputs:            "the result on the page",
		CompletionCriteria: "the four operations work",
	}
}

// mtTimeout bounds every wait of the model-driven tests: they wait on
// channels, never sleep, and only a broken library makes them time out.
const mtTimeout = 10 * time.Second

// mtRecv returns the next value from ch, failing the test after mtTimeout.
func mtRecv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(mtTimeout):
		t.Fatalf("timed out after %v waiting for %s", mtTimeout, what)
	}
	panic("unreachable")
}

// mtStore is a store that records every change the society makes, so that a
// test can say exactly what a refused operation did not do.
type mtStore struct {
	store.Store
	mu       sync.Mutex
	changes  []store.Change
	puts     []store.Artifact
	finished chan string // ids of handled messages, as their handling ends
}

func newMTStore() *mtStore {
	return &mtStore{Store: store.NewMemory(), finished: make(chan string, 4096)}
}

func (m *mtStore) Apply(ctx context.Context, c store.Change) error {
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

func (m *mtStore) PutArtifact(ctx context.Context, a store.Artifact, data []byte) error {
	if err := m.Store.PutArtifact(ctx, a, data); err != nil {
		return err
	}
	m.mu.Lock()
	m.puts = append(m.puts, a)
	m.mu.Unlock()
	return nil
}

// mark returns a position in the record of changes, for since.
func (m *mtStore) mark() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.changes)
}

func (m *mtStore) since(mark int) []store.Change {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.changes[mark:])
}

func (m *mtStore) artifacts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.puts)
}

// waitFinished waits until the handling of message id has ended: its
// handler returned and the society recorded it.
func (m *mtStore) waitFinished(t testing.TB, id string) {
	t.Helper()
	for {
		if got := mtRecv(t, m.finished, "the end of the handling of "+id); got == id {
			return
		}
	}
}

// assertOnly fails unless the changes since mark are exactly the acceptance
// of the messages in accepted and the end of their handling: no role, agent,
// contact or request was recorded, and no other message was accepted.
func (m *mtStore) assertOnly(t testing.TB, mark int, accepted ...as.Message) {
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

// mtState is what the society shows of its organisation.
type mtState struct {
	Roles    []as.Role
	Agents   []as.Agent
	Contacts map[string][]as.Contact
}

func mtSnapshot(t testing.TB, s *as.Society) mtState {
	t.Helper()
	st := mtState{Roles: s.Roles(), Agents: s.Agents(), Contacts: map[string][]as.Contact{}}
	ids := []string{as.RootID, as.UserID}
	for _, a := range st.Agents {
		ids = append(ids, a.ID)
	}
	for _, id := range ids {
		c, err := s.Contacts(id)
		if err != nil {
			t.Fatal(err)
		}
		st.Contacts[id] = c
	}
	return st
}

func mtSameState(t testing.TB, before mtState, s *as.Society) {
	t.Helper()
	after := mtSnapshot(t, s)
	if !reflect.DeepEqual(before.Roles, after.Roles) {
		t.Errorf("roles changed:\nbefore %+v\nafter  %+v", before.Roles, after.Roles)
	}
	if !reflect.DeepEqual(before.Agents, after.Agents) {
		t.Errorf("agents changed:\nbefore %+v\nafter  %+v", before.Agents, after.Agents)
	}
	if !reflect.DeepEqual(before.Contacts, after.Contacts) {
		t.Errorf("contacts changed:\nbefore %+v\nafter  %+v", before.Contacts, after.Contacts)
	}
}

// mtSpawn has root create (or reuse) a role and spawn an agent on it for
// task, driven by beh (nil: the society's model).
func mtSpawn(t testing.TB, s *as.Society, task, roleName, rolePrompt string, beh as.Behavior) as.Agent {
	t.Helper()
	ctx := context.Background()
	root, err := s.Actor(as.RootID)
	if err != nil {
		t.Fatal(err)
	}
	root = root.WithTask(task)
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

// mtSendAs sends text from agent from to agent to, on from's task.
func mtSendAs(t testing.TB, s *as.Society, from, to, text string) as.Message {
	t.Helper()
	x, err := s.Actor(from)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := s.Agent(to); ok && from == as.RootID {
		x = x.WithTask(a.TaskID)
	}
	m, err := x.SendText(context.Background(), to, text)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mtInbox is a Go behaviour that hands every message it gets to a channel.
type mtInbox chan as.Message

func (c mtInbox) HandleMessage(_ context.Context, _ *as.Actor, m as.Message) error {
	c <- m
	return nil
}

// mtToolNames returns the names of the tools a request offered.
func mtToolNames(req llm.Request) []string {
	var out []string
	for _, tl := range req.Tools {
		out = append(out, tl.Name)
	}
	return out
}

// mtToolError is a failed tool result as the model reads it.
type mtToolError struct {
	Error         string   `json:"error"`
	Message       string   `json:"message"`
	MissingFields []string `json:"missing_fields"`
	MessageType   string   `json:"message_type"`
	AgentID       string   `json:"agent_id"`
}

// mtLastResult returns the tool result that ends req, with the call it
// answers, failing the test if req does not end with one.
func mtLastResult(t testing.TB, req llm.Request) (llm.ToolCall, llm.Message) {
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

// mtLogRecorder is a slog.Handler that passes each record, flattened, to a
// channel.
type mtLogRecorder struct{ ch chan map[string]string }

func (r mtLogRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r mtLogRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }

func (r mtLogRecorder) WithGroup(string) slog.Handler { return r }

func (r mtLogRecorder) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"_message": rec.Message, "_level": rec.Level.String()}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	select {
	case r.ch <- m:
	default:
	}
	return nil
}

// ptTimeout bounds every wait for a delivery; deliveries normally take
// microseconds, so it is only reached when a message is lost.
const ptTimeout = 10 * time.Second

// ptIgnoreAddedAt compares contacts without their timestamps, which a model
// cannot predict.
var ptIgnoreAddedAt = cmpopts.IgnoreFields(as.Contact{}, "AddedAt")

// ptOpen starts a society for one property check. The caller closes it
// with the returned function (rapid checks cannot use newSociety, whose
// cleanup runs at the end of the whole test).
func ptOpen(t rapid.TB, cfg as.Config) (*as.Society, func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := as.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, func() {
		ctx, cancel := context.WithTimeout(context.Background(), ptTimeout)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

// ptActor returns a handle acting as agent id.
func ptActor(t rapid.TB, s *as.Society, id string) *as.Actor {
	t.Helper()
	x, err := s.Actor(id)
	if err != nil {
		t.Fatalf("Actor(%q): %v", id, err)
	}
	return x
}

// ptContacts returns agent id's registry.
func ptContacts(t rapid.TB, s *as.Society, id string) []as.Contact {
	t.Helper()
	c, err := s.Contacts(id)
	if err != nil {
		t.Fatalf("Contacts(%q): %v", id, err)
	}
	return c
}

// ptAllContacts returns the registry of every agent, root and user included.
func ptAllContacts(t rapid.TB, s *as.Society) map[string][]as.Contact {
	t.Helper()
	out := map[string][]as.Contact{
		as.RootID: ptContacts(t, s, as.RootID),
		as.UserID: ptContacts(t, s, as.UserID),
	}
	for _, a := range s.Agents() {
		out[a.ID] = ptContacts(t, s, a.ID)
	}
	return out
}

// ptWantCode checks that err is an *as.Error with code, through errors.As and
// errors.Is both, and returns it.
func ptWantCode(t rapid.TB, err error, code as.Code) *as.Error {
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

func ptFindContact(list []as.Contact, id string) (as.Contact, bool) {
	i := slices.IndexFunc(list, func(c as.Contact) bool { return c.ID == id })
	if i < 0 {
		return as.Contact{}, false
	}
	return list[i], true
}

// ptRecorder is a Behavior that records every message delivered to the agents
// it drives, one channel per agent, so a test waits for deliveries instead of
// sleeping.
type ptRecorder struct {
	mu    sync.Mutex
	boxes map[string]chan as.Message
	// relayed receives the result of each relay a "relay_to" payload asked for.
	relayed chan ptRelay
}

type ptRelay struct {
	m   as.Message
	err error
}

func ptNewRecorder() *ptRecorder {
	return &ptRecorder{boxes: make(map[string]chan as.Message), relayed: make(chan ptRelay, 64)}
}

func (r *ptRecorder) box(id string) chan as.Message {
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
func (r *ptRecorder) behavior() as.Behavior {
	return as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		var p struct {
			RelayTo string `json:"relay_to"`
			From    string `json:"from"`
		}
		if m.Decode(&p) == nil && p.RelayTo != "" {
			out, err := self.Send(ctx, as.Outgoing{To: p.RelayTo, Payload: map[string]string{"from": p.From, "text": "relayed"}})
			r.relayed <- ptRelay{out, err}
		}
		select {
		case r.box(self.ID()) <- m:
		case <-ctx.Done():
		}
		return nil
	})
}

// watchUser records the messages to user too.
func (r *ptRecorder) watchUser(s *as.Society) {
	s.OnUserMessage(func(m as.Message) { r.box(as.UserID) <- m })
}

// next waits for the next message delivered to id.
func (r *ptRecorder) next(t rapid.TB, id string) as.Message {
	t.Helper()
	timer := time.NewTimer(ptTimeout)
	defer timer.Stop()
	select {
	case m := <-r.box(id):
		return m
	case <-timer.C:
		t.Fatalf("no message delivered to %s within %v", id, ptTimeout)
	}
	return as.Message{}
}

// expect checks that the next messages delivered to id are exactly wantIDs,
// in order.
func (r *ptRecorder) expect(t rapid.TB, id string, wantIDs ...string) {
	t.Helper()
	var got []string
	for range wantIDs {
		got = append(got, r.next(t, id).ID)
	}
	if diff := cmp.Diff(wantIDs, got); diff != "" {
		t.Fatalf("messages delivered to %s (-want +got):\n%s", id, diff)
	}
}

// ptModel predicts every registry from the operations a test performed,
// following DESIGN §3 Contacts.
type ptModel struct {
	role  map[string]string // agent id -> role name
	spec  map[string]*as.InterfaceSpec
	task  map[string]string
	reg   map[string][]as.Contact
	ids   []string                  // user, root, then spawned agents in order
	roles map[[2]string]ptModelRole // (creator, name) -> role
}

type ptModelRole struct {
	id   string
	spec *as.InterfaceSpec
}

func ptNewModel() *ptModel {
	return &ptModel{
		role: map[string]string{as.RootID: as.RootID, as.UserID: as.UserID},
		spec: map[string]*as.InterfaceSpec{},
		task: map[string]string{},
		reg: map[string][]as.Contact{
			as.RootID: {{ID: as.UserID, Role: as.UserID, Source: as.SourceSystem}},
			as.UserID: {{ID: as.RootID, Role: as.RootID, Source: as.SourceSystem}},
		},
		ids:   []string{as.UserID, as.RootID},
		roles: map[[2]string]ptModelRole{},
	}
}

func (m *ptModel) knows(owner, id string) bool {
	return slices.ContainsFunc(m.reg[owner], func(c as.Contact) bool { return c.ID == id })
}

// add records c for owner unless owner knows c.ID already: the first entry wins.
func (m *ptModel) add(owner string, c as.Contact) {
	if !m.knows(owner, c.ID) {
		m.reg[owner] = append(m.reg[owner], c)
	}
}

func (m *ptModel) spawned(parent, child, roleName string, spec *as.InterfaceSpec, collabs []as.Collaborator) {
	m.role[child], m.spec[child] = roleName, spec
	m.ids = append(m.ids, child)
	m.add(child, as.Contact{ID: parent, Role: m.role[parent], InterfaceSpec: m.spec[parent], Source: as.SourceParent})
	m.add(parent, as.Contact{ID: child, Role: roleName, InterfaceSpec: spec, Source: as.SourceChild})
	for _, c := range collabs {
		m.add(child, as.Contact{ID: c.AgentID, Role: m.role[c.AgentID], InterfaceSpec: m.spec[c.AgentID], Source: as.SourcePreset, Note: c.Description})
	}
}

// sent records that from sent to to a message: to learns from.
func (m *ptModel) sent(from, to string) {
	m.add(to, as.Contact{ID: from, Role: m.role[from], InterfaceSpec: m.spec[from], Source: as.SourceFirstMessage})
}

// check compares every registry with the model.
func (m *ptModel) check(t rapid.TB, s *as.Society) {
	t.Helper()
	for _, id := range m.ids {
		got := ptContacts(t, s, id)
		if diff := cmp.Diff(m.reg[id], got, ptIgnoreAddedAt); diff != "" {
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
	ptRoleNames = []string{"程序员", "测试员", "UI设计师", "lead", "worker"}
	ptSpaces    = []string{"", " ", "\t", "\n", "\r\n", "\v\f", "\u00a0", "\u3000", "\u2003", " \n\t\u3000 "}
	ptBlank     = rapid.SampledFrom(ptSpaces)
)

// ptDrawSpec draws an interface spec or nil.
func ptDrawSpec(t *rapid.T, label, name string) *as.InterfaceSpec {
	if !rapid.Bool().Draw(t, label+"?") {
		return nil
	}
	spec := &as.InterfaceSpec{Services: name + "的服务", InputFormat: "文本需求", OutputFormat: "artifact 引用"}
	if rapid.Bool().Draw(t, label+".examples?") {
		spec.Examples = []string{"send_message(to='x', payload={...})"}
	}
	return spec
}

// ptSpawnStep makes parent create (or reuse) a role and spawn a child on it
// with a valid brief, checks the result against the model and records it.
// Root spawns each child on task taskHint, so that no spawn reuses a child.
func ptSpawnStep(t *rapid.T, s *as.Society, m *ptModel, parent, taskHint string, collabs []as.Collaborator, beh as.Behavior) string {
	t.Helper()
	ctx := context.Background()
	name := rapid.SampledFrom(ptRoleNames).Draw(t, "role name")
	spec := ptDrawSpec(t, "role spec", name)
	x := ptActor(t, s, parent)
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
		m.roles[key] = ptModelRole{role.ID, spec}
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

// ptGrowTree spawns n agents, each under a random existing agent (root or an
// earlier spawn), and returns root followed by the spawned agents. after, if
// set, runs after each spawn.
func ptGrowTree(t *rapid.T, s *as.Society, m *ptModel, n int, beh as.Behavior, after func(parent, child string)) []string {
	t.Helper()
	agents := []string{as.RootID}
	for i := range n {
		parent := rapid.SampledFrom(agents).Draw(t, "parent")
		child := ptSpawnStep(t, s, m, parent, fmt.Sprintf("task-%d", i), nil, beh)
		agents = append(agents, child)
		if after != nil {
			after(parent, child)
		}
	}
	return agents
}

// ptDrawPair draws two different agents from ids.
func ptDrawPair(t *rapid.T, ids []string) (from, to string) {
	from = rapid.SampledFrom(ids).Draw(t, "from")
	to = rapid.SampledFrom(ids).Filter(func(id string) bool { return id != from }).Draw(t, "to")
	return from, to
}

var (
	rfLeadSpec     = &as.InterfaceSpec{Services: "owns one requirement", InputFormat: "a task brief", OutputFormat: "a status report"}
	rfReviewerSpec = &as.InterfaceSpec{Services: "代码评审", InputFormat: "artifact 引用", OutputFormat: "评审意见", Examples: []string{"collaboration_request{subtask_description: review artifact:x}"}}
)

// rfFixture is a small organisation:
//
//	root ─┬─ a (role lead, task t1) ── g (role worker, a's)
//	      └─ b (role reviewer, task t2)
//
// root owns lead and reviewer, a owns worker, g owns intern. Every agent,
// user included, records what it receives in rec.
type rfFixture struct {
	s                   *as.Society
	rec                 *ptRecorder
	root, user, a, b, g *as.Actor
	lead, reviewer      as.Role
	worker, intern      as.Role
}

func rfSetup(t *testing.T, cfg as.Config) *rfFixture {
	t.Helper()
	ctx := context.Background()
	rec := ptNewRecorder()
	cfg.Root = rec.behavior()
	s := newSociety(t, cfg)
	rec.watchUser(s)
	f := &rfFixture{s: s, rec: rec, root: ptActor(t, s, as.RootID), user: ptActor(t, s, as.UserID)}
	role := func(x *as.Actor, name string, spec *as.InterfaceSpec) as.Role {
		t.Helper()
		r, _, err := x.CreateRole(ctx, as.RoleSpec{Name: name, Prompt: "you are a " + name, InterfaceSpec: spec})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	spawn := func(x *as.Actor, r as.Role) *as.Actor {
		t.Helper()
		c, _, err := x.SpawnAgent(ctx, as.SpawnSpec{RoleID: r.ID, Brief: validBrief(), Behavior: rec.behavior()})
		if err != nil {
			t.Fatal(err)
		}
		return ptActor(t, s, c.ID)
	}
	f.lead = role(f.root, "lead", rfLeadSpec)
	f.reviewer = role(f.root, "reviewer", rfReviewerSpec)
	f.a = spawn(f.root.WithTask("t1"), f.lead)
	f.b = spawn(f.root.WithTask("t2"), f.reviewer)
	f.worker = role(f.a, "worker", nil)
	f.g = spawn(f.a, f.worker)
	f.intern = role(f.g, "intern", nil)
	return f
}

// rfState is everything a refusal must leave as it was.
type rfState struct {
	Agents   []as.Agent
	Roles    []as.Role
	Contacts map[string][]as.Contact
}

func rfSnapshot(t *testing.T, s *as.Society) rfState {
	t.Helper()
	return rfState{Agents: s.Agents(), Roles: s.Roles(), Contacts: ptAllContacts(t, s)}
}

func rfSameState(t *testing.T, before rfState, s *as.Society) {
	t.Helper()
	if diff := cmp.Diff(before, rfSnapshot(t, s)); diff != "" {
		t.Fatalf("the refusal changed the organisation (-before +after):\n%s", diff)
	}
}

// assertQuiet checks that no agent has a message waiting: a marker sent to
// each one now is the next message it sees. (A mailbox is a FIFO, so a
// message queued by the refused operation would come first.)
func (f *rfFixture) assertQuiet(t *testing.T) {
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

// spawnErr spawns and returns the error, checking that a refused spawn
// returns no agent.
func rfSpawnErr(ctx context.Context, x *as.Actor, spec as.SpawnSpec) error {
	c, reused, err := x.SpawnAgent(ctx, spec)
	if err != nil && (c.ID != "" || reused) {
		return fmt.Errorf("a refused spawn returned %+v, reused=%v: %w", c, reused, err)
	}
	return err
}

func rfSendErr(ctx context.Context, x *as.Actor, out as.Outgoing) error {
	m, err := x.Send(ctx, out)
	if err != nil && m.ID != "" {
		return fmt.Errorf("a refused send returned message %+v: %w", m, err)
	}
	return err
}

// rfRequest makes from send to to a collaboration request with id, and waits
// until to has received it.
func (f *rfFixture) rfRequest(t *testing.T, from, to *as.Actor, id string) {
	t.Helper()
	m, err := from.Send(context.Background(), as.Outgoing{To: to.ID(), Type: as.CollaborationRequest,
		Payload: as.CollaborationRequestPayload{RequestID: id, SubtaskDescription: "review the page"}})
	if err != nil {
		t.Fatal(err)
	}
	f.rec.expect(t, to.ID(), m.ID)
}

func rfBrief(edit func(b *as.TaskBrief)) *as.TaskBrief {
	b := validBrief()
	edit(b)
	return b
}

// call is a model reply that makes one tool call.
func call(id, name, args string) *llm.Response {
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: name, Arguments: json.RawMessage(args)}}}}
}

func say(text string) *llm.Response {
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: text}}
}

func lastToolResult(req *llm.Request) string {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == llm.RoleTool {
		return req.Messages[n-1].Content
	}
	return ""
}

// recorder is a slog.Handler that keeps every record's message and attributes.
type recorder struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }

func (r *recorder) WithGroup(string) slog.Handler { return r }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"_message": rec.Message}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	r.mu.Lock()
	r.recs = append(r.recs, m)
	r.mu.Unlock()
	return nil
}

func (r *recorder) find(msg string, attrs map[string]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.recs, func(m map[string]string) bool {
		if m["_message"] != msg {
			return false
		}
		for k, v := range attrs {
			if m[k] != v {
				return false
			}
		}
		return true
	})
}

// hostLead has the host, acting as root on task, create a "lead" role and
// spawn one lead agent on it (root keeps one child per task), then create a
// role owned by that lead. It returns a handle acting as the lead and the id
// of the lead's role, on which the lead may spawn as many agents as needed.
func hostLead(tb testing.TB, s *as.Society, task, childRole string) (lead *as.Actor, roleID string) {
	tb.Helper()
	ctx := context.Background()
	root, err := s.Actor(as.RootID)
	if err != nil {
		tb.Fatal(err)
	}
	root = root.WithTask(task)
	leadRole, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "lead", Prompt: "lead the task"})
	if err != nil {
		tb.Fatal(err)
	}
	a, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: leadRole.ID, Brief: validBrief()})
	if err != nil {
		tb.Fatal(err)
	}
	if lead, err = s.Actor(a.ID); err != nil {
		tb.Fatal(err)
	}
	role, _, err := lead.CreateRole(ctx, as.RoleSpec{Name: childRole, Prompt: "do the work"})
	if err != nil {
		tb.Fatal(err)
	}
	return lead, role.ID
}

// spawnWith spawns a child of lead on roleID driven by b.
func spawnWith(t *testing.T, s *as.Society, lead *as.Actor, roleID string, b as.Behavior) *as.Actor {
	t.Helper()
	a, _, err := lead.SpawnAgent(context.Background(), as.SpawnSpec{RoleID: roleID, Brief: validBrief(), Behavior: b})
	if err != nil {
		t.Fatal(err)
	}
	x, err := s.Actor(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// chain spawns root -> a -> b, all driven by b's behaviour for b and none
// for a, and returns actors for a and b.
func chain(t *testing.T, s *as.Society, bb as.Behavior) (*as.Actor, *as.Actor) {
	t.Helper()
	ctx := context.Background()
	root, _ := s.Actor(as.RootID)
	ra, _, _ := root.WithTask("t").CreateRole(ctx, as.RoleSpec{Name: "a"})
	a, _, err := root.WithTask("t").SpawnAgent(ctx, as.SpawnSpec{RoleID: ra.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	aa, _ := s.Actor(a.ID)
	rb, _, _ := aa.CreateRole(ctx, as.RoleSpec{Name: "b"})
	b, _, err := aa.SpawnAgent(ctx, as.SpawnSpec{RoleID: rb.ID, Brief: validBrief(), Behavior: bb})
	if err != nil {
		t.Fatal(err)
	}
	ba, _ := s.Actor(b.ID)
	return aa, ba
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the condition never held")
		}
	}
}

var noop = as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error { return nil })

func contactOf(s *as.Society, owner, id string) (as.Contact, bool) {
	list, _ := s.Contacts(owner)
	for _, c := range list {
		if c.ID == id {
			return c, true
		}
	}
	return as.Contact{}, false
}

// inbox records what code-driven agents receive, by agent.
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

func (in *inbox) next(t rapid.TB) as.Message {
	t.Helper()
	select {
	case m := <-in.ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no message delivered")
		return as.Message{}
	}
}

// durRecv returns the next value from ch, failing the test after limit.
func durRecv[T any](t *testing.T, ch <-chan T, limit time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("timed out after %v waiting for %s", limit, what)
	}
	panic("unreachable")
}

// durOpen opens a society on a file store in dir; the test closes both.
func durOpen(t *testing.T, dir string, cfg as.Config) (*as.Society, *filestore.Store) {
	t.Helper()
	st, err := filestore.Open(dir, filestore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Logger = st, quiet
	s, err := as.New(context.Background(), cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	return s, st
}

func durShut(t *testing.T, s *as.Society, st *filestore.Store) {
	t.Helper()
	if err := s.Close(context.Background()); err != nil {
		t.Error(err)
	}
	if err := st.Close(); err != nil {
		t.Error(err)
	}
}

func closeFS(tb testing.TB, s *as.Society, st *filestore.Store) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		tb.Fatal(err)
	}
	if err := st.Close(); err != nil {
		tb.Fatal(err)
	}
}

// copyDir copies the regular files and directories under src into dst.
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

// smallBrief is the brief idle agents are spawned with.
func smallBrief() *as.TaskBrief {
	return &as.TaskBrief{Objective: "idle", Constraints: []string{}, Inputs: "none", Outputs: "none", CompletionCriteria: "none"}
}

func closeSociety(b *testing.B, s *as.Society) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		b.Fatal(err)
	}
}
