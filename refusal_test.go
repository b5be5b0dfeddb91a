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

func TestRefusals(t *testing.T) {
	type rfCase struct {
		name  string
		cfg   as.Config
		setup func(t *testing.T, f *rfFixture)
		act   func(ctx context.Context, f *rfFixture) error
		code  as.Code
		check func(t *testing.T, f *rfFixture, e *as.Error)
	}
	missing := func(want ...string) func(*testing.T, *rfFixture, *as.Error) {
		return func(t *testing.T, _ *rfFixture, e *as.Error) {
			t.Helper()
			if diff := cmp.Diff(want, e.MissingFields); diff != "" {
				t.Fatalf("MissingFields (-want +got):\n%s", diff)
			}
		}
	}
	agentID := func(want string) func(*testing.T, *rfFixture, *as.Error) {
		return func(t *testing.T, _ *rfFixture, e *as.Error) {
			t.Helper()
			if e.AgentID != want {
				t.Fatalf("AgentID = %q, want %q", e.AgentID, want)
			}
		}
	}
	messageType := func(want as.MessageType, fields ...string) func(*testing.T, *rfFixture, *as.Error) {
		return func(t *testing.T, _ *rfFixture, e *as.Error) {
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

	cases := []rfCase{
		// Spawning.
		{
			name: "spawn/invalid brief",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: rfBrief(func(b *as.TaskBrief) {
					b.Objective, b.Outputs = "", " \t "
				})})
			},
			code:  as.ErrInvalidTaskBrief,
			check: missing("objective", "outputs"),
		},
		{
			name: "spawn/nil brief",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.root.WithTask("t9"), as.SpawnSpec{RoleID: f.lead.ID})
			},
			code:  as.ErrInvalidTaskBrief,
			check: missing("objective", "constraints", "inputs", "outputs", "completion_criteria"),
		},
		{
			name: "spawn/nil constraints",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: rfBrief(func(b *as.TaskBrief) { b.Constraints = nil })})
			},
			code:  as.ErrInvalidTaskBrief,
			check: missing("constraints"),
		},
		{
			name: "spawn/collaborator without id",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: rfBrief(func(b *as.TaskBrief) {
					b.Collaborators = []as.Collaborator{{AgentID: " ", Description: "nobody"}}
				})})
			},
			code: as.ErrInvalidTaskBrief,
		},
		{
			name: "spawn/parent mismatch",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief(), ParentID: as.RootID})
			},
			code: as.ErrParentMismatch,
		},
		{
			name: "spawn/parent mismatch naming a child",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief(), ParentID: f.g.ID()})
			},
			code: as.ErrParentMismatch,
		},
		{
			name: "spawn/role of another creator",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.lead.ID, Brief: validBrief()})
			},
			code: as.ErrNotRoleOwner,
		},
		{
			name: "spawn/root on a role it did not create",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.root.WithTask("t9"), as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief()})
			},
			code: as.ErrNotRoleOwner,
		},
		{
			name: "spawn/unknown role",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.a, as.SpawnSpec{RoleID: "role-999", Brief: validBrief()})
			},
			code: as.ErrRoleNotFound,
		},
		{
			name: "spawn/collaborator that does not exist",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: rfBrief(func(b *as.TaskBrief) {
					b.Collaborators = []as.Collaborator{{AgentID: f.b.ID()}, {AgentID: "agent-ui-designer", Role: "UI设计师"}}
				})})
			},
			code:  as.ErrAgentNotFound,
			check: agentID("agent-ui-designer"),
		},
		{
			name: "spawn/too many agents",
			cfg:  as.Config{MaxAgents: 3},
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.a, as.SpawnSpec{RoleID: f.worker.ID, Brief: validBrief()})
			},
			code: as.ErrTooManyAgents,
		},
		{
			name: "spawn/too many agents, root on a new task",
			cfg:  as.Config{MaxAgents: 3},
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.root.WithTask("t9"), as.SpawnSpec{RoleID: f.lead.ID, Brief: validBrief()})
			},
			code: as.ErrTooManyAgents,
		},
		{
			name: "spawn/max depth",
			cfg:  as.Config{MaxDepth: 2},
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.g, as.SpawnSpec{RoleID: f.intern.ID, Brief: validBrief()})
			},
			code: as.ErrMaxDepth,
		},
		{
			name: "spawn/by user",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSpawnErr(ctx, f.user, as.SpawnSpec{RoleID: f.lead.ID, Brief: validBrief()})
			},
			code: as.ErrForbidden,
		},

		// Roles.
		{
			name: "create role/by user",
			act: func(ctx context.Context, f *rfFixture) error {
				_, _, err := f.user.CreateRole(ctx, as.RoleSpec{Name: "boss"})
				return err
			},
			code: as.ErrForbidden,
		},
		{
			name: "create role/empty name",
			act: func(ctx context.Context, f *rfFixture) error {
				_, _, err := f.a.CreateRole(ctx, as.RoleSpec{Name: "", Prompt: "p"})
				return err
			},
			code: as.ErrInvalidArgument,
		},
		{
			name: "create role/blank name",
			act: func(ctx context.Context, f *rfFixture) error {
				_, _, err := f.root.CreateRole(ctx, as.RoleSpec{Name: " \t\u3000", Prompt: "p"})
				return err
			},
			code: as.ErrInvalidArgument,
		},

		// Messages.
		{
			name: "send/unknown agent",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: "agent-999", Payload: as.Text("hello")})
			},
			code:  as.ErrAgentNotFound,
			check: agentID("agent-999"),
		},
		{
			name: "send/user to unknown agent",
			act: func(ctx context.Context, f *rfFixture) error {
				_, err := f.s.SendTextToAgent(ctx, "agent-999", "hello", "")
				return err
			},
			code: as.ErrAgentNotFound,
		},
		{
			name: "send/to self",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: f.a.ID(), Payload: as.Text("note to self")})
			},
			code: as.ErrInvalidArgument,
		},
		{
			name: "send/array payload",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Payload: json.RawMessage(`[{"text":"x"}]`)})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.General),
		},
		{
			name: "send/string payload",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Payload: "hello"})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.General),
		},
		{
			name: "send/number payload as bytes",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Payload: []byte("42")})
			},
			code: as.ErrInvalidMessageFormat,
		},
		{
			name: "send/null payload",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Type: as.StatusReport, Payload: json.RawMessage(`null`)})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.StatusReport),
		},
		{
			name: "send/malformed JSON",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Payload: json.RawMessage(`{"text": "unterminated`)})
			},
			code: as.ErrInvalidMessageFormat,
		},
		{
			name: "send/payload that does not encode",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Payload: map[string]any{"f": func() {}}})
			},
			code: as.ErrInvalidMessageFormat,
		},
		{
			name: "send/unknown type",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Type: "gossip", Payload: as.Text("psst")})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType("gossip"),
		},
		{
			name: "send/task_assignment with an incomplete brief",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: f.g.ID(), Type: as.TaskAssignment, Payload: rfBrief(func(b *as.TaskBrief) {
					b.Inputs, b.CompletionCriteria = "", "\n"
				})})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.TaskAssignment, "inputs", "completion_criteria"),
		},
		{
			name: "send/introduction_request without its fields",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.g, as.Outgoing{To: f.a.ID(), Type: as.IntroductionRequest, Payload: map[string]string{"reason": " "}})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.IntroductionRequest, "reason", "required_capability"),
		},
		{
			name: "send/strict policy, unknown contact",
			cfg:  as.Config{ContactPolicy: as.ContactStrict},
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Payload: as.Text("hello, sibling")})
			},
			code: as.ErrUnknownContact,
			check: func(t *testing.T, f *rfFixture, e *as.Error) {
				agentID(f.b.ID())(t, f, e)
			},
		},
		{
			name: "send/strict policy, grandchild to root",
			cfg:  as.Config{ContactPolicy: as.ContactStrict},
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.g, as.Outgoing{To: as.RootID, Type: as.StatusReport, Payload: as.StatusReportPayload{Status: "working"}})
			},
			code: as.ErrUnknownContact,
		},

		// Introductions.
		{
			name: "introduction/target does not exist",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.root, as.Outgoing{To: f.a.ID(), Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{TargetAgentID: "agent-999"}})
			},
			code:  as.ErrAgentNotFound,
			check: agentID("agent-999"),
		},
		{
			name: "introduction/target unknown to the introducer",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: f.g.ID(), Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{TargetAgentID: f.b.ID(), TargetRole: "reviewer"}})
			},
			code: as.ErrUnknownContact,
		},
		{
			name: "introduction/target is the receiver",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.root, as.Outgoing{To: f.a.ID(), Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{TargetAgentID: f.a.ID()}})
			},
			code: as.ErrInvalidArgument,
		},
		{
			name: "introduction/without a target",
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.root, as.Outgoing{To: f.a.ID(), Type: as.IntroductionResponse, Payload: map[string]string{"advice": "ask b"}})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.IntroductionResponse, "target_agent_id"),
		},

		// Collaboration.
		{
			name: "collaboration_response/unknown request",
			setup: func(t *testing.T, f *rfFixture) {
				f.rfRequest(t, f.a, f.b, "req-1")
			},
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.b, as.Outgoing{To: f.a.ID(), Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{RequestID: "req-none", Status: as.StatusCompleted, ResultData: json.RawMessage(`"ok"`)}})
			},
			code: as.ErrUnknownRequest,
		},
		{
			name: "collaboration_response/from the wrong responder",
			setup: func(t *testing.T, f *rfFixture) {
				f.rfRequest(t, f.a, f.b, "req-1")
			},
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.g, as.Outgoing{To: f.a.ID(), Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{RequestID: "req-1", Status: as.StatusCompleted, ResultData: json.RawMessage(`{"ok":true}`)}})
			},
			code: as.ErrWrongResponder,
		},
		{
			name: "collaboration_response/to someone other than the requester",
			setup: func(t *testing.T, f *rfFixture) {
				f.rfRequest(t, f.a, f.b, "req-1")
			},
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.b, as.Outgoing{To: as.RootID, Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{RequestID: "req-1", Status: as.StatusRejected, ErrorMessage: "not mine"}})
			},
			code: as.ErrWrongResponder,
		},
		{
			name: "collaboration_response/requester answering its own request",
			setup: func(t *testing.T, f *rfFixture) {
				f.rfRequest(t, f.a, f.b, "req-1")
			},
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.a, as.Outgoing{To: f.b.ID(), Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{RequestID: "req-1", Status: as.StatusError, ErrorMessage: "never mind"}})
			},
			code: as.ErrWrongResponder,
		},
		{
			name: "collaboration_response/answered twice",
			setup: func(t *testing.T, f *rfFixture) {
				f.rfRequest(t, f.a, f.b, "req-1")
				m, err := f.b.Send(context.Background(), as.Outgoing{To: f.a.ID(), Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{RequestID: "req-1", Status: as.StatusCompleted, ResultData: json.RawMessage(`"first"`)}})
				if err != nil {
					t.Fatal(err)
				}
				f.rec.expect(t, f.a.ID(), m.ID)
			},
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.b, as.Outgoing{To: f.a.ID(), Type: as.CollaborationResponse, Payload: as.CollaborationResponsePayload{RequestID: "req-1", Status: as.StatusCompleted, ResultData: json.RawMessage(`"second"`)}})
			},
			code: as.ErrRequestClosed,
		},
		{
			name: "collaboration_request/duplicate request_id",
			setup: func(t *testing.T, f *rfFixture) {
				f.rfRequest(t, f.a, f.b, "req-1")
			},
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.root, as.Outgoing{To: f.b.ID(), Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: "req-1", SubtaskDescription: "another job"}})
			},
			code: as.ErrDuplicateRequest,
		},
		{
			name: "collaboration_response/completed without result_data",
			setup: func(t *testing.T, f *rfFixture) {
				f.rfRequest(t, f.a, f.b, "req-1")
			},
			act: func(ctx context.Context, f *rfFixture) error {
				return rfSendErr(ctx, f.b, as.Outgoing{To: f.a.ID(), Type: as.CollaborationResponse, Payload: map[string]any{"request_id": "req-1", "status": "completed", "result_data": nil}})
			},
			code:  as.ErrInvalidMessageFormat,
			check: messageType(as.CollaborationResponse, "result_data"),
		},

		// Artifacts and requirements.
		{
			name: "artifact/too large",
			cfg:  as.Config{MaxArtifactBytes: 8},
			act: func(ctx context.Context, f *rfFixture) error {
				_, err := f.a.PutArtifact(ctx, as.ArtifactSpec{Name: "big", Data: []byte("123456789")})
				return err
			},
			code: as.ErrArtifactTooLarge,
		},
		{
			name: "artifact/unknown reference",
			act: func(ctx context.Context, f *rfFixture) error {
				_, _, err := f.a.GetArtifact(ctx, "artifact:a-0123456789abcdef")
				return err
			},
			code: as.ErrArtifactNotFound,
		},
		{
			name: "submit requirement/empty",
			act: func(ctx context.Context, f *rfFixture) error {
				_, err := f.s.SubmitRequirement(ctx, "")
				return err
			},
			code: as.ErrInvalidArgument,
		},
		{
			name: "submit requirement/blank",
			act: func(ctx context.Context, f *rfFixture) error {
				_, err := f.s.SubmitRequirement(ctx, " \n\t\u3000")
				return err
			},
			code: as.ErrInvalidArgument,
		},
	}
	for _, ref := range []string{"../x", "/etc/passwd", "a\x00b", "", "artifact:", "artifact:../../etc/passwd", "artifact:a b", strings.Repeat("x", 65)} {
		cases = append(cases, rfCase{
			name: fmt.Sprintf("artifact/bad reference %q", ref),
			act: func(ctx context.Context, f *rfFixture) error {
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
			f := rfSetup(t, tc.cfg)
			if tc.setup != nil {
				tc.setup(t, f)
			}
			before := rfSnapshot(t, f.s)
			err := tc.act(ctx, f)
			e := ptWantCode(t, err, tc.code)
			if e.Message == "" {
				t.Errorf("the refusal %v has no message", err)
			}
			if tc.check != nil {
				tc.check(t, f, e)
			}
			rfSameState(t, before, f.s)
			f.assertQuiet(t)
		})
	}
}

func TestRefusals_IntroductionAddsTheRealTarget(t *testing.T) {
	ctx := context.Background()
	f := rfSetup(t, as.Config{ContactPolicy: as.ContactStrict})
	a, b := f.a.ID(), f.b.ID()

	// Under the strict policy a may not write to b before an introduction.
	_, err := f.a.SendText(ctx, b, "hello?")
	ptWantCode(t, err, as.ErrUnknownContact)

	// root introduces b to a, with a made-up role and spec: the society
	// records and delivers b's real ones.
	msg, err := f.root.Send(ctx, as.Outgoing{To: a, Type: as.IntroductionResponse, Payload: map[string]any{
		"target_agent_id":       b,
		"target_role":           "假角色",
		"target_interface_spec": map[string]any{"services": "fake", "input_format": "fake", "output_format": "fake"},
		"advice":                "找他做代码评审",
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := f.rec.next(t, a)
	if diff := cmp.Diff(msg, got); diff != "" {
		t.Fatalf("delivered introduction differs from the accepted one (-accepted +delivered):\n%s", diff)
	}
	var p as.IntroductionResponsePayload
	if err := got.Decode(&p); err != nil {
		t.Fatal(err)
	}
	wantP := as.IntroductionResponsePayload{TargetAgentID: b, TargetRole: "reviewer", TargetInterfaceSpec: rfReviewerSpec, Advice: "找他做代码评审"}
	if diff := cmp.Diff(wantP, p); diff != "" {
		t.Fatalf("delivered payload (-want +got):\n%s", diff)
	}
	c, ok := ptFindContact(ptContacts(t, f.s, a), b)
	wantC := as.Contact{ID: b, Role: "reviewer", InterfaceSpec: rfReviewerSpec, Source: as.SourceIntroduction, IntroducedBy: as.RootID, Note: "找他做代码评审"}
	if !ok {
		t.Fatalf("a does not know b after the introduction")
	}
	if diff := cmp.Diff(wantC, c, ptIgnoreAddedAt); diff != "" {
		t.Fatalf("a's entry for b (-want +got):\n%s", diff)
	}
	// The introduction told b nothing: b does not know a yet.
	if f.s.IsKnown(b, a) {
		t.Fatal("b knows a before a wrote to it")
	}

	// Now a may write to b directly, and b learns a from that first message.
	m, err := f.a.SendText(ctx, b, "你好，root 介绍我来找你")
	if err != nil {
		t.Fatalf("a -> b after the introduction: %v", err)
	}
	f.rec.expect(t, b, m.ID)
	if c, ok := ptFindContact(ptContacts(t, f.s, b), a); !ok || c.Source != as.SourceFirstMessage || c.Role != "lead" {
		t.Fatalf("b's entry for a: %+v (found %v), want first_message with role lead", c, ok)
	}

	// Introducing an agent whose role has no spec: a forged spec is dropped.
	msg, err = f.root.Send(ctx, as.Outgoing{To: a, Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{
		TargetAgentID: as.UserID, TargetRole: "admin", TargetInterfaceSpec: &as.InterfaceSpec{Services: "everything"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got = f.rec.next(t, a)
	p = as.IntroductionResponsePayload{}
	if err := got.Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.TargetRole != as.UserID || p.TargetInterfaceSpec != nil || got.ID != msg.ID {
		t.Fatalf("introduction of user delivered %+v, want role user and no spec", p)
	}
	if c, ok := ptFindContact(ptContacts(t, f.s, a), as.UserID); !ok || c.Source != as.SourceIntroduction || c.IntroducedBy != as.RootID || c.InterfaceSpec != nil || c.Role != as.UserID {
		t.Fatalf("a's entry for user: %+v (found %v)", c, ok)
	}

	// Introducing b again changes nothing: the first entry wins.
	before := ptContacts(t, f.s, a)
	if _, err := f.root.Send(ctx, as.Outgoing{To: a, Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{TargetAgentID: b, Advice: "again"}}); err != nil {
		t.Fatal(err)
	}
	f.rec.next(t, a)
	if diff := cmp.Diff(before, ptContacts(t, f.s, a)); diff != "" {
		t.Fatalf("a second introduction changed a's registry (-before +after):\n%s", diff)
	}
}

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
