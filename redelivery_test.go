package agentsociety_test

import (
	"context"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/store"
)

// forgetFinished is a store that never records the end of a message's
// handling: reopened on the inner store, a society sees every message as
// accepted and not finished, as after a crash in the middle of each.
type forgetFinished struct{ store.Store }

func (f forgetFinished) Apply(ctx context.Context, c store.Change) error {
	c.Finished = nil
	return f.Store.Apply(ctx, c)
}

// TestRedeliveryDuplicatesNoSpawn: a lead spawns two workers while handling a
// message, and the process "crashes" before the end of the handling is
// recorded. Reopened, the society delivers the message again; the lead spawns
// again, and gets the same two workers back.
func TestRedeliveryDuplicatesNoSpawn(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	handled := make(chan []string, 2)
	lead := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		role, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "worker"})
		if err != nil {
			return err
		}
		var ids []string
		for range 2 {
			w, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
			if err != nil {
				return err
			}
			ids = append(ids, w.ID)
		}
		handled <- ids
		return nil
	})
	open := func(st store.Store) *as.Society {
		s, err := as.New(ctx, as.Config{Logger: quiet, Store: st, DefaultBehavior: lead})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	next := func() []string {
		select {
		case ids := <-handled:
			return ids
		case <-time.After(5 * time.Second):
			t.Fatal("the lead never handled its message")
			return nil
		}
	}

	s := open(forgetFinished{mem})
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("t").CreateRole(ctx, as.RoleSpec{Name: "lead"})
	l, _, err := root.WithTask("t").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: lead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SendTextToAgent(ctx, l.ID, "staff up", ""); err != nil {
		t.Fatal(err)
	}
	first := next()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	s = open(mem) // the message was never finished: it comes again
	defer s.Close(ctx)
	again := next()
	if again[0] != first[0] || again[1] != first[1] {
		t.Fatalf("handled again, the lead got %v, first %v: a spawn was duplicated", again, first)
	}
	if n := len(s.Agents()); n != 3 {
		t.Fatalf("%d agents after redelivery, want 3 (the lead and two workers)", n)
	}
}

// TestRestoreBehaviorGivesAgentsTheirCodeBack: behaviours are code, so a
// reopened society asks the host for them, by agent and role.
func TestRestoreBehaviorGivesAgentsTheirCodeBack(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	got := make(chan string, 1)
	echo := as.BehaviorFunc(func(_ context.Context, self *as.Actor, m as.Message) error {
		got <- self.ID() + ":" + m.Text()
		return nil
	})
	s, err := as.New(ctx, as.Config{Logger: quiet, Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.WithTask("t").CreateRole(ctx, as.RoleSpec{Name: "echo"})
	e, _, _ := root.WithTask("t").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: echo})
	s.Close(ctx)

	var asked []string
	s, err = as.New(ctx, as.Config{Logger: quiet, Store: mem, RestoreBehavior: func(a as.Agent, r as.Role) as.Behavior {
		asked = append(asked, a.ID+"/"+r.Name)
		if r.Name == "echo" {
			return echo
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if len(asked) != 1 || asked[0] != e.ID+"/echo" {
		t.Fatalf("RestoreBehavior was asked for %v", asked)
	}
	if _, err := s.SendTextToAgent(ctx, e.ID, "again", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-got:
		if g != e.ID+":again" {
			t.Fatalf("got %q", g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the restored agent has no behaviour")
	}
}
