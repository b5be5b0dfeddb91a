package agentsociety_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	as "agentsociety"

	"github.com/google/go-cmp/cmp"
)

func TestRefusals_CollaborationRequestLifecycle(t *testing.T) {
	ctx := context.Background()
	f := rfSetup(t, as.Config{})
	a, b := f.a.ID(), f.b.ID()

	// Without a request_id the society generates one, in the returned and
	// the delivered message alike.
	ids := map[string]bool{}
	var first string
	for i := range 2 {
		msg, err := f.a.Send(ctx, as.Outgoing{To: b, Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{SubtaskDescription: "review the page", Context: json.RawMessage(`{"artifact":"artifact:x"}`)}})
		if err != nil {
			t.Fatal(err)
		}
		var p as.CollaborationRequestPayload
		if err := msg.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(p.RequestID) == "" || ids[p.RequestID] {
			t.Fatalf("request %d: request_id %q is empty or reused", i, p.RequestID)
		}
		ids[p.RequestID] = true
		if p.SubtaskDescription != "review the page" || string(p.Context) != `{"artifact":"artifact:x"}` {
			t.Fatalf("request payload changed: %+v", p)
		}
		got := f.rec.next(t, b)
		if diff := cmp.Diff(msg, got); diff != "" {
			t.Fatalf("delivered request differs from the accepted one (-accepted +delivered):\n%s", diff)
		}
		if i == 0 {
			first = p.RequestID
		}
	}

	// Refused answers leave the request pending.
	respond := func(x *as.Actor, to string, p any) (as.Message, error) {
		return x.Send(ctx, as.Outgoing{To: to, Type: as.CollaborationResponse, Payload: p})
	}
	_, err := respond(f.g, a, as.CollaborationResponsePayload{RequestID: first, Status: as.StatusCompleted, ResultData: json.RawMessage(`1`)})
	ptWantCode(t, err, as.ErrWrongResponder)
	_, err = respond(f.b, a, map[string]string{"request_id": first, "status": string(as.StatusError)})
	e := ptWantCode(t, err, as.ErrInvalidMessageFormat)
	if diff := cmp.Diff([]string{"error_message"}, e.MissingFields); diff != "" {
		t.Fatalf("MissingFields (-want +got):\n%s", diff)
	}
	m, err := respond(f.b, a, as.CollaborationResponsePayload{RequestID: first, Status: as.StatusCompleted, ResultData: json.RawMessage(`{"verdict":"pass"}`)})
	if err != nil {
		t.Fatalf("the right answer: %v", err)
	}
	f.rec.expect(t, a, m.ID)
	_, err = respond(f.b, a, as.CollaborationResponsePayload{RequestID: first, Status: as.StatusRejected, ErrorMessage: "changed my mind"})
	ptWantCode(t, err, as.ErrRequestClosed)

	// A supplied request_id is kept, and cannot be used twice.
	msg, err := f.g.Send(ctx, as.Outgoing{To: b, Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: "req-mine", SubtaskDescription: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	var p as.CollaborationRequestPayload
	if err := msg.Decode(&p); err != nil || p.RequestID != "req-mine" {
		t.Fatalf("supplied request_id became %q (%v)", p.RequestID, err)
	}
	f.rec.expect(t, b, msg.ID)
	_, err = f.a.Send(ctx, as.Outgoing{To: b, Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: "req-mine", SubtaskDescription: "y"}})
	ptWantCode(t, err, as.ErrDuplicateRequest)
	_, err = f.a.Send(ctx, as.Outgoing{To: b, Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: first, SubtaskDescription: "y"}})
	ptWantCode(t, err, as.ErrDuplicateRequest)
	f.assertQuiet(t)
}

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
