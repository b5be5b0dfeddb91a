package agentsociety_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"pgregory.net/rapid"

	as "agentsociety"
	"agentsociety/store"
	"agentsociety/store/filestore"
)

// restoreBrief is validBrief as the store records it.
func restoreBrief(t *testing.T) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(validBrief())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A store written across a backwards step of the wall clock, whose child
// agent has an earlier CreatedAt than its parent, opens: restore orders
// agents by their parents, not by time.
func TestRestore_ChildOlderThanItsParentReopens(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	now := time.Now()
	brief := restoreBrief(t)
	if err := mem.Apply(ctx, store.Change{
		Roles: []store.Role{
			{ID: "role-1", Name: "lead", CreatedBy: as.RootID, CreatedAt: now},
			{ID: "role-2", Name: "worker", CreatedBy: "agent-1", CreatedAt: now},
		},
		// The child first, and an hour older than its parent.
		Agents: []store.Agent{
			{ID: "agent-2", RoleID: "role-2", ParentID: "agent-1", TaskID: "t", Brief: brief, Status: "active", CreatedAt: now.Add(-time.Hour)},
			{ID: "agent-3", RoleID: "role-2", ParentID: "agent-2", TaskID: "t", Brief: brief, Status: "active", CreatedAt: now.Add(-2 * time.Hour)},
			{ID: "agent-1", RoleID: "role-1", ParentID: as.RootID, TaskID: "t", Brief: brief, Status: "active", CreatedAt: now},
		},
	}); err != nil {
		t.Fatal(err)
	}
	s := newSociety(t, as.Config{Store: mem})
	for id, parent := range map[string]string{"agent-1": as.RootID, "agent-2": "agent-1", "agent-3": "agent-2"} {
		a, ok := s.Agent(id)
		if !ok || a.ParentID != parent {
			t.Fatalf("agent %s after reopening: %+v, %v; want parent %s", id, a, ok, parent)
		}
	}
	// The depth came from the parents: agent-3 is at depth 3.
	x, _ := s.Actor("agent-3")
	role, _, err := x.CreateRole(ctx, as.RoleSpec{Name: "deeper"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := x.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()}); err != nil {
		t.Fatalf("spawn under the restored agent-3: %v", err)
	}
}

// A store whose agents' parents are missing, or form a cycle, is refused.
func TestRestore_BrokenParentsAreRefused(t *testing.T) {
	ctx := context.Background()
	brief := restoreBrief(t)
	for name, agents := range map[string][]store.Agent{
		"missing parent": {{ID: "agent-2", RoleID: "role-1", ParentID: "agent-1", Brief: brief, Status: "active"}},
		"cycle": {
			{ID: "agent-1", RoleID: "role-1", ParentID: "agent-2", Brief: brief, Status: "active"},
			{ID: "agent-2", RoleID: "role-1", ParentID: "agent-1", Brief: brief, Status: "active"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			mem := store.NewMemory()
			if err := mem.Apply(ctx, store.Change{Roles: []store.Role{{ID: "role-1", Name: "lead", CreatedBy: as.RootID}}, Agents: agents}); err != nil {
				t.Fatal(err)
			}
			if s, err := as.New(ctx, as.Config{Store: mem, Logger: quiet}); err == nil {
				s.Close(ctx)
				t.Fatal("New opened a store whose agents have no way up to root")
			}
		})
	}
}

// A request to an agent that was being terminated when the society stopped
// is settled on reopening: the termination ends now, and its requester gets
// an error response, instead of waiting forever.
func TestRestore_RequestToATerminatingAgentIsSettled(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	now := time.Now()
	brief := restoreBrief(t)
	if err := mem.Apply(ctx, store.Change{
		Roles: []store.Role{
			{ID: "role-1", Name: "lead", CreatedBy: as.RootID, CreatedAt: now},
			{ID: "role-2", Name: "worker", CreatedBy: "agent-1", CreatedAt: now},
		},
		Agents: []store.Agent{
			{ID: "agent-1", RoleID: "role-1", ParentID: as.RootID, TaskID: "t", Brief: brief, Status: "active", CreatedAt: now},
			{ID: "agent-2", RoleID: "role-2", ParentID: "agent-1", TaskID: "t", Brief: brief, Status: string(as.StatusTerminating), CreatedAt: now},
		},
		Requests: []store.Request{{ID: "req-1", From: "agent-1", To: "agent-2", TaskID: "t", Status: string(as.StatusPending), CreatedAt: now}},
	}); err != nil {
		t.Fatal(err)
	}
	got := make(chan as.Message, 4)
	s := newSociety(t, as.Config{Store: mem, RestoreBehavior: func(a as.Agent, _ as.Role) as.Behavior {
		return as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
			got <- m
			return nil
		})
	}})
	var m as.Message
	select {
	case m = <-got:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("the requester heard nothing after reopening")
	}
	var p as.CollaborationResponsePayload
	if err := m.Decode(&p); err != nil || m.To != "agent-1" || m.Type != as.CollaborationResponse || p.RequestID != "req-1" || p.Status != as.StatusError {
		t.Fatalf("the requester got %+v (%s), want an error response to req-1", m, m.Payload)
	}
	if a, _ := s.Agent("agent-2"); a.Status != as.StatusTerminated {
		t.Fatalf("agent-2 is %s after reopening, want terminated", a.Status)
	}
	st, _ := mem.Load(ctx)
	if len(st.Requests) != 1 || st.Requests[0].Status != string(as.StatusError) {
		t.Fatalf("the store's requests: %+v, want req-1 settled with an error", st.Requests)
	}
}

// reopeningMachine is the organisation's state machine on a file store,
// with one more action: close the society and its store and open both
// again, after which the organisation must still agree with the model.
type reopeningMachine struct {
	*orgMachine
	dir string
	st  *filestore.Store
	cfg as.Config
}

func (r *reopeningMachine) open(t *rapid.T) {
	st, err := filestore.Open(r.dir, filestore.Options{Logger: quiet, Sync: filestore.SyncBatched, CompactAfter: 16})
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.cfg
	cfg.Store = st
	s, err := as.New(r.ctx, cfg)
	if err != nil {
		st.Close()
		t.Fatalf("reopening: %v", err)
	}
	r.st, r.s = st, s
}

func (r *reopeningMachine) shut(t *rapid.T) {
	if err := r.s.Close(r.ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.st.Close(); err != nil {
		t.Fatalf("closing the store: %v", err)
	}
}

func (r *reopeningMachine) reopen(t *rapid.T) {
	r.shut(t)
	r.open(t)
}

// reopenRounds is how many times rapid runs its default number of checks
// (100) of the reopening state machine: 1,000 random sequences in all.
const reopenRounds = 10

func TestStateMachine_OrganisationReopened(t *testing.T) {
	for range reopenRounds {
		rapid.Check(t, func(t *rapid.T) {
			policy := rapid.SampledFrom([]as.ContactPolicy{as.ContactOpen, as.ContactStrict}).Draw(t, "policy")
			maxAgents := rapid.IntRange(2, 12).Draw(t, "maxAgents")
			maxDepth := rapid.IntRange(1, 4).Draw(t, "maxDepth")
			dir, err := os.MkdirTemp("", "agentsociety-reopen-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			r := &reopeningMachine{
				orgMachine: &orgMachine{ctx: context.Background(), model: newOrgModel(policy, maxAgents, maxDepth), tasks: []string{"task-a", "task-b", "task-c"}},
				dir:        dir,
				cfg:        as.Config{Logger: quiet, Root: noop, DefaultBehavior: noop, ContactPolicy: policy, MaxAgents: maxAgents, MaxDepth: maxDepth},
			}
			r.open(t)
			defer r.shut(t)
			t.Repeat(map[string]func(*rapid.T){
				"":            r.check,
				"create_role": r.createRole,
				"spawn":       r.spawn,
				"send":        r.send,
				"reopen":      r.reopen,
			})
		})
	}
}
