package agentsociety_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// TestLoopGuard_Acknowledgers: two model-driven agents that thank each
// other for every message are stopped: after LoopGuard.Rounds answers with
// no progress the next is refused with loop_detected, which the model
// reads as a tool error, and on the second refusal their parent is told.
func TestLoopGuard_Acknowledgers(t *testing.T) {
	ctx := context.Background()
	const rounds = 4
	results := make(chan string, 64)
	thank := func(req *llm.Request) string {
		var start string
		for _, m := range req.Messages {
			if m.Role == llm.RoleUser {
				start = m.Content
			}
		}
		from := start[strings.Index(start, "to='")+4:]
		return `{"to":"` + from[:strings.Index(from, "'")] + `","payload":{"text":"thanks!"}}`
	}
	model := llmtest.New(idleOnBrief,
		// Told of a refusal, an acknowledger tries once more.
		llmtest.Rule{Name: "after a send", AfterTool: "send_message", Reply: func(req *llm.Request) (*llm.Response, error) {
			r := lastToolResult(req)
			results <- r
			if strings.Contains(r, "loop_detected") && strings.Count(fmt.Sprint(req.Messages), "loop_detected") == 1 {
				return call("again", "send_message", thank(req)), nil
			}
			return llmtest.Say(""), nil
		}},
		llmtest.Rule{Name: "thank the sender", LastContains: "如需回复", Reply: func(req *llm.Request) (*llm.Response, error) {
			return call("t", "send_message", thank(req)), nil
		}},
	)
	parent := newInbox()
	s := newSociety(t, as.Config{Model: model, LoopGuard: as.LoopGuard{Rounds: rounds}})
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", parent.behavior()).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "acker", Prompt: "ack"})
	a, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actorOf(t, s, b.ID).SendText(ctx, a.ID, "hello"); err != nil {
		t.Fatal(err)
	}
	// The thanks are accepted until the two have answered each other
	// rounds times; the next is refused, and so is the retry.
	var sent int
	var refused []string
	count := func(r string) {
		if strings.Contains(r, `"error"`) {
			refused = append(refused, r)
		} else {
			sent++
		}
	}
	for len(refused) < 2 {
		count(recv(t, results, "a send's result"))
	}
	// The other agent's last success may be told to its model after the
	// refusals: count what came once every turn has ended.
	waitQuiet(t, s)
	for len(results) > 0 {
		count(<-results)
	}
	if sent != rounds {
		t.Errorf("%d thanks were accepted, want %d", sent, rounds)
	}
	for _, r := range refused {
		if !strings.Contains(r, `"error":"loop_detected"`) || !strings.Contains(r, "with no progress") {
			t.Errorf("the refusal is %s", r)
		}
	}
	m := parent.next(t)
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || m.Type != as.StatusReport || p.Status != string(as.ErrLoopDetected) || !strings.Contains(p.Text, a.ID) || !strings.Contains(p.Text, b.ID) {
		t.Fatalf("the parent got %+v (%s), want a loop_detected report naming %s and %s", m, m.Payload, a.ID, b.ID)
	}
	if !hasEvent(t, s, as.EventLoopDetected) {
		t.Error("no loop_detected event")
	}
}

// TestLoopGuard_RepeatsAndCycles: the same payload to the same receiver is
// refused after LoopGuard.Repeats sends in a row; a collaboration request
// to an agent already waiting, through open requests, on the requester is
// refused at once; with the guard off neither is.
func TestLoopGuard_RepeatsAndCycles(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprint("off=", off), func(t *testing.T) {
			cfg := as.Config{LoopGuard: as.LoopGuard{Off: off, Repeats: 2}}
			same := `{"to":"agent-2","payload":{"text":"status?"}}`
			// Each request gets its own request_id: still the same ask.
			ask := `{"to":"agent-2","message_type":"collaboration_request","payload":{"subtask_description":"do it"}}`
			results := callTools(t, cfg, newInbox().behavior(),
				toolCall{"send_message", same},
				toolCall{"send_message", same},
				toolCall{"send_message", same},
				toolCall{"send_message", `{"to":"agent-2","payload":{"text":"something else"}}`},
				toolCall{"send_message", ask},
				toolCall{"send_message", ask},
				toolCall{"send_message", ask},
			)
			want := []string{`"status":"sent"`, `"status":"sent"`, `"error":"loop_detected"`, `"status":"sent"`, `"status":"pending"`, `"status":"pending"`, `"error":"loop_detected"`}
			if off {
				want[2], want[6] = `"status":"sent"`, `"status":"pending"`
			}
			for i, r := range results {
				if !strings.Contains(r, want[i]) {
					t.Errorf("send %d gave %s, want %s", i+1, r, want[i])
				}
			}
		})
	}
	t.Run("cycle", func(t *testing.T) {
		ctx := context.Background()
		// agent-2 (code) asks agent-1 (the model) for help; agent-1,
		// asking agent-2 back, would wait on an agent waiting on it.
		in := newInbox()
		results := make(chan string, 4)
		model := llmtest.New(idleOnBrief,
			llmtest.Rule{Name: "ask back", LastContains: "collaboration_request", Response: llmtest.Call("send_message", `{"to":"agent-2","message_type":"collaboration_request","payload":{"subtask_description":"you do it"}}`)},
			llmtest.Rule{Name: "read", AfterTool: "send_message", Reply: func(req *llm.Request) (*llm.Response, error) {
				results <- lastToolResult(req)
				return llmtest.Say(""), nil
			}},
		)
		s := newSociety(t, as.Config{Model: model, Root: noop})
		lead, helper := chain(t, s, in.behavior())
		if _, err := helper.RequestCollaboration(ctx, lead.ID(), as.CollaborationRequestPayload{SubtaskDescription: "help me"}, 0); err != nil {
			t.Fatal(err)
		}
		r := recv(t, results, "the model's request's result")
		if !strings.Contains(r, `"error":"loop_detected"`) || !strings.Contains(r, "delegation cycle: agent-1 → agent-2 → agent-1") {
			t.Errorf("asking back gave %s", r)
		}
	})
}

// TestLoopGuard_RootsLoopIsReported: model-driven root sends its lead the
// same message again and again; the loop guard refuses the repeats, and
// at the second refusal should tell root's "parent", user, as it tells
// user of a lead's loop.
func TestLoopGuard_RootsLoopIsReported(t *testing.T) {
	ctx := context.Background()
	var lead string
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		return call(fmt.Sprint("c", len(req.Messages)), "send_message", `{"to":"`+lead+`","payload":{"text":"status?"}}`), nil
	})
	s := newSociety(t, as.Config{Model: model, MaxSteps: 4, LoopGuard: as.LoopGuard{Repeats: 1}, Logger: quiet})
	inbox := userInbox(s)
	lead = rootSpawn(t, s, "t", "lead", "lead", noop).ID
	if _, err := s.SendTextToAgent(ctx, as.RootID, "go", "t"); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, s)
	refusals := 0
	for e, err := range s.Events(ctx, 0) {
		if err == nil && e.Kind == as.EventLoopDetected {
			refusals++
		}
	}
	for len(inbox) > 0 {
		m := <-inbox
		var p as.StatusReportPayload
		if m.Decode(&p) == nil && p.Status == string(as.ErrLoopDetected) {
			return
		}
	}
	t.Fatalf("root's messages were refused %d times by the loop guard; nobody was told", refusals)
}

// TestLoopGuard_RetryingAFailingChild: a model-driven lead that answers each
// failure report of its child (sent by the society on the child's behalf)
// with another "try again", worded a little differently each time, is in a
// ping-pong with the child as much as if the child had written the reports
// itself: after LoopGuard.Rounds of them with no progress, the next retry
// is refused with loop_detected, where it went on until the child stopped
// failing (or, with a budget, until the budget ran out).
func TestLoopGuard_RetryingAFailingChild(t *testing.T) {
	ctx := context.Background()
	const rounds, patience = 3, 30
	var child string
	var n int
	model := llmtest.New(idleOnBrief,
		llmtest.Rule{Name: "after a send", AfterTool: "send_message", Response: llmtest.Say("")},
		llmtest.Rule{Name: "retry", When: func(req *llm.Request) bool {
			last := req.Messages[len(req.Messages)-1].Content
			return child != "" && strings.Contains(last, child) && strings.Contains(last, "error")
		}, Reply: func(req *llm.Request) (*llm.Response, error) {
			n++
			return call(fmt.Sprint("r", n), "send_message", fmt.Sprintf(`{"to":%q,"payload":{"text":"try again, attempt %d"}}`, child, n+1)), nil
		}},
	)
	attempts := make(chan int, patience+1)
	var tries int
	s := newSociety(t, as.Config{Model: model, LoopGuard: as.LoopGuard{Rounds: rounds}, Root: noop})
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", nil).ID)
	role, _, err := lead.CreateRole(ctx, as.RoleSpec{Name: "worker", Prompt: "work"})
	if err != nil {
		t.Fatal(err)
	}
	c := spawnWith(t, s, lead, role.ID, as.BehaviorFunc(func(_ context.Context, _ *as.Actor, m as.Message) error {
		if m.Type == as.TaskAssignment {
			return nil
		}
		tries++
		attempts <- tries
		if tries >= patience {
			return nil // gives in at last, so that the test ends on the old code too
		}
		return fmt.Errorf("the tool is down (attempt %d)", tries)
	}))
	child = c.ID()
	if _, err := lead.SendText(ctx, child, "do the work"); err != nil {
		t.Fatal(err)
	}
	recv(t, attempts, "the child's first attempt")
	waitQuiet(t, s)
	if tries > rounds+1 {
		t.Errorf("the lead had its failing child try %d times; the loop guard let it go on past %d rounds", tries, rounds)
	}
	if !hasEvent(t, s, as.EventLoopDetected) {
		t.Error("no loop_detected event")
	}
}

// TestLoopGuard_ReaskingAfterTimeouts: a model-driven lead that asks a
// helper that never answers, again and again, each request with a timeout
// and worded a little differently, gets back each time the society's
// collaboration_response with status error, on the helper's behalf. That
// outcome is the helper's answer, as its own rejection would be: after
// LoopGuard.Rounds of them with no progress, the next request is refused
// with loop_detected, where the lead could ask for ever.
func TestLoopGuard_ReaskingAfterTimeouts(t *testing.T) {
	ctx := context.Background()
	const rounds, patience = 3, 30
	model := llmtest.New(llmtest.Rule{Name: "idle", Response: llmtest.Say("")})
	s := newSociety(t, as.Config{Model: model, LoopGuard: as.LoopGuard{Rounds: rounds}, Root: noop})
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", nil).ID)
	role, _, err := lead.CreateRole(ctx, as.RoleSpec{Name: "helper", Prompt: "help"})
	if err != nil {
		t.Fatal(err)
	}
	helper := spawnWith(t, s, lead, role.ID, noop) // never answers
	asked := 0
	for ; asked < patience; asked++ {
		_, err := lead.RequestCollaboration(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: fmt.Sprint("please do it, attempt ", asked+1)}, time.Millisecond)
		if err != nil {
			wantCode(t, err, as.ErrLoopDetected)
			break
		}
		waitQuiet(t, s) // the timeout's outcome has reached the lead
	}
	if asked > rounds+1 {
		t.Errorf("the lead asked a helper that never answers %d times; the loop guard let it go on past %d rounds", asked, rounds)
	}
}
