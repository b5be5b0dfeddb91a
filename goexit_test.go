package agentsociety_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// A behaviour, or a model, that calls runtime.Goexit (t.FailNow in a test
// helper does) ends its handling as a panic does: with an error reported
// to the agent's parent. The agent goes on with its next message, and
// Close returns.
func TestHandlerGoexitIsReportedAndTheAgentGoesOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  as.Config
	}{
		{"behaviour", as.Config{Root: as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
			runtime.Goexit()
			return nil
		})}},
		{"model", as.Config{Model: llm.ModelFunc(func(context.Context, *llm.Request) (*llm.Response, error) {
			runtime.Goexit()
			return nil, nil
		})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runGoexitCase(t, tc.cfg)
		})
	}
}

// TestToolGoexitLeavesAWholeHistory: a host tool that calls runtime.Goexit
// ends the turn as a panic does, and the call it was given is answered, as
// failed, in the agent's history: a history with a tool call and no result
// is one models refuse, so every later turn of the agent would fail.
func TestToolGoexitLeavesAWholeHistory(t *testing.T) {
	var (
		mu     sync.Mutex
		broken []string // what the model found wrong in the requests it got
	)
	cfg := as.Config{
		Tools: []as.Tool{{Name: "boom", Description: "ends its goroutine", Handler: func(context.Context, *as.Actor, json.RawMessage) (any, error) {
			runtime.Goexit()
			return nil, nil
		}}},
		Model: llm.ModelFunc(func(_ context.Context, req *llm.Request) (*llm.Response, error) {
			answered := map[string]bool{}
			for _, m := range req.Messages {
				if m.Role == llm.RoleTool {
					answered[m.ToolCallID] = true
				}
			}
			for _, m := range req.Messages {
				for _, c := range m.ToolCalls {
					if !answered[c.ID] {
						mu.Lock()
						broken = append(broken, "call "+c.ID+" of "+c.Name+" has no result")
						mu.Unlock()
					}
				}
			}
			last := req.Messages[len(req.Messages)-1]
			if last.Role == llm.RoleUser && strings.Contains(last.Content, "first") {
				return llmtest.Calls(llm.ToolCall{ID: "c1", Name: "boom", Arguments: json.RawMessage(`{}`)}, llm.ToolCall{ID: "c2", Name: "boom", Arguments: json.RawMessage(`{}`)}), nil
			}
			runtime.Goexit() // the second message: report, as the first
			return nil, nil
		}),
	}
	runGoexitCase(t, cfg)
	mu.Lock()
	defer mu.Unlock()
	if len(broken) > 0 {
		t.Errorf("the second turn's history is not whole: %q", broken)
	}
}

// runGoexitCase submits two requirements to a society on cfg, whose root
// ends each handling with runtime.Goexit, and checks that each is reported
// to user as an error naming it, and that Close returns.
func runGoexitCase(t *testing.T, cfg as.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg.Logger = quiet
	s, err := as.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"first", "second"} {
		if _, err := s.SubmitRequirement(ctx, text); err != nil {
			t.Fatal(err)
		}
		m, err := s.WaitForUserMessage(ctx, nil)
		if err != nil {
			t.Fatalf("%s message: no report of the Goexit: %v", text, err)
		}
		var p as.StatusReportPayload
		if err := m.Decode(&p); err != nil || m.Type != as.StatusReport || p.Status != string(as.StatusError) || m.From != as.RootID {
			t.Fatalf("%s message: got %+v (%v), want an error status_report from root", text, m, err)
		}
		if !strings.Contains(p.Text, "runtime.Goexit") {
			t.Errorf("%s message: the report %q does not name runtime.Goexit", text, p.Text)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestPanicNilIsHandledOnce: under GODEBUG=panicnil=1 a behaviour's
// panic(nil) looks to recover like no panic at all, as runtime.Goexit
// does, but handle returns: the message is still handled once, by one
// drainer. The test runs itself again with the setting.
func TestPanicNilIsHandledOnce(t *testing.T) {
	if os.Getenv("AGENTSOCIETY_PANICNIL") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPanicNilIsHandledOnce$", "-test.v")
		cmd.Env = append(os.Environ(), "GODEBUG=panicnil=1", "AGENTSOCIETY_PANICNIL=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestPanicNilIsHandledOnce") {
			t.Fatalf("the test under GODEBUG=panicnil=1: %v\n%s", err, out)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := as.New(ctx, as.Config{Logger: quiet, Root: as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		if m.Text() == "first" {
			panic(nil)
		}
		return nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	first, err := s.SendTextToAgent(ctx, as.RootID, "first", "t")
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.SendTextToAgent(ctx, as.RootID, "second", "t")
	if err != nil {
		t.Fatal(err)
	}
	handled := map[string]int{}
	for e, err := range s.WatchEvents(ctx, 1) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Kind == as.EventMessageHandled {
			handled[e.Turn]++
		}
		if handled[second.ID] > 0 {
			break
		}
	}
	// Anything a second drainer did with the first message would follow
	// its first end: wait for the society to be idle, then count again.
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	handled = map[string]int{}
	for e, err := range s.Events(ctx, 1) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Kind == as.EventMessageHandled {
			handled[e.Turn]++
		}
	}
	if handled[first.ID] != 1 || handled[second.ID] != 1 {
		t.Errorf("message_handled events: %d for the message that panicked, %d for the next; want 1 each", handled[first.ID], handled[second.ID])
	}
}
