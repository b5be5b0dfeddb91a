package toolset_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
)

// quiet is a logger for tests: records are checked where they matter, not
// printed.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newSociety starts a society on cfg, closed when the test ends.
func newSociety(t testing.TB, cfg as.Config) *as.Society {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := as.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func validBrief() *as.TaskBrief {
	return &as.TaskBrief{
		Objective:          "build a calculator",
		Constraints:        []string{"HTML + JavaScript", "static page"},
		Inputs:             "numbers and operators typed by the user",
		Outputs:            "the result on the page",
		CompletionCriteria: "the four operations work",
	}
}

// briefTurn reports whether req is the first call of the turn a spawned
// agent's brief starts, which the scripts here leave idle.
func briefTurn(req *llm.Request) bool {
	last := req.Messages[len(req.Messages)-1]
	return last.Role == llm.RoleUser && strings.Contains(last.Content, "message_type: task_assignment")
}

// call is a model reply that makes one tool call.
func call(id, name, args string) *llm.Response {
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: name, Arguments: json.RawMessage(args)}}}}
}

// say is a model reply without a tool call: it ends the turn.
func say(text string) *llm.Response {
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: text}}
}

// lastToolResult is the tool result req ends with, if it ends with one.
func lastToolResult(req *llm.Request) string {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == llm.RoleTool {
		return req.Messages[n-1].Content
	}
	return ""
}
