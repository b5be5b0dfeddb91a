package agentsociety

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"agentsociety/internal/ids"
	"agentsociety/store"
)

// Send sends a message as the agent. It returns once the message is accepted:
// checked, recorded in the store and queued for the receiver; it never waits
// for the receiver. The returned Message is what the receiver gets, with the
// society's sender, id and time, and any field the society filled in (the
// request_id of a collaboration request, the target's role in an
// introduction response).
//
// A refused message is not queued and changes no registry. Refusals:
// ErrAgentNotFound for an unknown receiver; ErrInvalidArgument for a message
// to oneself; ErrInvalidMessageFormat for a payload that does not fit its
// type; ErrUnknownContact under ContactStrict. An introduction_response is
// refused with ErrAgentNotFound if its target does not exist and with
// ErrUnknownContact if the sender does not know the target. A
// collaboration_request reusing a request id is refused with
// ErrDuplicateRequest; a collaboration_response with ErrUnknownRequest,
// ErrWrongResponder (not from the agent asked, or not to the requester) or
// ErrRequestClosed (already answered).
func (x *Actor) Send(ctx context.Context, out Outgoing) (Message, error) {
	return x.s.send(ctx, x, out)
}

// SendText sends the payload {"text": text} to agent to, as a general message.
func (x *Actor) SendText(ctx context.Context, to, text string) (Message, error) {
	return x.Send(ctx, Outgoing{To: to, Payload: Text(text)})
}

// pendingSend is a message that passed its checks, with what accepting it
// changes besides queueing it.
type pendingSend struct {
	msg      Message
	to       *agent
	via      *turn // the turn of the handler that sends, if any
	contacts []ownedContact
	request  *request // a new request, or nil
	answered *request // the request a response closes, or nil
	status   string   // the answered request's new status
	// divert is the waiter of the answered request: the message goes to it,
	// not to the mailbox, and so is finished as soon as it is accepted.
	divert chan Message
}

// changesState reports whether accepting a message of type t always changes
// the organisation (requests, or the receiver's contacts).
func changesState(t MessageType) bool {
	return t == IntroductionResponse || t == CollaborationRequest || t == CollaborationResponse
}

func (p *pendingSend) mutates() bool {
	return len(p.contacts) > 0 || p.request != nil || p.answered != nil
}

func (s *Society) send(ctx context.Context, x *Actor, out Outgoing) (Message, error) {
	return s.sendWith(ctx, x, out, nil)
}

// sendWith is send; for a collaboration request, waiter, if not nil,
// receives the request's outcome instead of the sender's mailbox.
func (s *Society) sendWith(ctx context.Context, x *Actor, out Outgoing, waiter chan Message) (Message, error) {
	from := x.a
	m, f, err := compose(from, x.taskID, out)
	if err != nil {
		return Message{}, s.refuse("send_message", from.info.ID, err)
	}
	// Most messages go between agents that know each other and change
	// nothing but the queue: accept them under the read lock, and take the
	// write lock only when accepting the message changes the organisation.
	// The types whose acceptance always changes it take the write lock at
	// once, so that prepare, which rewrites their payload, runs once.
	write := changesState(m.Type)
	for {
		sent, retry, err := s.accept(ctx, x, m, f, write, waiter)
		switch {
		case retry:
			write = true
		case err != nil:
			return Message{}, s.refuse("send_message", from.info.ID, err)
		default:
			return sent, nil
		}
	}
}

// compose builds the message an agent's Outgoing describes and checks its
// payload against its type.
func compose(from *agent, taskID string, out Outgoing) (Message, fields, *Error) {
	if out.Type == "" {
		out.Type = General
	}
	if out.TaskID == "" {
		out.TaskID = taskID
	}
	payload, err := encodePayload(out.Payload)
	if err != nil {
		e := err.(*Error)
		e.MessageType = out.Type
		return Message{}, nil, e
	}
	f, err := checkPayload(out.Type, payload)
	if err != nil {
		return Message{}, nil, err.(*Error)
	}
	return Message{From: from.info.ID, To: out.To, TaskID: out.TaskID, Type: out.Type, Payload: payload, SentAt: time.Now()}, f, nil
}

// accept checks m under s.mu, held for writing if write, and records and
// queues it. Under the read lock it returns retry when accepting m would
// change the organisation. Checking closed under s.mu orders every accepted
// message before Close, which sets closed under s.mu held for writing.
func (s *Society) accept(ctx context.Context, x *Actor, m Message, f fields, write bool, waiter chan Message) (sent Message, retry bool, err *Error) {
	if write {
		s.mu.Lock()
		defer s.mu.Unlock()
	} else {
		s.mu.RLock()
		defer s.mu.RUnlock()
	}
	if s.closed.Load() {
		return Message{}, false, newError(ErrClosed, "the society is closed")
	}
	p := pendingSend{via: x.turn}
	if err := s.prepare(&p, x.a, m, f); err != nil {
		return Message{}, false, err
	}
	if !write && p.mutates() {
		return Message{}, true, nil
	}
	if p.request != nil {
		p.request.waiter = waiter
	}
	if err := s.acceptLocked(ctx, &p, nil); err != nil {
		return Message{}, false, err
	}
	return p.msg, false, nil
}

// acceptLocked numbers p's message, records it with the rest of p's change
// (and the agents in extra, if any), applies p's changes and routes the
// message. Called with s.mu held, for writing if p changes anything but the
// queue, and s.closed false. On a store failure nothing has changed.
func (s *Society) acceptLocked(ctx context.Context, p *pendingSend, extra []store.Agent) *Error {
	p.msg.Seq = s.seq.Add(1)
	p.msg.ID = s.msgIDs.ID(p.msg.Seq)
	ch := p.change(!s.volatile)
	ch.Agents = extra
	if err := s.record(ctx, ch); err != nil {
		return storeError(err)
	}
	if p.mutates() {
		s.commit(p)
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.logMessage(ctx, "message accepted", &p.msg)
	}
	s.route(p)
	return nil
}

// record applies ch to the store. An empty change, which is what accepting
// or finishing a message alone makes on a volatile store, costs nothing but
// the check of ctx that Apply would have made.
func (s *Society) record(ctx context.Context, ch store.Change) error {
	if ch.Empty() {
		return ctx.Err()
	}
	return s.store.Apply(ctx, ch)
}

// route hands an accepted message to its receiver: to the waiter blocked in
// Collaborate for the request it settles, if there is one, else to the
// receiver's mailbox. Called with s.mu held and s.closed false.
func (s *Society) route(p *pendingSend) {
	if p.divert != nil {
		p.divert <- p.msg // buffered, and each request is settled once
		return
	}
	s.enqueue(p.to, p.msg, p.via)
}

// change returns the store record of accepting p, with the message itself
// if withMessage.
func (p *pendingSend) change(withMessage bool) store.Change {
	var ch store.Change
	if withMessage {
		ch.Accepted = []store.Message{messageRecord(&p.msg)}
		if p.divert != nil {
			ch.Finished = []string{p.msg.ID}
		}
	}
	if len(p.contacts) > 0 {
		ch.Contacts = contactRecords(p.contacts)
	}
	if p.request != nil {
		ch.Requests = append(ch.Requests, p.request.record())
	}
	if p.answered != nil {
		r := *p.answered
		r.status = p.status
		ch.Requests = append(ch.Requests, r.record())
	}
	return ch
}

// commit applies p's changes to the organisation. Called with s.mu held for
// writing, after the store recorded them.
func (s *Society) commit(p *pendingSend) {
	for _, e := range p.contacts {
		s.contacts.Add(e.owner, e.c)
	}
	if p.request != nil {
		s.requests[p.request.id] = p.request
		s.armTimeout(p.request)
	}
	if r := p.answered; r != nil {
		r.status, r.waiter = p.status, nil
		if r.timer != nil && r.timer.Stop() {
			s.wg.Done()
		}
		r.timer = nil
	}
}

// logMessage records a step of m's journey at Debug level. It is a function
// of its own so that its attributes take no room on the message path's stack
// when Debug is off.
//
//go:noinline
func (s *Society) logMessage(ctx context.Context, what string, m *Message) {
	s.log.LogAttrs(ctx, slog.LevelDebug, what,
		slog.String("msg", m.ID), slog.String("from", m.From), slog.String("to", m.To),
		slog.String("type", string(m.Type)), slog.String("task", m.TaskID))
}

// prepare checks m against the organisation and works out in p what
// accepting it changes. It only reads; called with s.mu held for reading or
// writing.
func (s *Society) prepare(p *pendingSend, from *agent, m Message, f fields) *Error {
	by := from.info.ID
	to := s.agents[m.To]
	if to == nil {
		return &Error{Code: ErrAgentNotFound, Message: "no agent " + strconvQuote(m.To), AgentID: m.To}
	}
	if to == from {
		return &Error{Code: ErrInvalidArgument, Message: "an agent cannot send a message to itself", AgentID: m.To}
	}
	if to.info.Status != StatusActive || from.info.Status == StatusTerminated {
		return terminatedError(from, to)
	}
	if s.cfg.ContactPolicy == ContactStrict && by != UserID && m.To != UserID && !s.contacts.knows(by, m.To) {
		return &Error{Code: ErrUnknownContact, Message: m.To + " is not in your contacts; ask a contact for an introduction", AgentID: m.To}
	}
	p.msg, p.to = m, to
	if !s.contacts.knows(m.To, by) {
		p.contacts = append(p.contacts, firstContact(from, m))
	}
	if changesState(m.Type) {
		return s.prepareTyped(p, f)
	}
	return nil
}

func terminatedError(from, to *agent) *Error {
	a := to
	if from.info.Status == StatusTerminated {
		a = from
	}
	return &Error{Code: ErrAgentTerminated, Message: a.info.ID + " is " + string(a.info.Status) + " and takes no messages", AgentID: a.info.ID}
}

// firstContact is the entry a first message from from adds to its receiver.
func firstContact(from *agent, m Message) ownedContact {
	return ownedContact{m.To, Contact{ID: from.info.ID, Role: from.roleName, InterfaceSpec: from.spec, Source: SourceFirstMessage, AddedAt: m.SentAt}}
}

// prepareTyped does prepare's work for the message types whose acceptance
// changes the organisation.
func (s *Society) prepareTyped(p *pendingSend, f fields) *Error {
	m, by := p.msg, p.msg.From
	switch m.Type {
	case IntroductionResponse:
		return s.prepareIntroduction(p, f, m.SentAt)
	case CollaborationRequest:
		id := f.text("request_id")
		if id == "" {
			id = ids.Random("req")
			f.set("request_id", id)
			p.msg.Payload = f.encode()
		} else if s.requests[id] != nil {
			return &Error{Code: ErrDuplicateRequest, Message: "request_id " + strconvQuote(id) + " is already in use"}
		}
		p.request = &request{id: id, from: by, to: m.To, taskID: m.TaskID, status: StatusPending, createdAt: m.SentAt}
		if d := timeoutOf(f); d > 0 {
			p.request.deadline = m.SentAt.Add(d)
		}
	case CollaborationResponse:
		id := f.text("request_id")
		r := s.requests[id]
		switch {
		case r == nil:
			return &Error{Code: ErrUnknownRequest, Message: "no collaboration request " + strconvQuote(id)}
		case r.to != by || r.from != m.To:
			return &Error{Code: ErrWrongResponder, Message: "request " + id + " was sent by " + r.from + " to " + r.to + "; only " + r.to + " answers it, to " + r.from}
		case r.status != StatusPending:
			return &Error{Code: ErrRequestClosed, Message: "request " + id + " is already " + r.status}
		}
		p.answered, p.status, p.divert = r, f.text("status"), r.waiter
	}
	return nil
}

// prepareIntroduction checks an introduction_response, fills in the target's
// real role and interface, and adds the target to the registry of the agent
// the introduction is for: the receiver, or the original requester named by
// requester_agent_id when the receiver only forwards the answer along a
// chain of introducers. The introducer must know the target, unless the
// beneficiary already does (a forwarder passing on what was added).
func (s *Society) prepareIntroduction(p *pendingSend, f fields, now time.Time) *Error {
	by, id := p.msg.From, f.text("target_agent_id")
	target := s.agents[id]
	if target == nil {
		return &Error{Code: ErrAgentNotFound, Message: "target_agent_id " + strconvQuote(id) + " does not exist", AgentID: id}
	}
	beneficiary := p.msg.To
	if r := f.text("requester_agent_id"); r != "" {
		if s.agents[r] == nil {
			return &Error{Code: ErrAgentNotFound, Message: "requester_agent_id " + strconvQuote(r) + " does not exist", AgentID: r}
		}
		beneficiary = r
	}
	if id == beneficiary {
		return &Error{Code: ErrInvalidArgument, Message: "an agent cannot be introduced to itself", AgentID: id}
	}
	known := s.contacts.knows(beneficiary, id)
	if !known && !s.contacts.knows(by, id) {
		return &Error{Code: ErrUnknownContact, Message: "you can only introduce agents in your own contacts", AgentID: id}
	}
	f.set("target_role", target.roleName)
	if target.spec != nil {
		f.set("target_interface_spec", target.spec)
	} else {
		delete(f, "target_interface_spec")
	}
	p.msg.Payload = f.encode()
	if !known {
		p.contacts = append(p.contacts, ownedContact{beneficiary, Contact{
			ID: id, Role: target.roleName, InterfaceSpec: target.spec, Source: SourceIntroduction,
			IntroducedBy: by, Note: f.text("advice"), AddedAt: now,
		}})
	}
	return nil
}

// enqueue queues m for a and gets a's messages drained if nobody drains
// them: by the drainer of via, the turn that sends m, if it holds a, else by
// a new drainer. Called with s.mu held and s.closed false, so a new drainer
// is counted before Close can wait.
func (s *Society) enqueue(a *agent, m Message, via *turn) {
	switch {
	case !a.inbox().Push(m):
	case via.hold(a):
		s.sweepHeld()
	default:
		s.start(a)
	}
}

// deliver hands m to a's behaviour, on drainer d, and records that its
// handling ended. It returns the agent the handler's turn held, if any.
func (s *Society) deliver(d *drainer, a *agent, m Message) (next *agent) {
	ctx := s.runCtx
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.logMessage(ctx, "message delivered", &m)
	}
	var err error
	status, handoff := StatusActive, ""
	if a.ending.Load() {
		status, handoff = s.statusOf(a)
	}
	if status == StatusTerminated {
		s.log.LogAttrs(ctx, slog.LevelInfo, "message dropped: the agent was terminated", slog.String("msg", m.ID), slog.String("agent", a.info.ID))
	} else {
		next, err = s.handle(ctx, d, a, m)
	}
	// The turn's history is recorded with the end of its message, so that
	// after a crash the message is handled again from the history before it.
	var done store.Change
	if !s.volatile {
		done.Finished = []string{m.ID}
	}
	if h, ok := a.mind.record(a.info.ID); ok {
		done.Histories = []store.History{h}
	}
	if !done.Empty() { // on a volatile store a code-driven turn records nothing
		if ferr := s.store.Apply(ctx, done); ferr != nil {
			s.log.LogAttrs(ctx, slog.LevelError, "recording a handled message failed",
				slog.String("msg", m.ID), slog.String("agent", a.info.ID), slog.String("err", ferr.Error()))
		}
	}
	if err != nil {
		s.reportFailure(a, m, err)
	}
	if m.ID == handoff {
		s.finishTermination(ctx, a)
	}
	return next
}

// delivery is a behaviour's handle with its turn, allocated together.
type delivery struct {
	actor Actor
	turn  turn
}

// statusOf returns a's status and the id of its handoff message, if it is
// being terminated.
func (s *Society) statusOf(a *agent) (AgentStatus, string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return a.info.Status, a.handoff
}

// handle runs a's behaviour on m, on drainer d, turning a panic into an
// error. It returns the agent the turn held, if any.
func (s *Society) handle(ctx context.Context, d *drainer, a *agent, m Message) (next *agent, err error) {
	b := a.behavior
	if b == nil {
		b = s.cfg.Default
	}
	dl := &delivery{turn: turn{msgID: m.ID}}
	dl.actor = Actor{s: s, a: a, taskID: m.TaskID, turn: &dl.turn}
	// A turn holds the agents it sends to only if its drainer can take
	// them up as soon as it ends: not if its end is written to a durable
	// store first, nor if it calls a model, which is slow.
	holds := s.volatile
	if b == nil && s.cfg.Model != nil {
		b = modelBehavior{s}
		holds = false
	}
	if !holds {
		dl.turn.next.Store(closedTurn)
	}
	if b == nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "message dropped: the agent has no behaviour",
			slog.String("msg", m.ID), slog.String("agent", a.info.ID))
		return nil, nil
	}
	d.turn.Store(&dl.turn)
	defer func() {
		d.turn.Store(nil)
		next = dl.turn.end()
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return nil, b.HandleMessage(ctx, &dl.actor, m)
}

// reportFailure logs a failed handler and tells the agent's parent (user,
// for root) with a status_report from the agent, so the failure is not lost.
func (s *Society) reportFailure(a *agent, m Message, err error) {
	id := a.info.ID
	s.log.LogAttrs(s.runCtx, slog.LevelError, "handler failed",
		slog.String("agent", id), slog.String("msg", m.ID), slog.String("err", err.Error()))
	parent := a.info.ParentID
	if id == RootID {
		parent = UserID
	}
	if parent == "" {
		return // user: nobody above to tell
	}
	report := StatusReportPayload{Status: StatusError, Text: "handling message " + m.ID + " from " + m.From + " failed: " + firstLine(err.Error())}
	if _, serr := s.send(s.runCtx, &Actor{s: s, a: a, taskID: m.TaskID}, Outgoing{To: parent, Type: StatusReport, Payload: report}); serr != nil {
		s.log.LogAttrs(s.runCtx, slog.LevelWarn, "reporting a failure failed",
			slog.String("agent", id), slog.String("to", parent), slog.String("err", serr.Error()))
	}
}

func messageRecord(m *Message) store.Message {
	return store.Message{ID: m.ID, Seq: m.Seq, From: m.From, To: m.To, TaskID: m.TaskID, Type: string(m.Type), Payload: m.Payload, SentAt: m.SentAt}
}
