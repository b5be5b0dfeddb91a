package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	as "agentsociety"
	"agentsociety/llm"
)

// TestHostToolErrorsKeepTheirCode checks that a host tool's coded error
// reaches the model with its code, whether returned as is, wrapped, or as a
// bare Code.
func TestHostToolErrorsKeepTheirCode(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		code string
	}{
		"error":   {&as.Error{Code: as.ErrRoleNotFound, Message: "no such role"}, "role_not_found"},
		"wrapped": {fmt.Errorf("lookup: %w", &as.Error{Code: as.ErrAgentNotFound, Message: "gone"}), "agent_not_found"},
		"code":    {as.ErrArtifactNotFound, "artifact_not_found"},
		"plain":   {errors.New("disk on fire"), "tool_failed"},
	} {
		t.Run(name, func(t *testing.T) {
			results := make(chan string, 1)
			model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
				if r := lastToolResult(req); r != "" {
					results <- r
					return say(""), nil
				}
				return call("c", "lookup", `{}`), nil
			})
			s := newSociety(t, as.Config{Model: model, Tools: []as.Tool{{
				Name: "lookup", Description: "looks up",
				Handler: func(context.Context, *as.Actor, json.RawMessage) (any, error) { return nil, tc.err },
			}}})
			if _, err := s.SubmitRequirement(context.Background(), "x"); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-results:
				if !strings.Contains(r, `"error":"`+tc.code+`"`) {
					t.Fatalf("tool result %s, want code %s", r, tc.code)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no tool result")
			}
		})
	}
}

func TestNewRejectsARuntimeTemplateThatCannotRun(t *testing.T) {
	_, err := as.New(context.Background(), as.Config{Logger: quiet, Prompts: fstest.MapFS{
		"runtime.tmpl": {Data: []byte("{{.Nope}}")},
	}})
	if err == nil || !strings.Contains(err.Error(), "runtime.tmpl") {
		t.Fatalf("New = %v, want an error naming runtime.tmpl", err)
	}
}
