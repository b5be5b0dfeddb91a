package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
	"agentsociety/store"

	"github.com/google/go-cmp/cmp"
)

// retention is the Config.Retention of the tests here: long enough for a
// test to see a record before it is forgotten, short enough to wait for.
const retention = time.Second

// TestRetention_SettledRequestIsForgotten: a settled request, answered or
// timed out, is forgotten Config.Retention after it was settled; a late
// answer is refused with ErrRequestClosed until then, and with
// ErrUnknownRequest after.
func TestRetention_SettledRequestIsForgotten(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	s := newSociety(t, as.Config{Retention: retention, DefaultBehavior: in.behavior(), Logger: quiet})
	lead, helper := chain(t, s, nil)
	base := s.Held()

	answered, err := lead.RequestCollaboration(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	timedOut, err := lead.RequestCollaboration(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "y"}, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	answer := as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: json.RawMessage(`1`)}
	if _, err := helper.Respond(ctx, answered, answer); err != nil {
		t.Fatal(err)
	}
	for range 4 { // the two requests, the answer and the timeout's outcome
		in.next(t)
	}
	for _, id := range []string{answered, timedOut} {
		_, err := helper.Respond(ctx, id, answer)
		wantCode(t, err, as.ErrRequestClosed)
	}
	for _, id := range []string{answered, timedOut} {
		waitFor(t, "request "+id+" to be forgotten", func() bool {
			_, err := helper.Respond(ctx, id, answer)
			return errors.Is(err, as.ErrUnknownRequest)
		})
	}
	if diff := cmp.Diff(base, heldOnceRecorded(t, s)); diff != "" {
		t.Errorf("the society holds more than before the requests (-before +after):\n%s", diff)
	}
}

// TestRetention_TerminatedAgentIsForgotten: a terminated agent is
// forgotten Config.Retention after it ended, with its descendants, spawn
// keys, contact registries, private state, the requests they made and the
// roles they created.
func TestRetention_TerminatedAgentIsForgotten(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Retention: retention, Logger: quiet})
	lead, role := hostLead(t, s, "t", "worker")
	ready := make(chan string, 1)
	// The worker, on "go", spawns a child on a role of its own, writes
	// private state and asks the lead for help.
	worker := spawnWith(t, s, lead, role, as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if m.Text() != "go" {
			return nil
		}
		r, _, err := self.CreateRole(ctx, as.RoleSpec{Name: "intern"})
		if err != nil {
			return err
		}
		child, _, err := self.SpawnAgent(ctx, as.SpawnSpec{RoleID: r.ID, Brief: validBrief(), Behavior: newInbox().behavior()})
		if err != nil {
			return err
		}
		if err := self.SetState(ctx, "notes", "mine", as.ScopePrivate); err != nil {
			return err
		}
		if _, err := self.Send(ctx, as.Outgoing{To: lead.ID(), Type: as.CollaborationRequest,
			Payload: as.CollaborationRequestPayload{RequestID: "req-w", SubtaskDescription: "help"}}); err != nil {
			return err
		}
		ready <- child.ID
		return nil
	}))
	base := s.Held()
	sendAs(t, s, lead.ID(), worker.ID(), "go")
	child := recv(t, ready, "the worker's spawn")
	grown := s.Held()
	if grown["spawnKeys"] != base["spawnKeys"]+1 || grown["requests"] != base["requests"]+1 || grown["state"] != base["state"]+1 {
		t.Fatalf("before the termination the society holds %v (it held %v)", grown, base)
	}

	if err := lead.Terminate(ctx, worker.ID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker to end", func() bool {
		a, _ := s.Agent(worker.ID())
		return a.Status == as.StatusTerminated
	})
	wantCode(t, sendErr(ctx, lead, as.Outgoing{To: worker.ID(), Payload: as.Text("hi")}), as.ErrAgentTerminated)
	if _, err := lead.Respond(ctx, "req-w", as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: json.RawMessage(`1`)}); !errors.Is(err, as.ErrAgentTerminated) {
		t.Fatalf("an answer to a terminated requester: %v", err)
	}

	waitFor(t, "the worker to be forgotten", func() bool {
		_, ok := s.Agent(worker.ID())
		return !ok
	})
	waitFor(t, "the worker's child to be forgotten", func() bool {
		_, ok := s.Agent(child)
		return !ok
	})
	for _, id := range []string{worker.ID(), child} {
		if _, err := s.Contacts(id); !errors.Is(err, as.ErrAgentNotFound) {
			t.Errorf("Contacts(%s): %v", id, err)
		}
	}
	wantCode(t, sendErr(ctx, lead, as.Outgoing{To: worker.ID(), Payload: as.Text("hi")}), as.ErrAgentNotFound)
	_, err := lead.Respond(ctx, "req-w", as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: json.RawMessage(`1`)})
	wantCode(t, err, as.ErrUnknownRequest)
	for _, a := range s.Agents() {
		if a.ID == worker.ID() || a.ID == child {
			t.Errorf("Agents() lists %s", a.ID)
		}
	}
	if got := s.FindRoleByName("intern"); len(got) != 0 {
		t.Errorf("the worker's role is still there: %+v", got)
	}
	// The lead's registry no longer names the worker, its child.
	if s.IsKnown(lead.ID(), worker.ID()) {
		t.Errorf("the lead still knows %s, forgotten", worker.ID())
	}
	held := heldOnceRecorded(t, s)
	want := base
	want["agents"]-- // the worker
	want["indexed"]--
	want["contacts"]--
	want["roleUsers"]--  // no agent is on the worker's role, which the lead made, any more
	want["entries"] -= 2 // the worker's registry, with its parent, and the lead's entry about it
	if diff := cmp.Diff(want, held); diff != "" {
		t.Errorf("the society holds (-want +got):\n%s", diff)
	}
}

// heldOnceRecorded returns what s holds once no change is in flight: the
// removal of what s forgot holds its claims until the store has it.
func heldOnceRecorded(t *testing.T, s *as.Society) map[string]int {
	t.Helper()
	waitFor(t, "the changes in flight to be recorded", func() bool { return s.Held()["claims"] == 0 })
	return s.Held()
}

// TestRetention_NothingGrows: task after task of spawning, asking,
// answering and terminating leaves the society, and its store, holding
// what they held before, once Config.Retention has passed: root's
// registry does not keep an entry per task's lead, nor the store a record
// of what the society forgot.
func TestRetention_NothingGrows(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	st := store.NewMemory()
	s := newSociety(t, as.Config{Store: st, Retention: 50 * time.Millisecond, DefaultBehavior: in.behavior(), Logger: quiet})
	root := actorOf(t, s, as.RootID)
	role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "lead"})
	if err != nil {
		t.Fatal(err)
	}
	base, baseStore := s.Held(), storeHolds(t, st)
	for i := range 20 {
		task := "t" + strconv.Itoa(i)
		lead, _, err := root.WithTask(task).SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
		if err != nil {
			t.Fatal(err)
		}
		x := actorOf(t, s, lead.ID).WithTask(task)
		sub, _, err := x.CreateRole(ctx, as.RoleSpec{Name: "worker"})
		if err != nil {
			t.Fatal(err)
		}
		w, _, err := x.SpawnAgent(ctx, as.SpawnSpec{RoleID: sub.ID, Brief: validBrief()})
		if err != nil {
			t.Fatal(err)
		}
		id, err := x.RequestCollaboration(ctx, w.ID, as.CollaborationRequestPayload{SubtaskDescription: "x"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := actorOf(t, s, w.ID).Respond(ctx, id, as.CollaborationResponsePayload{Status: as.StatusRejected, ErrorMessage: "no"}); err != nil {
			t.Fatal(err)
		}
		if _, err := x.RequestCollaboration(ctx, w.ID, as.CollaborationRequestPayload{SubtaskDescription: "y"}, 0); err != nil {
			t.Fatal(err)
		}
		if err := x.SetState(ctx, "notes", "mine", as.ScopePrivate); err != nil {
			t.Fatal(err)
		}
		if err := x.SetState(ctx, "plan", "ours", as.ScopeProject); err != nil {
			t.Fatal(err)
		}
		if err := s.Terminate(ctx, lead.ID); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "everything that ended to be forgotten", func() bool { return cmp.Equal(base, s.Held()) })
	// Only the last ids are new in the store (see prune.go).
	baseStore["states"] += 2
	waitFor(t, "the store to remove it", func() bool { return cmp.Equal(baseStore, storeHolds(t, st)) })
}

// storeHolds counts the records st holds, by kind.
func storeHolds(t *testing.T, st store.Store) map[string]int {
	t.Helper()
	state, err := st.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range state.Contacts {
		n += len(l)
	}
	return map[string]int{
		"roles": len(state.Roles), "agents": len(state.Agents), "requests": len(state.Requests),
		"registries": len(state.Contacts), "entries": n, "histories": len(state.Histories), "states": len(state.States),
	}
}

// TestRetention_AfterReopening: a society reopened on a store forgets what
// had ended Config.Retention after opening, and removes it from the store;
// the agents it makes then are not numbered as those it forgot.
func TestRetention_AfterReopening(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	in := newInbox()
	s1, err := as.New(ctx, as.Config{Store: st, DefaultBehavior: in.behavior(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	lead, helper := settledAndEnded(t, s1)
	ended := time.Now()
	if err := s1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	s2 := newSociety(t, as.Config{Store: st, Retention: retention, DefaultBehavior: in.behavior(), Logger: quiet})
	// A loaded machine may take the whole retention to get here.
	if a, ok := s2.Agent(helper.ID()); (!ok && time.Since(ended) < retention) || (ok && a.Status != as.StatusTerminated) {
		t.Fatalf("on reopening, the helper is %+v, %v", a, ok)
	}
	// The helper goes Retention after it ended, the request Retention
	// after the society was opened again: wait for both.
	waitFor(t, "the helper and the request to be forgotten", func() bool {
		_, ok := s2.Agent(helper.ID())
		h := s2.Held()
		return !ok && h["requests"] == 0 && h["retired"] == 0
	})
	lead2 := actorOf(t, s2, lead.ID())
	wantCode(t, sendErr(ctx, lead2, as.Outgoing{To: helper.ID(), Payload: as.Text("hi")}), as.ErrAgentNotFound)
	state, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(state.Requests) != 0 || len(state.Agents) != 1 || state.Contacts[helper.ID()] != nil {
		t.Errorf("the store holds %d requests, %d agents and the helper's registry %v, want 0, 1 and none", len(state.Requests), len(state.Agents), state.Contacts[helper.ID()])
	}
	for owner, l := range state.Contacts {
		for _, c := range l {
			if c.ID == helper.ID() {
				t.Errorf("%s's registry in the store names the helper, forgotten", owner)
			}
		}
	}
	if err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s3 := newSociety(t, as.Config{Store: st, DefaultBehavior: in.behavior(), Logger: quiet})
	r, _, err := actorOf(t, s3, lead.ID()).CreateRole(ctx, as.RoleSpec{Name: "new"})
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := actorOf(t, s3, lead.ID()).SpawnAgent(ctx, as.SpawnSpec{RoleID: r.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == helper.ID() {
		t.Errorf("a new agent is numbered %s, as the one the society forgot", a.ID)
	}
}

// settledAndEnded makes, in s, a lead and a helper, has the lead ask the
// helper for help and the helper refuse, then has the lead terminate the
// helper and waits until it ended: a settled request and an ended agent,
// both due to be forgotten Config.Retention later.
func settledAndEnded(t *testing.T, s *as.Society) (lead, helper *as.Actor) {
	t.Helper()
	ctx := context.Background()
	lead, helper = chain(t, s, nil)
	id, err := lead.RequestCollaboration(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := helper.Respond(ctx, id, as.CollaborationResponsePayload{Status: as.StatusRejected, ErrorMessage: "no"}); err != nil {
		t.Fatal(err)
	}
	if err := lead.Terminate(ctx, helper.ID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the helper to end", func() bool {
		a, _ := s.Agent(helper.ID())
		return a.Status == as.StatusTerminated
	})
	return lead, helper
}

// TestRetention_NegativeKeepsEverything: with a negative Config.Retention
// nothing is queued to be forgotten.
func TestRetention_NegativeKeepsEverything(t *testing.T) {
	in := newInbox()
	s := newSociety(t, as.Config{Retention: -1, DefaultBehavior: in.behavior(), Logger: quiet})
	settledAndEnded(t, s)
	if h := s.Held(); h["retired"] != 0 || h["requests"] != 1 {
		t.Errorf("the society holds %v", h)
	}
}

// TestRetention_CloseDoesNotWaitForThePruneTimer: Close stops the prune
// timer, as it stops request timers: it returns at once, not when the
// oldest record falls due.
func TestRetention_CloseDoesNotWaitForThePruneTimer(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	s, err := as.New(ctx, as.Config{Retention: time.Hour, DefaultBehavior: in.behavior(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	lead, helper := chain(t, s, nil)
	id, err := lead.RequestCollaboration(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := helper.Respond(ctx, id, as.CollaborationResponsePayload{Status: as.StatusRejected, ErrorMessage: "no"}); err != nil {
		t.Fatal(err)
	}
	if h := s.Held(); h["retired"] != 1 {
		t.Fatalf("the society holds %v, want one record retired", h)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestRetention_EndedTaskIsForgotten: what the society holds of a task,
// its ledger and its activity, is forgotten once the task has ended: for a
// task root answered alone, Config.Retention after it went quiet; for one
// with a lead, when the lead, terminated, is forgotten. Running tasks does
// not grow what the society holds.
func TestRetention_EndedTaskIsForgotten(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{Retention: retention, Model: busyModel(), MaxSteps: 50, TaskBudget: as.Budget{ModelCalls: 2}, Logger: quiet})
	inbox := userInbox(s)
	base := s.Held()
	for i := range 3 {
		solo, err := s.SubmitRequirement(ctx, "work alone") // root works on it, with no agent
		if err != nil {
			t.Fatal(err)
		}
		recv(t, inbox, "the budget report of "+solo)
		led := "led-" + strconv.Itoa(i)
		lead := rootSpawn(t, s, led, "lead", "lead", nil) // model-driven: its brief starts its calls
		recv(t, inbox, "the budget report of "+led)
		waitQuiet(t, s)
		for _, task := range []string{solo, led} {
			if _, ok := s.Usage(task); !ok {
				t.Fatalf("task %s has no ledger while it runs", task)
			}
		}
		if err := s.Terminate(ctx, lead.ID); err != nil {
			t.Fatal(err)
		}
		for _, task := range []string{solo, led} {
			waitFor(t, "task "+task+" to be forgotten", func() bool {
				_, ok := s.Usage(task)
				return !ok
			})
		}
		waitFor(t, "the society to hold no more ledgers, task counts and agents than before the tasks", func() bool {
			held := s.Held()
			return held["ledgers"] == base["ledgers"] && held["taskKeys"] == base["taskKeys"] && held["agents"] == base["agents"]
		})
		if got := s.Tasks(); len(got) != 0 {
			t.Fatalf("Tasks = %+v after they ended", got)
		}
	}
}

// TestRetention_TaskInUseIsNotForgotten: a task root answers alone is
// forgotten Config.Retention after it last went quiet, not after the first
// time: a conversation that goes on keeps what it spent, where it was
// forgotten Retention after the first answer, between two messages, and
// started afresh with nothing spent and the default budget.
func TestRetention_TaskInUseIsNotForgotten(t *testing.T) {
	ctx := context.Background()
	model := llm.ModelFunc(func(context.Context, *llm.Request) (*llm.Response, error) {
		return call("a", "send_message", `{"to":"user","payload":{"text":"ok"},"end_turn":true}`), nil
	})
	s := newSociety(t, as.Config{Retention: retention, Model: model, Logger: quiet})
	inbox := userInbox(s)
	const task = "chat"
	if err := s.SetBudget(ctx, task, as.Budget{ModelCalls: 1000}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := int64(1); time.Since(start) < 2*retention; i++ {
		if _, err := s.SendTextToAgent(ctx, as.RootID, "hello "+strconv.FormatInt(i, 10), task); err != nil {
			t.Fatal(err)
		}
		recv(t, inbox, "root's answer")
		waitQuiet(t, s)
		u, ok := s.Usage(task)
		if !ok || u.ModelCalls != i || u.Budget.ModelCalls != 1000 {
			t.Fatalf("after %d answers, %v into the conversation, the task's usage is %+v (ok %v): it was forgotten while in use", i, time.Since(start).Round(time.Millisecond), u, ok)
		}
		time.Sleep(10 * time.Millisecond) // a pace, not a wait: the conversation goes on
	}
}

// TestRetention_QuietTaskIsForgotten: a task root answered alone, in words
// that reached nobody, goes quiet unanswered and user is told; it has
// ended, and is forgotten Config.Retention later like any other, where it
// was kept for the society's life.
func TestRetention_QuietTaskIsForgotten(t *testing.T) {
	ctx := context.Background()
	model := llm.ModelFunc(func(context.Context, *llm.Request) (*llm.Response, error) {
		return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "I would answer, but I only think aloud."}}, nil
	})
	s := newSociety(t, as.Config{Retention: retention, Model: model, Logger: quiet})
	inbox := userInbox(s)
	task, err := s.SubmitRequirement(ctx, "hello")
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, inbox, "the quiet report")
	var p as.StatusReportPayload
	if m.Decode(&p) != nil || p.Status != as.StatusQuiet {
		t.Fatalf("user got %+v (%s)", m, m.Payload)
	}
	if _, ok := s.Usage(task); !ok {
		t.Fatal("the task has no ledger once reported quiet")
	}
	waitFor(t, "the quiet task to be forgotten", func() bool {
		_, ok := s.Usage(task)
		return !ok && len(s.Tasks()) == 0
	})
}

// heldRemovals is a store whose Apply of a change that removes records
// waits, once it has said so on removing, until release is closed.
type heldRemovals struct {
	store.Store
	removing chan store.Removal
	release  chan struct{}
}

func (h *heldRemovals) Apply(ctx context.Context, c store.Change) error {
	if !c.Remove.Empty() {
		h.removing <- c.Remove
		<-h.release
	}
	return h.Store.Apply(ctx, c)
}

// A request made with the id of a forgotten request while the store is
// removing that one waits until the removal is recorded: the removal
// never removes it.
func TestRetention_RemovalDoesNotRemoveAReusedID(t *testing.T) {
	ctx := context.Background()
	st := &heldRemovals{Store: store.NewMemory(), removing: make(chan store.Removal, 1), release: make(chan struct{})}
	s := newSociety(t, as.Config{Store: st, Retention: 10 * time.Millisecond, DefaultBehavior: newInbox().behavior(), Logger: quiet})
	lead, helper := chain(t, s, nil)
	ask := as.CollaborationRequestPayload{RequestID: "req-again", SubtaskDescription: "x"}
	if _, err := lead.RequestCollaboration(ctx, helper.ID(), ask, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := helper.Respond(ctx, "req-again", as.CollaborationResponsePayload{Status: as.StatusRejected, ErrorMessage: "no"}); err != nil {
		t.Fatal(err)
	}
	if rm := recv(t, st.removing, "the removal of the settled request"); !slices.Equal(rm.Requests, []string{"req-again"}) {
		t.Fatalf("the removal: %+v", rm)
	}
	asked := make(chan error, 1)
	go func() {
		_, err := lead.RequestCollaboration(ctx, helper.ID(), ask, 0)
		asked <- err
	}()
	// Released once the request waits for the removal, or, if it does not,
	// once it is recorded (and would be removed).
	waitFor(t, "the request made again to wait or be recorded", func() bool {
		if state, _ := st.Load(ctx); len(state.Requests) > 0 {
			return true
		}
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "agentsociety.(*Society).waitFor(")
	})
	close(st.release)
	if err := recv(t, asked, "the request made again"); err != nil {
		t.Fatal(err)
	}
	state, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(state.Requests) != 1 || state.Requests[0].ID != "req-again" || state.Requests[0].Status != string(as.StatusPending) {
		t.Fatalf("the store holds requests %+v, want req-again pending", state.Requests)
	}
}

// failFirstRemoval is a store that fails the first change that removes
// records.
type failFirstRemoval struct {
	store.Store
	tries atomic.Int32
}

func (f *failFirstRemoval) Apply(ctx context.Context, c store.Change) error {
	if !c.Remove.Empty() && f.tries.Add(1) == 1 {
		return errors.New("the store is down for a moment")
	}
	return f.Store.Apply(ctx, c)
}

// A removal that fails leaves in the store what the society forgot; what
// the society removes later (here the role the agent was on, with its
// creator) leaves the store one that a society still opens.
func TestRetention_FailedRemovalThenItsRoleRemoved(t *testing.T) {
	ctx := context.Background()
	st := &failFirstRemoval{Store: store.NewMemory()}
	s := newSociety(t, as.Config{Store: st, Retention: 20 * time.Millisecond, DefaultBehavior: newInbox().behavior(), Logger: quiet})
	lead, worker := chain(t, s, nil)
	terminateAndWait(t, s, worker.ID())
	waitFor(t, "the worker's removal to fail", func() bool { return st.tries.Load() >= 1 })
	terminateAndWait(t, s, lead.ID())
	waitFor(t, "the lead and its role to be removed", func() bool {
		state, _ := st.Load(ctx)
		return !slices.ContainsFunc(state.Agents, func(a store.Agent) bool { return a.ID == lead.ID() }) &&
			!slices.ContainsFunc(state.Roles, func(r store.Role) bool { return r.CreatedBy == lead.ID() })
	})
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := newSociety(t, as.Config{Store: st, Logger: quiet})
	if a, ok := s2.Agent(worker.ID()); !ok || a.Status != as.StatusTerminated {
		t.Fatalf("the worker, left in the store, restored as %+v, %v", a, ok)
	}
}

// heldBudget is a store whose Apply of a change setting a budget of 999
// model calls waits, once it has said so on held, until release is closed.
type heldBudget struct {
	store.Store
	held    chan struct{}
	release chan struct{}
}

func (h *heldBudget) Apply(ctx context.Context, c store.Change) error {
	for _, e := range c.States {
		if strings.HasPrefix(e.Scope, "budget:") && strings.Contains(string(e.Value), "999") {
			h.held <- struct{}{}
			<-h.release
		}
	}
	return h.Store.Apply(ctx, c)
}

// A budget set on an ended task while the society forgets the task is
// kept, in memory and in the store: prune's removal waits for the change
// in flight and leaves what it wrote.
func TestRetention_RemovalLeavesWhatAChangeInFlightWrites(t *testing.T) {
	ctx := context.Background()
	st := &heldBudget{Store: store.NewMemory(), held: make(chan struct{}, 1), release: make(chan struct{})}
	s := newSociety(t, as.Config{Store: st, Retention: retention, DefaultBehavior: newInbox().behavior(), Logger: quiet})
	lead := rootSpawn(t, s, "t", "lead", "", nil)
	if err := s.SetBudget(ctx, "t", as.Budget{ModelCalls: 5}); err != nil {
		t.Fatal(err)
	}
	set := make(chan error, 1)
	terminateAndWait(t, s, lead.ID)
	go func() { set <- s.SetBudget(ctx, "t", as.Budget{ModelCalls: 999}) }()
	recv(t, st.held, "the new budget to reach the store")
	waitFor(t, "the task to be forgotten", func() bool { _, ok := s.Usage("t"); return !ok })
	close(st.release)
	if err := recv(t, set, "the new budget"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removal to be recorded", func() bool {
		state, _ := st.Load(ctx)
		return slices.ContainsFunc(state.States, func(e store.StateEntry) bool { return e.Scope == "ids:" })
	})
	if u, ok := s.Usage("t"); !ok || u.Budget.ModelCalls != 999 {
		t.Errorf("the task's budget in memory: %+v, %v", u.Budget, ok)
	}
	state, _ := st.Load(ctx)
	if !slices.ContainsFunc(state.States, func(e store.StateEntry) bool {
		return e.Scope == "budget:task:t" && strings.Contains(string(e.Value), "999")
	}) {
		t.Errorf("the store lost the budget set as the task was forgotten: %+v", state.States)
	}
	// The task has no agents: its budget is forgotten in its turn.
	waitFor(t, "the budget to be forgotten", func() bool {
		state, _ := st.Load(ctx)
		_, ok := s.Usage("t")
		return !ok && !slices.ContainsFunc(state.States, func(e store.StateEntry) bool { return e.Scope == "budget:task:t" })
	})
}

// Forgetting hundreds of agents at once removes them in changes of a
// bounded size, and all of them.
func TestRetention_ManyForgottenAtOnce(t *testing.T) {
	ctx := context.Background()
	st := newRecordingStore()
	s := newSociety(t, as.Config{Store: st, Retention: 20 * time.Millisecond, DefaultBehavior: newInbox().behavior(), Logger: quiet})
	lead, role := hostLead(t, s, "t", "worker")
	for range 300 {
		if _, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: role, Brief: validBrief()}); err != nil {
			t.Fatal(err)
		}
	}
	mark := st.mark()
	terminateAndWait(t, s, lead.ID())
	waitFor(t, "the lead and its workers to be removed", func() bool {
		state, _ := st.Load(ctx)
		return len(state.Agents) == 0
	})
	for _, c := range st.since(mark) {
		if n := len(c.Remove.Agents) + len(c.Remove.Contacts) + len(c.Remove.Requests) + len(c.Remove.Roles) + len(c.States); !c.Remove.Empty() && n > 256 {
			t.Errorf("a change removes %d records", n)
		}
	}
}

// BenchmarkForget measures forgetting a task in a society that holds
// many idle agents besides: each op spawns a lead with a role and a
// worker of its own, terminates the lead, and waits until the society has
// forgotten both and removed them from its store. What a termination and
// prune cost should follow what they end and forget, not the agents the
// society keeps. The wait yields rather than sleeps, so that a timer's
// granularity does not show: run it at -test.cpu 1, where the waiting
// burns no core of its own.
func BenchmarkForget(b *testing.B) {
	for _, idle := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("idle=%d", idle), func(b *testing.B) {
			ctx := context.Background()
			s, err := as.New(ctx, as.Config{Logger: quiet, MaxAgents: idle + 10, Retention: time.Microsecond})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(ctx)
			keeper, role := hostLead(b, s, "idle", "idle")
			for range idle {
				if _, _, err := keeper.SpawnAgent(ctx, as.SpawnSpec{RoleID: role, Brief: validBrief(minimal)}); err != nil {
					b.Fatal(err)
				}
			}
			root := actorOf(b, s, as.RootID)
			leadRole, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "lead"})
			if err != nil {
				b.Fatal(err)
			}
			cpu := startCPU(b)
			b.ResetTimer()
			for i := range b.N {
				task := "t" + strconv.Itoa(i)
				lead, _, err := root.WithTask(task).SpawnAgent(ctx, as.SpawnSpec{RoleID: leadRole.ID, Brief: validBrief(minimal)})
				if err != nil {
					b.Fatal(err)
				}
				x := actorOf(b, s, lead.ID).WithTask(task)
				r, _, err := x.CreateRole(ctx, as.RoleSpec{Name: "worker"})
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := x.SpawnAgent(ctx, as.SpawnSpec{RoleID: r.ID, Brief: validBrief(minimal)}); err != nil {
					b.Fatal(err)
				}
				if err := s.Terminate(ctx, lead.ID); err != nil {
					b.Fatal(err)
				}
				for {
					if _, ok := s.Agent(lead.ID); !ok && len(s.FindRoleByName("worker")) == 0 {
						break
					}
					runtime.Gosched()
				}
			}
			b.StopTimer()
			cpu.report()
		})
	}
}

// TestRetention_PromptForgetsAForgottenContact: an agent's system prompt
// stops naming a contact once the society forgot it, even when a new
// contact came meanwhile, which leaves the agent with as many contacts as
// its last prompt showed.
func TestRetention_PromptForgetsAForgottenContact(t *testing.T) {
	ctx := context.Background()
	model := llmtest.New(llmtest.Rule{Name: "quiet", Response: llmtest.Say("")})
	s := newSociety(t, as.Config{Model: model, Retention: 50 * time.Millisecond, Logger: quiet})
	lead := rootSpawn(t, s, "t", "lead", "", nil) // model-driven
	x := actorOf(t, s, lead.ID)
	role, _, err := x.CreateRole(ctx, as.RoleSpec{Name: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	turns := 1 // the brief's
	turn := func() string {
		t.Helper()
		if _, err := actorOf(t, s, as.UserID).WithTask("t").SendText(ctx, lead.ID, "next"); err != nil {
			t.Fatal(err)
		}
		turns++
		waitFor(t, "the lead's turn", func() bool { return len(model.RequestsFor(lead.ID)) == turns })
		reqs := model.RequestsFor(lead.ID)
		return reqs[len(reqs)-1].System
	}
	waitFor(t, "the lead's first turn", func() bool { return len(model.RequestsFor(lead.ID)) == turns })

	gone := spawnWith(t, s, x, role.ID, newInbox().behavior())
	if system := turn(); !strings.Contains(system, gone.ID()) {
		t.Fatalf("the lead's prompt does not name its child %s:\n%s", gone.ID(), system)
	}
	if err := s.Terminate(ctx, gone.ID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the child to be forgotten", func() bool {
		_, ok := s.Agent(gone.ID())
		return !ok
	})
	next := spawnWith(t, s, x, role.ID, newInbox().behavior())
	system := turn()
	if strings.Contains(system, gone.ID()) || !strings.Contains(system, next.ID()) {
		t.Fatalf("the lead's prompt after %s was forgotten and %s spawned:\n%s", gone.ID(), next.ID(), system)
	}
}
