package demo

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/examples/internal/script"
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
	system := "base\n\n## 任务委托书\n" + as.FormatBrief(brief) + "\n\n## 联系人\n- agent-1（lead，parent）"
	if got := script.BriefList(system, "constraints"); !slices.Equal(got, brief.Constraints) {
		t.Errorf("constraints %q", got)
	}
	if got := script.BriefField(system, "objective"); got != "o" {
		t.Errorf("objective %q", got)
	}
	brief.Constraints = []string{}
	system = "## 任务委托书\n" + as.FormatBrief(brief)
	if got := script.BriefList(system, "constraints"); got == nil || len(got) != 0 {
		t.Errorf("no constraints read as %q", got)
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
