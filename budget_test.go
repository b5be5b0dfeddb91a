package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
	"agentsociety/store"

	"pgregory.net/rapid"
)

// busyModel is a model that never stops calling console_print, each call
// reporting 100 input and 10 output tokens.
func busyModel() llm.Model {
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		resp := call(fmt.Sprint("c", len(req.Messages)), "console_print", `{"text":"working"}`)
		resp.Usage = llm.Usage{InputTokens: 100, OutputTokens: 10}
		return resp, nil
	})
}

// TestBudget_RunsOutThenRaised: a task that may make 3 model calls makes 3,
// then its turn ends without a fourth; user is told once, by root, what ran
// out and what was spent; raised, the task goes on by itself: nobody writes
// to it.
func TestBudget_RunsOutThenRaised(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Language: as.English, Model: busyModel(), MaxSteps: 50, TaskBudget: as.Budget{ModelCalls: 3}})
	inbox := userInbox(s)
	task, err := s.SubmitRequirement(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, inbox, "the budget report")
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || m.From != as.RootID || p.Status != as.StatusBudgetExhausted || !strings.Contains(p.Text, "(model_calls)") || !strings.Contains(p.Text, "3 model calls, 300 input tokens, 30 output tokens") {
		t.Fatalf("user got %+v (%s)", m, m.Payload)
	}
	waitQuiet(t, s)
	if u, ok := s.Usage(task); !ok || u.ModelCalls != 3 || u.InputTokens != 300 || u.OutputTokens != 30 || u.Budget.ModelCalls != 3 {
		t.Fatalf("Usage = %+v, %v", u, ok)
	}
	if err := s.SetBudget(ctx, task, as.Budget{ModelCalls: 5}); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, inbox, "the second budget report"); !strings.Contains(m.Text(), "5 model calls") {
		t.Fatalf("user got %+v (%s)", m, m.Payload)
	}
	waitQuiet(t, s)
	if u, _ := s.Usage(task); u.ModelCalls != 5 {
		t.Fatalf("after raising the budget to 5, %d calls", u.ModelCalls)
	}
}

// TestBudget_SurvivesReopening: a reopened society keeps a task's budget
// and spending: it does not grant the task a fresh budget.
func TestBudget_SurvivesReopening(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	cfg := as.Config{Model: busyModel(), MaxSteps: 50, Store: st, Logger: quiet}
	s, err := as.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	inbox := userInbox(s)
	task, err := s.SubmitRequirement(ctx, "work", as.WithBudget(as.Budget{ModelCalls: 2}))
	if err != nil {
		t.Fatal(err)
	}
	recv(t, inbox, "the budget report")
	waitQuiet(t, s)
	before, _ := s.Usage(task)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := newSociety(t, cfg)
	inbox2 := userInbox(s2)
	if after, ok := s2.Usage(task); !ok || after != before {
		t.Fatalf("after reopening Usage = %+v, %v; before %+v", after, ok, before)
	}
	if _, err := s2.SendTextToAgent(ctx, as.RootID, "more", task); err != nil {
		t.Fatal(err)
	}
	recv(t, inbox2, "the budget report after reopening")
	waitQuiet(t, s2)
	if after, _ := s2.Usage(task); after.ModelCalls != 2 {
		t.Fatalf("after reopening the task made %d calls in all, with a budget of 2", after.ModelCalls)
	}
}

// TestBudget_BadBudgetsAreRefused: a negative budget is refused, never
// taken for unlimited.
func TestBudget_BadBudgetsAreRefused(t *testing.T) {
	if _, err := as.New(context.Background(), as.Config{TaskBudget: as.Budget{InputTokens: -1}}); err == nil {
		t.Error("New took a negative TaskBudget")
	}
	s := newSociety(t, as.Config{})
	_, err := s.SubmitRequirement(context.Background(), "x", as.WithBudget(as.Budget{ModelCalls: -5}))
	if !errors.Is(err, as.ErrInvalidArgument) {
		t.Errorf("SubmitRequirement with a negative budget: %v", err)
	}
	wantCode(t, s.SetBudget(context.Background(), "t", as.Budget{OutputTokens: -1}), as.ErrInvalidArgument)
}

// TestProperty_BudgetIsNeverExceeded: however many agents of a task call
// the model at once, the task makes at most its budget of model calls, and
// its input tokens exceed their budget by less than one call per agent; a
// worker given a share of its own never exceeds it. What the workers
// spent adds up to what their parent and the task were charged, and a
// society reopened on the store reports the same figures.
func TestProperty_BudgetIsNeverExceeded(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		agents := rapid.IntRange(1, 6).Draw(rt, "agents")
		calls := rapid.Int64Range(1, 12).Draw(rt, "model calls")
		tokens := rapid.Int64Range(50, 2000).Draw(rt, "input tokens")
		ctx := context.Background()
		st := store.NewMemory()
		cfg := as.Config{Store: st, Model: busyModel(), MaxSteps: 20, MaxModelCalls: agents, Root: noop,
			TaskBudget: as.Budget{ModelCalls: calls, InputTokens: tokens}}
		s, closeSociety := openSociety(rt, cfg)
		closed := false
		defer func() {
			if !closed {
				closeSociety()
			}
		}()
		root := actorOf(rt, s, as.RootID).WithTask("t")
		role, _, _ := root.CreateRole(ctx, as.RoleSpec{Name: "worker"})
		lead, _, err := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: noop})
		if err != nil {
			rt.Fatal(err)
		}
		leadActor := actorOf(rt, s, lead.ID)
		wrole, _, _ := leadActor.CreateRole(ctx, as.RoleSpec{Name: "w"})
		var wg sync.WaitGroup
		// Some workers get a share of their own, drawn before any spends.
		shares := make([]int64, agents)
		for i := range shares {
			shares[i] = rapid.Int64Range(0, calls).Draw(rt, "share") // 0: none of its own
		}
		ids := make([]string, agents)
		for i := range agents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				spec := as.SpawnSpec{RoleID: wrole.ID, Brief: validBrief()} // its brief starts its calls
				if shares[i] > 0 {
					spec.Budget = &as.Budget{ModelCalls: shares[i]}
				}
				w, _, err := leadActor.SpawnAgent(ctx, spec)
				if err == nil {
					ids[i] = w.ID
				} else if !errors.Is(err, as.ErrBudgetTooLarge) {
					rt.Errorf("spawn: %v", err)
				}
			}()
		}
		wg.Wait()
		waitFor(rt, "the workers to stop", s.Quiet)
		u, _ := s.Usage("t")
		if u.ModelCalls > calls {
			rt.Fatalf("%d model calls with a budget of %d", u.ModelCalls, calls)
		}
		for i, id := range ids {
			if id == "" || shares[i] == 0 {
				continue
			}
			if au, ok := s.AgentUsage(id); !ok || au.ModelCalls > shares[i] {
				rt.Fatalf("%s made %d model calls with a share of %d (ok %v)", id, au.ModelCalls, shares[i], ok)
			}
		}
		// A call is reserved with its estimate, more than the 100 tokens it
		// reports, so only the last call can go over, and by its own.
		if u.InputTokens >= tokens+100 {
			rt.Fatalf("%d input tokens with a budget of %d, calls of 100 tokens", u.InputTokens, tokens)
		}
		// The subtree's sum is what its root was charged.
		var sum int64
		for _, id := range ids {
			if id != "" {
				au, _ := s.AgentUsage(id)
				sum += au.ModelCalls
			}
		}
		if lu, _ := s.AgentUsage(lead.ID); lu.ModelCalls != sum || u.ModelCalls != sum {
			rt.Fatalf("the workers spent %d calls in all; the lead was charged %d and the task %d", sum, lu.ModelCalls, u.ModelCalls)
		}
		// After a restart the figures are the same.
		before := map[string]as.Usage{}
		for i, id := range ids {
			if id != "" && shares[i] > 0 {
				before[id], _ = s.AgentUsage(id)
			}
		}
		closeSociety()
		closed = true
		s2, close2 := openSociety(rt, cfg)
		defer close2()
		if u2, _ := s2.Usage("t"); u2.ModelCalls != u.ModelCalls || u2.InputTokens != u.InputTokens {
			rt.Fatalf("after reopening the task's usage is %+v, before %+v", u2, u)
		}
		for id, b := range before {
			if a, _ := s2.AgentUsage(id); a.ModelCalls != b.ModelCalls {
				rt.Fatalf("after reopening %s spent %d calls, before %d", id, a.ModelCalls, b.ModelCalls)
			}
		}
	})
}

// TestBudget_ChildShares: a child given a share of its parent's budget
// stops at its share, and its parent is told, by the child, what ran out;
// what it spent is charged to the task too. A share larger than what the
// parent has left is refused with budget_too_large and spawns nothing.
func TestBudget_ChildShares(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Language: as.English, Model: busyModel(), MaxSteps: 50, Root: noop, TaskBudget: as.Budget{ModelCalls: 10}})
	parent := newInbox()
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", parent.behavior()).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "worker", Prompt: "work"})
	_, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Budget: &as.Budget{ModelCalls: 11}})
	if e := wantCode(t, err, as.ErrBudgetTooLarge); !slices.Equal(e.MissingFields, []string{"model_calls"}) || !strings.Contains(e.Message, "model_calls 10") {
		t.Errorf("the refusal is %+v", e)
	}
	w, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Budget: &as.Budget{ModelCalls: 4}})
	if err != nil {
		t.Fatal(err)
	}
	m := parent.next(t)
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || m.From != w.ID || p.Status != as.StatusBudgetExhausted || !strings.Contains(p.Text, "4 model calls") {
		t.Fatalf("the parent got %+v (%s)", m, m.Payload)
	}
	waitQuiet(t, s)
	if u, ok := s.AgentUsage(w.ID); !ok || u.ModelCalls != 4 || u.Budget.ModelCalls != 4 {
		t.Errorf("the worker's usage is %+v, %v", u, ok)
	}
	if u, _ := s.Usage("t"); u.ModelCalls != 4 {
		t.Errorf("the task was charged %d calls, want the worker's 4", u.ModelCalls)
	}
}

// TestBudget_ShownInThePrompt: an agent under a budget sees, in one line
// of its system prompt, what it may still spend, and the line follows its
// spending.
func TestBudget_ShownInThePrompt(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var systems []string
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		mu.Lock()
		systems = append(systems, req.System)
		mu.Unlock()
		return busyModel().Generate(ctx, req)
	})
	s := newSociety(t, as.Config{Model: model, MaxSteps: 50, Root: noop, TaskBudget: as.Budget{ModelCalls: 10, InputTokens: 1_000_000}})
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", noop).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "worker", Prompt: "work"})
	if _, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Budget: &as.Budget{ModelCalls: 3}}); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, s)
	mu.Lock()
	defer mu.Unlock()
	if len(systems) != 3 {
		t.Fatalf("%d model calls, want the share of 3", len(systems))
	}
	for i, sys := range systems {
		if want := fmt.Sprintf("- 剩余预算：model_calls %d, input_tokens", 3-i); !strings.Contains(sys, want) {
			t.Errorf("call %d's system prompt lacks %q:\n%s", i+1, want, sys)
		}
	}
}

// TestBudget_Deadline: a task whose deadline has passed makes no model
// call, and user is told the deadline ran out; a child's deadline may not
// be later than its parent's.
func TestBudget_Deadline(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Model: busyModel(), MaxSteps: 50})
	inbox := userInbox(s)
	task, err := s.SubmitRequirement(ctx, "work", as.WithBudget(as.Budget{Deadline: time.Now().Add(-time.Second)}))
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, inbox, "the budget report")
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || p.Status != as.StatusBudgetExhausted || !strings.Contains(p.Text, "deadline") {
		t.Fatalf("user got %+v (%s)", m, m.Payload)
	}
	waitQuiet(t, s)
	if u, _ := s.Usage(task); u.ModelCalls != 0 {
		t.Errorf("%d model calls after the deadline", u.ModelCalls)
	}

	deadline := time.Now().Add(time.Hour)
	s2 := newSociety(t, as.Config{Root: noop, TaskBudget: as.Budget{Deadline: deadline}})
	lead := actorOf(t, s2, rootSpawn(t, s2, "t", "lead", "lead", noop).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "w"})
	_, _, err = lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: noop, Budget: &as.Budget{Deadline: deadline.Add(time.Minute)}})
	if e := wantCode(t, err, as.ErrBudgetTooLarge); !slices.Equal(e.MissingFields, []string{"deadline"}) {
		t.Errorf("the refusal is %+v", e)
	}
	if _, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: noop, Budget: &as.Budget{Deadline: deadline.Add(-time.Minute)}}); err != nil {
		t.Errorf("an earlier deadline was refused: %v", err)
	}
}

// TestBudget_Spawns: a task that may spawn two agents spawns two; the
// third spawn is refused with budget_exhausted and creates nothing.
func TestBudget_Spawns(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Root: noop, TaskBudget: as.Budget{Spawns: 3}})
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", noop).ID) // the first spawn
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "w"})
	for i := range 3 {
		_, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: noop})
		if i < 2 && err != nil {
			t.Fatalf("spawn %d: %v", i+2, err)
		}
		if i == 2 {
			wantCode(t, err, as.ErrBudgetExhausted)
		}
	}
	if n := len(s.Agents()); n != 3 {
		t.Errorf("%d agents, want the lead and two workers", n)
	}
	if u, _ := s.Usage("t"); u.Spawns != 3 {
		t.Errorf("Usage counts %d spawns, want 3", u.Spawns)
	}
}

// TestBudget_PeersFailures reproduces two failures peers' users report,
// each stopped within its budget with one clear report to user: a
// supervisor that re-asks a worker that already answered
// (langgraph-supervisor #208), and a lead that spawns children in a loop.
func TestBudget_PeersFailures(t *testing.T) {
	brief := `{"objective":"x","constraints":[],"inputs":"i","outputs":"o","completion_criteria":"c"}`
	cases := []struct {
		name   string
		budget as.Budget
		rules  []llmtest.Rule
	}{
		{"supervisor re-asks", as.Budget{ModelCalls: 12}, []llmtest.Rule{
			// The lead makes a worker, then asks it the same thing for ever,
			// whatever it answers.
			{Name: "worker answers", SystemContains: "ROLE-WORKER", LastContains: "collaboration_request", Reply: func(req *llm.Request) (*llm.Response, error) {
				last := req.Messages[len(req.Messages)-1].Content
				id := last[strings.Index(last, `"request_id": "`)+len(`"request_id": "`):]
				id = id[:strings.Index(id, `"`)]
				return call("a", "send_message", `{"to":"agent-1","message_type":"collaboration_response","payload":{"request_id":"`+id+`","status":"completed","result_data":"42"},"end_turn":true}`), nil
			}},
			{Name: "worker idles", SystemContains: "ROLE-WORKER", Response: llmtest.Say("")},
			{Name: "lead: role", SystemContains: "ROLE-LEAD", LastContains: "task_assignment", Response: llmtest.Call("create_role", `{"name":"w","rolePrompt":"ROLE-WORKER"}`)},
			{Name: "lead: worker", SystemContains: "ROLE-LEAD", AfterTool: "create_role", Reply: func(req *llm.Request) (*llm.Response, error) {
				var r struct{ RoleID string }
				json.Unmarshal([]byte(lastToolResult(req)), &r)
				return call("s", "spawn_agent", `{"roleId":"`+r.RoleID+`","taskBrief":`+brief+`}`), nil
			}},
			{Name: "lead: asks again", SystemContains: "ROLE-LEAD", Response: llmtest.Call("send_message", `{"to":"agent-2","message_type":"collaboration_request","payload":{"subtask_description":"what is 6 times 7?"},"end_turn":true}`)},
		}},
		{"lead spawns in a loop", as.Budget{ModelCalls: 30, Spawns: 4}, []llmtest.Rule{
			{Name: "children idle", SystemContains: "ROLE-WORKER", Response: llmtest.Say("")},
			{Name: "lead: role", SystemContains: "ROLE-LEAD", LastContains: "task_assignment", Response: llmtest.Call("create_role", `{"name":"w","rolePrompt":"ROLE-WORKER"}`)},
			{Name: "lead: spawns for ever", SystemContains: "ROLE-LEAD", Reply: func(req *llm.Request) (*llm.Response, error) {
				return call("s", "spawn_agent", `{"roleId":"role-2","taskBrief":`+brief+`}`), nil
			}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			rules := []llmtest.Rule{
				{Name: "root: role", Agent: as.RootID, LastContains: "【来自用户的消息】", Response: llmtest.Call("create_role", `{"name":"lead","rolePrompt":"ROLE-LEAD"}`)},
				{Name: "root: lead", Agent: as.RootID, AfterTool: "create_role", Response: llmtest.Call("spawn_agent", `{"roleId":"role-1","taskBrief":`+brief+`,"end_turn":true}`)},
				{Name: "root: idle", Agent: as.RootID, Response: llmtest.Say("")},
			}
			model := llmtest.New(append(rules, c.rules...)...)
			s := newSociety(t, as.Config{Model: model, MaxSteps: 100})
			inbox := userInbox(s)
			task, err := s.SubmitRequirement(ctx, "go", as.WithBudget(c.budget))
			if err != nil {
				t.Fatal(err)
			}
			m := recv(t, inbox, "the budget report")
			var p as.StatusReportPayload
			if err := m.Decode(&p); err != nil || p.Status != as.StatusBudgetExhausted {
				t.Fatalf("user got %+v (%s)", m, m.Payload)
			}
			waitQuiet(t, s)
			u, _ := s.Usage(task)
			if u.ModelCalls > c.budget.ModelCalls || (c.budget.Spawns > 0 && u.Spawns != c.budget.Spawns) {
				t.Errorf("spent %+v, want within the budget %+v and every spawn it allows", u, c.budget)
			}
			select {
			case m := <-inbox:
				t.Errorf("a second message to user: %+v (%s)", m, m.Payload)
			default:
			}
			t.Logf("stopped after %d model calls and %d spawns: %s", u.ModelCalls, u.Spawns, p.Text)
		})
	}
}

// TestBudget_FailedCallsAreNotCharged: a model call that panics or fails
// releases what it reserved and is not charged: the task still makes every
// call its budget allows.
func TestBudget_FailedCallsAreNotCharged(t *testing.T) {
	var mu sync.Mutex
	n := 0
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		switch k {
		case 1:
			panic("the model's bug")
		case 2:
			return nil, errors.New("bad request")
		}
		return busyModel().Generate(ctx, req)
	})
	s := newSociety(t, as.Config{Model: model, MaxSteps: 50, Root: noop, TaskBudget: as.Budget{ModelCalls: 3}})
	lead := rootSpawn(t, s, "t", "lead", "lead", nil) // its brief's turn: the panic
	waitQuiet(t, s)
	sendAs(t, s, as.RootID, lead.ID, "again") // the failure
	waitQuiet(t, s)
	sendAs(t, s, as.RootID, lead.ID, "and again") // busy until the budget runs out
	waitQuiet(t, s)
	if u, _ := s.Usage("t"); u.ModelCalls != 3 {
		t.Errorf("the task was charged %d calls, want the 3 that succeeded", u.ModelCalls)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 5 {
		t.Errorf("the model was called %d times, want 2 failed and 3 charged", n)
	}
}

// TestBudget_RaiseAgentShare: the host raises a worker's share after it ran
// out; a share that would leave the worker more than its parent has left
// is refused with budget_too_large, naming the field, and changes nothing;
// raised within it, the worker goes on by itself to its new share.
func TestBudget_RaiseAgentShare(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Language: as.English, Model: busyModel(), MaxSteps: 50, Root: noop, TaskBudget: as.Budget{ModelCalls: 20}})
	parent := newInbox()
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", parent.behavior()).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "worker", Prompt: "work"})
	w, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Budget: &as.Budget{ModelCalls: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if m := parent.next(t); !strings.Contains(m.Text(), "2 model calls") {
		t.Fatalf("the parent got %+v (%s)", m, m.Payload)
	}
	waitQuiet(t, s)
	// The task has 18 calls left: a share of 21 would leave the worker 19.
	err = s.SetAgentBudget(ctx, w.ID, as.Budget{ModelCalls: 21})
	if e := wantCode(t, err, as.ErrBudgetTooLarge); !slices.Equal(e.MissingFields, []string{"model_calls"}) || !strings.Contains(e.Message, "model_calls 18") {
		t.Errorf("the refusal is %+v", e)
	}
	if u, _ := s.AgentUsage(w.ID); u.Budget.ModelCalls != 2 {
		t.Errorf("a refused raise changed the share to %+v", u.Budget)
	}
	wantCode(t, s.SetAgentBudget(ctx, w.ID, as.Budget{ModelCalls: -1}), as.ErrInvalidArgument)
	wantCode(t, s.SetAgentBudget(ctx, as.RootID, as.Budget{ModelCalls: 1}), as.ErrForbidden)
	wantCode(t, s.SetAgentBudget(ctx, "agent-99", as.Budget{ModelCalls: 1}), as.ErrAgentNotFound)
	if err := s.SetAgentBudget(ctx, w.ID, as.Budget{ModelCalls: 10}); err != nil {
		t.Fatal(err)
	}
	if m := parent.next(t); !strings.Contains(m.Text(), "10 model calls") {
		t.Fatalf("after the raise the parent got %+v (%s), want the share run out again at 10", m, m.Payload)
	}
	waitQuiet(t, s)
	if u, _ := s.AgentUsage(w.ID); u.ModelCalls != 10 || u.Budget.ModelCalls != 10 || u.Left.ModelCalls != 0 {
		t.Errorf("the worker's usage is %+v", u)
	}
	if u, _ := s.Usage("t"); u.ModelCalls != 10 {
		t.Errorf("the task was charged %d calls, want 10", u.ModelCalls)
	}
}

// TestBudget_AgentUsageWithoutShare: an agent without a share of its own
// reports what it and its descendants spent, and what the budgets it draws
// on have left: its nearest ancestor's share, or its task's.
func TestBudget_AgentUsageWithoutShare(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Model: busyModel(), MaxSteps: 50, Root: noop, TaskBudget: as.Budget{ModelCalls: 10}})
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", noop).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "w", Prompt: "work"})
	mid, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: noop, Budget: &as.Budget{ModelCalls: 4}})
	if err != nil {
		t.Fatal(err)
	}
	midActor := actorOf(t, s, mid.ID)
	wrole, _, _ := midActor.CreateRole(ctx, as.RoleSpec{Name: "w", Prompt: "work"})
	worker, _, err := midActor.SpawnAgent(ctx, as.SpawnSpec{RoleID: wrole.ID, Brief: validBrief()}) // model-driven, no share
	if err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, s)
	unlimited := as.Budget{InputTokens: -1, OutputTokens: -1, ModelCalls: -1, Spawns: -1}
	cases := []struct {
		id   string
		want as.Usage
	}{
		{worker.ID, as.Usage{ModelCalls: 4, InputTokens: 400, OutputTokens: 40, Left: budgetLeft(unlimited, 0)}},
		{mid.ID, as.Usage{ModelCalls: 4, InputTokens: 400, OutputTokens: 40, Spawns: 1, Budget: as.Budget{ModelCalls: 4}, Left: budgetLeft(unlimited, 0)}},
		{lead.ID(), as.Usage{ModelCalls: 4, InputTokens: 400, OutputTokens: 40, Spawns: 2, Left: budgetLeft(unlimited, 6)}},
	}
	for _, c := range cases {
		if got, ok := s.AgentUsage(c.id); !ok || got != c.want {
			t.Errorf("AgentUsage(%s) = %+v, %v; want %+v", c.id, got, ok, c.want)
		}
	}
	if u, _ := s.Usage("t"); u.ModelCalls != 4 || u.Spawns != 3 || u.Left.ModelCalls != 6 {
		t.Errorf("the task's usage is %+v", u)
	}
	if _, ok := s.AgentUsage(as.RootID); ok {
		t.Error("AgentUsage(root) is ok")
	}
}

// budgetLeft is b with model calls set to calls.
func budgetLeft(b as.Budget, calls int64) as.Budget {
	b.ModelCalls = calls
	return b
}

// TestBudget_ResumesAfterRaise: a lead that needs more model calls than its
// task's budget stops when it runs out; the host raises the budget and
// writes nothing, and the lead, told of the raise, finishes and answers
// user.
func TestBudget_ResumesAfterRaise(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var last *llm.Request
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		mu.Lock()
		last = req
		mu.Unlock()
		done := 0
		for _, m := range req.Messages {
			if m.Role == llm.RoleTool {
				done++
			}
		}
		if done < 4 { // four steps of work, then the answer
			return call(fmt.Sprint("c", done), "console_print", `{"text":"step"}`), nil
		}
		return call("a", "send_message", `{"to":"user","message_type":"status_report","payload":{"status":"done","text":"finished"},"end_turn":true}`), nil
	})
	s := newSociety(t, as.Config{Model: model, MaxSteps: 50, Root: noop, TaskBudget: as.Budget{ModelCalls: 2}})
	inbox := userInbox(s)
	rootSpawn(t, s, "t", "lead", "lead", nil) // its brief starts its work
	if m := recv(t, inbox, "the budget report"); !strings.Contains(m.Text(), "2 次模型调用") {
		t.Fatalf("user got %+v (%s)", m, m.Payload)
	}
	waitQuiet(t, s)
	if err := s.SetBudget(ctx, "t", as.Budget{ModelCalls: 20}); err != nil {
		t.Fatal(err)
	}
	m := recv(t, inbox, "the lead's answer")
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || p.Text != "finished" {
		t.Fatalf("user got %+v (%s), want the lead's answer", m, m.Payload)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(last.Messages, func(m llm.Message) bool { return strings.Contains(m.Content, "【预算已提高】") }) {
		t.Errorf("the lead was not told of the raise: %+v", last.Messages)
	}
	if u, _ := s.Usage("t"); u.ModelCalls != 5 {
		t.Errorf("the task made %d calls, want 2 before the raise and 3 after", u.ModelCalls)
	}
}

// TestBudget_LineIsCoarse: under a token budget, consecutive calls that
// spend a little see the same system prompt (a provider's prompt cache
// keeps it), the figures rounded down to their first digit.
func TestBudget_LineIsCoarse(t *testing.T) {
	var mu sync.Mutex
	var systems []string
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		mu.Lock()
		systems = append(systems, req.System)
		mu.Unlock()
		return busyModel().Generate(ctx, req)
	})
	s := newSociety(t, as.Config{Model: model, MaxSteps: 5, Root: noop,
		TaskBudget: as.Budget{ModelCalls: 59, InputTokens: 999_999, OutputTokens: 99_999, Deadline: time.Now().Add(3*time.Hour + 30*time.Minute)}})
	rootSpawn(t, s, "t", "lead", "lead", nil) // one turn of 5 calls, cut by MaxSteps
	waitQuiet(t, s)
	mu.Lock()
	defer mu.Unlock()
	if len(systems) != 5 {
		t.Fatalf("%d calls, want 5", len(systems))
	}
	const want = "- 剩余预算：model_calls 50+, input_tokens 900000+, output_tokens 90000+, time_left 3h+"
	for i, sys := range systems {
		if !strings.Contains(sys, want) {
			t.Errorf("call %d's system prompt lacks %q:\n%s", i+1, want, sys)
		}
		if sys != systems[0] {
			t.Errorf("call %d's system prompt differs from the first's", i+1)
		}
	}
}

// TestBudget_ChecksKeepNoLedger: a spawn refused for its share, checked
// against a task's default budget, leaves the society without a ledger for
// the task: a check changes nothing.
func TestBudget_ChecksKeepNoLedger(t *testing.T) {
	s := newSociety(t, as.Config{Root: noop, TaskBudget: as.Budget{ModelCalls: 5}})
	root := actorOf(t, s, as.RootID).WithTask("t")
	role, _, _ := root.CreateRole(context.Background(), as.RoleSpec{Name: "lead"})
	_, _, err := root.SpawnAgent(context.Background(), as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: noop, Budget: &as.Budget{ModelCalls: 9}})
	wantCode(t, err, as.ErrBudgetTooLarge)
	if u, ok := s.Usage("t"); ok || u.Budget.ModelCalls != 5 || u.Left.ModelCalls != 5 {
		t.Errorf("after a refused spawn Usage = %+v, %v; want the default budget, not kept", u, ok)
	}
	if got := s.Tasks(); len(got) != 0 {
		t.Errorf("Tasks = %+v, want none", got)
	}
}

// TestBudget_CallAnsweredAsCloseBeginsIsCharged: a model call in flight
// when Close begins is answered (Close waits for the turn, so the call
// goes on) and reported as a finished call with its usage; the task's
// limited budget must count it, in memory and, reopened, in the store.
func TestBudget_CallAnsweredAsCloseBeginsIsCharged(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	called, answer := make(chan struct{}, 1), make(chan struct{})
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		select {
		case called <- struct{}{}:
			<-answer
		default:
		}
		return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "done"}, Usage: llm.Usage{InputTokens: 100, OutputTokens: 10}}, nil
	})
	cfg := as.Config{Model: model, Store: st, TaskBudget: as.Budget{ModelCalls: 10}, Logger: quiet}
	s, err := as.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	task, err := s.SubmitRequirement(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	recv(t, called, "the model call")
	closed := make(chan error, 1)
	go func() { closed <- s.Close(ctx) }()
	waitFor(t, "Close to begin", func() bool {
		return errors.Is(s.Terminate(ctx, "nobody"), as.ErrClosed) // changes nothing
	})
	close(answer)
	if err := recv(t, closed, "Close"); err != nil {
		t.Fatal(err)
	}
	finished := 0
	for e, err := range s.Events(ctx, 0) {
		if err == nil && e.Kind == as.EventModelCallFinished && e.Usage != nil {
			finished++
		}
	}
	u, _ := s.Usage(task)
	s2 := newSociety(t, as.Config{Store: st, Root: noop, Logger: quiet})
	u2, _ := s2.Usage(task)
	if finished != 1 || u.ModelCalls != 1 || u2.ModelCalls != 1 {
		t.Fatalf("%d model calls finished with usage; the task's budget counts %d (%d input tokens), and %d reopened", finished, u.ModelCalls, u.InputTokens, u2.ModelCalls)
	}
}

// TestBudget_RefusalByAReservationThatIsReleased: a task may make one
// model call. A worker's call is in flight when a second worker's first
// call is refused, the budget being reserved by the first; then the first
// call fails, which charges nothing: the task has spent nothing and has its
// call left. User was told the budget ran out, and the second worker, which
// has work to do and budget to do it with, never goes on.
func TestBudget_RefusalByAReservationThatIsReleased(t *testing.T) {
	ctx := context.Background()
	held, fail := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	later := make(chan string, 10)
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if first.CompareAndSwap(false, true) {
			close(held)
			<-fail
			return nil, errors.New("the provider refused the request")
		}
		later <- req.Agent
		// Failed too: no spending of the call records the ledger again.
		return nil, errors.New("the provider refused the request")
	})
	st := store.NewMemory()
	cfg := as.Config{Language: as.English, Model: model, Root: noop, Logger: quiet, Store: st}
	s, err := as.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	inbox := userInbox(s)
	if err := s.SetBudget(ctx, "t", as.Budget{ModelCalls: 1}); err != nil {
		t.Fatal(err)
	}
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", noop).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "w"})
	spawnWith(t, s, lead, role.ID, nil)
	recv(t, held, "the first worker's call")
	w2 := spawnWith(t, s, lead, role.ID, nil)
	m := recv(t, inbox, "a report to user")
	close(fail)
	waitQuiet(t, s)
	t.Logf("user was told %s", m.Payload)
	if id := recv(t, later, w2.ID()+"'s call, refused while the budget was only reserved, once the reservation is released"); id != w2.ID() {
		t.Fatalf("a call by %s", id)
	}
	// The wake was recorded: reopened, a raise wakes nobody again.
	waitQuiet(t, s)
	closeSociety(t, s)
	s2 := newSociety(t, cfg)
	if err := s2.SetBudget(ctx, "t", as.Budget{ModelCalls: 20}); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, s2)
	select {
	case id := <-later:
		t.Fatalf("reopened, the raise woke %s, which the released reservation had woken already", id)
	default:
	}
}

// TestBudget_DescendantEndedMidTurnMakesNoMoreCalls: a model-driven
// worker is in a model call when its parent is terminated and ends with
// it. The worker is terminated ("stopped", says StatusTerminated), yet its
// turn goes on calling the model, every step, up to MaxSteps.
func TestBudget_DescendantEndedMidTurnMakesNoMoreCalls(t *testing.T) {
	ctx := context.Background()
	var calls atomic.Int64
	held, release := make(chan struct{}), make(chan struct{})
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if calls.Add(1) == 1 {
			close(held)
			<-release
		}
		return call(fmt.Sprint("c", len(req.Messages)), "console_print", `{"text":"working"}`), nil
	})
	s := newSociety(t, as.Config{Model: model, Root: noop, MaxSteps: 20, Logger: quiet})
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", noop).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "w"})
	w := spawnWith(t, s, lead, role.ID, nil)
	recv(t, held, "the worker's first call")
	if err := s.Terminate(ctx, lead.ID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker to end with its parent", func() bool {
		a, _ := s.Agent(w.ID())
		return a.Status == as.StatusTerminated
	})
	close(release)
	waitQuiet(t, s)
	if n := calls.Load(); n != 1 {
		t.Fatalf("the worker, terminated during its first model call, made %d more", n-1)
	}
}

// TestBudget_RaiseAfterReopeningResumesTheStopped: as
// TestBudget_ResumesAfterRaise, with the society closed and reopened on
// its store between the budget's running out and the raise. The budget and
// its exhaustion survive the restart; the agents it stopped should go on
// when it is raised, as they do without the restart.
func TestBudget_RaiseAfterReopeningResumesTheStopped(t *testing.T) {
	ctx := context.Background()
	model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		done := 0
		for _, m := range req.Messages {
			if m.Role == llm.RoleTool {
				done++
			}
		}
		if done < 4 {
			return call(fmt.Sprint("c", done), "console_print", `{"text":"step"}`), nil
		}
		return call("a", "send_message", `{"to":"user","message_type":"status_report","payload":{"status":"done","text":"finished"},"end_turn":true}`), nil
	})
	st := store.NewMemory()
	cfg := as.Config{Model: model, MaxSteps: 50, Root: noop, TaskBudget: as.Budget{ModelCalls: 2}, Store: st, Logger: quiet}
	s, err := as.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	inbox := userInbox(s)
	rootSpawn(t, s, "t", "lead", "lead", nil)
	recv(t, inbox, "the budget report")
	waitQuiet(t, s)
	closeSociety(t, s)

	s2 := newSociety(t, cfg)
	inbox2 := userInbox(s2)
	if u, _ := s2.Usage("t"); u.ModelCalls != 2 || u.Left.ModelCalls != 0 {
		t.Fatalf("reopened, Usage = %+v", u)
	}
	if err := s2.SetBudget(ctx, "t", as.Budget{ModelCalls: 20}); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, inbox2, "the lead the budget stopped to go on once raised after reopening"); m.Text() != "finished" {
		t.Fatalf("user got %+v (%s)", m, m.Payload)
	}
}

// TestBudget_AbsurdUsageIsBounded: a model that reports a usage below zero
// does not give back what was spent, and one that reports nearly as many
// tokens as an int64 holds, twice, does not wrap the count round to below
// zero, where an output budget would never run out: the count stops at
// the largest int64.
func TestBudget_AbsurdUsageIsBounded(t *testing.T) {
	for _, c := range []struct {
		name     string
		reported int
		want     int64
	}{{"negative", -1000, 0}, {"huge", math.MaxInt, math.MaxInt64}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			model := llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
				resp := call(fmt.Sprint("c", len(req.Messages)), "console_print", `{"text":"working"}`)
				resp.Usage = llm.Usage{InputTokens: 100, OutputTokens: c.reported}
				return resp, nil
			})
			s := newSociety(t, as.Config{Language: as.English, Model: model, MaxSteps: 50, TaskBudget: as.Budget{ModelCalls: 2}})
			inbox := userInbox(s)
			task, err := s.SubmitRequirement(ctx, "work")
			if err != nil {
				t.Fatal(err)
			}
			recv(t, inbox, "the budget report")
			waitQuiet(t, s)
			u, ok := s.Usage(task)
			if !ok || u.OutputTokens != c.want {
				t.Fatalf("after 2 calls each reporting %d output tokens, Usage = %+v, %v; want %d output tokens", c.reported, u, ok, c.want)
			}
		})
	}
}
