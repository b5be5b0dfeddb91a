package agentsociety

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"agentsociety/store"
)

// request is a collaboration request's state. Guarded by Society.mu.
type request struct {
	id, from, to, taskID string
	status               RequestStatus
	createdAt            time.Time
	deadline             time.Time   // zero without a timeout
	timer                *time.Timer // fires at deadline while the request is pending, or, without one, at Config.StuckAfter (watch)
	watch                bool        // timer is the watchdog's: it reports the request stuck and settles nothing
	reported             bool        // the watchdog reported it stuck: recorded (see stuckEntry), so never again
	// waiter, when set, receives the request's outcome instead of the
	// requester's mailbox: the requester is blocked in Collaborate.
	waiter chan Message
}

// RequestCollaboration asks agent to for help with a subtask: it sends a
// collaboration_request and returns its request id at once. The outcome
// arrives later as a collaboration_response message to the agent: the
// responder's answer (completed, error or rejected), or, if timeout is
// positive and passes first, one with status error naming the timeout.
func (x *Actor) RequestCollaboration(ctx context.Context, to string, p CollaborationRequestPayload, timeout time.Duration) (requestID string, err error) {
	m, err := x.s.sendCollaboration(ctx, x, to, p, timeout, nil)
	if err != nil {
		return "", err
	}
	return requestIDOf(m), nil
}

// Collaborate is RequestCollaboration that waits: it returns the
// collaboration_response that settles the request (the responder's answer,
// or the society's after timeout). The outcome comes to the caller rather
// than to the agent's mailbox, so a behaviour may call Collaborate while it
// handles a message. If ctx ends first, Collaborate returns ctx.Err(), and if
// the society closes first, ErrClosed; the outcome, if it comes later, goes
// to the agent's mailbox instead. A request to an agent that is terminated
// before it answers is settled with an error.
func (x *Actor) Collaborate(ctx context.Context, to string, p CollaborationRequestPayload, timeout time.Duration) (Message, error) {
	s := x.s
	waiter := make(chan Message, 1)
	m, err := s.sendCollaboration(ctx, x, to, p, timeout, waiter)
	if err != nil {
		return Message{}, err
	}
	var why error
	select {
	case out := <-waiter:
		if out.ID == "" {
			return Message{}, &Error{Code: ErrAgentTerminated, Message: x.a.info.ID + " was terminated before the request was settled", AgentID: x.a.info.ID}
		}
		return s.received(ctx, out), nil
	case <-ctx.Done():
		why = ctx.Err()
	case <-s.done:
		why = newError(ErrClosed, "the society closed before the request was settled")
	}
	s.mu.Lock()
	if r := s.requests[requestIDOf(m)]; r != nil && r.waiter == waiter {
		r.waiter = nil // the outcome goes to the mailbox
	}
	s.mu.Unlock()
	select {
	case out := <-waiter: // settled as the caller gave up: better returned than lost
		if out.ID == "" {
			return Message{}, &Error{Code: ErrAgentTerminated, Message: x.a.info.ID + " was terminated before the request was settled", AgentID: x.a.info.ID}
		}
		return s.received(ctx, out), nil
	default:
		return Message{}, why
	}
}

// received records that m, a request's outcome handed to the requester
// blocked in Collaborate rather than to its mailbox, was taken, and returns
// it. Until then m is pending in the store, so that a crash before the
// requester had it delivers it again.
func (s *Society) received(ctx context.Context, m Message) Message {
	if !s.volatile {
		if err := s.record(context.WithoutCancel(ctx), store.Change{Finished: []string{m.ID}}); err != nil {
			s.log.LogAttrs(ctx, slog.LevelError, "recording a received outcome failed; it is delivered again on reopening",
				slog.String("msg", m.ID), slog.String("err", err.Error()))
		}
	}
	return m
}

// Respond answers collaboration request requestID, which must have been sent
// to this agent: it sends the collaboration_response to the requester, on
// the request's task. p's RequestID is set to requestID. Refusals are Send's: ErrUnknownRequest,
// ErrWrongResponder, ErrRequestClosed, or ErrInvalidMessageFormat for a
// payload that does not fit its status.
func (x *Actor) Respond(ctx context.Context, requestID string, p CollaborationResponsePayload) (Message, error) {
	x.s.mu.Lock()
	var requester, asked string
	if r := x.s.requests[requestID]; r != nil {
		requester, asked = r.from, r.to
	}
	x.s.mu.Unlock()
	switch {
	case requester == "":
		return Message{}, x.s.refuse("send_message", x.ID(), unknownRequest(requestID))
	case asked != x.ID():
		// Before Send, whose refusal of the requester's answer to itself
		// would name nothing it did.
		return Message{}, x.s.refuse("send_message", x.ID(), wrongResponder(requestID, requester, asked, x.ID()))
	}
	p.RequestID = requestID
	return x.Send(ctx, Outgoing{To: requester, Type: CollaborationResponse, Payload: p})
}

// wrongResponder is the refusal of by's answer to request id, which
// requester sent to asked, not to by.
func wrongResponder(id, requester, asked, by string) *Error {
	msg := "request " + id + " was sent by " + requester + " to " + asked + "; only " + asked + " answers it, to " + requester
	if by == requester {
		msg = "request " + id + " is one you made, to " + asked + ": its outcome comes to you as a collaboration_response from " + asked +
			"; you do not answer it yourself (to change or drop the work, message " + asked + ")"
	}
	return &Error{Code: ErrWrongResponder, Message: msg}
}

// unknownRequest is the refusal of an answer to request id, which the
// society does not have.
func unknownRequest(id string) *Error {
	return &Error{Code: ErrUnknownRequest, Message: "no collaboration request " + strconvQuote(id) +
		": it was never made, or it was settled long ago and is forgotten; check the request_id you were sent"}
}

func (s *Society) sendCollaboration(ctx context.Context, x *Actor, to string, p CollaborationRequestPayload, timeout time.Duration, waiter chan Message) (Message, error) {
	if timeout > 0 {
		// A Duration's seconds may round, as a float, to just past the
		// longest Duration.
		p.TimeoutSeconds = min(timeout.Seconds(), float64(MaxTimeoutSeconds))
	}
	return s.sendWith(ctx, x, Outgoing{To: to, Type: CollaborationRequest, Payload: p}, waiter, false)
}

func requestIDOf(m Message) string {
	var p CollaborationRequestPayload
	m.Decode(&p) // the society wrote this payload
	return p.RequestID
}

// armTimeout starts r's timer, unless the society is closed (a change
// recorded as Close began commits after it). Called with s.mu held: the
// timer is counted in s.wg until it fires or Close stops it, so
// no timer outlives Close.
func (s *Society) armTimeout(r *request) {
	if r.status != StatusPending || s.closed.Load() {
		return // once closed, the timer starts again when the society is reopened
	}
	if r.deadline.IsZero() {
		s.armWatch(r)
		return
	}
	s.wg.Add(1)
	s.busier(r.taskID) // the timeout will answer the request
	r.timer = time.AfterFunc(time.Until(r.deadline), func() {
		defer s.wg.Done()
		s.expire(r.id)
		s.mu.Lock()
		s.idler(r.taskID)
		s.mu.Unlock()
	})
}

// stopTimer stops r's timeout, unless it fired already. Called with s.mu
// held.
func (s *Society) stopTimer(r *request) {
	if r.timer != nil && r.timer.Stop() {
		s.wg.Done()
		if !r.watch {
			s.idler(r.taskID)
		}
	}
	r.timer = nil
}

// armWatch starts the watchdog's timer of r, a request without a timeout:
// if r is still pending Config.StuckAfter after it was made, the
// requester's parent (user, for a lead) is told once what the requester
// waits for. Called with s.mu held, as armTimeout is.
func (s *Society) armWatch(r *request) {
	if s.cfg.StuckAfter < 0 || r.reported {
		return
	}
	s.wg.Add(1)
	r.watch = true
	r.timer = time.AfterFunc(time.Until(r.createdAt.Add(s.cfg.StuckAfter)), func() {
		defer s.wg.Done()
		s.reportStuck(r)
	})
}

// The store keeps, for a request the watchdog reported stuck, a state
// entry under this scope prefix and the request's id, so that a society
// reopened on it does not report the request again; settling the request
// deletes it.
const (
	stuckScope = "stuck:"
	stuckKey   = "reported"
)

func stuckEntry(id string, reported bool) store.StateEntry {
	e := store.StateEntry{Scope: stuckScope + id, Key: stuckKey, Writer: RootID, UpdatedAt: time.Now()}
	if reported {
		e.Value = []byte("true")
	}
	return e
}

// restoreStuck takes back the mark of a request reported stuck, reporting
// whether e is one. Called with s.mu held, while the society opens, after
// the requests are loaded.
func (s *Society) restoreStuck(e store.StateEntry) bool {
	id, ok := strings.CutPrefix(e.Scope, stuckScope)
	if !ok || e.Key != stuckKey {
		return false
	}
	if r := s.requests[id]; r != nil && r.status == StatusPending {
		r.reported = true
	}
	return true
}

// reportStuck tells the parent of r's requester that r is still
// unanswered, once: it records that r was reported, then reports it.
func (s *Society) reportStuck(r *request) {
	var from *agent
	var parent string
	ctx := s.runCtx
	err := s.apply(ctx, func() (*change, *Error) {
		from, parent = s.agents[r.from], ""
		if r.status != StatusPending || r.reported || from == nil {
			return nil, nil
		}
		parent = from.info.ParentID
		if parent == RootID {
			parent = UserID
		}
		return &change{
			claims: []string{claimRequest(r.id)},
			record: store.Change{States: []store.StateEntry{stuckEntry(r.id, true)}},
			commit: func() {
				r.reported = true
				if r.watch { // else a retry of a failed settle armed it since (see retrySettle)
					r.timer = nil
				}
			},
		}, nil
	})
	if err != nil || parent == "" {
		if err != nil && !errors.Is(err, ErrClosed) {
			s.log.LogAttrs(ctx, slog.LevelError, "recording a stuck request failed", slog.String("request", r.id), slog.String("err", err.Error()))
		}
		return
	}
	text := expand(s.lang.Strings.StuckRequest, "from", r.from, "to", r.to, "request", r.id, "after", s.cfg.StuckAfter.String())
	s.log.LogAttrs(ctx, slog.LevelWarn, "request stuck", slog.String("request", r.id), slog.String("from", r.from), slog.String("to", r.to))
	s.emit(Event{Kind: EventRequestStuck, Task: r.taskID, Agent: r.from, Target: r.to, Request: r.id, Detail: text})
	if _, err := s.sendOwn(ctx, &Actor{s: s, a: from, taskID: r.taskID}, Outgoing{To: parent, Type: StatusReport, Payload: StatusReportPayload{Status: StatusStuck, Text: text}}); err != nil && !errors.Is(err, ErrClosed) {
		s.log.LogAttrs(ctx, slog.LevelWarn, "reporting a stuck request failed", slog.String("request", r.id), slog.String("err", err.Error()))
	}
}

// StatusStuck is the status of the report that tells an agent's parent (or
// user) that a collaboration request of the agent, without a timeout, is
// still unanswered Config.StuckAfter after it was made.
const StatusStuck = "stuck"

// StatusStalled is the status of the report that tells user that a task
// has had work in flight and no message of it handled for
// Config.StuckAfter, and an agent's parent that the agent is one it waits
// for (see Config.StuckAfter).
const StatusStalled = "stalled"

// stopTimeouts stops every request's timer. Called by Close with s.mu held,
// after setting closed; a timer that already fired sees closed and returns.
func (s *Society) stopTimeouts() {
	for _, r := range s.requests {
		s.stopTimer(r)
	}
	for _, t := range s.tasks {
		s.stopStall(t)
	}
}

// expire settles request id with a timeout, if it is still pending: the
// requester gets a collaboration_response with status error from the agent
// that did not answer.
func (s *Society) expire(id string) {
	s.settle(context.Background(), id, StatusTimeout)
}

// settleRequestsTo settles with an error the pending requests addressed to
// agents that ended, whose answers can no longer come.
func (s *Society) settleRequestsTo(ctx context.Context, ended []*agent) {
	gone := map[string]bool{}
	for _, a := range ended {
		gone[a.info.ID] = true
	}
	var ids []string
	s.mu.Lock()
	for _, r := range s.requests {
		if r.status == StatusPending && gone[r.to] && !gone[r.from] {
			ids = append(ids, r.id)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.settle(ctx, id, StatusError)
	}
}

// settle closes request id, if it is still pending, with status: the
// requester gets a collaboration_response with status error, from the agent
// that did not answer, whose error_message says why: StatusTimeout for a
// request whose timeout passed, StatusError for one whose responder ended.
func (s *Society) settle(ctx context.Context, id string, status RequestStatus) {
	s.settleOr(ctx, id, status, settleRetryFirst)
}

// A request whose end the society failed to record is settled again after
// settleRetryFirst, a wait that doubles after each failure up to
// settleRetryMax.
const (
	settleRetryFirst = time.Second
	settleRetryMax   = time.Minute
)

// settleOr is settle, which, if recording the request's end fails, tries
// again after wait (see retrySettle).
func (s *Society) settleOr(ctx context.Context, id string, status RequestStatus, wait time.Duration) {
	var p pendingSend
	err := s.apply(ctx, func() (*change, *Error) {
		p.answered = nil
		r := s.requests[id]
		// The responder may be forgotten already (see prune): the requester
		// is told all the same.
		if r == nil || r.status != StatusPending || s.agents[r.from] == nil {
			return nil, nil
		}
		why := "terminated: " + r.to + " was terminated before it answered"
		if status == StatusTimeout {
			why = "timeout: " + r.to + " did not answer within " + r.deadline.Sub(r.createdAt).Round(time.Millisecond).String()
		}
		payload, _ := marshal(CollaborationResponsePayload{RequestID: r.id, Status: StatusError, ErrorMessage: why})
		p = pendingSend{
			msg:      &Message{From: r.to, To: r.from, TaskID: r.taskID, Type: CollaborationResponse, Payload: payload, SentAt: time.Now()},
			to:       s.agents[r.from],
			answered: r, status: status,
		}
		return s.accepting(&p), nil
	})
	switch {
	case err != nil && !errors.Is(err, ErrClosed):
		s.log.LogAttrs(ctx, slog.LevelError, "recording a request's end failed; trying again later",
			slog.String("request", id), slog.Duration("in", wait), slog.String("err", err.Error()))
		s.retrySettle(id, status, wait)
	case err == nil && p.answered != nil:
		s.logMessage(ctx, "message accepted", p.msg)
		s.log.LogAttrs(ctx, slog.LevelInfo, "request settled by the society",
			slog.String("request", id), slog.String("from", p.msg.To), slog.String("to", p.msg.From), slog.String("status", string(status)))
	}
}

// retrySettle arms request id's timer to settle it with status after wait,
// the end of it having failed to be recorded: else it would stay pending
// until the society is reopened, and a requester blocked in Collaborate
// without a deadline of its own would wait for ever. The timer is counted
// as a timeout's is (see armTimeout), and Close stops it.
func (s *Society) retrySettle(id string, status RequestStatus, wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.requests[id]
	if r == nil || r.status != StatusPending || s.closed.Load() {
		return // settled meanwhile; or settled when the society is opened again
	}
	if a := s.agents[r.from]; a == nil || a.info.Status == StatusTerminated {
		return // nobody is left to tell (see finishTermination)
	}
	s.stopTimer(r) // the watchdog's, for a request without a timeout
	r.watch = false
	s.wg.Add(1)
	s.busier(r.taskID)
	next := min(2*wait, settleRetryMax)
	r.timer = time.AfterFunc(wait, func() {
		defer s.wg.Done()
		s.settleOr(context.Background(), id, status, next)
		s.mu.Lock()
		s.idler(r.taskID)
		s.mu.Unlock()
	})
}

// MaxTimeoutSeconds is the largest timeout_seconds a collaboration request
// may give, about 292 years: the longest time.Duration, in whole seconds. A
// larger one is refused, never taken as no timeout.
const MaxTimeoutSeconds = int64(math.MaxInt64 / time.Second)

// timeoutProblem is what a model is told of a timeout_seconds it must correct.
var timeoutProblem = "timeout_seconds, when given, must be a positive number of seconds, at most " +
	strconv.FormatInt(MaxTimeoutSeconds, 10) + " (about 292 years); leave it out for no timeout"

// timeoutOf reads a collaboration request's timeout_seconds: zero when it
// is absent, and ok false when it is not a number in (0, MaxTimeoutSeconds].
func timeoutOf(f fields) (d time.Duration, ok bool) {
	v, present := f["timeout_seconds"]
	if !present {
		return 0, true
	}
	secs, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return 0, false
	}
	return secondsToDuration(secs)
}

// secondsToDuration converts a timeout in seconds to a Duration, reporting
// false for one that is not positive or exceeds MaxTimeoutSeconds (NaN
// included). A positive timeout shorter than a nanosecond is a nanosecond.
func secondsToDuration(secs float64) (time.Duration, bool) {
	if !(secs > 0 && secs <= float64(MaxTimeoutSeconds)) {
		return 0, false
	}
	return max(time.Duration(secs*float64(time.Second)), 1), true
}
