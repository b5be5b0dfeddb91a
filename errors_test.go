package agentsociety_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	as "agentsociety"

	"github.com/google/go-cmp/cmp"
)

// TestRefusals checks that every refusal is an *as.Error with its code and
// changes nothing: no agent, no role, no queued message, no contact.
func TestRefusals(t *testing.T) {
	type refusalCase struct {
		name  string
		cfg   as.Config
		setup func(t *testing.T, f *smallOrg)
		act   func(ctx context.Context, f *smallOrg) error
		code  as.Code
		check func(t *testing.T, f *smallOrg, e *as.Error)
	}
	missing := func(want ...string) func(*testing.T, *smallOrg, *as.Error) {
		return func(t *testing.T, _ *smallOrg, e *as.Error) {
			t.Helper()
			if diff := cmp.Diff(want, e.MissingFields); diff != "" {
				t.Fatalf("MissingFields (-want +got):\n%s", diff)
			}
		}
	}
	agentID := func(want string) func(*testing.T, *smallOrg, *as.Error) {
		return func(t *testing.T, _ *smallOrg, e *as.Error) {
			t.Helper()
			if e.AgentID != want {
				t.Fatalf("AgentID = %q, want %q", e.AgentID, want)
			}
		}
	}
	messageType := func(want as.MessageType, fields ...string) func(*testing.T, *smallOrg, *as.Error) {
		return func(t *testing.T, _ *smallOrg, e *as.Error) {
			t.Helper()
			if e.MessageType != want {
				t.Fatalf("MessageType = %q, want %q", e.MessageType, want)
			}
			if len(fields) > 0 {
				if diff := cmp.Diff(fields, e.MissingFields); diff != "" {
					t.Fatalf("MissingFields (-want +got):\n%s", diff)
				}
			}
		}
	}

	cases := []refusalCase{
		// Spawning.
		{
			name: "spawn/invalid brief",
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief(func(b *as.TaskBrief) {
					b.Objective, b.Outputs = "", " \t "
				})})
			},
			code:  as.ErrInvalidTaskBrief,
			check: missing("objective", "outputs"),
		},
		{
			name: "spawn/nil brief",
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.root.WithTask("t9"), as.SpawnSpec{RoleID: f.lead.ID})
			},
			code:  as.ErrInvalidTaskBrief,
			check: missing("objective", "constraints", "inputs", "outputs", "completion_criteria"),
		},
		{
			name: "spawn/nil constraints",
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief(func(b *as.TaskBrief) { b.Constraints = nil })})
			},
			code:  as.ErrInvalidTaskBrief,
			check: missing("constraints"),
		},
		{
			name: "spawn/collaborator without id",
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief(func(b *as.TaskBrief) {
					b.Collaborators = []as.Collaborator{{AgentID: " ", Description: "nobody"}}
				})})
			},
			code: as.ErrInvalidTaskBrief,
		},
		{
			name: "spawn/parent mismatch",
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief(), ParentID: as.RootID})
			},
			code: as.ErrParentMismatch,
		},
		{
			name: "spawn/parent mismatch naming a child",
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief(), ParentID: f.g.ID()})
			},
			code: as.ErrParentMismatch,
		},
		{
			name: "spawn/role of another creator",
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.lead.ID, Brief: validBrief()})
			},
			code: as.ErrNotRoleOwner,
		},
		{
			name: "spawn/root on a role it did not create",
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.root.WithTask("t9"), as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief()})
			},
			code: as.ErrNotRoleOwner,
		},
		{
			name: "spawn/unknown role",
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.a, as.SpawnSpec{RoleID: "role-999", Brief: validBrief()})
			},
			code: as.ErrRoleNotFound,
		},
		{
			name: "spawn/collaborator that does not exist",
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief(func(b *as.TaskBrief) {
					b.Collaborators = []as.Collaborator{{AgentID: f.b.ID()}, {AgentID: "agent-ui-designer", Role: "UI设计师"}}
				})})
			},
			code:  as.ErrAgentNotFound,
			check: agentID("agent-ui-designer"),
		},
		{
			name: "spawn/too many agents",
			cfg:  as.Config{MaxAgents: 3},
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief()})
			},
			code: as.ErrTooManyAgents,
		},
		{
			name: "spawn/too many agents, root on a new task",
			cfg:  as.Config{MaxAgents: 3},
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.root.WithTask("t9"), as.SpawnSpec{RoleID: f.lead.ID, Brief: validBrief()})
			},
			code: as.ErrTooManyAgents,
		},
		{
			name: "spawn/max depth",
			cfg:  as.Config{MaxDepth: 2},
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.g, as.SpawnSpec{RoleID: f.intern.ID, Brief: validBrief()})
			},
			code: as.ErrMaxDepth,
		},
		{
			name: "spawn/by user",
			act: func(ctx context.Context, f *smallOrg) error {
				return spawnErr(ctx, f.user, as.SpawnSpec{RoleID: f.lead.ID, Brief: validBrief()})
			},
			code: as.ErrForbidden,
		},

		// Roles.
		{
			name: "create role/by user",
			act: func(ctx context.Context, f *smallOrg) error {
				_, _, err := f.user.CreateRole(ctx, as.RoleSpec{Name: "boss"})
				return err
			},
			code: as.ErrForbidden,
		},
		{
			name: "create role/empty name",
			act: func(ctx context.Context, f *smallOrg) error {
				_, _, err := f.a.CreateRole(ctx, as.RoleSpec{Name: "", Prompt: "p"})
				return err
			},
			code: as.ErrInvalidArgument,
		},
		{
			name: "create role/blank name",
			act: func(ctx context.Context, f *smallOrg) error {
				_, _, err := f.root.CreateRole(ctx, as.RoleSpec{Name: " \t\u3000", Prompt: "p"})
				return err
			},
			code: as.ErrInvalidArgument,
		},

		// Messages.
		{
			name: "send/unknown agent",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: "agent-999", Payload: as.Text("hello")})
			},
			code:  as.ErrAgentNotFound,
			check: agentID("agent-999"),
		},
		{
			name: "send/user to unknown agent",
			act: func(ctx context.Context, f *smallOrg) error {
				_, err := f.s.SendTextToAgent(ctx, "agent-999", "hello", "")
				return err
			},
			code: as.ErrAgentNotFound,
		},
		{
			name: "send/to self",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: f.a.ID(), Payload: as.Text("note to self")})
			},
			code: as.ErrInvalidArgument,
		},
		{
			name: "send/array payload",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Payload: json.RawMessage(`[{"text":"x"}]`)})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.General),
		},
		{
			name: "send/string payload",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Payload: "hello"})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.General),
		},
		{
			name: "send/number payload as bytes",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Payload: []byte("42")})
			},
			code: as.ErrInvalidMessageFormat,
		},
		{
			name: "send/null payload",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Type: as.StatusReport, Payload: json.RawMessage(`null`)})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.StatusReport),
		},
		{
			name: "send/malformed JSON",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Payload: json.RawMessage(`{"text": "unterminated`)})
			},
			code: as.ErrInvalidMessageFormat,
		},
		{
			name: "send/payload that does not encode",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Payload: map[string]any{"f": func() {}}})
			},
			code: as.ErrInvalidMessageFormat,
		},
		{
			name: "send/unknown type",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Type: "gossip", Payload: as.Text("psst")})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType("gossip"),
		},
		{
			name: "send/task_assignment with an incomplete brief",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: f.g.ID(), Type: as.TaskAssignment, Payload: validBrief(func(b *as.TaskBrief) {
					b.Inputs, b.CompletionCriteria = "", "\n"
				})})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.TaskAssignment, "inputs", "completion_criteria"),
		},
		{
			name: "send/introduction_request without its fields",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.g, as.Outgoing{To: f.a.ID(), Type: as.IntroductionRequest, Payload: map[string]string{"reason": " "}})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.IntroductionRequest, "reason", "required_capability"),
		},
		{
			name: "send/strict policy, unknown contact",
			cfg:  as.Config{ContactPolicy: as.ContactStrict},
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Payload: as.Text("hello, sibling")})
			},
			code: as.ErrUnknownContact,
			check: func(t *testing.T, f *smallOrg, e *as.Error) {
				agentID(f.b.ID())(t, f, e)
			},
		},
		{
			name: "send/strict policy, grandchild to root",
			cfg:  as.Config{ContactPolicy: as.ContactStrict},
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.g, as.Outgoing{To: as.RootID, Type: as.StatusReport, Payload: as.StatusReportPayload{Status: "working"}})
			},
			code: as.ErrUnknownContact,
		},

		// Introductions.
		{
			name: "introduction/target does not exist",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.root, as.Outgoing{To: f.a.ID(), Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{TargetAgentID: "agent-999"}})
			},
			code:  as.ErrAgentNotFound,
			check: agentID("agent-999"),
		},
		{
			name: "introduction/target unknown to the introducer",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: f.g.ID(), Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{TargetAgentID: f.b.ID(), TargetRole: "reviewer"}})
			},
			code: as.ErrUnknownContact,
		},
		{
			name: "introduction/target is the receiver",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.root, as.Outgoing{To: f.a.ID(), Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{TargetAgentID: f.a.ID()}})
			},
			code: as.ErrInvalidArgument,
		},
		{
			name: "introduction/without a target or advice",
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.root, as.Outgoing{To: f.a.ID(), Type: as.IntroductionResponse, Payload: map[string]string{"text": "ask b"}})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.IntroductionResponse, "target_agent_id"),
		},

		// Collaboration.
		{
			name: "collaboration_response/unknown request",
			setup: func(t *testing.T, f *smallOrg) {
				f.request(t, f.a, f.b, "req-1")
			},
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.b, as.Outgoing{To: f.a.ID(), Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{RequestID: "req-none", Status: as.StatusCompleted, ResultData: json.RawMessage(`"ok"`)}})
			},
			code: as.ErrUnknownRequest,
		},
		{
			name: "collaboration_response/from the wrong responder",
			setup: func(t *testing.T, f *smallOrg) {
				f.request(t, f.a, f.b, "req-1")
			},
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.g, as.Outgoing{To: f.a.ID(), Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{RequestID: "req-1", Status: as.StatusCompleted, ResultData: json.RawMessage(`{"ok":true}`)}})
			},
			code: as.ErrWrongResponder,
		},
		{
			name: "collaboration_response/to someone other than the requester",
			setup: func(t *testing.T, f *smallOrg) {
				f.request(t, f.a, f.b, "req-1")
			},
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.b, as.Outgoing{To: as.RootID, Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{RequestID: "req-1", Status: as.StatusRejected, ErrorMessage: "not mine"}})
			},
			code: as.ErrWrongResponder,
		},
		{
			name: "collaboration_response/requester answering its own request",
			setup: func(t *testing.T, f *smallOrg) {
				f.request(t, f.a, f.b, "req-1")
			},
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{RequestID: "req-1", Status: as.StatusError, ErrorMessage: "never mind"}})
			},
			code: as.ErrWrongResponder,
		},
		{
			name: "collaboration_response/answered twice",
			setup: func(t *testing.T, f *smallOrg) {
				f.request(t, f.a, f.b, "req-1")
				m, err := f.b.Send(context.Background(), as.Outgoing{To: f.a.ID(), Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{RequestID: "req-1", Status: as.StatusCompleted, ResultData: json.RawMessage(`"first"`)}})
				if err != nil {
					t.Fatal(err)
				}
				f.rec.expect(t, f.a.ID(), m.ID)
			},
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.b, as.Outgoing{To: f.a.ID(), Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{RequestID: "req-1", Status: as.StatusCompleted, ResultData: json.RawMessage(`"second"`)}})
			},
			code: as.ErrRequestClosed,
		},
		{
			name: "collaboration_request/duplicate request_id",
			setup: func(t *testing.T, f *smallOrg) {
				f.request(t, f.a, f.b, "req-1")
			},
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.root, as.Outgoing{To: f.b.ID(), Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: "req-1", SubtaskDescription: "another job"}})
			},
			code: as.ErrDuplicateRequest,
		},
		{
			name: "collaboration_response/completed without result_data",
			setup: func(t *testing.T, f *smallOrg) {
				f.request(t, f.a, f.b, "req-1")
			},
			act: func(ctx context.Context, f *smallOrg) error {
				return sendErr(ctx, f.b, as.Outgoing{To: f.a.ID(), Type: as.CollaborationResponse, Payload: map[string]any{"request_id": "req-1", "status": "completed", "result_data": nil}})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.CollaborationResponse, "result_data"),
		},

		// Artifacts and requirements.
		{
			name: "artifact/too large",
			cfg:  as.Config{MaxArtifactBytes: 8},
			act: func(ctx context.Context, f *smallOrg) error {
				_, err := f.a.PutArtifact(ctx, as.ArtifactSpec{Name: "big", Data: []byte("123456789")})
				return err
			},
			code: as.ErrArtifactTooLarge,
		},
		{
			name: "artifact/unknown reference",
			act: func(ctx context.Context, f *smallOrg) error {
				_, _, err := f.a.GetArtifact(ctx, "artifact:a-0123456789abcdef")
				return err
			},
			code: as.ErrArtifactNotFound,
		},
		{
			name: "submit requirement/empty",
			act: func(ctx context.Context, f *smallOrg) error {
				_, err := f.s.SubmitRequirement(ctx, "")
				return err
			},
			code: as.ErrInvalidArgument,
		},
		{
			name: "submit requirement/blank",
			act: func(ctx context.Context, f *smallOrg) error {
				_, err := f.s.SubmitRequirement(ctx, " \n\t\u3000")
				return err
			},
			code: as.ErrInvalidArgument,
		},
	}
	for _, ref := range []string{"../x", "/etc/passwd", "a\x00b", "", "artifact:", "artifact:../../etc/passwd", "artifact:a b", strings.Repeat("x", 65)} {
		cases = append(cases, refusalCase{
			name: fmt.Sprintf("artifact/bad reference %q", ref),
			act: func(ctx context.Context, f *smallOrg) error {
				_, data, err := f.s.GetArtifact(ctx, ref)
				if err != nil && data != nil {
					return fmt.Errorf("a refused read returned %d bytes: %w", len(data), err)
				}
				return err
			},
			code: as.ErrInvalidArtifactRef,
		})
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newSmallOrg(t, tc.cfg)
			if tc.setup != nil {
				tc.setup(t, f)
			}
			before := snapshot(t, f.s)
			err := tc.act(ctx, f)
			e := wantCode(t, err, tc.code)
			if e.Message == "" {
				t.Errorf("the refusal %v has no message", err)
			}
			if tc.check != nil {
				tc.check(t, f, e)
			}
			sameState(t, before, f.s)
			f.assertQuiet(t)
		})
	}
}

// TestRefusalJSONFollowsSeed001 checks the refusals a model reads against
// seed 001's Error Handling section, field names and all:
// {error: 'invalid_task_brief', missing_fields: [...]}, {error:
// 'invalid_message_format', message_type: type, missing_fields: [...]} and
// {error: 'agent_not_found', agentId: targetId}, each with a message.
func TestRefusalJSONFollowsSeed001(t *testing.T) {
	results := callTools(t, as.Config{}, newInbox().behavior(),
		toolCall{"spawn_agent", `{"roleId":"role-1","taskBrief":{"objective":"x","constraints":[]}}`},
		toolCall{"send_message", `{"to":"agent-2","message_type":"introduction_request","payload":{"reason":"need a DBA"}}`},
		toolCall{"send_message", `{"to":"agent-2","payload":[1,2]}`},
		toolCall{"send_message", `{"to":"agent-404","payload":{"text":"hi"}}`},
	)
	want := []map[string]any{
		{"error": "invalid_task_brief", "missing_fields": []any{"inputs", "outputs", "completion_criteria"}},
		{"error": "invalid_message_format", "message_type": "introduction_request", "missing_fields": []any{"required_capability"}},
		{"error": "invalid_message_format", "message_type": "general", "missing_fields": []any{}},
		{"error": "agent_not_found", "agentId": "agent-404"},
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %q", len(results), len(want), results)
	}
	for i, r := range results {
		var got map[string]any
		if err := json.Unmarshal([]byte(r), &got); err != nil {
			t.Fatalf("result %d is not a JSON object: %v: %s", i, err, r)
		}
		if msg, _ := got["message"].(string); msg == "" {
			t.Errorf("result %d has no message: %s", i, r)
		}
		delete(got, "message")
		if diff := cmp.Diff(want[i], got); diff != "" {
			t.Errorf("result %d (-want +got):\n%s", i, diff)
		}
	}
}

// TestErrorJSONFromTheAPI checks that the refusals the host gets encode as
// the model reads them: the same seed 001 fields, from errors.As on a Go
// call's error.
func TestErrorJSONFromTheAPI(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{})
	root := actorOf(t, s, as.RootID).WithTask("t")
	role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, briefErr := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: &as.TaskBrief{Objective: "x"}})
	formatErr := sendErr(ctx, root, as.Outgoing{To: as.UserID, Type: as.StatusReport, Payload: map[string]any{}})
	notFoundErr := sendErr(ctx, root, as.Outgoing{To: "agent-9", Payload: as.Text("hi")})
	for _, c := range []struct {
		err  error
		want string
	}{
		{briefErr, `{"error":"invalid_task_brief","message":"the task brief lacks required fields","missing_fields":["constraints","inputs","outputs","completion_criteria"]}`},
		{formatErr, `{"error":"invalid_message_format","message":"the payload lacks fields its type requires","message_type":"status_report","missing_fields":["status"]}`},
		{notFoundErr, `{"error":"agent_not_found","message":"no agent \"agent-9\"","agentId":"agent-9"}`},
	} {
		b, err := json.Marshal(c.err)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("got  %s\nwant %s", b, c.want)
		}
	}
}
