package agentsociety_test

import (
	"context"
	"testing"

	as "agentsociety"
)

func TestRefusals_AfterClose(t *testing.T) {
	ctx := context.Background()
	f := rfSetup(t, as.Config{})
	before := rfSnapshot(t, f.s)
	if err := f.s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Close(ctx); err != nil {
		t.Fatalf("closing twice: %v", err)
	}
	ops := map[string]func() error{
		"SpawnAgent": func() error {
			return rfSpawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief()})
		},
		"SpawnAgent by root on a new task": func() error {
			return rfSpawnErr(ctx, f.root.WithTask("t9"), as.SpawnSpec{RoleID: f.lead.ID, Brief: validBrief()})
		},
		"CreateRole": func() error {
			_, _, err := f.a.CreateRole(ctx, as.RoleSpec{Name: "late"})
			return err
		},
		"Send": func() error {
			return rfSendErr(ctx, f.a, as.Outgoing{To: as.RootID, Payload: as.Text("anyone?")})
		},
		"Send collaboration_request": func() error {
			return rfSendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{SubtaskDescription: "x"}})
		},
		"SubmitRequirement": func() error {
			_, err := f.s.SubmitRequirement(ctx, "a calculator")
			return err
		},
		"SendTextToAgent": func() error {
			_, err := f.s.SendTextToAgent(ctx, f.a.ID(), "hello", "")
			return err
		},
		"PutArtifact": func() error {
			_, err := f.a.PutArtifact(ctx, as.ArtifactSpec{Name: "after", Data: []byte("y")})
			return err
		},
		"WaitForUserMessage": func() error {
			_, err := f.s.WaitForUserMessage(ctx, nil)
			return err
		},
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			ptWantCode(t, op(), as.ErrClosed)
			rfSameState(t, before, f.s)
		})
	}
}
