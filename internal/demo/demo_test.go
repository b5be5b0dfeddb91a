package demo

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/internal/script"
	"agentsociety/llm"
)

// The script reads what the society shows an agent; these tests pin the
// readings to the society's own formatting, so that a change there shows up
// here rather than as a stalled scenario.

func TestParseMessage(t *testing.T) {
	payload, _ := json.Marshal(as.CollaborationRequestPayload{
		RequestID: "req-1", SubtaskDescription: "check artifact:a-1", Text: "hello",
		Context: json.RawMessage(`{"artifact":"artifact:a-1"}`),
	})
	m := script.ParseMessage(as.FormatMessage(as.Message{From: "agent-3", To: "agent-2", Type: as.CollaborationRequest, Payload: payload, SentAt: time.Now()}, "developer"))
	if m.From != "agent-3" || m.FromRole != "developer" || m.Type != "collaboration_request" || m.Text != "hello" {
		t.Errorf("read %+v", m)
	}
	if m.Payload["request_id"] != "req-1" || script.RefIn(m.Content) != "artifact:a-1" {
		t.Errorf("payload %v", m.Payload)
	}

	m = script.ParseMessage(as.FormatMessage(as.Message{From: as.UserID, Type: as.General, Payload: as.Text("a calculator")}, as.UserID))
	if m.From != as.UserID || m.Type != "" || m.Text != "a calculator" {
		t.Errorf("read %+v", m)
	}
}

func TestBriefList(t *testing.T) {
	brief := &as.TaskBrief{Objective: "o", Constraints: []string{"HTML + JavaScript", "静态网页，无后端"}, Inputs: "i", Outputs: "o", CompletionCriteria: "c"}
	// The brief is the first message of the agent's history, a
	// task_assignment from its parent; later messages are not briefs.
	req := func(b *as.TaskBrief) *llm.Request {
		payload, _ := json.Marshal(b)
		later := as.FormatMessage(as.Message{From: "agent-1", To: "agent-2", Type: as.General, Payload: as.Text("objective: not the brief")}, "lead")
		return &llm.Request{Messages: []llm.Message{
			{Role: llm.RoleUser, Content: as.FormatMessage(as.Message{From: "agent-1", To: "agent-2", Type: as.TaskAssignment, Payload: payload}, "lead")},
			{Role: llm.RoleAssistant, Content: "ok"},
			{Role: llm.RoleUser, Content: later},
		}}
	}
	if got := script.BriefList(req(brief), "constraints"); !slices.Equal(got, brief.Constraints) {
		t.Errorf("constraints %q", got)
	}
	if got := script.BriefField(req(brief), "objective"); got != "o" {
		t.Errorf("objective %q", got)
	}
	if got := script.BriefField(req(brief), "completion_criteria"); got != "c" {
		t.Errorf("completion_criteria %q (the reply hint must not be read as part of it)", got)
	}
	brief.Constraints = []string{}
	if got := script.BriefList(req(brief), "constraints"); got == nil || len(got) != 0 {
		t.Errorf("no constraints read as %q", got)
	}
	if got := script.BriefField(&llm.Request{}, "objective"); got != "" {
		t.Errorf("a history without a brief has objective %q", got)
	}
}

func TestContactWithRole(t *testing.T) {
	system := "## 你的身份\n- ID：agent-3；岗位：developer；taskId：t\n- 父级：agent-1（lead）；完成后向 agent-1 汇报\n\n" +
		"## 联系人\n- agent-1（lead，parent）\n- agent-2（tester，preset）\n- 子级（reviewer）：已汇报 agent-5；未汇报 agent-6..agent-8\n\n## 岗位接口\n- tester：{}"
	for role, want := range map[string]string{"tester": "agent-2", "lead": "agent-1", "reviewer": "agent-5", "developer": ""} {
		if got := script.ContactWithRole(system, role); got != want {
			t.Errorf("ContactWithRole(%q) = %q, want %q", role, got, want)
		}
	}
	if got := script.Role(system); got != "developer" {
		t.Errorf("Role = %q", got)
	}
	if got := script.Parent(system); got != "agent-1" {
		t.Errorf("Parent = %q", got)
	}
}

func TestChecksFailABrokenPage(t *testing.T) {
	for _, c := range checks {
		if !c.ok(Page) {
			t.Errorf("the demo page fails %q", c.name)
		}
		if c.ok(`<!doctype html><form action="/calc"></form>`) {
			t.Errorf("a page with a form and no script passes %q", c.name)
		}
	}
}
