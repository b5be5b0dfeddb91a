package agentsociety_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	as "agentsociety"
)

func TestLogRecordsCarryTheIDsInvolved(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	s := newSociety(t, as.Config{Logger: slog.New(rec)})
	root, _ := s.Actor(as.RootID)
	root = root.WithTask("task-1")
	role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "lead"})
	if err != nil {
		t.Fatal(err)
	}
	child, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	lead, _ := s.Actor(child.ID)
	art, err := lead.PutArtifact(ctx, as.ArtifactSpec{Name: "x", Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	m, err := lead.SendText(ctx, as.UserID, "hi")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.WaitForUserMessage(wctx, nil); err != nil {
		t.Fatal(err)
	}
	_, _ = lead.SendText(ctx, "agent-404", "nobody")

	for _, want := range []struct {
		msg   string
		attrs map[string]string
	}{
		{"role created", map[string]string{"role": role.ID, "name": "lead", "by": as.RootID}},
		{"agent spawned", map[string]string{"agent": child.ID, "role": role.ID, "parent": as.RootID, "task": "task-1"}},
		{"artifact stored", map[string]string{"artifact": art.ID, "by": child.ID}},
		{"message accepted", map[string]string{"msg": m.ID, "from": child.ID, "to": as.UserID}},
		{"message delivered", map[string]string{"msg": m.ID, "to": as.UserID}},
		{"message to user", map[string]string{"msg": m.ID, "from": child.ID, "role": "lead"}},
		{"refused", map[string]string{"op": "send_message", "by": child.ID, "code": "agent_not_found"}},
	} {
		if !rec.find(want.msg, want.attrs) {
			t.Errorf("no %q record with %v", want.msg, want.attrs)
		}
	}
}
