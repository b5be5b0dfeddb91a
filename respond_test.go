package agentsociety_test

import (
	"context"
	"testing"

	as "agentsociety"
)

func TestRespondFindsTheRequester(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	_, lead, helper := twoAgents(t, in)
	id, err := lead.RequestCollaboration(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	in.next(t)
	if _, err := lead.Respond(ctx, id, as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: []byte(`1`)}); err == nil {
		t.Fatal("the requester answered its own request")
	}
	if _, err := helper.Respond(ctx, "req-unknown", as.CollaborationResponsePayload{Status: as.StatusRejected, ErrorMessage: "no"}); err == nil {
		t.Fatal("answered an unknown request")
	}
	m, err := helper.Respond(ctx, id, as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: []byte(`1`)})
	if err != nil || m.To != lead.ID() {
		t.Fatalf("Respond = %+v, %v", m, err)
	}
}
