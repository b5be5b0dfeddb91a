package agentsociety_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// ---- Item 4: the step limit ----

func TestStepLimitReportsToParentAndTheAgentGoesOn(t *testing.T) {
	const maxSteps = 3
	rootInbox := make(mtInbox, 16)
	model := llmtest.New(
		llmtest.Rule{Name: "first turn", SystemContains: "MARK-steps", LastContains: "FIRST", Response: llmtest.Call("list_contacts", nil)},
		llmtest.Rule{Name: "loop", SystemContains: "MARK-steps", AfterTool: "list_contacts", Response: llmtest.Call("list_contacts", nil)},
		llmtest.Rule{Name: "second turn", SystemContains: "MARK-steps", LastContains: "SECOND", Response: llmtest.Call("send_message", `{"to":"root","payload":{"text":"second handled"}}`)},
		llmtest.Rule{Name: "end", SystemContains: "MARK-steps", AfterTool: "send_message", Response: say("")},
	)
	s := newSociety(t, as.Config{Model: model, MaxSteps: maxSteps, Root: rootInbox})
	worker := mtSpawn(t, s, "t1", "looper", "MARK-steps", nil)

	first := mtSendAs(t, s, as.RootID, worker.ID, "FIRST")
	report := mtRecv(t, rootInbox, "the step_limit report")
	if n := len(model.RequestsFor(worker.ID)); n != maxSteps {
		t.Errorf("the turn made %d model calls, want exactly MaxSteps = %d", n, maxSteps)
	}
	var p as.StatusReportPayload
	if err := report.Decode(&p); err != nil || report.Type != as.StatusReport || report.From != worker.ID || report.TaskID != "t1" ||
		p.Status != string(as.StatusError) || !strings.Contains(p.Text, string(as.ErrStepLimit)) || !strings.Contains(p.Text, first.ID) {
		t.Fatalf("root got %+v (%s), want a status_report from %s with status error naming step_limit and message %s", report, report.Payload, worker.ID, first.ID)
	}

	mtSendAs(t, s, as.RootID, worker.ID, "SECOND")
	m := mtRecv(t, rootInbox, "the answer to the second message")
	if m.From != worker.ID || m.Text() != "second handled" {
		t.Fatalf("root got %+v, want %q from %s", m, "second handled", worker.ID)
	}
	if n := len(model.RequestsFor(worker.ID)); n < maxSteps+1 {
		t.Errorf("%d calls in all after the second message", n)
	}
	// Every one of the first turn's calls is answered by the society: the
	// history handed on holds each call with its result.
	reqs := model.RequestsFor(worker.ID)
	for i := 1; i < maxSteps; i++ {
		if call, _ := mtLastResult(t, reqs[i]); call.Name != "list_contacts" {
			t.Errorf("call %d answers %s", i, call.Name)
		}
	}
}

// ---- Item 5: the cap on model calls in flight ----

func TestModelCallsInFlightAreCapped(t *testing.T) {
	const agents = 20
	for _, c := range []struct{ maxCalls, want int }{{4, 4}, {100, agents}} {
		t.Run(fmt.Sprintf("MaxModelCalls=%d", c.maxCalls), func(t *testing.T) {
			// A call holds its slot until want calls are in flight at once
			// (or mtTimeout passes), so that the peak does not hang on
			// timing: a society that lets fewer calls run together fails.
			var arrived atomic.Int32
			reached := make(chan struct{})
			var once sync.Once
			done := make(chan string, agents)
			model := llmtest.New(llmtest.Rule{Reply: func(req *llm.Request) (*llm.Response, error) {
				if int(arrived.Add(1)) >= c.want {
					once.Do(func() { close(reached) })
				}
				select {
				case <-reached:
				case <-time.After(mtTimeout):
				}
				done <- req.Agent
				return say(""), nil
			}})
			model.Delay = 20 * time.Millisecond
			s := newSociety(t, as.Config{Model: model, MaxModelCalls: c.maxCalls})
			var workers []as.Agent
			for i := range agents {
				workers = append(workers, mtSpawn(t, s, fmt.Sprintf("t%d", i), "worker", "work", nil))
			}
			for _, w := range workers {
				mtSendAs(t, s, as.RootID, w.ID, "go")
			}
			seen := map[string]bool{}
			for range agents {
				seen[mtRecv(t, done, "a model call")] = true
			}
			if len(seen) != agents {
				t.Errorf("%d distinct agents called the model, want %d", len(seen), agents)
			}
			if got := model.MaxInFlight(); got != c.want {
				t.Errorf("MaxInFlight = %d with MaxModelCalls = %d and %d agents, want %d", got, c.maxCalls, agents, c.want)
			}
		})
	}
}

// ---- Item 6: a failing model is reported and does not stall the society ----

func statusReportTo(t *testing.T, m as.Message, from string) as.StatusReportPayload {
	t.Helper()
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || m.Type != as.StatusReport || m.From != from {
		t.Fatalf("got %+v (%s), want a status_report from %s", m, m.Payload, from)
	}
	return p
}

func TestModelFailureIsReported(t *testing.T) {
	ctx := context.Background()
	wctx, cancel := context.WithTimeout(ctx, mtTimeout)
	defer cancel()
	for _, c := range []struct {
		name     string
		retries  int
		fail     int
		err      error
		calls    int
		reported bool
	}{
		{"bad request is not retried", 0, 1, llm.ErrBadRequest, 1, true},
		{"auth failure is not retried", 2, 1, llm.ErrAuth, 1, true},
		{"server error is retried then reported", 2, 3, llm.ErrServer, 3, true},
		{"rate limit is retried then reported", 2, 3, llm.ErrRateLimited, 3, true},
		{"server error once is retried and recovers", 2, 1, llm.ErrServer, 2, false},
		{"no retries", -1, 1, llm.ErrServer, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			model := llmtest.New(
				llmtest.Rule{Agent: as.RootID, LastContains: "REQ", Response: llmtest.Call("send_message", `{"to":"user","payload":{"text":"answer"}}`)},
				llmtest.Rule{Agent: as.RootID, AfterTool: "send_message", Response: say("")},
			)
			model.FailNext(c.fail, c.err)
			s := newSociety(t, as.Config{Model: model, ModelRetries: c.retries, RetryBackoff: time.Millisecond})
			if _, err := s.SubmitRequirement(ctx, "REQ 1"); err != nil {
				t.Fatal(err)
			}
			m, err := s.WaitForUserMessage(wctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.reported {
				p := statusReportTo(t, m, as.RootID)
				if p.Status != string(as.StatusError) || !strings.Contains(p.Text, string(as.ErrModel)) {
					t.Fatalf("user got %+v, want a model_error report", p)
				}
				if n := model.Calls(); n != c.calls {
					t.Errorf("%d model calls before the report, want %d", n, c.calls)
				}
				// The agent goes on with its next message.
				if _, err := s.SubmitRequirement(ctx, "REQ 2"); err != nil {
					t.Fatal(err)
				}
				if m, err = s.WaitForUserMessage(wctx, nil); err != nil {
					t.Fatal(err)
				}
			}
			if m.From != as.RootID || m.Text() != "answer" {
				t.Fatalf("user got %+v, want root's answer", m)
			}
			if !c.reported {
				if n := len(model.RequestsFor(as.RootID)); n < c.calls {
					t.Errorf("%d model calls, want at least %d", n, c.calls)
				}
			}
		})
	}
}

func TestFailingModelDoesNotStallOtherAgents(t *testing.T) {
	ctx := context.Background()
	alive := make(chan struct{})
	model := llmtest.New(
		// Root's model fails, transiently, every time; its first call
		// fails only once the other agent has done its work, so that
		// the work happens while root's call is in flight.
		llmtest.Rule{Agent: as.RootID, Reply: func(*llm.Request) (*llm.Response, error) {
			select {
			case <-alive:
			case <-time.After(mtTimeout):
			}
			return nil, llm.ErrServer
		}},
		llmtest.Rule{SystemContains: "MARK-alive", LastContains: "PING", Response: llmtest.Call("send_message", `{"to":"user","payload":{"text":"alive"}}`)},
		llmtest.Rule{SystemContains: "MARK-alive", AfterTool: "send_message", Response: say("")},
	)
	s, err := as.New(ctx, as.Config{Model: model, Logger: quiet, ModelRetries: 2, RetryBackoff: time.Millisecond, MaxModelCalls: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	var once sync.Once
	s.OnUserMessage(func(m as.Message) {
		if m.Text() == "alive" {
			once.Do(func() { close(alive) })
		}
	})
	other := mtSpawn(t, s, "t-other", "other", "MARK-alive", nil)
	if _, err := s.SubmitRequirement(ctx, "REQ"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SendTextToAgent(ctx, other.ID, "PING", ""); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, mtTimeout)
	defer cancel()
	first, err := s.WaitForUserMessage(wctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.From != other.ID || first.Text() != "alive" {
		t.Fatalf("user's first message is %+v, want the other agent's answer", first)
	}
	report, err := s.WaitForUserMessage(wctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := statusReportTo(t, report, as.RootID); p.Status != string(as.StatusError) || !strings.Contains(p.Text, string(as.ErrModel)) {
		t.Fatalf("user got %+v, want a model_error report", p)
	}
	if n := len(model.RequestsFor(as.RootID)); n != 3 {
		t.Errorf("root made %d model calls, want 1 + ModelRetries = 3", n)
	}
	start := time.Now()
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if err := s.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
}

// TestCloseDuringRetryBackoff closes a society while an agent waits to
// retry a failed model call: as Close documents, it cancels the handler when
// its ctx ends and returns ctx.Err() promptly, with no handler left.
func TestCloseDuringRetryBackoff(t *testing.T) {
	ctx := context.Background()
	failed := make(chan struct{}, 8)
	model := llmtest.New(llmtest.Rule{Reply: func(*llm.Request) (*llm.Response, error) {
		failed <- struct{}{}
		return nil, llm.ErrServer
	}})
	s, err := as.New(ctx, as.Config{Model: model, Logger: quiet, ModelRetries: 3, RetryBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubmitRequirement(ctx, "REQ"); err != nil {
		t.Fatal(err)
	}
	mtRecv(t, failed, "the failing call")
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = s.Close(cctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want the ctx's deadline error", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v while an agent waited an hour to retry", d)
	}
	if n := model.Calls(); n != 1 {
		t.Errorf("%d model calls, want 1: the retry was cancelled", n)
	}
}

// ---- Item 8: the history budget ----

// mtHistory is what mtHistoryRun saw.
type mtHistory struct {
	reqs   []llm.Request
	full   []llm.Message // the whole conversation, as if nothing were dropped
	bounds []int         // the index in full where each turn starts
	sys    string
}

// mtHistoryRun delivers one message per text to a model-driven agent whose
// every turn is: the message, a list_contacts call, its result, and "noted".
// It returns the agent's requests and the full history the agent built.
func mtHistoryRun(t *testing.T, budget int, sum as.Summarizer, texts []string) mtHistory {
	turnDone := make(chan struct{}, len(texts))
	model := llmtest.New(
		llmtest.Rule{SystemContains: "MARK-history", LastContains: "TURN-", Response: llmtest.Call("list_contacts", nil)},
		llmtest.Rule{SystemContains: "MARK-history", AfterTool: "list_contacts", Reply: func(*llm.Request) (*llm.Response, error) {
			turnDone <- struct{}{}
			return say("noted"), nil
		}},
	)
	s := newSociety(t, as.Config{Model: model, HistoryBudget: budget, Summarize: sum, Root: make(mtInbox, 1)})
	worker := mtSpawn(t, s, "t1", "historian", "MARK-history", nil)
	var sent []as.Message
	for _, text := range texts {
		sent = append(sent, mtSendAs(t, s, as.RootID, worker.ID, text))
	}
	for i := range texts {
		mtRecv(t, turnDone, fmt.Sprintf("turn %d", i+1))
	}
	h := mtHistory{reqs: model.RequestsFor(worker.ID)}
	if len(h.reqs) != 2*len(texts) {
		t.Fatalf("%d model calls, want 2 per turn", len(h.reqs))
	}
	for k, m := range sent {
		second := h.reqs[2*k+1]
		n := len(second.Messages)
		h.bounds = append(h.bounds, len(h.full))
		h.full = append(h.full,
			llm.Message{Role: llm.RoleUser, Content: as.FormatMessage(m, as.RootID)},
			second.Messages[n-2], second.Messages[n-1],
			llm.Message{Role: llm.RoleAssistant, Content: "noted"})
	}
	h.sys = h.reqs[0].System
	return h
}

// mtContentSize is the size of messages as the history budget counts it:
// bytes of content, tool calls included.
func mtContentSize(msgs []llm.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	return n
}

func mtHistoryTexts() []string {
	pad := strings.Repeat("x", 150)
	return []string{
		"TURN-1 " + pad,
		"TURN-2 " + pad,
		"TURN-3 " + pad,
		"TURN-4 " + strings.Repeat("y", 900), // a turn over the budget by itself
		"TURN-5 " + pad,
		"TURN-6 " + pad,
	}
}

// mtCheckWellFormed checks what holds of every request whatever the budget:
// the system prompt is the same, with the brief; the history starts at a
// delivered message; every tool result follows its call; and the current
// turn is there.
func mtCheckWellFormed(t *testing.T, h mtHistory, msgs []llm.Message, req llm.Request, turn, step int) {
	t.Helper()
	if req.System != h.sys || !strings.Contains(req.System, validBrief().Objective) {
		t.Errorf("turn %d: the system prompt changed or lost the brief:\n%s", turn+1, req.System)
	}
	if len(msgs) == 0 || msgs[0].Role != llm.RoleUser {
		t.Fatalf("turn %d: the history does not start with a delivered message: %+v", turn+1, msgs)
	}
	calls := map[string]bool{}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			calls[c.ID] = true
		}
		if m.Role == llm.RoleTool && !calls[m.ToolCallID] {
			t.Errorf("turn %d: the tool result %s comes without its call", turn+1, m.ToolCallID)
		}
	}
	if i := len(msgs) - 1 - 2*step; i < 0 || !reflect.DeepEqual(msgs[i:], h.full[h.bounds[turn]:h.bounds[turn]+1+2*step]) {
		t.Errorf("turn %d call %d: the current turn is not whole at the end of the history", turn+1, step+1)
	}
}

func TestHistoryBudgetDropsWholeOldestTurns(t *testing.T) {
	const budget = 700
	h := mtHistoryRun(t, budget, nil, mtHistoryTexts())
	// The expected window: the oldest turns go, whole, while the history is
	// over the budget, and never the current turn; what is dropped stays
	// dropped.
	start := 0
	dropped := false
	for i, req := range h.reqs {
		turn, step := i/2, i%2
		end := h.bounds[turn] + 1 + 2*step // the delivered message, then the call and its result
		for b := start; b < h.bounds[turn]; {
			if mtContentSize(h.full[b:end]) <= budget {
				break
			}
			b = h.bounds[indexOfBound(h.bounds, b)+1]
			start = b
		}
		want := h.full[start:end]
		mtCheckWellFormed(t, h, req.Messages, req, turn, step)
		if !reflect.DeepEqual(req.Messages, want) {
			t.Errorf("turn %d call %d: history of %d messages from %q,\nwant %d from %q", turn+1, step+1,
				len(req.Messages), clipText(req.Messages[0].Content), len(want), clipText(want[0].Content))
		}
		if start > 0 {
			dropped = true
		}
		if strings.HasPrefix(req.Messages[0].Content, "【此前对话摘要】") {
			t.Errorf("turn %d: a summary without a summariser", turn+1)
		}
	}
	if !dropped {
		t.Fatal("nothing was dropped: the test is vacuous")
	}
	// The turn over the budget by itself is sent alone, then dropped.
	if got := h.reqs[6].Messages; len(got) != 1 || !strings.Contains(got[0].Content, "TURN-4") {
		t.Errorf("the oversized turn's first call has %d messages", len(got))
	}
	for _, m := range h.reqs[8].Messages {
		if strings.Contains(m.Content, "TURN-4") {
			t.Error("the oversized turn is still sent with the next turn")
		}
	}
}

func indexOfBound(bounds []int, b int) int {
	for i, x := range bounds {
		if x == b {
			return i
		}
	}
	panic("not a turn boundary")
}

func clipText(s string) string {
	if r := []rune(s); len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return s
}

func TestHistoryBudgetSummarisesDroppedTurns(t *testing.T) {
	const budget = 700
	type sumCall struct {
		agent, previous string
		dropped         []llm.Message
	}
	var mu sync.Mutex
	var sums []sumCall
	summarize := func(_ context.Context, agent, previous string, dropped []llm.Message) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		cp := make([]llm.Message, len(dropped))
		copy(cp, dropped)
		sums = append(sums, sumCall{agent, previous, cp})
		return fmt.Sprintf("S%d", len(sums)), nil
	}
	h := mtHistoryRun(t, budget, summarize, mtHistoryTexts())
	mu.Lock()
	defer mu.Unlock()
	if len(sums) == 0 {
		t.Fatal("the summariser was never called")
	}

	// The summariser is given each dropped turn exactly once, whole and in
	// order, with the summary it returned before.
	var all []llm.Message
	for i, c := range sums {
		want := ""
		if i > 0 {
			want = fmt.Sprintf("S%d", i)
		}
		if c.previous != want || c.agent != h.reqs[0].Agent {
			t.Errorf("summariser call %d for %s with previous %q, want %s and %q", i+1, c.agent, c.previous, h.reqs[0].Agent, want)
		}
		if len(c.dropped) == 0 || c.dropped[0].Role != llm.RoleUser {
			t.Errorf("summariser call %d was not given whole turns: %+v", i+1, c.dropped)
		}
		all = append(all, c.dropped...)
	}
	if len(all) > len(h.full) || !reflect.DeepEqual(all, h.full[:len(all)]) {
		t.Fatalf("the summariser was given %d messages that are not the oldest of the history", len(all))
	}

	// Each request: the summary first, once there is one, then the kept
	// turns, exactly the ones not yet summarised.
	summaries := 0
	seen := 0
	for i, req := range h.reqs {
		turn, step := i/2, i%2
		end := h.bounds[turn] + 1 + 2*step
		msgs := req.Messages
		if first := msgs[0]; strings.HasPrefix(first.Content, "【此前对话摘要】") {
			if first.Role != llm.RoleUser {
				t.Errorf("turn %d: the summary is a %s message", turn+1, first.Role)
			}
			var n int
			if _, err := fmt.Sscanf(strings.TrimPrefix(first.Content, "【此前对话摘要】\n"), "S%d", &n); err != nil || n < summaries {
				t.Errorf("turn %d: summary %q", turn+1, first.Content)
			}
			summaries = n
			msgs = msgs[1:]
		} else if summaries > 0 {
			t.Errorf("turn %d: the summary is gone", turn+1)
		}
		// The kept messages are the history from the end of what the
		// summaries so far hold.
		dropped := 0
		for _, c := range sums[:summaries] {
			dropped += len(c.dropped)
		}
		if dropped < seen {
			t.Errorf("turn %d: dropped turns came back", turn+1)
		}
		seen = dropped
		mtCheckWellFormed(t, h, msgs, req, turn, step)
		if !reflect.DeepEqual(msgs, h.full[dropped:end]) {
			t.Errorf("turn %d call %d: %d messages after the summary, want the %d not yet summarised", turn+1, step+1, len(msgs), end-dropped)
		}
		if size := len(fmt.Sprintf("S%d", summaries)) + mtContentSize(msgs); summaries > 0 && size > budget && dropped != h.bounds[turn] {
			t.Errorf("turn %d: %d bytes over the budget of %d with older turns left", turn+1, size, budget)
		}
	}
	if summaries == 0 {
		t.Fatal("no request carried a summary")
	}
	last := h.reqs[len(h.reqs)-1].Messages[0]
	if last.Content != fmt.Sprintf("【此前对话摘要】\nS%d", len(sums)) {
		t.Errorf("the last request starts with %q, want the latest summary S%d", last.Content, len(sums))
	}
}

// ---- Item 9: plain text goes nowhere ----

func TestPlainTextIsLoggedAsThoughtAndSentToNobody(t *testing.T) {
	st := newMTStore()
	logs := make(chan map[string]string, 4096)
	const thought = "I should tell the user the answer is 42"
	model := llmtest.New(llmtest.Rule{SystemContains: "MARK-thinker", Response: say(thought)})
	rootInbox := make(mtInbox, 4)
	s := newSociety(t, as.Config{Model: model, Store: st, Root: rootInbox, Logger: slog.New(mtLogRecorder{logs})})
	worker := mtSpawn(t, s, "t1", "thinker", "MARK-thinker", nil)
	before := mtSnapshot(t, s)
	mark := st.mark()
	kick := mtSendAs(t, s, as.RootID, worker.ID, "what is the answer?")
	st.waitFinished(t, kick.ID)

	st.assertOnly(t, mark, kick)
	mtSameState(t, before, s)
	if n := model.Calls(); n != 1 {
		t.Errorf("%d model calls, want 1", n)
	}
	select {
	case m := <-rootInbox:
		t.Errorf("root got %+v", m)
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if m, err := s.WaitForUserMessage(ctx, nil); err == nil {
		t.Errorf("user got %+v", m)
	}
	found := false
	for len(logs) > 0 {
		r := <-logs
		if r["_message"] == "thought" {
			if r["agent"] != worker.ID || r["text"] != thought {
				t.Errorf("thought record %v, want agent %s and the text", r, worker.ID)
			}
			found = true
		}
	}
	if !found {
		t.Error("no \"thought\" record was logged")
	}
}
