package agentsociety_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// TestTasks: Society.Tasks reports each task's state: running while a
// model call of it is in flight, done once its lead reported to user,
// stuck once it went quiet unanswered, out of budget once its budget ran
// out; with what each spent.
func TestTasks(t *testing.T) {
	ctx := context.Background()
	release, started := make(chan struct{}), make(chan struct{}, 1)
	rules := []llmtest.Rule{
		rootLeads[0],
		// The lead's brief carries the requirement, whose marker the
		// rules below match.
		{Name: "root spawns", Agent: as.RootID, AfterTool: "create_role", Reply: func(req *llm.Request) (*llm.Response, error) {
			var role struct{ RoleID string }
			json.Unmarshal([]byte(lastToolResult(req)), &role)
			var text string
			for _, m := range req.Messages {
				if m.Role == llm.RoleUser {
					text = strings.TrimPrefix(m.Content, "【来自用户的消息】\n") // the turn's requirement
				}
			}
			b, _ := json.Marshal(map[string]any{"roleId": role.RoleID, "end_turn": true, "taskBrief": map[string]any{
				"objective": "x", "constraints": []string{}, "inputs": text, "outputs": "o", "completion_criteria": "c"}})
			return call("s1", "spawn_agent", string(b)), nil
		}},
	}
	rules = append(rules,
		llmtest.Rule{Name: "done", LastContains: "REQ-DONE", Response: llmtest.Call("send_message", `{"to":"user","message_type":"status_report","payload":{"status":"done","text":"here it is"},"end_turn":true}`)},
		llmtest.Rule{Name: "stuck", LastContains: "REQ-STUCK", Response: llmtest.Say("I wrote it above.")},
		llmtest.Rule{Name: "running", LastContains: "REQ-RUN", Reply: func(*llm.Request) (*llm.Response, error) {
			started <- struct{}{}
			<-release
			return llmtest.Say(""), nil
		}},
		llmtest.Rule{Name: "busy", LastContains: "REQ-BUDGET", Response: llmtest.Call("console_print", `{"text":"x"}`)},
		llmtest.Rule{Name: "busy on", AfterTool: "console_print", Response: llmtest.Call("console_print", `{"text":"x"}`)},
	)
	model := llmtest.New(rules...)
	s := newSociety(t, as.Config{Model: model, MaxSteps: 50})
	inbox := userInbox(s)
	submit := func(text string, opts ...as.RequirementOption) string {
		task, err := s.SubmitRequirement(ctx, text, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	done := submit("REQ-DONE")
	recv(t, inbox, "the done task's answer")
	stuck := submit("REQ-STUCK")
	recv(t, inbox, "the stuck task's quiet report")
	out := submit("REQ-BUDGET", as.WithBudget(as.Budget{ModelCalls: 4}))
	recv(t, inbox, "the budget report")
	running := submit("REQ-RUN")
	recv(t, started, "the running task's call")
	want := map[string]as.TaskState{done: as.TaskDone, stuck: as.TaskStuck, out: as.TaskOutOfBudget, running: as.TaskRunning}
	// An answer reaches user before the turn that sent it ends: wait for
	// the turns to end.
	waitFor(t, "the tasks' states", func() bool {
		for _, ti := range s.Tasks() {
			if ti.State != want[ti.ID] {
				return false
			}
		}
		return true
	})
	got := s.Tasks()
	if len(got) != len(want) {
		t.Fatalf("%d tasks, want %d: %+v", len(got), len(want), got)
	}
	for _, ti := range got {
		if ti.State != want[ti.ID] || !strings.HasPrefix(ti.Lead, "agent-") {
			t.Errorf("task %s is %s with lead %q, want %s", ti.ID, ti.State, ti.Lead, want[ti.ID])
		}
		if ti.ID == out && ti.Usage.ModelCalls != 4 {
			t.Errorf("the task out of budget spent %d calls, want 4", ti.Usage.ModelCalls)
		}
	}
	close(release)
}
