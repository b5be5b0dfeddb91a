package llmtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

func user(text string) llm.Message { return llm.Message{Role: llm.RoleUser, Content: text} }

func assistant(calls ...llm.ToolCall) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, ToolCalls: calls}
}

func result(id, text string) llm.Message {
	return llm.Message{Role: llm.RoleTool, ToolCallID: id, Content: text}
}

func call(id, name string) llm.ToolCall {
	return llm.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(`{}`)}
}

// generate calls m and fails the test on error.
func generate(t *testing.T, m *llmtest.Model, req *llm.Request) *llm.Response {
	t.Helper()
	resp, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return resp
}

func TestMatchers(t *testing.T) {
	base := llm.Request{
		Agent:    "agent-7",
		System:   "You are agent-7, a developer. Write the page.",
		Messages: []llm.Message{user("hello"), user("please build the page")},
	}
	// after returns base ending with msgs.
	after := func(msgs ...llm.Message) llm.Request {
		r := base
		r.Messages = append([]llm.Message{user("hello")}, msgs...)
		return r
	}
	tests := []struct {
		name string
		rule llmtest.Rule
		req  llm.Request
		want bool
	}{
		{"no matchers", llmtest.Rule{}, base, true},
		{"no matchers, empty request", llmtest.Rule{}, llm.Request{}, true},

		{"Agent equal", llmtest.Rule{Agent: "agent-7"}, base, true},
		{"Agent differs", llmtest.Rule{Agent: "agent-8"}, base, false},
		{"Agent is not a substring match", llmtest.Rule{Agent: "agent"}, base, false},

		{"SystemContains present", llmtest.Rule{SystemContains: "a developer"}, base, true},
		{"SystemContains absent", llmtest.Rule{SystemContains: "a tester"}, base, false},

		{"LastContains in last", llmtest.Rule{LastContains: "build"}, base, true},
		{"LastContains only in earlier message", llmtest.Rule{LastContains: "hello"}, base, false},
		{"LastContains only in system", llmtest.Rule{LastContains: "Write"}, base, false},
		{"LastContains, no messages", llmtest.Rule{LastContains: "x"}, llm.Request{Agent: "a"}, false},
		{"LastContains, tool result", llmtest.Rule{LastContains: "42"},
			after(assistant(call("c1", "calc")), result("c1", "it is 42")), true},

		{"AfterTool, result of preceding call", llmtest.Rule{AfterTool: "search"},
			after(assistant(call("c1", "search")), result("c1", "found")), true},
		{"AfterTool, second call of the message", llmtest.Rule{AfterTool: "read"},
			after(assistant(call("c1", "search"), call("c2", "read")), result("c1", "found"), result("c2", "text")), true},
		{"AfterTool, other tool's result", llmtest.Rule{AfterTool: "search"},
			after(assistant(call("c1", "search"), call("c2", "read")), result("c1", "found"), result("c2", "text")), false},
		{"AfterTool, call in an earlier assistant message", llmtest.Rule{AfterTool: "search"},
			after(assistant(call("c1", "search")), user("meanwhile"), assistant(call("c2", "read")), result("c1", "late")), true},
		{"AfterTool, newest call with the id wins", llmtest.Rule{AfterTool: "search"},
			after(assistant(call("c1", "read")), result("c1", "x"), assistant(call("c1", "search")), result("c1", "y")), true},
		{"AfterTool, newest call with the id wins (other name)", llmtest.Rule{AfterTool: "read"},
			after(assistant(call("c1", "read")), result("c1", "x"), assistant(call("c1", "search")), result("c1", "y")), false},
		{"AfterTool, unknown id", llmtest.Rule{AfterTool: "search"},
			after(assistant(call("c1", "search")), result("c9", "found")), false},
		{"AfterTool, id only on a non-assistant message", llmtest.Rule{AfterTool: "search"},
			after(llm.Message{Role: llm.RoleUser, ToolCalls: []llm.ToolCall{call("c1", "search")}}, result("c1", "found")), false},
		{"AfterTool, last message not a tool result", llmtest.Rule{AfterTool: "search"},
			after(assistant(call("c1", "search")), result("c1", "found"), user("thanks")), false},
		{"AfterTool, no messages", llmtest.Rule{AfterTool: "search"}, llm.Request{}, false},

		{"When true", llmtest.Rule{When: func(r *llm.Request) bool { return len(r.Messages) == 2 }}, base, true},
		{"When false", llmtest.Rule{When: func(r *llm.Request) bool { return len(r.Messages) == 3 }}, base, false},

		{"all matchers hold", llmtest.Rule{Agent: "agent-7", SystemContains: "developer", LastContains: "found", AfterTool: "search",
			When: func(*llm.Request) bool { return true }},
			after(assistant(call("c1", "search")), result("c1", "found")), true},
		{"one matcher of several fails", llmtest.Rule{Agent: "agent-7", SystemContains: "developer", LastContains: "found", AfterTool: "search",
			When: func(*llm.Request) bool { return false }},
			after(assistant(call("c1", "search")), result("c1", "found")), false},
		{"Agent fails, others hold", llmtest.Rule{Agent: "agent-8", SystemContains: "developer", LastContains: "build"}, base, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rule := tt.rule
			rule.Response = llmtest.Say("matched")
			m := llmtest.New(rule)
			req := tt.req
			resp, err := m.Generate(context.Background(), &req)
			switch {
			case tt.want && err != nil:
				t.Fatalf("rule did not match: %v", err)
			case tt.want && resp.Message.Content != "matched":
				t.Fatalf("reply = %q, want %q", resp.Message.Content, "matched")
			case !tt.want && !errors.Is(err, llmtest.ErrNoRule):
				t.Fatalf("rule matched: reply %+v, err %v", resp, err)
			}
		})
	}
}

func TestRuleOrderAndTimes(t *testing.T) {
	m := llmtest.New(
		llmtest.Rule{Name: "specific", Agent: "a", Response: llmtest.Say("specific")},
		llmtest.Rule{Name: "once", Times: 1, Response: llmtest.Say("once")},
		llmtest.Rule{Name: "twice", Times: 2, Response: llmtest.Say("twice")},
		llmtest.Rule{Name: "forever", Response: llmtest.Say("forever")},
	)
	var got []string
	for range 5 {
		got = append(got, generate(t, m, &llm.Request{Agent: "b"}).Message.Content)
	}
	if want := []string{"once", "twice", "twice", "forever", "forever"}; !reflect.DeepEqual(got, want) {
		t.Errorf("replies = %q, want %q", got, want)
	}
	if got := generate(t, m, &llm.Request{Agent: "a"}).Message.Content; got != "specific" {
		t.Errorf("reply = %q, want specific", got)
	}

	// Order, not specificity, decides: a catch-all listed first shadows
	// every later rule.
	m = llmtest.New(
		llmtest.Rule{Response: llmtest.Say("catch-all")},
		llmtest.Rule{Agent: "a", Response: llmtest.Say("specific")},
	)
	if got := generate(t, m, &llm.Request{Agent: "a"}).Message.Content; got != "catch-all" {
		t.Errorf("reply = %q, want catch-all", got)
	}
}

// A used-up rule is skipped, not a dead end: the next matching rule answers.
func TestTimesFallsThroughToLaterRule(t *testing.T) {
	m := llmtest.New(
		llmtest.Rule{Agent: "a", Times: 1, Response: llmtest.Call("plan", nil)},
		llmtest.Rule{Agent: "b", Response: llmtest.Say("b")},
		llmtest.Rule{Agent: "a", Response: llmtest.Say("done")},
	)
	if got := generate(t, m, &llm.Request{Agent: "a"}).Message.ToolCalls[0].Name; got != "plan" {
		t.Errorf("first call: tool %q, want plan", got)
	}
	if got := generate(t, m, &llm.Request{Agent: "b"}).Message.Content; got != "b" {
		t.Errorf("other agent: %q, want b", got)
	}
	if got := generate(t, m, &llm.Request{Agent: "a"}).Message.Content; got != "done" {
		t.Errorf("second call: %q, want done", got)
	}
}

func TestErrNoRuleMessage(t *testing.T) {
	m := llmtest.New(
		llmtest.Rule{Name: "first", AfterTool: "search", Times: 1, Response: llmtest.Say("ok")},
		llmtest.Rule{AfterTool: "search", Times: 2, Err: llm.ErrServer},
		llmtest.Rule{Agent: "nobody", Response: llmtest.Say("no")},
	)
	req := &llm.Request{Agent: "lead-1", Messages: []llm.Message{
		user("find it"), assistant(call("call_1", "search")), result("call_1", "no results"),
	}}
	generate(t, m, req)
	for range 2 {
		if _, err := m.Generate(context.Background(), req); !errors.Is(err, llm.ErrServer) {
			t.Fatalf("Err rule: err = %v, want ErrServer", err)
		}
	}

	tests := []struct {
		name string
		req  *llm.Request
		want string
	}{
		{"tool result, rules used up", req,
			`llmtest: no rule matches the request: agent "lead-1", last message (tool result of search "call_1") "no results"; ` +
				`matching but used up: rule "first" (Times 1), rule[1] (Times 2)`},
		{"user message", &llm.Request{Agent: "dev-2", Messages: []llm.Message{user("hi\nthere")}},
			`llmtest: no rule matches the request: agent "dev-2", last message (user) "hi\nthere"`},
		{"no messages", &llm.Request{Agent: "dev-2"},
			`llmtest: no rule matches the request: agent "dev-2", no messages`},
		{"assistant message with calls", &llm.Request{Agent: "x", Messages: []llm.Message{assistant(call("1", "a"), call("2", "b"))}},
			`llmtest: no rule matches the request: agent "x", last message (assistant calling a, b) ""`},
		{"result of an unknown call", &llm.Request{Agent: "x", Messages: []llm.Message{result("c7", "?")}},
			`llmtest: no rule matches the request: agent "x", last message (tool result of an unknown call "c7") "?"`},
		{"long message is clipped", &llm.Request{Agent: "x", Messages: []llm.Message{user(strings.Repeat("é", 150))}},
			`llmtest: no rule matches the request: agent "x", last message (user) "` + strings.Repeat("é", 100) + `…"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Generate(context.Background(), tt.req)
			if !errors.Is(err, llmtest.ErrNoRule) {
				t.Fatalf("err = %v, want ErrNoRule", err)
			}
			if err.Error() != tt.want {
				t.Errorf("message:\n got %s\nwant %s", err, tt.want)
			}
		})
	}
}

func TestFallback(t *testing.T) {
	m := llmtest.New(llmtest.Rule{Agent: "a", Response: llmtest.Say("rule")})
	m.Fallback = func(req *llm.Request) (*llm.Response, error) {
		return llmtest.Say("fallback for " + req.Agent), nil
	}
	if got := generate(t, m, &llm.Request{Agent: "a"}).Message.Content; got != "rule" {
		t.Errorf("matching request: %q, want rule", got)
	}
	if got := generate(t, m, &llm.Request{Agent: "b"}).Message.Content; got != "fallback for b" {
		t.Errorf("unmatched request: %q, want fallback for b", got)
	}
}

func TestZeroModel(t *testing.T) {
	var m llmtest.Model
	if _, err := m.Generate(context.Background(), &llm.Request{Agent: "a"}); !errors.Is(err, llmtest.ErrNoRule) {
		t.Errorf("err = %v, want ErrNoRule", err)
	}
	m.Fallback = func(*llm.Request) (*llm.Response, error) { return llmtest.Say("ok"), nil }
	if got := generate(t, &m, &llm.Request{}).Message.Content; got != "ok" {
		t.Errorf("reply = %q, want ok", got)
	}
	if m.Calls() != 2 {
		t.Errorf("Calls = %d, want 2", m.Calls())
	}
}

func TestNilRequest(t *testing.T) {
	m := llmtest.New(llmtest.Rule{Response: llmtest.Say("x")})
	if _, err := m.Generate(context.Background(), nil); !errors.Is(err, llm.ErrBadRequest) {
		t.Errorf("err = %v, want ErrBadRequest", err)
	}
	if m.Calls() != 0 {
		t.Errorf("Calls = %d, want 0", m.Calls())
	}
}

func TestErrRule(t *testing.T) {
	boom := errors.New("boom")
	m := llmtest.New(
		llmtest.Rule{Name: "flaky", Times: 1, Err: boom},
		llmtest.Rule{Response: llmtest.Say("recovered")},
	)
	_, err := m.Generate(context.Background(), &llm.Request{})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `rule "flaky"`) {
		t.Errorf("err = %v, want one wrapping boom and naming the rule", err)
	}
	if got := generate(t, m, &llm.Request{}).Message.Content; got != "recovered" {
		t.Errorf("retry: %q, want recovered", got)
	}
}

func TestReply(t *testing.T) {
	shared := llmtest.Call("echo", nil)
	m := llmtest.New(
		llmtest.Rule{Agent: "echo", Reply: func(req *llm.Request) (*llm.Response, error) {
			req.Messages[0].Content = "changed by Reply" // must not reach the record or the caller
			return shared, nil
		}},
		llmtest.Rule{Agent: "fail", Reply: func(*llm.Request) (*llm.Response, error) { return nil, llm.ErrAuth }},
		llmtest.Rule{Name: "empty", Agent: "empty", Reply: func(*llm.Request) (*llm.Response, error) { return nil, nil }},
		llmtest.Rule{Agent: "norole", Reply: func(*llm.Request) (*llm.Response, error) {
			return &llm.Response{Message: llm.Message{Content: "x"}}, nil
		}},
	)

	req := &llm.Request{Agent: "echo", Messages: []llm.Message{user("original")}}
	resp := generate(t, m, req)
	if req.Messages[0].Content != "original" || m.Requests()[0].Messages[0].Content != "original" {
		t.Errorf("Reply's change leaked: caller %q, record %q", req.Messages[0].Content, m.Requests()[0].Messages[0].Content)
	}
	if resp == shared || resp.Message.ToolCalls[0].ID != "call_1" || shared.Message.ToolCalls[0].ID != "" {
		t.Errorf("Reply's response not copied before ids were filled in: got %+v, shared %+v", resp, shared)
	}

	if _, err := m.Generate(context.Background(), &llm.Request{Agent: "fail"}); !errors.Is(err, llm.ErrAuth) {
		t.Errorf("Reply error: %v, want ErrAuth", err)
	}
	_, err := m.Generate(context.Background(), &llm.Request{Agent: "empty"})
	if err == nil || !strings.Contains(err.Error(), `rule "empty" returned neither a response nor an error`) {
		t.Errorf("nil, nil Reply: err = %v", err)
	}
	if got := generate(t, m, &llm.Request{Agent: "norole"}).Message.Role; got != llm.RoleAssistant {
		t.Errorf("empty Role became %q, want assistant", got)
	}
}

func TestFailNext(t *testing.T) {
	m := llmtest.New(
		llmtest.Rule{Name: "once", Times: 1, Response: llmtest.Say("first")},
		llmtest.Rule{Response: llmtest.Say("later")},
	)
	m.FailNext(2, llm.ErrRateLimited)
	m.FailNext(1, nil)
	m.FailNext(0, llm.ErrAuth) // queues nothing
	m.FailNext(-1, llm.ErrAuth)

	ctx := context.Background()
	for i, want := range []error{llm.ErrRateLimited, llm.ErrRateLimited, llm.ErrServer} {
		_, err := m.Generate(ctx, &llm.Request{Agent: fmt.Sprint("agent-", i)})
		if !errors.Is(err, want) || !llm.IsTransient(err) {
			t.Fatalf("call %d: err = %v, want %v", i, err, want)
		}
	}
	// The failures came before the rules: the Times-1 rule is still unused.
	if got := generate(t, m, &llm.Request{}).Message.Content; got != "first" {
		t.Errorf("after failures: %q, want first", got)
	}
	if got := generate(t, m, &llm.Request{}).Message.Content; got != "later" {
		t.Errorf("then: %q, want later", got)
	}
	if m.Calls() != 5 || len(m.RequestsFor("agent-2")) != 1 {
		t.Errorf("Calls = %d, RequestsFor(agent-2) = %d; want the failed calls recorded", m.Calls(), len(m.RequestsFor("agent-2")))
	}
}

func TestContextDoneAtEntry(t *testing.T) {
	m := llmtest.New(llmtest.Rule{Times: 1, Response: llmtest.Say("ok")})
	m.FailNext(1, llm.ErrServer)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Generate(ctx, &llm.Request{Agent: "a"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if m.Calls() != 1 {
		t.Errorf("Calls = %d, want the cancelled call recorded", m.Calls())
	}
	// Neither the queued failure nor the rule was consumed.
	if _, err := m.Generate(context.Background(), &llm.Request{}); !errors.Is(err, llm.ErrServer) {
		t.Errorf("queued failure: err = %v", err)
	}
	if got := generate(t, m, &llm.Request{}).Message.Content; got != "ok" {
		t.Errorf("rule: %q, want ok", got)
	}
}

func TestDelayHonoursContext(t *testing.T) {
	m := llmtest.New(llmtest.Rule{Times: 1, Response: llmtest.Say("slow")}, llmtest.Rule{Response: llmtest.Say("next")})
	m.Delay = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.Generate(ctx, &llm.Request{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Generate returned after %v, want soon after the deadline", d)
	}
	// The interrupted call had been given its reply, which stays consumed.
	m.Delay = 0
	if got := generate(t, m, &llm.Request{}).Message.Content; got != "next" {
		t.Errorf("after interrupted call: %q, want next", got)
	}
}

func TestDelayAndMaxInFlight(t *testing.T) {
	const callers = 8
	const delay = 200 * time.Millisecond

	// run has callers goroutines call m at once, each through limit.
	run := func(m *llmtest.Model, limit chan struct{}) time.Duration {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				<-start
				limit <- struct{}{}
				defer func() { <-limit }()
				if _, err := m.Generate(context.Background(), &llm.Request{Agent: fmt.Sprint("agent-", i)}); err != nil {
					t.Error(err)
				}
			})
		}
		begin := time.Now()
		close(start)
		wg.Wait()
		return time.Since(begin)
	}

	t.Run("uncapped", func(t *testing.T) {
		m := llmtest.New(llmtest.Rule{Response: llmtest.Say("ok")})
		m.Delay = delay
		took := run(m, make(chan struct{}, callers))
		if got := m.MaxInFlight(); got != callers {
			t.Errorf("MaxInFlight = %d, want %d", got, callers)
		}
		if took < delay || took >= callers*delay {
			t.Errorf("%d calls of %v took %v, want them to overlap", callers, delay, took)
		}
	})
	t.Run("capped at 3", func(t *testing.T) {
		m := llmtest.New(llmtest.Rule{Response: llmtest.Say("ok")})
		m.Delay = delay
		took := run(m, make(chan struct{}, 3))
		if got := m.MaxInFlight(); got != 3 {
			t.Errorf("MaxInFlight = %d, want 3", got)
		}
		if took < 3*delay { // ceil(8/3) rounds of delay
			t.Errorf("took %v, want at least %v", took, 3*delay)
		}
	})
	// Without timing: a Reply that blocks holds every call in flight.
	t.Run("blocking Reply", func(t *testing.T) {
		var arrived sync.WaitGroup
		arrived.Add(callers)
		release := make(chan struct{})
		m := llmtest.New(llmtest.Rule{Reply: func(*llm.Request) (*llm.Response, error) {
			arrived.Done()
			<-release
			return llmtest.Say("ok"), nil
		}})
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				if _, err := m.Generate(context.Background(), &llm.Request{}); err != nil {
					t.Error(err)
				}
			})
		}
		arrived.Wait()
		if got := m.MaxInFlight(); got != callers {
			t.Errorf("MaxInFlight = %d, want %d", got, callers)
		}
		close(release)
		wg.Wait()
	})
}

func TestRecordedRequestsAreCopies(t *testing.T) {
	newReq := func() *llm.Request {
		return &llm.Request{
			Agent:  "a",
			System: "system",
			Messages: []llm.Message{
				user("hello"),
				{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "t", Arguments: json.RawMessage(`{"k":1}`)}}},
				result("c1", "done"),
			},
			Tools: []llm.Tool{{Name: "t", Description: "d", Parameters: json.RawMessage(`{"type":"object"}`)}},
		}
	}
	m := llmtest.New(llmtest.Rule{When: func(r *llm.Request) bool {
		r.Tools[0].Name = "changed by When"
		return true
	}, Response: llmtest.Say("ok")})
	req := newReq()
	generate(t, m, req)

	// The caller reuses and changes everything it passed.
	req.System = "changed"
	req.Messages[0].Content = "changed"
	req.Messages[1].ToolCalls[0].Arguments[2] = 'X'
	req.Messages[1].ToolCalls[0].Name = "changed"
	req.Tools[0].Parameters[2] = 'X'
	req.Messages = append(req.Messages, user("appended"))

	got := m.Requests()
	if want := []llm.Request{*newReq()}; !reflect.DeepEqual(got, want) {
		t.Fatalf("record changed:\n got %+v\nwant %+v", got, want)
	}

	// Changing what Requests returned does not change the record either.
	got[0].Messages[1].ToolCalls[0].Arguments[2] = 'Y'
	got[0].Tools[0].Parameters[2] = 'Y'
	got[0].Messages[0].Content = "changed"
	if again := m.RequestsFor("a"); !reflect.DeepEqual(again, []llm.Request{*newReq()}) {
		t.Fatalf("record changed through Requests:\n got %+v", again)
	}
}

func TestResponsesAreCopiesWithFreshIDs(t *testing.T) {
	static := llmtest.Calls(
		llm.ToolCall{Name: "a", Arguments: json.RawMessage(`{}`)},
		llm.ToolCall{ID: "mine", Name: "b"},
		llm.ToolCall{Name: "c"},
	)
	m := llmtest.New(
		llmtest.Rule{Agent: "one", Response: llmtest.Call("search", map[string]string{"q": "x"})},
		llmtest.Rule{Agent: "many", Response: static},
	)
	var ids []string
	for range 3 {
		resp := generate(t, m, &llm.Request{Agent: "one"})
		ids = append(ids, resp.Message.ToolCalls[0].ID)
		// A caller changing its reply does not change the next one.
		resp.Message.ToolCalls[0].Arguments[2] = 'X'
		resp.Message.ToolCalls[0].Name = "changed"
	}
	resp := generate(t, m, &llm.Request{Agent: "many"})
	for _, c := range resp.Message.ToolCalls {
		ids = append(ids, c.ID)
	}
	if want := []string{"call_1", "call_2", "call_3", "call_4", "mine", "call_5"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("ids = %q, want %q", ids, want)
	}
	if static.Message.ToolCalls[0].ID != "" || static.Message.ToolCalls[2].ID != "" {
		t.Errorf("static Response was given ids: %+v", static.Message.ToolCalls)
	}
	last := generate(t, m, &llm.Request{Agent: "one"}).Message.ToolCalls[0]
	if last.Name != "search" || string(last.Arguments) != `{"q":"x"}` || last.ID != "call_6" {
		t.Errorf("reply after caller's changes = %+v", last)
	}
}

func TestUsage(t *testing.T) {
	m := llmtest.New(
		llmtest.Rule{Agent: "say", Response: llmtest.Say("0123456789ab")},
		llmtest.Rule{Agent: "call", Response: llmtest.Call("read", `{"a":1}`)},
		llmtest.Rule{Agent: "fixed", Response: &llm.Response{
			Message: llm.Message{Role: llm.RoleAssistant, Content: "x"},
			Usage:   llm.Usage{InputTokens: 1000, OutputTokens: 7},
		}},
	)
	req := func(agent string) *llm.Request {
		return &llm.Request{
			Agent:  agent,
			System: "abcdefgh", // 8
			Messages: []llm.Message{
				user("1234"), // 4
				{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c", Name: "read", Arguments: json.RawMessage(`{"a":1}`)}}}, // 4+7
				result("c", "xyz"), // 3
			},
			Tools: []llm.Tool{{Name: "not counted", Parameters: json.RawMessage(`{"type":"object"}`)}},
		}
	}
	tests := []struct {
		agent string
		want  llm.Usage
	}{
		{"say", llm.Usage{InputTokens: 26 / 4, OutputTokens: 12 / 4}},
		{"call", llm.Usage{InputTokens: 26 / 4, OutputTokens: 11 / 4}},
		{"fixed", llm.Usage{InputTokens: 1000, OutputTokens: 7}},
	}
	for _, tt := range tests {
		if got := generate(t, m, req(tt.agent)).Usage; got != tt.want {
			t.Errorf("%s: Usage = %+v, want %+v", tt.agent, got, tt.want)
		}
	}
}

func TestCallArguments(t *testing.T) {
	type args struct {
		Path string `json:"path"`
	}
	tests := []struct {
		name string
		args any
		want string
	}{
		{"struct", args{Path: "/a"}, `{"path":"/a"}`},
		{"map", map[string]int{"n": 1}, `{"n":1}`},
		{"nil", nil, `{}`},
		{"json.RawMessage", json.RawMessage(`{"raw": true}`), `{"raw": true}`},
		{"[]byte", []byte(`{"b":1}`), `{"b":1}`},
		{"string", `{"s": "t"}`, `{"s": "t"}`},
		{"malformed string", `{"unterminated`, `{"unterminated`},
	}
	for _, tt := range tests {
		resp := llmtest.Call("tool", tt.args)
		msg := resp.Message
		if msg.Role != llm.RoleAssistant || msg.Content != "" || len(msg.ToolCalls) != 1 ||
			msg.ToolCalls[0].Name != "tool" || msg.ToolCalls[0].ID != "" || string(msg.ToolCalls[0].Arguments) != tt.want {
			t.Errorf("%s: Call = %+v, want arguments %s", tt.name, msg, tt.want)
		}
	}

	raw := json.RawMessage(`{"k":1}`)
	resp := llmtest.Call("tool", raw)
	raw[2] = 'X'
	if string(resp.Message.ToolCalls[0].Arguments) != `{"k":1}` {
		t.Errorf("Call kept the caller's RawMessage: %s", resp.Message.ToolCalls[0].Arguments)
	}

	defer func() {
		if recover() == nil {
			t.Error("Call with unmarshallable args did not panic")
		}
	}()
	llmtest.Call("tool", make(chan int))
}

func TestSay(t *testing.T) {
	want := &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "hi"}}
	if got := llmtest.Say("hi"); !reflect.DeepEqual(got, want) {
		t.Errorf("Say = %+v, want %+v", got, want)
	}
}

func TestNewPanicsOnBadRule(t *testing.T) {
	tests := []struct {
		name string
		rule llmtest.Rule
		want string
	}{
		{"no reply", llmtest.Rule{Name: "r"}, `rule "r" sets 0 of Reply, Response and Err`},
		{"two replies", llmtest.Rule{Response: llmtest.Say("x"), Err: llm.ErrServer}, `rule[1] sets 2 of Reply, Response and Err`},
		{"negative Times", llmtest.Rule{Times: -1, Err: llm.ErrServer}, `rule[1] has negative Times -1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), tt.want) {
					t.Errorf("panic = %v, want one containing %q", r, tt.want)
				}
			}()
			llmtest.New(llmtest.Rule{Response: llmtest.Say("fine")}, tt.rule)
		})
	}
}

// Many agents call one Model at once while the test reads its record; run
// with -race. A rule's Times is shared exactly, and ids are never reused.
func TestConcurrentUse(t *testing.T) {
	const agents, calls, limited = 16, 50, 100
	m := llmtest.New(
		llmtest.Rule{Name: "limited", Times: limited, Response: llmtest.Call("limited", nil)},
		llmtest.Rule{SystemContains: "worker", Reply: func(req *llm.Request) (*llm.Response, error) {
			return llmtest.Call("echo", map[string]string{"agent": req.Agent}), nil
		}},
	)
	var (
		mu              sync.Mutex
		ids             = map[string]bool{}
		answeredLimited int
		wg              sync.WaitGroup
		done            = make(chan struct{})
		readers         sync.WaitGroup
	)
	readers.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			_ = m.Requests()
			_ = m.RequestsFor("agent-3")
			_ = m.Calls()
			_ = m.MaxInFlight()
			time.Sleep(time.Millisecond)
		}
	})
	for a := range agents {
		wg.Go(func() {
			agent := fmt.Sprint("agent-", a)
			req := &llm.Request{Agent: agent, System: "You are a worker."}
			for range calls {
				resp, err := m.Generate(context.Background(), req)
				if err != nil {
					t.Error(err)
					return
				}
				c := resp.Message.ToolCalls[0]
				mu.Lock()
				if ids[c.ID] {
					t.Errorf("id %s reused", c.ID)
				}
				ids[c.ID] = true
				if c.Name == "limited" {
					answeredLimited++
				}
				mu.Unlock()
				// The caller reuses its request for the next call.
				req.Messages = append(req.Messages, resp.Message, result(c.ID, "ok"))
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()

	if answeredLimited != limited {
		t.Errorf("limited rule answered %d times, want %d", answeredLimited, limited)
	}
	if m.Calls() != agents*calls {
		t.Errorf("Calls = %d, want %d", m.Calls(), agents*calls)
	}
	for a := range agents {
		reqs := m.RequestsFor(fmt.Sprint("agent-", a))
		if len(reqs) != calls {
			t.Fatalf("agent-%d: %d requests, want %d", a, len(reqs), calls)
		}
		for i, r := range reqs {
			if len(r.Messages) != 2*i {
				t.Fatalf("agent-%d call %d: %d messages, want %d", a, i, len(r.Messages), 2*i)
			}
		}
	}
}
