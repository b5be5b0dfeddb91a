package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	as "agentsociety"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func TestRootReusesItsChildPerTask(t *testing.T) {
	ctx := context.Background()
	f := newSmallOrg(t, as.Config{})
	aInfo := f.a.Agent()
	before := snapshot(t, f.s)

	// A second spawn by root on task t1 returns a, and creates nothing.
	child, reused, err := f.root.WithTask("t1").SpawnAgent(ctx, as.SpawnSpec{RoleID: f.lead.ID, Brief: validBrief()})
	if err != nil || !reused {
		t.Fatalf("second spawn on t1: reused=%v err=%v, want reused", reused, err)
	}
	if diff := cmp.Diff(aInfo, child); diff != "" {
		t.Fatalf("reused child (-a +got):\n%s", diff)
	}
	sameState(t, before, f.s)
	f.assertQuiet(t)

	// A different task gets a new child.
	before = snapshot(t, f.s)
	c3, reused, err := f.root.WithTask("t3").SpawnAgent(ctx, as.SpawnSpec{RoleID: f.lead.ID, Brief: validBrief()})
	if err != nil || reused {
		t.Fatalf("spawn on t3: reused=%v err=%v", reused, err)
	}
	if c3.ID == aInfo.ID || c3.ID == f.b.ID() || c3.ParentID != as.RootID || c3.TaskID != "t3" {
		t.Fatalf("spawn on t3 returned %+v", c3)
	}
	if got := f.s.Agents(); len(got) != len(before.Agents)+1 || got[len(got)-1].ID != c3.ID {
		t.Fatalf("agents after the spawn on t3: %+v", got)
	}
	// ... and it is reused in its turn.
	again, reused, err := f.root.WithTask("t3").SpawnAgent(ctx, as.SpawnSpec{RoleID: f.lead.ID, Brief: validBrief()})
	if err != nil || !reused || again.ID != c3.ID {
		t.Fatalf("second spawn on t3: %s reused=%v err=%v, want %s reused", again.ID, reused, err, c3.ID)
	}
}

func TestRoleReuse(t *testing.T) {
	ctx := context.Background()
	f := newSmallOrg(t, as.Config{})
	before := snapshot(t, f.s)

	// Same creator, same name: the existing role, unchanged.
	r, reused, err := f.root.CreateRole(ctx, as.RoleSpec{Name: "lead", Prompt: "another prompt", InterfaceSpec: &as.InterfaceSpec{Services: "other"}})
	if err != nil || !reused {
		t.Fatalf("re-creating lead: reused=%v err=%v, want reused", reused, err)
	}
	if diff := cmp.Diff(f.lead, r); diff != "" {
		t.Fatalf("reused role (-original +got):\n%s", diff)
	}
	sameState(t, before, f.s)

	// Another creator, same name: a new role of its own.
	mine, reused, err := f.a.CreateRole(ctx, as.RoleSpec{Name: "lead", Prompt: "a's lead"})
	if err != nil || reused {
		t.Fatalf("a creating lead: reused=%v err=%v, want a new role", reused, err)
	}
	if mine.ID == f.lead.ID || mine.CreatedBy != f.a.ID() || mine.Name != "lead" {
		t.Fatalf("a's lead = %+v", mine)
	}
	want := []as.Role{f.lead, mine}
	if diff := cmp.Diff(want, f.s.FindRoleByName("lead")); diff != "" {
		t.Fatalf("FindRoleByName(lead) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, f.g.FindRoleByName("lead")); diff != "" {
		t.Fatalf("Actor.FindRoleByName(lead) (-want +got):\n%s", diff)
	}
	if got := f.s.FindRoleByName("nobody"); got != nil {
		t.Fatalf("FindRoleByName(nobody) = %+v, want nil", got)
	}
	// Each creator spawns on its own role only.
	if _, _, err := f.a.SpawnAgent(ctx, as.SpawnSpec{RoleID: mine.ID, Brief: validBrief()}); err != nil {
		t.Fatalf("a spawning on its own lead: %v", err)
	}
	_, _, err = f.a.SpawnAgent(ctx, as.SpawnSpec{RoleID: f.lead.ID, Brief: validBrief()})
	wantCode(t, err, as.ErrNotRoleOwner)
}

// orgModel is the simplest thing that behaves like the organisation: who
// exists, who created which role, who knows whom and how, which requests are
// open. The state machine drives the society and the model side by side and
// checks after every step that they agree and that no hard constraint broke.
type orgModel struct {
	policy    as.ContactPolicy
	maxAgents int
	maxDepth  int

	agents   map[string]modelAgent
	order    []string // agent ids, root and user first
	roles    map[string]modelRole
	roleKeys map[[2]string]string // creator, name -> role id
	rootKids map[string]string    // task -> child
	contacts map[string][]modelContact
	requests map[string]*modelRequest
	reqOrder []string
	// asks holds the open introduction requests (requester, asked) under
	// ContactStrict; the society keeps them in memory only.
	asks map[[2]string]bool
}

type modelAgent struct {
	parent, role, roleName, task string
	depth                        int
}

type modelRole struct{ name, creator string }

type modelContact struct {
	ID, Role, Source, IntroducedBy string
}

type modelRequest struct {
	from, to string
	status   as.RequestStatus
}

func newOrgModel(policy as.ContactPolicy, maxAgents, maxDepth int) *orgModel {
	m := &orgModel{
		policy: policy, maxAgents: maxAgents, maxDepth: maxDepth,
		agents: map[string]modelAgent{
			as.RootID: {roleName: as.RootID},
			as.UserID: {roleName: as.UserID},
		},
		order:    []string{as.RootID, as.UserID},
		roles:    map[string]modelRole{},
		roleKeys: map[[2]string]string{},
		rootKids: map[string]string{},
		contacts: map[string][]modelContact{
			as.RootID: {{ID: as.UserID, Role: as.UserID, Source: "system"}},
			as.UserID: {{ID: as.RootID, Role: as.RootID, Source: "system"}},
		},
		requests: map[string]*modelRequest{},
		asks:     map[[2]string]bool{},
	}
	return m
}

func (m *orgModel) knows(owner, id string) bool {
	return slices.ContainsFunc(m.contacts[owner], func(c modelContact) bool { return c.ID == id })
}

func (m *orgModel) addContact(owner string, c modelContact) {
	if !m.knows(owner, c.ID) {
		m.contacts[owner] = append(m.contacts[owner], c)
	}
}

// sendCheck returns the code a message from -> to must be refused with
// before its type is considered, or "".
func (m *orgModel) sendCheck(from, to string) as.Code {
	switch {
	case m.agents[to] == (modelAgent{}) && to != as.RootID && to != as.UserID:
		return as.ErrAgentNotFound
	case from == to:
		return as.ErrInvalidArgument
	case m.policy == as.ContactStrict && from != as.UserID && to != as.UserID && !m.knows(from, to):
		return as.ErrUnknownContact
	}
	return ""
}

func (m *orgModel) exists(id string) bool {
	_, ok := m.agents[id]
	return ok
}

type orgMachine struct {
	ctx   context.Context
	s     *as.Society
	model *orgModel
	tasks []string
}

func (sm *orgMachine) actor(t *rapid.T, id, task string) *as.Actor {
	a, err := sm.s.Actor(id)
	if err != nil {
		t.Fatalf("Actor(%s): %v", id, err)
	}
	if task != "" {
		a = a.WithTask(task)
	}
	return a
}

// pickAgent draws an existing agent, or now and then an id that does not exist.
func (sm *orgMachine) pickAgent(t *rapid.T, label string) string {
	ids := append(slices.Clone(sm.model.order), "agent-999")
	return rapid.SampledFrom(ids).Draw(t, label)
}

func expectCode(t *rapid.T, op string, err error, want as.Code) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("%s: unexpected error %v", op, err)
		}
		return
	}
	if err == nil {
		t.Fatalf("%s: got no error, want code %s", op, want)
	}
	wantCode(t, fmt.Errorf("%s: %w", op, err), want)
}

func (sm *orgMachine) createRole(t *rapid.T) {
	by := sm.pickAgent(t, "by")
	if !sm.model.exists(by) {
		return // Actor refuses unknown ids; covered elsewhere
	}
	name := rapid.SampledFrom([]string{"dev", "tester", "lead", " "}).Draw(t, "name")
	role, reused, err := sm.actor(t, by, "").CreateRole(sm.ctx, as.RoleSpec{Name: name, Prompt: "p"})
	m := sm.model
	var want as.Code
	switch {
	case name == " ":
		want = as.ErrInvalidArgument
	case by == as.UserID:
		want = as.ErrForbidden
	}
	expectCode(t, "create_role", err, want)
	if err != nil {
		return
	}
	key := [2]string{by, name}
	if id, ok := m.roleKeys[key]; ok {
		if !reused || role.ID != id {
			t.Fatalf("create_role %v: got %s reused=%v, want %s reused", key, role.ID, reused, id)
		}
		return
	}
	if reused {
		t.Fatalf("create_role %v: reused a role that does not exist", key)
	}
	m.roleKeys[key] = role.ID
	m.roles[role.ID] = modelRole{name: name, creator: by}
}

func (sm *orgMachine) spawn(t *rapid.T) {
	m := sm.model
	by := sm.pickAgent(t, "by")
	if !m.exists(by) {
		return
	}
	roleIDs := []string{"role-999"}
	for id := range m.roles {
		roleIDs = append(roleIDs, id)
	}
	slices.Sort(roleIDs)
	roleID := rapid.SampledFrom(roleIDs).Draw(t, "role")
	parent := rapid.SampledFrom([]string{"", "", by, "agent-998"}).Draw(t, "parentAgentId")
	brief := validBrief()
	if rapid.IntRange(0, 5).Draw(t, "briefBroken") == 0 {
		brief.Inputs = ""
	}
	collabs := rapid.SliceOfNDistinct(rapid.SampledFrom(append(slices.Clone(m.order), "agent-997")), 0, 3, rapid.ID).Draw(t, "collaborators")
	for _, c := range collabs {
		brief.Collaborators = append(brief.Collaborators, as.Collaborator{AgentID: c, Description: "ask " + c})
	}
	task := rapid.SampledFrom(sm.tasks).Draw(t, "task")
	if by != as.RootID {
		task = "" // an agent works on its own task
	}
	child, reused, err := sm.actor(t, by, task).SpawnAgent(sm.ctx, as.SpawnSpec{RoleID: roleID, Brief: brief, ParentID: parent})

	role, roleOK := m.roles[roleID]
	_, kidExists := m.rootKids[task]
	var want as.Code
	switch {
	case by == as.UserID:
		want = as.ErrForbidden
	case parent != "" && parent != by:
		want = as.ErrParentMismatch
	case brief.Inputs == "":
		want = as.ErrInvalidTaskBrief
	case !roleOK:
		want = as.ErrRoleNotFound
	case role.creator != by:
		want = as.ErrNotRoleOwner
	case by == as.RootID && kidExists:
		want = ""
	case slices.ContainsFunc(collabs, func(c string) bool { return !m.exists(c) }):
		want = as.ErrAgentNotFound
	case m.policy == as.ContactStrict && slices.ContainsFunc(collabs, func(c string) bool { return c != by && c != as.UserID && !m.knows(by, c) }):
		want = as.ErrUnknownContact
	case len(m.order)-2 >= m.maxAgents:
		want = as.ErrTooManyAgents
	case m.agents[by].depth+1 > m.maxDepth:
		want = as.ErrMaxDepth
	}
	expectCode(t, "spawn_agent", err, want)
	if err != nil {
		return
	}
	if by == as.RootID && kidExists {
		if !reused || child.ID != m.rootKids[task] {
			t.Fatalf("root spawn on task %s: got %s reused=%v, want %s reused", task, child.ID, reused, m.rootKids[task])
		}
		return
	}
	if reused {
		t.Fatal("a fresh spawn reported reused")
	}
	if by == as.RootID {
		m.rootKids[task] = child.ID
	} else {
		task = m.agents[by].task
	}
	if child.TaskID != task || child.ParentID != by {
		t.Fatalf("child %+v: want parent %s task %s", child, by, task)
	}
	m.agents[child.ID] = modelAgent{parent: by, role: roleID, roleName: role.name, task: task, depth: m.agents[by].depth + 1}
	m.order = append(m.order, child.ID)
	m.contacts[child.ID] = []modelContact{{ID: by, Role: m.agents[by].roleName, Source: "parent"}}
	m.addContact(by, modelContact{ID: child.ID, Role: role.name, Source: "child"})
	for _, c := range collabs {
		m.addContact(child.ID, modelContact{ID: c, Role: m.agents[c].roleName, Source: "preset"})
	}
}

// send sends one message of a random type with a payload that is valid or
// not, and predicts the outcome.
func (sm *orgMachine) send(t *rapid.T) {
	m := sm.model
	from := sm.pickAgent(t, "from")
	if !m.exists(from) {
		return
	}
	to := sm.pickAgent(t, "to")
	typ := rapid.SampledFrom(as.MessageTypes()).Draw(t, "type")
	valid := rapid.IntRange(0, 4).Draw(t, "payloadOK") > 0
	payload, missing := map[string]any{}, as.Code("")
	if !valid {
		missing = as.ErrInvalidMessageFormat
	}
	var target string
	var req string
	switch typ {
	case as.General:
		payload["text"] = "hello"
		missing = "" // any object is a general payload
	case as.TaskAssignment:
		b, _ := json.Marshal(validBrief())
		json.Unmarshal(b, &payload)
		if !valid {
			delete(payload, "objective")
		}
	case as.StatusReport:
		if valid {
			payload["status"] = "working"
		}
	case as.IntroductionRequest:
		payload["reason"] = "need tests"
		if valid {
			payload["required_capability"] = "testing"
		}
	case as.IntroductionResponse:
		if valid {
			target = sm.pickAgent(t, "target")
			payload["target_agent_id"] = target
			payload["target_role"] = "forged"
		}
	case as.CollaborationRequest:
		if valid {
			payload["subtask_description"] = "review this"
		}
	case as.CollaborationResponse:
		ids := append(slices.Clone(m.reqOrder), "req-unknown")
		req = rapid.SampledFrom(ids).Draw(t, "request")
		payload["request_id"] = req
		payload["status"] = as.StatusCompleted
		if valid {
			payload["result_data"] = map[string]any{"ok": true}
		}
	}
	sent, err := sm.actor(t, from, "").Send(sm.ctx, as.Outgoing{To: to, Type: typ, Payload: payload})

	want := missing
	if want == "" {
		want = m.sendCheck(from, to)
	}
	if want == "" {
		switch typ {
		case as.IntroductionResponse:
			switch {
			case !m.exists(target):
				want = as.ErrAgentNotFound
			case target == to:
				want = as.ErrInvalidArgument
			case !m.knows(from, target) && !m.knows(to, target):
				want = as.ErrUnknownContact
			case m.policy == as.ContactStrict && !m.knows(to, target) && !m.asks[[2]string{to, from}]:
				want = as.ErrUnsolicitedIntroduction
			}
		case as.CollaborationResponse:
			r := m.requests[req]
			switch {
			case r == nil:
				want = as.ErrUnknownRequest
			case r.to != from || r.from != to:
				want = as.ErrWrongResponder
			case r.status != as.StatusPending:
				want = as.ErrRequestClosed
			}
		}
	}
	expectCode(t, fmt.Sprintf("send %s %s->%s", typ, from, to), err, want)
	if err != nil {
		return
	}
	if sent.From != from || sent.To != to || sent.Type != typ {
		t.Fatalf("sent %+v: want from %s to %s type %s", sent, from, to, typ)
	}
	m.addContact(to, modelContact{ID: from, Role: m.agents[from].roleName, Source: "first_message"})
	switch typ {
	case as.IntroductionRequest:
		if m.policy == as.ContactStrict {
			m.asks[[2]string{from, to}] = true
		}
	case as.IntroductionResponse:
		delete(m.asks, [2]string{to, from}) // answered
		var p as.IntroductionResponsePayload
		if err := sent.Decode(&p); err != nil || p.TargetRole != m.agents[target].roleName {
			t.Fatalf("introduction payload %s: target_role must be the real %q", sent.Payload, m.agents[target].roleName)
		}
		if !m.knows(to, target) {
			m.contacts[to] = append(m.contacts[to], modelContact{ID: target, Role: m.agents[target].roleName, Source: "introduction", IntroducedBy: from})
		}
	case as.CollaborationRequest:
		var p as.CollaborationRequestPayload
		if err := sent.Decode(&p); err != nil || p.RequestID == "" {
			t.Fatalf("collaboration request %s: no request_id generated", sent.Payload)
		}
		m.requests[p.RequestID] = &modelRequest{from: from, to: to, status: as.StatusPending}
		m.reqOrder = append(m.reqOrder, p.RequestID)
	case as.CollaborationResponse:
		m.requests[req].status = as.StatusCompleted
	}
}

// check compares every registry with the model and checks the hard
// constraints of the organisation.
func (sm *orgMachine) check(t *rapid.T) {
	m := sm.model
	for _, id := range m.order {
		got, err := sm.s.Contacts(id)
		if err != nil {
			t.Fatalf("Contacts(%s): %v", id, err)
		}
		proj := make([]modelContact, len(got))
		for i, c := range got {
			proj[i] = modelContact{ID: c.ID, Role: c.Role, Source: string(c.Source), IntroducedBy: c.IntroducedBy}
		}
		if diff := cmp.Diff(m.contacts[id], proj); diff != "" {
			t.Fatalf("contacts of %s differ from the model (-model +society):\n%s", id, diff)
		}
	}
	agents := sm.s.Agents()
	if len(agents) != len(m.order)-2 || len(agents) > m.maxAgents {
		t.Fatalf("society has %d agents, model %d (max %d)", len(agents), len(m.order)-2, m.maxAgents)
	}
	perTask := map[string]int{}
	for _, a := range agents {
		role, ok := sm.s.Role(a.RoleID)
		if !ok || role.CreatedBy != a.ParentID {
			t.Fatalf("agent %s is on role %s created by %q, not by its parent %s", a.ID, a.RoleID, role.CreatedBy, a.ParentID)
		}
		if a.ParentID == as.RootID {
			perTask[a.TaskID]++
			if perTask[a.TaskID] > 1 {
				t.Fatalf("root has two children on task %s", a.TaskID)
			}
		}
		if m.agents[a.ID].depth > m.maxDepth {
			t.Fatalf("agent %s is deeper than %d", a.ID, m.maxDepth)
		}
	}
}

func TestStateMachine_Organisation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		policy := rapid.SampledFrom([]as.ContactPolicy{as.ContactOpen, as.ContactStrict}).Draw(t, "policy")
		maxAgents := rapid.IntRange(2, 12).Draw(t, "maxAgents")
		maxDepth := rapid.IntRange(1, 4).Draw(t, "maxDepth")
		s, err := as.New(context.Background(), as.Config{
			Logger: quiet, Root: noop, DefaultBehavior: noop, ContactPolicy: policy, MaxAgents: maxAgents, MaxDepth: maxDepth,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		sm := &orgMachine{ctx: context.Background(), s: s, model: newOrgModel(policy, maxAgents, maxDepth), tasks: []string{"task-a", "task-b", "task-c"}}
		t.Repeat(map[string]func(*rapid.T){
			"":            sm.check,
			"create_role": sm.createRole,
			"spawn":       sm.spawn,
			"send":        sm.send,
		})
	})
}

// The idle-agent benchmarks spawn agents under spawnParents parents (root's
// children on as many tasks), on a society that holds up to spawnScale of
// them; BenchmarkSpawnIdle/million holds spawnMillion.
const (
	spawnScale   = 100_000
	spawnMillion = 1_000_000
	spawnParents = 8
)

// spawnHeapProfile names a file to which BenchmarkSpawnIdle/heap writes a
// heap profile while its spawnScale agents are alive, for an in-use
// breakdown per allocation site (go tool pprof -sample_index=inuse_space).
// Run with -memprofilerate=1 for exact numbers.
var spawnHeapProfile = flag.String("spawnheapprofile", "", "write a heap profile of spawnScale idle agents to this file")

// idleSociety starts a society for up to maxAgents idle agents, on the
// default store, and returns it with spawnParents parents and the role each
// may spawn on. It reports errors rather than failing a test, for
// spawnChild, which runs outside one.
func idleSociety(maxAgents int) (*as.Society, []*as.Actor, []string, error) {
	ctx := context.Background()
	s, err := as.New(ctx, as.Config{Logger: quiet, MaxAgents: maxAgents})
	if err != nil {
		return nil, nil, nil, err
	}
	root, err := s.Actor(as.RootID)
	if err != nil {
		return nil, nil, nil, err
	}
	parents := make([]*as.Actor, spawnParents)
	roles := make([]string, spawnParents)
	for i := range spawnParents {
		root := root.WithTask("idle-" + strconv.Itoa(i))
		lead, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "lead", Prompt: "lead the task"})
		if err != nil {
			return nil, nil, nil, err
		}
		a, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: lead.ID, Brief: validBrief()})
		if err != nil {
			return nil, nil, nil, err
		}
		if parents[i], err = s.Actor(a.ID); err != nil {
			return nil, nil, nil, err
		}
		role, _, err := parents[i].CreateRole(ctx, as.RoleSpec{Name: "idle", Prompt: "do the work"})
		if err != nil {
			return nil, nil, nil, err
		}
		roles[i] = role.ID
	}
	return s, parents, roles, nil
}

// spawnSociety is idleSociety for a benchmark.
func spawnSociety(b *testing.B, maxAgents int) (*as.Society, []*as.Actor, []string) {
	s, parents, roles, err := idleSociety(maxAgents)
	if err != nil {
		b.Fatal(err)
	}
	return s, parents, roles
}

// spawnIdle spawns n agents with brief, in turn under each of parents.
func spawnIdle(parents []*as.Actor, roles []string, brief *as.TaskBrief, n int) error {
	ctx := context.Background()
	for i := range n {
		p := i % len(parents)
		if _, _, err := parents[p].SpawnAgent(ctx, as.SpawnSpec{RoleID: roles[p], Brief: brief}); err != nil {
			return err
		}
	}
	return nil
}

// idleBrief is the small brief the idle-agent benchmarks give every agent.
func idleBrief() *as.TaskBrief { return validBrief(minimal) }

// BenchmarkSpawnIdle measures spawning idle agents: "spawn" is the time per
// spawn on a society filled with up to spawnScale agents (a new society
// every spawnScale spawns); "heap" spawns spawnScale agents per iteration
// and reports the live heap each one adds, and "million" does the same
// with spawnMillion agents and reports the whole heap they live in.
func BenchmarkSpawnIdle(b *testing.B) {
	ctx := context.Background()
	brief := idleBrief()

	b.Run("spawn", func(b *testing.B) {
		b.ReportAllocs()
		var s *as.Society
		var parents []*as.Actor
		var roles []string
		for i := range b.N {
			if i%spawnScale == 0 {
				b.StopTimer()
				if s != nil {
					closeSociety(b, s)
				}
				s, parents, roles = spawnSociety(b, 2*spawnScale)
				b.StartTimer()
			}
			p := i % spawnParents
			if _, _, err := parents[p].SpawnAgent(ctx, as.SpawnSpec{RoleID: roles[p], Brief: brief}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		closeSociety(b, s)
	})

	b.Run("heap", func(b *testing.B) { idleHeap(b, brief, spawnScale, *spawnHeapProfile) })
	b.Run("million", func(b *testing.B) { idleHeap(b, brief, spawnMillion, "") })
}

// idleHeap spawns n idle agents with brief on a new society per iteration
// and reports the live heap: B/agent is what each agent adds, the brief
// included; heap-MiB is the whole live heap of the process with the
// agents alive, beside heap-before-MiB, the same with the society and its
// parents only. brief-json-B is the size of the brief's JSON and B/brief
// the heap keeping one costs (see briefHeap), so that B/agent-briefs-aside
// is what the society adds of its own. It writes a heap profile to profile,
// if named.
func idleHeap(b *testing.B, brief *as.TaskBrief, n int, profile string) {
	briefJSON, err := json.Marshal(brief)
	if err != nil {
		b.Fatal(err)
	}
	var perAgent, goroutines, heapMiB, beforeMiB float64
	cpu := startCPU(b)
	var spawnTime time.Duration
	for range b.N {
		b.StopTimer()
		s, parents, roles := spawnSociety(b, n+spawnParents)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		b.StartTimer()
		t0 := time.Now()
		if err := spawnIdle(parents, roles, brief, n); err != nil {
			b.Fatal(err)
		}
		spawnTime += time.Since(t0)
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		goroutines = float64(runtime.NumGoroutine() - g0)
		perAgent = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
		heapMiB = float64(after.HeapAlloc) / (1 << 20)
		beforeMiB = float64(before.HeapAlloc) / (1 << 20)
		if profile != "" {
			writeHeapProfile(b, profile)
		}
		if got := len(s.Agents()); got != n+spawnParents {
			b.Fatalf("%d agents, want %d", got, n+spawnParents)
		}
		closeSociety(b, s)
		b.StartTimer()
	}
	cpu.report()
	perBrief := briefHeap(brief)
	b.ReportMetric(perAgent, "B/agent")
	b.ReportMetric(perBrief, "B/brief")
	b.ReportMetric(perAgent-perBrief, "B/agent-briefs-aside")
	b.ReportMetric(float64(len(briefJSON)), "brief-json-B")
	b.ReportMetric(heapMiB, "heap-MiB")
	b.ReportMetric(beforeMiB, "heap-before-MiB")
	b.ReportMetric(float64(spawnTime.Nanoseconds())/float64(b.N*n), "ns/spawn")
	b.ReportMetric(goroutines, "goroutines")
}

// briefHeap returns the live heap that keeping one brief costs a society:
// its JSON, which the society and its store share, measured over spawnScale
// of them as BenchmarkSpawnIdle measures agents, so that the two can be
// subtracted.
func briefHeap(brief *as.TaskBrief) float64 {
	encoded := make([][]byte, spawnScale)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range encoded {
		encoded[i], _ = json.Marshal(brief)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(encoded)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / spawnScale
}

// spawnChildEnv, set in the environment of the test binary, makes it a
// child of BenchmarkSpawnFresh: TestMain runs spawnChild with its value
// instead of the tests.
const spawnChildEnv = "AGENTSOCIETY_SPAWN_CHILD"

// BenchmarkSpawnFresh measures spawnScale spawns in a fresh process, where
// the heap starts small and every byte a spawn keeps is new memory: the
// benchmark runs the test binary again as a child (see spawnChildEnv) that
// starts a society, spawns, and prints the wall and CPU time of the spawns
// alone. Its same-run baselines: "baseline" is a fresh child that, on the
// same society, instead allocates spawnScale plain agent-sized records
// under new ids in a map; "warm" is the same spawns in this process, warm
// from the runs before.
func BenchmarkSpawnFresh(b *testing.B) {
	var fresh, base, warm childTimes
	brief := idleBrief()
	for range b.N {
		fresh.add(runSpawnChild(b, "spawn"))
		base.add(runSpawnChild(b, "baseline"))

		s, parents, roles := spawnSociety(b, spawnScale+spawnParents)
		cpu0, t0 := processCPU(b), time.Now()
		if err := spawnIdle(parents, roles, brief, spawnScale); err != nil {
			b.Fatal(err)
		}
		warm.add(childTimes{wall: time.Since(t0), cpu: processCPU(b) - cpu0})
		closeSociety(b, s)
	}
	n := float64(b.N)
	b.ReportMetric(float64(fresh.wall)/n, "fresh-ns/100k")
	b.ReportMetric(float64(fresh.cpu)/n, "fresh-cpu-ns/100k")
	b.ReportMetric(float64(base.wall)/n, "baseline-ns/100k")
	b.ReportMetric(float64(base.cpu)/n, "baseline-cpu-ns/100k")
	b.ReportMetric(float64(warm.wall)/n, "warm-ns/100k")
	b.ReportMetric(float64(warm.cpu)/n, "warm-cpu-ns/100k")
}

// childTimes is the wall and CPU time of a run.
type childTimes struct{ wall, cpu time.Duration }

func (t *childTimes) add(u childTimes) { t.wall += u.wall; t.cpu += u.cpu }

// runSpawnChild runs the test binary as a child doing what, and returns
// the times it printed.
func runSpawnChild(b *testing.B, what string) childTimes {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), spawnChildEnv+"="+what)
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("child %s: %v\n%s", what, err, out)
	}
	var wall, cpu int64
	if _, err := fmt.Sscan(string(out), &wall, &cpu); err != nil {
		b.Fatalf("child %s printed %q: %v", what, out, err)
	}
	return childTimes{time.Duration(wall), time.Duration(cpu)}
}

// spawnChild is BenchmarkSpawnFresh's child: it starts a society with
// spawnParents parents, then does what ("spawn": spawnScale spawns;
// "baseline": spawnScale plain records) and prints the wall and CPU time
// that took, in nanoseconds. It returns the process's exit code.
func spawnChild(what string) int {
	s, parents, roles, err := idleSociety(spawnScale + spawnParents)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	brief := idleBrief()
	var ru0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	t0 := time.Now()
	switch what {
	case "spawn":
		err = spawnIdle(parents, roles, brief, spawnScale)
	case "baseline":
		type record struct {
			id, role, parent, task string
			brief                  *as.TaskBrief
			rest                   [12]uint64 // padding: a record the size of an agent
		}
		kept := make(map[string]*record)
		for i := range spawnScale {
			id := "agent-" + strconv.Itoa(i+spawnParents+1)
			kept[id] = &record{id: id, role: roles[i%spawnParents], parent: parents[i%spawnParents].ID(), task: "idle", brief: brief}
		}
		runtime.KeepAlive(kept)
	default:
		err = fmt.Errorf("unknown child %q", what)
	}
	wall := time.Since(t0)
	var ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	fmt.Println(wall.Nanoseconds(), cpu.Nanoseconds())
	s.Close(context.Background())
	return 0
}

func writeHeapProfile(b *testing.B, name string) {
	f, err := os.Create(name)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// TestStrictPresetOnlyKnownAgents checks that under ContactStrict a parent
// presets as collaborators only agents it knows itself (and user): a brief
// naming a stranger is refused with ErrUnknownContact and changes nothing,
// so the child cannot reach the stranger; the same preset is accepted under
// ContactOpen.
func TestStrictPresetOnlyKnownAgents(t *testing.T) {
	ctx := context.Background()
	f := newSmallOrg(t, as.Config{ContactPolicy: as.ContactStrict})
	// a knows root (its parent) and g (its child), not b.
	if f.s.IsKnown(f.a.ID(), f.b.ID()) {
		t.Fatal("a must not know b at the start")
	}
	brief := validBrief()
	brief.Collaborators = []as.Collaborator{{AgentID: f.g.ID(), Description: "my worker"}, {AgentID: f.b.ID(), Description: "a reviewer I never met"}}
	before := snapshot(t, f.s)
	e := wantCode(t, spawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: brief}), as.ErrUnknownContact)
	if e.AgentID != f.b.ID() {
		t.Fatalf("the refusal names %q, want %s", e.AgentID, f.b.ID())
	}
	sameState(t, before, f.s)
	f.assertQuiet(t)

	// Agents a knows, user and a itself are fine.
	brief.Collaborators = []as.Collaborator{{AgentID: f.g.ID()}, {AgentID: as.RootID}, {AgentID: as.UserID}, {AgentID: f.a.ID()}}
	child, _, err := f.a.SpawnAgent(ctx, as.SpawnSpec{RoleID: f.worker.ID, Brief: brief, Behavior: f.rec.behavior()})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{f.g.ID(), as.RootID, as.UserID, f.a.ID()} {
		if !f.s.IsKnown(child.ID, id) {
			t.Fatalf("the child does not know %s", id)
		}
	}
	if f.s.IsKnown(child.ID, f.b.ID()) {
		t.Fatal("the child knows b")
	}

	// Under ContactOpen the registry only records: the preset is accepted.
	o := newSmallOrg(t, as.Config{})
	brief.Collaborators = []as.Collaborator{{AgentID: o.b.ID()}}
	child, _, err = o.a.SpawnAgent(ctx, as.SpawnSpec{RoleID: o.worker.ID, Brief: brief})
	if err != nil {
		t.Fatalf("open policy: %v", err)
	}
	if !o.s.IsKnown(child.ID, o.b.ID()) {
		t.Fatal("open policy: the child does not know its collaborator b")
	}
}

// TestActorAgentGivesACopy: an agent's own handle gives its brief as it
// was given, every time, as Society.Agent gives it; changing what one call
// returned changes nothing the next call returns.
func TestActorAgentGivesACopy(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Logger: quiet})
	lead, roleID := hostLead(t, s, "copy", "worker")
	given := validBrief(func(b *as.TaskBrief) {
		b.Collaborators = []as.Collaborator{{AgentID: lead.ID(), Role: "lead", InterfaceSpec: &as.InterfaceSpec{Services: "s", InputFormat: "i", OutputFormat: "o", Examples: []string{"e"}}}}
		b.References = []string{"r"}
	})
	child, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: roleID, Brief: given, Behavior: noop})
	if err != nil {
		t.Fatal(err)
	}
	self, err := s.Actor(child.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := validBrief(func(b *as.TaskBrief) { // given, as it was
		b.Collaborators = []as.Collaborator{{AgentID: lead.ID(), Role: "lead", InterfaceSpec: &as.InterfaceSpec{Services: "s", InputFormat: "i", OutputFormat: "o", Examples: []string{"e"}}}}
		b.References = []string{"r"}
	})
	for i := range 3 {
		got := self.Agent()
		if diff := cmp.Diff(want, got.Brief); diff != "" {
			t.Fatalf("call %d: Actor.Agent's brief (-given +got):\n%s", i, diff)
		}
		if other, _ := s.Agent(child.ID); !cmp.Equal(other, got) {
			t.Fatalf("call %d: Actor.Agent gave %+v, Society.Agent %+v", i, got, other)
		}
		got.Brief.Objective = "changed"
		got.Brief.Constraints[0] = "changed"
		got.Brief.Collaborators[0].InterfaceSpec.Examples[0] = "changed"
		got.Brief.References[0] = "changed"
	}
}

// BenchmarkActorAgent measures an agent's handle reading the agent, as a
// behaviour may for every message it handles, beside Society.Agent, which
// decodes the brief on every call.
func BenchmarkActorAgent(b *testing.B) {
	ctx := context.Background()
	s := newSociety(b, as.Config{Logger: quiet})
	lead, roleID := hostLead(b, s, "agent", "worker")
	child, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: roleID, Brief: validBrief(), Behavior: noop})
	if err != nil {
		b.Fatal(err)
	}
	self, err := s.Actor(child.ID)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Society.Agent", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			s.Agent(child.ID)
		}
	})
	b.Run("Actor.Agent", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			self.Agent()
		}
	})
}

// TestCreateRole_NamesThatReadAsUserOrRootAreRefused: the source line of a
// message shows its sender's role, so a role named user or root (in any
// case, width or spacing) would let its agents' messages pass for the
// user's or root's; such a name is refused and nothing is created. A name
// that only contains one is taken.
func TestCreateRole_NamesThatReadAsUserOrRootAreRefused(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{})
	lead, _ := hostLead(t, s, "t", "worker")
	for _, name := range []string{"user", "User", " root ", "ＵＳＥＲ", "用户", "用 户", "u\u200bser"} {
		roles := len(s.Roles())
		if _, _, err := lead.CreateRole(ctx, as.RoleSpec{Name: name}); !errors.Is(err, as.ErrInvalidArgument) {
			t.Errorf("CreateRole(%q) = %v, want %s", name, err, as.ErrInvalidArgument)
		}
		if n := len(s.Roles()); n != roles {
			t.Errorf("CreateRole(%q) was refused, yet the roles went from %d to %d", name, roles, n)
		}
	}
	for _, name := range []string{"user-researcher", "用户研究员", "rooted"} {
		if _, _, err := lead.CreateRole(ctx, as.RoleSpec{Name: name}); err != nil {
			t.Errorf("CreateRole(%q): %v", name, err)
		}
	}
}
