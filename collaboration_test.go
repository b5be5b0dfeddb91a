package agentsociety_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/store"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// twoAgents returns a society with a requester and a responder, both
// code-driven and recording into in.
func twoAgents(t testing.TB, in *inbox) (*as.Society, *as.Actor, *as.Actor) {
	t.Helper()
	s := newSociety(t, as.Config{DefaultBehavior: in.behavior()})
	lead, helper := chain(t, s, nil)
	return s, lead, helper
}

func answer(t rapid.TB, from *as.Actor, to, id string, status as.RequestStatus) error {
	t.Helper()
	p := as.CollaborationResponsePayload{RequestID: id, Status: status}
	if status == as.StatusCompleted {
		p.ResultData = []byte(`{"ok":true}`)
	} else {
		p.ErrorMessage = "cannot"
	}
	_, err := from.Send(context.Background(), as.Outgoing{To: to, Type: as.CollaborationResponse, Payload: p})
	return err
}

func TestCollaborationTimeoutSettlesAndRefusesLateAnswers(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	_, lead, helper := twoAgents(t, in)
	id, err := lead.RequestCollaboration(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "slow work"}, 20*time.Millisecond)
	if err != nil || !strings.HasPrefix(id, "req-") {
		t.Fatalf("RequestCollaboration = %q, %v", id, err)
	}
	// The request reaches the helper, and the timeout the lead: on a slow
	// machine the timeout may be delivered first.
	first, m := in.next(t), in.next(t)
	if first.To == lead.ID() {
		first, m = m, first
	}
	if first.To != helper.ID() || first.Type != as.CollaborationRequest {
		t.Fatalf("helper got %+v", first)
	}
	var p as.CollaborationResponsePayload
	if err := m.Decode(&p); err != nil || m.To != lead.ID() || m.From != helper.ID() || p.RequestID != id || p.Status != as.StatusError || !strings.Contains(p.ErrorMessage, "timeout") {
		t.Fatalf("lead got %+v (%+v), want a timeout error response for %s", m, p, id)
	}
	if err := answer(t, helper, lead.ID(), id, as.StatusCompleted); !errors.Is(err, as.ErrRequestClosed) {
		t.Fatalf("late answer: %v, want ErrRequestClosed", err)
	}
}

func TestCollaborateWaitsForTheAnswer(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	s, lead, helper := twoAgents(t, in)
	go func() {
		m := in.next(t) // the request, delivered to the helper
		var p as.CollaborationRequestPayload
		m.Decode(&p)
		answer(t, helper, m.From, p.RequestID, as.StatusRejected)
	}()
	out, err := lead.Collaborate(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var p as.CollaborationResponsePayload
	if out.Decode(&p); p.Status != as.StatusRejected || out.From != helper.ID() {
		t.Fatalf("Collaborate = %+v", out)
	}
	// The answer went to the caller only, not to the lead's mailbox.
	if _, err := lead.SendText(ctx, helper.ID(), "marker"); err != nil {
		t.Fatal(err)
	}
	if m := in.next(t); m.Text() != "marker" {
		t.Fatalf("after Collaborate the next delivery is %+v, want the marker", m)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if n := len(in.got[lead.ID()]); n != 0 {
		t.Fatalf("the lead's mailbox got %d messages, want 0", n)
	}
	_ = s
}

func TestCollaborateGivingUpSendsTheOutcomeToTheMailbox(t *testing.T) {
	in := newInbox()
	_, lead, helper := twoAgents(t, in)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := lead.Collaborate(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Collaborate = %v, want DeadlineExceeded", err)
	}
	// The request has no timeout: its outcome is the helper's answer, given
	// after Collaborate gave up however slow the machine.
	req := in.next(t) // the request, to the helper
	var p as.CollaborationRequestPayload
	if err := req.Decode(&p); err != nil || req.To != helper.ID() || req.Type != as.CollaborationRequest {
		t.Fatalf("helper got %+v (%v), want the request", req, err)
	}
	if err := answer(t, helper, lead.ID(), p.RequestID, as.StatusRejected); err != nil {
		t.Fatal(err)
	}
	if m := in.next(t); m.To != lead.ID() || m.Type != as.CollaborationResponse {
		t.Fatalf("got %+v, want the outcome in the lead's mailbox", m)
	}
}

func TestCloseStopsRequestTimers(t *testing.T) {
	base := runtime.NumGoroutine()
	in := newInbox()
	s, err := as.New(context.Background(), as.Config{Logger: quiet, DefaultBehavior: in.behavior()})
	if err != nil {
		t.Fatal(err)
	}
	root, _ := s.Actor(as.RootID)
	role, _, _ := root.CreateRole(context.Background(), as.RoleSpec{Name: "r"})
	a, _, _ := root.SpawnAgent(context.Background(), as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	for range 10 {
		if _, err := root.RequestCollaboration(context.Background(), a.ID, as.CollaborationRequestPayload{SubtaskDescription: "x"}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitGoroutines(t, base)
}

// TestProperty_CollaborationOutcomesExactlyOnce drives random interleavings
// of requests, answers and timeouts and checks that each request ends in
// exactly one final state and its requester receives exactly one outcome.
func TestProperty_CollaborationOutcomesExactlyOnce(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		in := newInbox()
		s, err := as.New(ctx, as.Config{Logger: quiet, DefaultBehavior: in.behavior()})
		if err != nil {
			rt.Fatal(err)
		}
		defer s.Close(ctx)
		root, _ := s.Actor(as.RootID)
		root = root.WithTask("t")
		role, _, _ := root.CreateRole(ctx, as.RoleSpec{Name: "lead"})
		leadInfo, _, _ := root.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
		lead, _ := s.Actor(leadInfo.ID)
		hrole, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "helper"})
		var helpers []*as.Actor
		for range 3 {
			h, _, _ := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: hrole.ID, Brief: validBrief()})
			ha, _ := s.Actor(h.ID)
			helpers = append(helpers, ha)
		}

		type req struct {
			id     string
			helper *as.Actor
			closed bool
		}
		var reqs []*req
		n := rapid.IntRange(1, 12).Draw(rt, "steps")
		for range n {
			if len(reqs) == 0 || rapid.Bool().Draw(rt, "new") {
				h := rapid.SampledFrom(helpers).Draw(rt, "helper")
				timeout := time.Duration(rapid.IntRange(0, 3).Draw(rt, "timeoutMs")) * time.Millisecond
				id, err := lead.RequestCollaboration(ctx, h.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, timeout)
				if err != nil {
					rt.Fatal(err)
				}
				reqs = append(reqs, &req{id: id, helper: h})
				continue
			}
			r := rapid.SampledFrom(reqs).Draw(rt, "answer")
			status := rapid.SampledFrom([]as.RequestStatus{as.StatusCompleted, as.StatusError, as.StatusRejected}).Draw(rt, "status")
			err := answer(rt, r.helper, lead.ID(), r.id, status)
			switch {
			case err == nil:
				if r.closed {
					rt.Fatalf("request %s answered twice", r.id)
				}
				r.closed = true
			case errors.Is(err, as.ErrRequestClosed):
				r.closed = true // answered before, or timed out
			default:
				rt.Fatalf("answer %s: %v", r.id, err)
			}
		}
		// Settle the rest by timeouts: requests without one are answered.
		for _, r := range reqs {
			if err := answer(rt, r.helper, lead.ID(), r.id, as.StatusCompleted); err != nil && !errors.Is(err, as.ErrRequestClosed) {
				rt.Fatal(err)
			}
		}
		outcomes := map[string]int{}
		for len(outcomes) < len(reqs) {
			select {
			case m := <-in.ch:
				if m.To == lead.ID() && m.Type == as.CollaborationResponse {
					var p as.CollaborationResponsePayload
					m.Decode(&p)
					outcomes[p.RequestID]++
				}
			case <-time.After(hangGuard):
				rt.Fatalf("%d outcomes for %d requests", len(outcomes), len(reqs))
			}
		}
		// Nothing more may come: a marker sent last arrives before any stray outcome would.
		helpers[0].SendText(ctx, lead.ID(), "end")
		for {
			m := in.next(rt)
			if m.To != lead.ID() {
				continue
			}
			if m.Text() == "end" {
				break
			}
			var p as.CollaborationResponsePayload
			m.Decode(&p)
			outcomes[p.RequestID]++
		}
		for _, r := range reqs {
			if outcomes[r.id] != 1 {
				rt.Fatalf("request %s had %d outcomes", r.id, outcomes[r.id])
			}
		}
	})
}

func TestRespondFindsTheRequester(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	_, lead, helper := twoAgents(t, in)
	id, err := lead.RequestCollaboration(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	in.next(t)
	if _, err := lead.Respond(ctx, id, as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: []byte(`1`)}); err == nil {
		t.Fatal("the requester answered its own request")
	}
	if _, err := helper.Respond(ctx, "req-unknown", as.CollaborationResponsePayload{Status: as.StatusRejected, ErrorMessage: "no"}); err == nil {
		t.Fatal("answered an unknown request")
	}
	m, err := helper.Respond(ctx, id, as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: []byte(`1`)})
	if err != nil || m.To != lead.ID() {
		t.Fatalf("Respond = %+v, %v", m, err)
	}
}

func TestCollaborationRequestLifecycle(t *testing.T) {
	ctx := context.Background()
	f := newSmallOrg(t, as.Config{})
	a, b := f.a.ID(), f.b.ID()

	// Without a request_id the society generates one, in the returned and
	// the delivered message alike.
	ids := map[string]bool{}
	var first string
	for i := range 2 {
		msg, err := f.a.Send(ctx, as.Outgoing{To: b, Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{SubtaskDescription: "review the page", Context: json.RawMessage(`{"artifact":"artifact:x"}`)}})
		if err != nil {
			t.Fatal(err)
		}
		var p as.CollaborationRequestPayload
		if err := msg.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(p.RequestID) == "" || ids[p.RequestID] {
			t.Fatalf("request %d: request_id %q is empty or reused", i, p.RequestID)
		}
		ids[p.RequestID] = true
		if p.SubtaskDescription != "review the page" || string(p.Context) != `{"artifact":"artifact:x"}` {
			t.Fatalf("request payload changed: %+v", p)
		}
		got := f.rec.next(t, b)
		if diff := cmp.Diff(msg, got); diff != "" {
			t.Fatalf("delivered request differs from the accepted one (-accepted +delivered):\n%s", diff)
		}
		if i == 0 {
			first = p.RequestID
		}
	}

	// Refused answers leave the request pending.
	respond := func(x *as.Actor, to string, p any) (as.Message, error) {
		return x.Send(ctx, as.Outgoing{To: to, Type: as.CollaborationResponse, Payload: p})
	}
	_, err := respond(f.g, a, as.CollaborationResponsePayload{RequestID: first, Status: as.StatusCompleted, ResultData: json.RawMessage(`1`)})
	wantCode(t, err, as.ErrWrongResponder)
	_, err = respond(f.b, a, map[string]string{"request_id": first, "status": string(as.StatusError)})
	e := wantCode(t, err, as.ErrInvalidMessageFormat)
	if diff := cmp.Diff([]string{"error_message"}, e.MissingFields); diff != "" {
		t.Fatalf("MissingFields (-want +got):\n%s", diff)
	}
	m, err := respond(f.b, a, as.CollaborationResponsePayload{RequestID: first, Status: as.StatusCompleted, ResultData: json.RawMessage(`{"verdict":"pass"}`)})
	if err != nil {
		t.Fatalf("the right answer: %v", err)
	}
	f.rec.expect(t, a, m.ID)
	_, err = respond(f.b, a, as.CollaborationResponsePayload{RequestID: first, Status: as.StatusRejected, ErrorMessage: "changed my mind"})
	wantCode(t, err, as.ErrRequestClosed)

	// A supplied request_id is kept, and cannot be used twice.
	msg, err := f.g.Send(ctx, as.Outgoing{To: b, Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: "req-mine", SubtaskDescription: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	var p as.CollaborationRequestPayload
	if err := msg.Decode(&p); err != nil || p.RequestID != "req-mine" {
		t.Fatalf("supplied request_id became %q (%v)", p.RequestID, err)
	}
	f.rec.expect(t, b, msg.ID)
	_, err = f.a.Send(ctx, as.Outgoing{To: b, Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: "req-mine", SubtaskDescription: "y"}})
	wantCode(t, err, as.ErrDuplicateRequest)
	_, err = f.a.Send(ctx, as.Outgoing{To: b, Type: as.CollaborationRequest, Payload: as.CollaborationRequestPayload{RequestID: first, SubtaskDescription: "y"}})
	wantCode(t, err, as.ErrDuplicateRequest)
	f.assertQuiet(t)
}

// TestCollaborateWithATerminatedResponderIsSettled: a request no one can
// answer any more is settled with an error, so Collaborate returns.
func TestCollaborateWithATerminatedResponderIsSettled(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{DefaultBehavior: noop})
	received := make(chan struct{}, 1)
	aa, ba := chain(t, s, as.BehaviorFunc(func(context.Context, *as.Actor, as.Message) error {
		received <- struct{}{} // the request is pending, and never answered
		return nil
	}))
	done := make(chan as.Message, 1)
	go func() {
		m, err := aa.Collaborate(ctx, ba.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, 0)
		if err != nil {
			t.Error(err)
		}
		done <- m
	}()
	<-received
	if err := aa.Terminate(ctx, ba.ID()); err != nil {
		t.Fatal(err)
	}
	m := recv(t, done, "Collaborate to return")
	var p as.CollaborationResponsePayload
	json.Unmarshal(m.Payload, &p)
	if p.Status != as.StatusError || !strings.Contains(p.ErrorMessage, "terminated") {
		t.Fatalf("outcome %+v", p)
	}
}

func TestCloseWakesCollaborate(t *testing.T) {
	ctx := context.Background()
	s, err := as.New(ctx, as.Config{Logger: quiet, DefaultBehavior: noop})
	if err != nil {
		t.Fatal(err)
	}
	aa, ba := chain(t, s, nil)
	got := make(chan error, 1)
	go func() {
		_, err := aa.Collaborate(ctx, ba.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, 0)
		got <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, "Collaborate to return after Close"); !errors.Is(err, as.ErrClosed) {
		t.Fatalf("Collaborate = %v, want ErrClosed", err)
	}
}

// TestTimeoutTooLongForADurationIsRefused: a timeout_seconds past the
// longest time.Duration is refused, by send_message with a
// collaboration_request payload and by request_collaboration alike, with a
// message naming the maximum, and nothing is sent; it is never taken as no
// timeout.
func TestTimeoutTooLongForADurationIsRefused(t *testing.T) {
	in := newInbox()
	maxSecs := strconv.FormatInt(as.MaxTimeoutSeconds, 10)
	payload := func(timeout string) string {
		return `{"to":"agent-2","message_type":"collaboration_request","payload":{"subtask_description":"x","timeout_seconds":` + timeout + `}}`
	}
	results := callTools(t, as.Config{}, in.behavior(),
		toolCall{"send_message", payload("1e10")},
		toolCall{"send_message", payload("9223372036.9")},
		toolCall{"send_message", payload("1e400")},
	)
	atMost := "at most " + maxSecs + " (about 292 years)"
	want := []struct {
		code as.Code
		in   string
	}{
		{as.ErrInvalidMessageFormat, atMost},
		{as.ErrInvalidMessageFormat, atMost},
		{as.ErrInvalidMessageFormat, atMost},
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %q", len(results), len(want), results)
	}
	for i, r := range results {
		var e toolError
		if err := json.Unmarshal([]byte(r), &e); err != nil {
			t.Fatalf("result %d: %v: %s", i, err, r)
		}
		if e.Error != string(want[i].code) || !strings.Contains(e.Message, want[i].in) {
			t.Errorf("result %d is %s, want %s with a message containing %q", i, r, want[i].code, want[i].in)
		}
		if e.Error == string(as.ErrInvalidMessageFormat) && e.MessageType != string(as.CollaborationRequest) {
			t.Errorf("result %d: message_type %q", i, e.MessageType)
		}
	}
	select {
	case m := <-in.ch:
		t.Fatalf("agent-2 got %s", m.Payload)
	default:
	}
}

// TestRequestCollaborationTakesTheLongestDuration: Actor.RequestCollaboration
// takes a Duration, so even the longest one is a timeout: the request gets
// a deadline, and the payload says MaxTimeoutSeconds.
func TestRequestCollaborationTakesTheLongestDuration(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	st := store.NewMemory()
	s := newSociety(t, as.Config{Store: st, DefaultBehavior: in.behavior()})
	lead, helper := chain(t, s, nil)
	before := time.Now()
	id, err := lead.RequestCollaboration(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "x"}, time.Duration(math.MaxInt64))
	if err != nil {
		t.Fatal(err)
	}
	var p as.CollaborationRequestPayload
	if m := in.next(t); m.Decode(&p) != nil || p.RequestID != id || p.TimeoutSeconds != float64(as.MaxTimeoutSeconds) {
		t.Fatalf("helper got %s", m.Payload)
	}
	state, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(state.Requests) != 1 || state.Requests[0].Status != string(as.StatusPending) || state.Requests[0].Deadline.Before(before.AddDate(290, 0, 0)) {
		t.Fatalf("the store holds %+v, want one pending request due in about 292 years", state.Requests)
	}
}

// TestWatchdog_StuckRequest: a collaboration request without a timeout
// that is still unanswered Config.StuckAfter after it was made is reported,
// once, to the requester's parent, with what the requester waits for; one
// answered in time is not.
func TestWatchdog_StuckRequest(t *testing.T) {
	ctx := context.Background()
	parent := newInbox()
	s := newSociety(t, as.Config{Root: noop, StuckAfter: 300 * time.Millisecond})
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", parent.behavior()).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "w"})
	asker := spawnWith(t, s, lead, role.ID, noop)
	silent := spawnWith(t, s, lead, role.ID, noop)
	answers := spawnWith(t, s, lead, role.ID, as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		var p as.CollaborationRequestPayload
		if m.Decode(&p) == nil && p.RequestID != "" {
			_, err := self.Respond(ctx, p.RequestID, as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: []byte(`"ok"`)})
			return err
		}
		return nil
	}))
	// Answered long before StuckAfter, however loaded the machine.
	quick, err := asker.Collaborate(ctx, answers.ID(), as.CollaborationRequestPayload{SubtaskDescription: "quick"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := asker.RequestCollaboration(ctx, silent.ID(), as.CollaborationRequestPayload{SubtaskDescription: "never answered"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	m := parent.next(t)
	var p as.StatusReportPayload
	if err := m.Decode(&p); err != nil || m.From != asker.ID() || p.Status != as.StatusStuck || !strings.Contains(p.Text, id) || !strings.Contains(p.Text, silent.ID()) {
		t.Fatalf("the parent got %+v (%s), want a stuck report of %s from %s", m, m.Payload, id, asker.ID())
	}
	closeSociety(t, s)
	select {
	case m := <-parent.ch:
		t.Errorf("a second report (the quick request was %s): %+v (%s)", quick.Text(), m, m.Payload)
	default:
	}
}

// TestCollaborationResponseIsOnTheRequestsTask: a request's answer carries
// on its requester's work on the request's task, as the society's own
// answer after a timeout does. An answer took the task the responder
// happened to be working on when it answered: a responder serving several
// tasks (or one that wanted to) that answered a request of task t1 in a
// turn on t2 moved the requester onto t2, with its spending, its children
// and its report to user, for which the host waiting on t1 waited in vain.
func TestCollaborationResponseIsOnTheRequestsTask(t *testing.T) {
	ctx := context.Background()
	f := newSmallOrg(t, as.Config{})
	f.request(t, f.a, f.b, "r1") // a works on t1, b on t2
	if _, err := f.b.Respond(ctx, "r1", as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: json.RawMessage(`"ok"`)}); err != nil {
		t.Fatal(err)
	}
	got := f.rec.next(t, f.a.ID())
	if got.Type != as.CollaborationResponse || got.TaskID != "t1" {
		t.Fatalf("a, which asked on t1, got a %s on task %q", got.Type, got.TaskID)
	}

	f.request(t, f.a, f.b, "r2")
	if _, err := f.b.Send(ctx, as.Outgoing{To: f.a.ID(), Type: as.CollaborationResponse, TaskID: "t2",
		Payload: as.CollaborationResponsePayload{RequestID: "r2", Status: as.StatusRejected, ErrorMessage: "no"}}); err != nil {
		t.Fatal(err)
	}
	if got := f.rec.next(t, f.a.ID()); got.TaskID != "t1" {
		t.Fatalf("an answer sent on t2 to a request of t1 arrived on task %q", got.TaskID)
	}
}

// failResponseStore fails the first change that accepts a
// collaboration_response: the society's record of a request's end.
type failResponseStore struct {
	store.Store
	failed atomic.Bool
}

func (f *failResponseStore) Apply(ctx context.Context, c store.Change) error {
	for _, m := range c.Accepted {
		if m.Type == string(as.CollaborationResponse) && f.failed.CompareAndSwap(false, true) {
			return errors.New("the disk is full, once")
		}
	}
	return f.Store.Apply(ctx, c)
}

// TestTimeoutIsTriedAgainWhenItsRecordFails: a request whose timeout
// passed is settled by the society; if recording that fails, the society
// tries again later, where the request stayed pending until the society
// was reopened, and a requester blocked in Collaborate without a deadline
// of its own waited for ever.
func TestTimeoutIsTriedAgainWhenItsRecordFails(t *testing.T) {
	ctx := context.Background()
	st := &failResponseStore{Store: store.NewMemory()}
	s := newSociety(t, as.Config{Store: st, Root: noop, Logger: quiet})
	lead := actorOf(t, s, rootSpawn(t, s, "t", "lead", "lead", noop).ID)
	role, _, _ := lead.CreateRole(ctx, as.RoleSpec{Name: "w"})
	w := spawnWith(t, s, lead, role.ID, noop)
	helper := spawnWith(t, s, lead, role.ID, noop) // never answers
	outcome := make(chan as.Message, 1)
	go func() {
		m, err := w.Collaborate(ctx, helper.ID(), as.CollaborationRequestPayload{SubtaskDescription: "help"}, 10*time.Millisecond)
		if err != nil {
			t.Error(err)
		}
		outcome <- m
	}()
	m := recv(t, outcome, "the request's outcome")
	var p as.CollaborationResponsePayload
	if err := m.Decode(&p); err != nil || p.Status != as.StatusError || !strings.Contains(p.ErrorMessage, "timeout") {
		t.Fatalf("outcome %+v (%s), want a timeout", m, m.Payload)
	}
	if !st.failed.Load() {
		t.Fatal("the store never failed the request's end: the test tests nothing")
	}
}

// fullStore fails every change that accepts a collaboration_response: a
// store whose disk stays full.
type fullStore struct{ store.Store }

func (f fullStore) Apply(ctx context.Context, c store.Change) error {
	for _, m := range c.Accepted {
		if m.Type == string(as.CollaborationResponse) {
			return errors.New("the disk is full")
		}
	}
	return f.Store.Apply(ctx, c)
}

// TestRetrySettle_EndedRequesterIsNotToldAgain: the timers of the requests
// a terminated agent made stop with it and are not armed again: nobody is
// left to tell. So when its helper ends later and recording the request's
// end fails, the society does not try again and again to tell it, with
// its task running for it.
func TestRetrySettle_EndedRequesterIsNotToldAgain(t *testing.T) {
	s := newSociety(t, as.Config{Store: fullStore{store.NewMemory()}, Root: noop, Logger: quiet})
	w, helper := askedInVain(t, s)
	terminateAndWait(t, s, w.ID())
	terminateAndWait(t, s, helper.ID())
	waitTaskStopped(t, s, "t", "the task to stop running once its only work is a terminated agent's request")
}
