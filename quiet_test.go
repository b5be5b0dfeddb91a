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

// rootLeads is a script for root: on the user's requirement it creates a
// lead role and spawns the lead, whose brief starts its work.
var rootLeads = []llmtest.Rule{
	{Name: "root creates", Agent: as.RootID, LastContains: "【来自用户的消息】", Response: llmtest.Call("create_role", `{"name":"lead","rolePrompt":"lead"}`)},
	{Name: "root spawns", Agent: as.RootID, AfterTool: "create_role", Reply: func(req *llm.Request) (*llm.Response, error) {
		var role struct{ RoleID string }
		json.Unmarshal([]byte(lastToolResult(req)), &role)
		brief := `{"objective":"the requirement","constraints":[],"inputs":"the requirement","outputs":"the result","completion_criteria":"done"}`
		return call("s1", "spawn_agent", `{"roleId":"`+role.RoleID+`","taskBrief":`+brief+`,"end_turn":true}`), nil
	}},
}

// userInbox collects every message to user of s.
func userInbox(s *as.Society) chan as.Message {
	ch := make(chan as.Message, 16)
	s.OnUserMessage(func(m as.Message) { ch <- m })
	return ch
}

// TestQuietTaskIsReportedToUser: a lead that answers in prose instead of
// sending its result leaves its task quiet with the user unanswered; the
// user is told, once, by root, naming the lead and its words.
func TestQuietTaskIsReportedToUser(t *testing.T) {
	ctx := context.Background()
	const words = "The calculator is done: see the code above."
	model := llmtest.New(append(rootLeads,
		llmtest.Rule{Name: "lead answers in prose", LastContains: "task_assignment", Response: llmtest.Say(words)})...)
	s := newSociety(t, as.Config{Model: model})
	inbox := userInbox(s)
	task, err := s.SubmitRequirement(ctx, "a calculator")
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, inbox, "the quiet report")
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || m.From != as.RootID || m.Type != as.StatusReport || p.Status != as.StatusQuiet || m.TaskID != task {
		t.Fatalf("user got %+v (%s), want a quiet report from root on %s", m, m.Payload, task)
	}
	for _, want := range []string{task, "agent-1", "lead", words} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("the report lacks %q: %s", want, p.Text)
		}
	}
	waitQuiet(t, s) // a second report, if one were due, would be sent first
	closeSociety(t, s)
	select {
	case m := <-inbox:
		t.Errorf("a second message to user: %+v", m)
	default:
	}
}

// TestQuietTaskNamesTheAgentsThatHaveNotReported: a lead that spawns a
// worker, and a worker that ends its turn without a word, leave their task
// quiet with the user unanswered and nobody's words to show. The report
// names the agents of the task that have not reported, the lead first, and
// none of another task, whose agents have not reported either.
func TestQuietTaskNamesTheAgentsThatHaveNotReported(t *testing.T) {
	ctx := context.Background()
	model := llmtest.New(append(rootLeads,
		llmtest.Rule{Name: "lead creates", SystemContains: "lead", LastContains: "task_assignment", Response: llmtest.Call("create_role", `{"name":"worker","rolePrompt":"WORKER"}`)},
		llmtest.Rule{Name: "lead spawns", AfterTool: "create_role", Reply: func(req *llm.Request) (*llm.Response, error) {
			var role struct{ RoleID string }
			json.Unmarshal([]byte(lastToolResult(req)), &role)
			brief := `{"objective":"a part","constraints":[],"inputs":"x","outputs":"y","completion_criteria":"done"}`
			return call("s1", "spawn_agent", `{"roleId":"`+role.RoleID+`","taskBrief":`+brief+`,"end_turn":true}`), nil
		}},
		llmtest.Rule{Name: "worker is silent", SystemContains: "WORKER", Response: llmtest.Say("")},
	)...)
	s := newSociety(t, as.Config{Model: model})
	inbox := userInbox(s)
	// Of another task, and silent: a lead and its worker.
	bystander := actorOf(t, s, rootSpawn(t, s, "other", "bystander", "stand by", noop).ID)
	role, _, err := bystander.CreateRole(ctx, as.RoleSpec{Name: "helper"})
	if err != nil {
		t.Fatal(err)
	}
	other := spawnWith(t, s, bystander, role.ID, noop)
	task, err := s.SubmitRequirement(ctx, "a calculator")
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, inbox, "the quiet report")
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || p.Status != as.StatusQuiet || m.TaskID != task {
		t.Fatalf("user got %+v (%s), want a quiet report on %s", m, m.Payload, task)
	}
	var lead, worker string
	for _, a := range s.Agents() {
		switch {
		case a.TaskID == task && a.ParentID == as.RootID:
			lead = a.ID
		case a.TaskID == task:
			worker = a.ID
		}
	}
	l, w := strings.Index(p.Text, lead), strings.Index(p.Text, worker)
	if lead == "" || worker == "" || l < 0 || w < l {
		t.Errorf("the report does not name the lead %q, then the worker %q: %s", lead, worker, p.Text)
	}
	for _, id := range []string{bystander.ID(), other.ID()} {
		if strings.Contains(p.Text, id) {
			t.Errorf("the report names %s, of another task: %s", id, p.Text)
		}
	}
}

// TestQuietTaskThatAnsweredIsLeftAlone: a lead that asks a helper with a
// timeout keeps its task busy until the timeout answers; told of it, it
// answers the user, and the task goes quiet unreported.
func TestQuietTaskThatAnsweredIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	model := llmtest.New(append(rootLeads,
		llmtest.Rule{Name: "lead asks", LastContains: "task_assignment", Response: llmtest.Call("send_message",
			`{"to":"agent-1","message_type":"collaboration_request","payload":{"subtask_description":"help","timeout_seconds":0.05},"end_turn":true}`)},
		llmtest.Rule{Name: "lead answers", LastContains: "timeout", Response: llmtest.Call("send_message", `{"to":"user","payload":{"text":"done without help"},"end_turn":true}`)},
	)...)
	s := newSociety(t, as.Config{Model: model})
	inbox := userInbox(s)
	// A code-driven helper that never answers, on a task of its own: the
	// lead's request to it times out.
	root := actorOf(t, s, as.RootID).WithTask("elsewhere")
	role, _, _ := root.CreateRole(ctx, as.RoleSpec{Name: "helper"})
	if h, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: noop}); err != nil || h.ID != "agent-1" {
		t.Fatalf("the helper is %s, %v", h.ID, err)
	}
	if _, err := s.SubmitRequirement(ctx, "do it"); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, inbox, "the lead's answer"); m.Text() != "done without help" {
		t.Fatalf("user got %+v (%s), want the lead's answer after the timeout", m, m.Payload)
	}
	waitQuiet(t, s) // a report, if one were due, would be sent first
	closeSociety(t, s)
	select {
	case m := <-inbox:
		t.Errorf("a quiet report although the user was answered: %+v (%s)", m, m.Payload)
	default:
	}
}
