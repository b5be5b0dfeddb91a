package agentsociety_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
)

func TestToolLoopRootSpawnsLeadWhoAnswersUser(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var childFirst *llm.Request
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		last := lastToolResult(req)
		if req.Agent == as.RootID {
			switch {
			case last == "":
				return call("c1", "create_role", `{"name":"lead","rolePrompt":"Own the requirement; report to user."}`), nil
			case strings.Contains(last, `"roleId"`) && !strings.Contains(last, "agentId"):
				var r struct{ RoleID string }
				json.Unmarshal([]byte(last), &r)
				return call("c2", "spawn_agent", `{"roleId":"`+r.RoleID+`","parentAgentId":"root","taskBrief":{"objective":"calc","constraints":["static page"],"inputs":"req","outputs":"page","completion_criteria":"works","priority":"high"}}`), nil
			case strings.Contains(last, `"agentId"`):
				var r struct{ AgentID string }
				json.Unmarshal([]byte(last), &r)
				return call("c3", "send_message", `{"to":"`+r.AgentID+`","payload":"please build it"}`), nil
			default:
				return say("delegated"), nil
			}
		}
		mu.Lock()
		if childFirst == nil {
			cp := *req
			childFirst = &cp
		}
		mu.Unlock()
		if last == "" {
			return call("d1", "send_message", `{"to":"user","message_type":"status_report","payload":{"status":"done","text":"built"}}`), nil
		}
		return say(""), nil
	})
	s := newSociety(t, as.Config{Model: model})
	task, err := s.SubmitRequirement(ctx, "a calculator")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := s.WaitForUserMessage(wctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != as.StatusReport || m.Text() != "built" || m.TaskID != task || m.From != "agent-1" {
		t.Fatalf("user got %+v", m)
	}
	sys := childFirst.System
	for _, want := range []string{"agent-1", "lead", "root", task, "objective: calc", "  - static page", "priority: high", "Own the requirement"} {
		if !strings.Contains(sys, want) {
			t.Errorf("child's system prompt lacks %q:\n%s", want, sys)
		}
	}
	if got := childFirst.Messages[0].Content; got != "【来自 root（root）的消息】\nplease build it\n如需回复，请使用 send_message(to='root', ...)" {
		t.Errorf("child's first message = %q", got)
	}
}

func TestToolLoopBadArgumentsGetCodedResults(t *testing.T) {
	ctx := context.Background()
	results := make(chan string, 8)
	calls := []*llm.Response{
		call("1", "spawn_agent", `{"roleId": 7}`),
		call("2", "send_message", `not json`),
		call("3", "no_such_tool", `{}`),
		call("4", "spawn_agent", `{"roleId":"role-1","taskBrief":{"objective":"x"}}`),
		call("5", "send_message", `{"to":"agent-404","payload":{"text":"hi"}}`),
		say("giving up"),
	}
	var step int
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if r := lastToolResult(req); r != "" {
			results <- r
		}
		step++
		return calls[step-1], nil
	})
	s := newSociety(t, as.Config{Model: model})
	if _, err := s.SubmitRequirement(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"error":"invalid_argument"`, `"error":"invalid_argument"`, `"error":"unknown_tool"`, `"missing_fields":["constraints","inputs","outputs","completion_criteria"]`, `"error":"agent_not_found"`} {
		select {
		case got := <-results:
			if !strings.Contains(got, want) {
				t.Errorf("tool result %s lacks %s", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no tool result")
		}
	}
}

func TestToolLoopStepLimitIsReportedToParent(t *testing.T) {
	ctx := context.Background()
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		return call("x", "list_contacts", `{}`), nil
	})
	s := newSociety(t, as.Config{Model: model, MaxSteps: 3})
	if _, err := s.SubmitRequirement(ctx, "loop forever"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := s.WaitForUserMessage(wctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != as.StatusReport || !strings.Contains(m.Text(), "step_limit") {
		t.Fatalf("user got %+v", m)
	}
}

func TestToolLoopTransientFailureIsRetriedThenReported(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	calls := 0
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return nil, llm.ErrRateLimited
	})
	s := newSociety(t, as.Config{Model: model, ModelRetries: 2, RetryBackoff: time.Millisecond})
	if _, err := s.SubmitRequirement(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := s.WaitForUserMessage(wctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 3 || !strings.Contains(m.Text(), "model_error") {
		t.Fatalf("calls = %d, report %q; want 3 calls and a model_error report", calls, m.Text())
	}
}
