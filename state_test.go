package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	as "agentsociety"
	"agentsociety/store"
)

func TestStateScopes(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	s, err := as.New(ctx, as.Config{Logger: quiet, Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("thesis").CreateRole(ctx, as.RoleSpec{Name: "partner"})
	p, _, _ := root.WithTask("thesis").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	pa, _ := s.Actor(p.ID)
	lrole, _, _ := pa.CreateRole(ctx, as.RoleSpec{Name: "librarian"})
	l, _, _ := pa.SpawnAgent(ctx, as.SpawnSpec{RoleID: lrole.ID, Brief: validBrief()})
	la, _ := s.Actor(l.ID)
	other, _, _ := root.WithTask("other").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	oa, _ := s.Actor(other.ID)

	if err := pa.SetState(ctx, "spec", map[string]any{"chapters": 5}, as.ScopeProject); err != nil {
		t.Fatal(err)
	}
	if err := pa.SetState(ctx, "notes", "mine", as.ScopePrivate); err != nil {
		t.Fatal(err)
	}
	v, ok, err := la.GetState("spec", as.ScopeProject)
	if err != nil || !ok || string(v.Value) != `{"chapters":5}` || v.Writer != p.ID {
		t.Fatalf("the librarian reads the project spec as %+v, %v, %v", v, ok, err)
	}
	if _, ok, _ := oa.GetState("spec", as.ScopeProject); ok {
		t.Fatal("an agent of another task sees this task's state")
	}
	if _, ok, _ := la.GetState("notes", as.ScopePrivate); ok {
		t.Fatal("an agent sees another's private state")
	}
	if err := la.SetState(ctx, "x", as.Text("x"), "global"); !errors.Is(err, as.ErrInvalidArgument) {
		t.Fatalf("bad scope: %v", err)
	}
	if err := la.SetState(ctx, "bad", json.RawMessage(`{`), as.ScopeProject); !errors.Is(err, as.ErrInvalidArgument) {
		t.Fatalf("bad JSON: %v", err)
	}
	if err := la.SetState(ctx, "checklist", []string{"intro"}, as.ScopeProject); err != nil {
		t.Fatal(err)
	}
	if err := pa.SetState(ctx, "checklist", nil, as.ScopeProject); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Reopened on the same store, the state is still there.
	s2, err := as.New(ctx, as.Config{Logger: quiet, Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(ctx)
	la2, _ := s2.Actor(l.ID)
	if v, ok, _ := la2.GetState("spec", as.ScopeProject); !ok || string(v.Value) != `{"chapters":5}` {
		t.Fatalf("after reopening, spec = %+v, %v", v, ok)
	}
	if _, ok, _ := la2.GetState("checklist", as.ScopeProject); ok {
		t.Fatal("a deleted key came back")
	}
	pa2, _ := s2.Actor(p.ID)
	if v, ok, _ := pa2.GetState("notes", as.ScopePrivate); !ok || string(v.Value) != `"mine"` {
		t.Fatalf("after reopening, private notes = %+v, %v", v, ok)
	}
}
