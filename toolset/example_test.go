package toolset_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
	"agentsociety/toolset"
)

// A lead writes the task's specification into the project state and
// delegates the work to a worker; the worker reads the specification,
// completes the task with its result, and the lead, told of the outcome,
// reports to user. Both agents are driven by a model, scripted here.
func Example() {
	ctx := context.Background()

	// The team's tools: the delegation and state tools, for its two roles.
	tools := append(toolset.Delegation(), toolset.State()...)
	for i := range tools {
		tools[i].Roles = []string{"lead", "worker"}
	}

	// Agents are numbered in the order they are made: the lead is agent-1,
	// the worker agent-2.
	model := llmtest.New(
		llmtest.Rule{Agent: "agent-1", LastContains: "start", Response: llmtest.Call("state_set",
			map[string]any{"key": "spec", "value": map[string]any{"chapters": 3}, "scope": "project"})},
		llmtest.Rule{Agent: "agent-1", AfterTool: "state_set", Response: llmtest.Call("delegate_task",
			map[string]any{"assignee": "agent-2", "description": "read the spec and count the chapters"})},
		llmtest.Rule{Agent: "agent-1", LastContains: "collaboration_response", Reply: func(req *llm.Request) (*llm.Response, error) {
			var outcome as.CollaborationResponsePayload
			if err := json.Unmarshal(payloadIn(req.Messages[len(req.Messages)-1].Content), &outcome); err != nil {
				return nil, err
			}
			return llmtest.Call("send_message", map[string]any{"to": as.UserID,
				"payload": map[string]string{"text": string(outcome.Status) + ": " + compact(outcome.ResultData)}}), nil
		}},

		llmtest.Rule{Agent: "agent-2", LastContains: "collaboration_request", Response: llmtest.Call("state_get",
			map[string]any{"key": "spec", "scope": "project"})},
		llmtest.Rule{Agent: "agent-2", AfterTool: "state_get", Reply: func(req *llm.Request) (*llm.Response, error) {
			var request as.CollaborationRequestPayload
			if err := json.Unmarshal(payloadIn(req.Messages[len(req.Messages)-3].Content), &request); err != nil {
				return nil, err // the request the worker is handling came three messages ago
			}
			var spec struct {
				Value json.RawMessage `json:"value"`
			}
			if err := json.Unmarshal([]byte(req.Messages[len(req.Messages)-1].Content), &spec); err != nil {
				return nil, err
			}
			return llmtest.Call("complete_task", map[string]any{"task_id": request.RequestID, "result": spec.Value}), nil
		}},

		// Everything else (a brief received, a tool's result): end the turn.
		llmtest.Rule{Response: llmtest.Say("ok")},
	)

	s, err := as.New(ctx, as.Config{Model: model, Tools: tools, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	defer s.Close(ctx)

	// The host makes the team: root spawns the lead, the lead the worker.
	root, err := s.Actor(as.RootID)
	if err != nil {
		panic(err)
	}
	lead := spawn(ctx, s, root.WithTask("thesis"), "lead")
	spawn(ctx, s, lead, "worker")

	if _, err := s.SendTextToAgent(ctx, lead.ID(), "start", ""); err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	reply, err := s.WaitForUserMessage(wctx, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(reply.From, "to user:", reply.Text())

	spec, _, err := lead.GetState("spec", as.ScopeProject)
	if err != nil {
		panic(err)
	}
	fmt.Println("spec:", string(spec.Value), "written by", spec.Writer)
	// Output:
	// agent-1 to user: completed: {"chapters":3}
	// spec: {"chapters":3} written by agent-1
}

// payloadIn is the JSON payload of a message as an agent reads it: the text
// from its first '{' to its last '}'.
func payloadIn(content string) []byte {
	i, j := strings.Index(content, "{"), strings.LastIndex(content, "}")
	if i < 0 || j < i {
		return nil
	}
	return []byte(content[i : j+1])
}

func compact(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}

// spawn has parent create a role and spawn an agent on it, and returns the
// agent's handle.
func spawn(ctx context.Context, s *as.Society, parent *as.Actor, role string) *as.Actor {
	r, _, err := parent.CreateRole(ctx, as.RoleSpec{Name: role})
	if err != nil {
		panic(err)
	}
	a, _, err := parent.SpawnAgent(ctx, as.SpawnSpec{RoleID: r.ID, Brief: &as.TaskBrief{
		Objective:          "count the chapters of the thesis",
		Constraints:        []string{},
		Inputs:             "the spec in the project state",
		Outputs:            "the count",
		CompletionCriteria: "the count is reported to user",
	}})
	if err != nil {
		panic(err)
	}
	x, err := s.Actor(a.ID)
	if err != nil {
		panic(err)
	}
	return x
}
