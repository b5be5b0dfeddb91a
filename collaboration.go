package agentsociety

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"agentsociety/store"
)

// StatusTimeout is the status of a collaboration request whose responder did
// not answer within its timeout. The requester receives a
// collaboration_response with StatusError whose error_message names the
// timeout, and a later answer is refused with ErrRequestClosed.
const StatusTimeout = "timeout"

// request is a collaboration request's state. Guarded by Society.mu.
type request struct {
	id, from, to, taskID string
	status               string
	createdAt            time.Time
	deadline             time.Time   // zero without a timeout
	timer                *time.Timer // fires at deadline while the request is pending
	// waiter, when set, receives the request's outcome instead of the
	// requester's mailbox: the requester is blocked in Collaborate.
	waiter chan Message
}

func (r *request) record() store.Request {
	return store.Request{ID: r.id, From: r.from, To: r.to, TaskID: r.taskID, Status: r.status, CreatedAt: r.createdAt, Deadline: r.deadline}
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
	s.release(x.turn) // the agent asked may be the one this turn holds
	var why error
	select {
	case out := <-waiter:
		return out, nil
	case <-ctx.Done():
		why = ctx.Err()
	case <-s.done:
		why = newError(ErrClosed, "the society closed before the request was settled")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.requests[requestIDOf(m)]; r != nil {
		r.waiter = nil
	}
	select {
	case out := <-waiter: // settled as the caller gave up: better returned than lost
		return out, nil
	default:
		return Message{}, why
	}
}

// Respond answers collaboration request requestID, which must have been sent
// to this agent: it sends the collaboration_response to the requester. p's
// RequestID is set to requestID. Refusals are Send's: ErrUnknownRequest,
// ErrWrongResponder, ErrRequestClosed, or ErrInvalidMessageFormat for a
// payload that does not fit its status.
func (x *Actor) Respond(ctx context.Context, requestID string, p CollaborationResponsePayload) (Message, error) {
	x.s.mu.RLock()
	var requester string
	if r := x.s.requests[requestID]; r != nil {
		requester = r.from
	}
	x.s.mu.RUnlock()
	if requester == "" {
		return Message{}, x.s.refuse("send_message", x.ID(), &Error{Code: ErrUnknownRequest, Message: "no collaboration request " + strconvQuote(requestID)})
	}
	p.RequestID = requestID
	return x.Send(ctx, Outgoing{To: requester, Type: CollaborationResponse, Payload: p})
}

func (s *Society) sendCollaboration(ctx context.Context, x *Actor, to string, p CollaborationRequestPayload, timeout time.Duration, waiter chan Message) (Message, error) {
	if timeout > 0 {
		p.TimeoutSeconds = timeout.Seconds()
	}
	return s.sendWith(ctx, x, Outgoing{To: to, Type: CollaborationRequest, Payload: p}, waiter)
}

func requestIDOf(m Message) string {
	var p CollaborationRequestPayload
	m.Decode(&p) // the society wrote this payload
	return p.RequestID
}

// armTimeout starts r's timer. Called with s.mu held for writing and s.closed
// false: the timer is counted in s.wg until it fires or Close stops it, so no
// timer outlives Close.
func (s *Society) armTimeout(r *request) {
	if r.deadline.IsZero() || r.status != StatusPending {
		return
	}
	s.wg.Add(1)
	r.timer = time.AfterFunc(time.Until(r.deadline), func() {
		defer s.wg.Done()
		s.expire(r.id)
	})
}

// stopTimeouts stops every request's timer. Called by Close with s.mu held
// for writing after setting closed; a timer that already fired sees closed
// and returns.
func (s *Society) stopTimeouts() {
	for _, r := range s.requests {
		if r.timer != nil && r.timer.Stop() {
			s.wg.Done()
		}
		r.timer = nil
	}
}

// expire settles request id with a timeout, if it is still pending: the
// requester gets a collaboration_response with status error from the agent
// that did not answer.
func (s *Society) expire(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.requests[id]
	if s.closed.Load() || r == nil || r.status != StatusPending {
		return
	}
	r.timer = nil
	waited := r.deadline.Sub(r.createdAt).Round(time.Millisecond)
	s.settle(context.Background(), r, StatusTimeout, "timeout: "+r.to+" did not answer within "+waited.String())
}

// settleRequestsTo settles with an error the pending requests addressed to
// agents that ended, whose answers can no longer come. Called with s.mu held
// for writing.
func (s *Society) settleRequestsTo(ctx context.Context, ended []*agent) {
	gone := map[string]bool{}
	for _, a := range ended {
		gone[a.info.ID] = true
	}
	for _, r := range s.requests {
		if r.status == StatusPending && gone[r.to] && !gone[r.from] {
			s.settle(ctx, r, StatusError, "terminated: "+r.to+" was terminated before it answered")
		}
	}
}

// settle closes pending request r with status, sending the requester a
// collaboration_response with status error and message why, from the agent
// that did not answer. Called with s.mu held for writing.
func (s *Society) settle(ctx context.Context, r *request, status, why string) {
	to, from := s.agents[r.from], s.agents[r.to]
	if to == nil || from == nil {
		return
	}
	payload, _ := marshal(CollaborationResponsePayload{RequestID: r.id, Status: StatusError, ErrorMessage: why})
	p := pendingSend{
		msg:      Message{From: r.to, To: r.from, TaskID: r.taskID, Type: CollaborationResponse, Payload: payload, SentAt: time.Now()},
		to:       to,
		answered: r, status: status, divert: r.waiter,
	}
	if err := s.acceptLocked(ctx, &p, nil); err != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "recording a request's end failed; it stays pending",
			slog.String("request", r.id), slog.String("err", err.Error()))
		return
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "request settled by the society",
		slog.String("request", r.id), slog.String("from", r.from), slog.String("to", r.to), slog.String("status", status))
}

// timeoutOf reads a collaboration request's timeout_seconds: zero when it
// is absent.
func timeoutOf(f fields) time.Duration {
	v, ok := f["timeout_seconds"]
	if !ok {
		return 0
	}
	secs, err := strconv.ParseFloat(string(v), 64)
	if err != nil || secs <= 0 {
		return 0
	}
	return time.Duration(secs * float64(time.Second))
}
