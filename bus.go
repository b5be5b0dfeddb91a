package agentsociety

import (
	"context"
	"log/slog"
	"time"

	"agentsociety/internal/ids"
	"agentsociety/store"
)

// Send sends a message as the agent. It returns once the message is accepted:
// checked, recorded in the store and queued for the receiver; it never waits
// for the receiver. The returned Message is what the receiver gets, with the
// society's sender, id and time, and any field the society filled in (the
// request_id of a collaboration request, the target's role in an
// introduction response). Its Payload is the receiver's too: do not
// modify it.
//
// A refused message is not queued and changes no registry. Refusals:
// ErrAgentNotFound for an unknown receiver; ErrInvalidArgument for a message
// to oneself; ErrInvalidMessageFormat for a payload that does not fit its
// type; ErrUnknownContact under ContactStrict. An introduction_response is
// refused with ErrAgentNotFound if its target does not exist and with
// ErrUnknownContact if the sender does not know the target (unless the agent
// it is for knows it already, and it only passes an answer on); under
// ContactStrict, with ErrUnsolicitedIntroduction if it would add the target
// to an agent that has no open introduction_request to the sender, directly
// or through the receiver (see ContactStrict). A
// collaboration_request reusing a request id is refused with
// ErrDuplicateRequest; a collaboration_response with ErrUnknownRequest,
// ErrWrongResponder (not from the agent asked, or not to the requester) or
// ErrRequestClosed (already answered; a request settled more than
// Config.Retention ago is forgotten, and an answer to it is refused with
// ErrUnknownRequest). A message to an agent whose mailbox
// holds Config.MaxQueued messages is refused with ErrMailboxFull, unless it
// is a collaboration_response.
func (x *Actor) Send(ctx context.Context, out Outgoing) (Message, error) {
	return x.s.sendWith(ctx, x, out, nil, false)
}

// SendText sends the payload {"text": text} to agent to, as a general message.
func (x *Actor) SendText(ctx context.Context, to, text string) (Message, error) {
	return x.Send(ctx, Outgoing{To: to, Payload: Text(text)})
}

// pendingSend is a message that passed its checks, with what accepting it
// changes besides queueing it, and the change that accepts it. Under
// ContactStrict, asks and answers are the introduction requests accepting it
// opens and closes (see introductions).
type pendingSend struct {
	change   change
	msg      *Message
	from     *agent // set by prepare; nil for the society's own messages
	to       *agent
	contacts contactAdds
	asks     []introAsk
	answers  []introKey
	request  *request // a new request, or nil
	answered *request // the request a response closes, or nil
	status   RequestStatus
	own      bool   // the society's own message: exempt from Config.MaxQueued
	cause    string // the turn that sent the message, if any (see Event.Turn)
	trace    string // the host's trace context, for a message sent outside a turn (see WithTrace)
	start    bool   // set by commitSend: the receiver's drainer is to be started
}

// introAsk is an introduction request accepting a message opens, and the
// request it is made on behalf of, if any.
type introAsk struct{ key, via introKey }

// typed reports whether a message of type t needs prepareTyped: its
// acceptance reads or changes requests, open introduction requests or
// contacts beyond a first message's.
func typed(t MessageType) bool {
	switch t {
	case IntroductionRequest, IntroductionResponse, CollaborationRequest, CollaborationResponse:
		return true
	}
	return false
}

// sendOwn sends out as x on the society's behalf (a failure report), as
// Send does, except that it is exempt from Config.MaxQueued.
func (s *Society) sendOwn(ctx context.Context, x *Actor, out Outgoing) (Message, error) {
	return s.sendWith(ctx, x, out, nil, true)
}

// sendWith is Send; for a collaboration request, waiter, if not nil,
// receives the request's outcome instead of the sender's mailbox. own marks
// the society's own message, exempt from Config.MaxQueued.
func (s *Society) sendWith(ctx context.Context, x *Actor, out Outgoing, waiter chan Message, own bool) (Message, error) {
	from := x.a
	p := &pendingSend{msg: new(Message), own: own, cause: x.turn.id()}
	if x.turn == nil {
		p.trace = TraceFromContext(ctx)
	}
	f, err := compose(p.msg, from, x.taskID, out)
	if err != nil {
		return Message{}, s.refuse("send_message", from.info.ID, err)
	}
	if err := s.apply(ctx, func() (*change, *Error) {
		if err := s.prepare(p, from, f); err != nil {
			return nil, err
		}
		if p.request != nil {
			p.request.waiter = waiter
		}
		return s.accepting(p), nil
	}); err != nil {
		if err.Code == ErrLoopDetected {
			s.loopRefused(ctx, x, out.To, err)
		}
		return Message{}, s.refuse("send_message", from.info.ID, err)
	}
	s.logMessage(ctx, "message accepted", p.msg)
	return *p.msg, nil
}

// compose builds in m the message an agent's Outgoing describes and checks
// its payload against its type.
func compose(m *Message, from *agent, taskID string, out Outgoing) (fields, *Error) {
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
		return nil, e
	}
	f, err := checkPayload(out.Type, payload)
	if err != nil {
		return nil, err.(*Error)
	}
	*m = Message{From: from.info.ID, To: out.To, TaskID: out.TaskID, Type: out.Type, Payload: payload, SentAt: time.Now()}
	return f, nil
}

// accepting numbers p's message and returns the change accepting it makes:
// the message recorded (on a durable store) with p's other changes, which
// commitSend makes in memory. Called with s.mu held.
func (s *Society) accepting(p *pendingSend) *change {
	s.number(p)
	p.change = change{send: p}
	c := &p.change
	if !s.volatile || len(p.contacts.recs) > 0 || p.request != nil || p.answered != nil {
		p.record(&c.record, !s.volatile)
	}
	for _, e := range p.contacts.recs {
		if e.Owner != p.msg.To { // an introduction forwarded to its requester
			c.claims = append(c.claims, e.Owner)
		}
	}
	if p.request != nil {
		c.claims = append(c.claims, claimRequest(p.request.id))
	}
	if p.answered != nil {
		// After a report of the request as stuck, if one is in flight:
		// the answer then removes its record (see record).
		c.claims = append(c.claims, claimRequest(p.answered.id))
	}
	s.awaiting(c, p)
	return c
}

// number gives p's message the next sequence number and its id. Called
// with s.mu held.
func (s *Society) number(p *pendingSend) {
	s.seq++
	p.msg.Seq = s.seq
	p.msg.ID = s.msgIDs.ID(p.msg.Seq)
}

// record fills ch with the records of accepting p: the message itself if
// withMessage, and the contacts and requests p adds or settles.
func (p *pendingSend) record(ch *store.Change, withMessage bool) {
	if withMessage {
		ch.Accepted = []store.Message{messageRecord(p.msg)}
	}
	if len(p.contacts.recs) > 0 {
		ch.Contacts = p.contacts.recs
	}
	if r := p.request; r != nil {
		ch.Requests = append(ch.Requests, r.record())
	}
	if p.answered != nil {
		r := *p.answered
		r.status = p.status
		ch.Requests = append(ch.Requests, r.record())
		if r.reported {
			ch.States = append(ch.States, stuckEntry(r.id, false))
		}
	}
}

// commitSend applies p's changes to the organisation and routes its message:
// to the waiter blocked in Collaborate for the request it settles, if there
// is one, else to the receiver's mailbox. Called with s.mu held, after the
// store recorded them.
func (s *Society) commitSend(p *pendingSend) {
	if !s.events.off {
		s.emitSend(p)
	}
	s.sentToTask(p)
	s.commitLoop(p)
	s.contacts.addAll(p.contacts)
	for _, k := range p.answers {
		s.intros.remove(k)
	}
	for _, k := range p.asks {
		s.intros.add(k.key, k.via)
	}
	if r := p.request; r != nil {
		s.requests[r.id] = r
		s.armTimeout(r)
	}
	if r := p.answered; r != nil {
		r.status = p.status
		s.retireRequest(r)
		s.stopTimer(r)
		if r.waiter != nil {
			r.waiter <- *p.msg // buffered, and each request is settled once
			r.waiter = nil
			return
		}
	}
	// A report the agent wrote itself, to its parent (to user, for a
	// lead, which reports for root), marks it reported in its parent's
	// prompt; the society's reports on its behalf do not.
	if p.msg.Type == StatusReport && !p.own {
		if from := s.agents[p.msg.From]; from != nil && !from.reported &&
			(from.info.ParentID == p.msg.To || from.info.ParentID == RootID && p.msg.To == UserID) {
			from.reported = true
			if parent := s.agents[from.info.ParentID]; parent != nil {
				parent.reports++
			}
		}
	}
	p.start = s.enqueue(p.to, p.msg)
}

// emitSend adds to the event log that p's message was accepted, and the
// request it opens or settles. Called with s.mu held, so that these events
// come before any event of the message's delivery. Not inlined: its frame
// is large, and is only wanted when events are on.
//
//go:noinline
func (s *Society) emitSend(p *pendingSend) {
	m := p.msg // not changed once committed
	if m.From == UserID && m.To == RootID && s.tasks[m.TaskID] == nil && !s.hasAgents(m.TaskID) {
		// A task starts with the user's first message to root on it: one
		// the society knows nothing of, neither work in flight nor agents
		// (after reopening, a quiet task is known by its agents only).
		s.events.add(func(e *Event) {
			e.Kind, e.Task, e.Agent, e.Detail, e.Trace = EventTaskSubmitted, m.TaskID, UserID, m.Text(), p.trace
		})
	}
	if p.request == nil && p.answered == nil && p.trace == "" {
		s.events.addMessage(entryAccepted, m, p.cause, 0)
		return
	}
	request := ""
	if r := p.request; r != nil {
		request = r.id
	} else if r := p.answered; r != nil {
		request = r.id
	}
	accepted := func(e *Event) {
		e.Kind, e.Task, e.Agent, e.Turn, e.Target, e.Message, e.Request, e.Trace = EventMessageAccepted, m.TaskID, m.From, p.cause, m.To, m, request, p.trace
	}
	s.events.addAt(m.SentAt.UnixNano(), accepted)
	switch {
	case p.request != nil:
		s.events.add(func(e *Event) { accepted(e); e.Kind = EventRequestOpened })
	case p.answered != nil:
		s.events.add(func(e *Event) {
			accepted(e)
			e.Kind, e.Status = EventRequestSettled, string(p.status)
			if p.from == nil {
				e.Detail = "settled by the society"
			}
		})
	}
}

// logMessage records a step of m's journey at Debug level.
func (s *Society) logMessage(ctx context.Context, what string, m *Message) {
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.logMessageNow(ctx, what, m)
	}
}

// logMessageNow is logMessage's record, in a frame of its own: a drainer's
// stack need not grow for a record that is not wanted.
//
//go:noinline
func (s *Society) logMessageNow(ctx context.Context, what string, m *Message) {
	s.log.LogAttrs(ctx, slog.LevelDebug, what,
		slog.String("msg", m.ID), slog.String("from", m.From), slog.String("to", m.To),
		slog.String("type", string(m.Type)), slog.String("task", m.TaskID))
}

// prepare checks p's message against the organisation and works out in p
// what accepting it changes. It only reads the organisation, and may run
// again on the same p; called with s.mu held.
func (s *Society) prepare(p *pendingSend, from *agent, f fields) *Error {
	p.contacts.reset()
	p.request, p.answered = nil, nil
	p.asks, p.answers = p.asks[:0], p.answers[:0]
	m, by := p.msg, from.info.ID
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
	if !p.own && m.Type != CollaborationResponse && s.mailboxFull(to) {
		return &Error{Code: ErrMailboxFull, Message: m.To + "'s mailbox is full (" + itoa(s.cfg.MaxQueued) +
			" messages waiting); nothing was sent. Do not resend at once: send again after " + m.To + " has caught up, for example once it has answered you.", AgentID: m.To}
	}
	p.from, p.to = from, to
	if !s.contacts.knows(m.To, by) {
		p.contacts.add(m.To, from, SourceFirstMessage, m.SentAt) // the sender is new to the receiver
	}
	if typed(m.Type) {
		if err := s.prepareTyped(p, f); err != nil {
			return err
		}
	}
	return s.checkLoop(p, f)
}

// mailboxFull reports whether a has Config.MaxQueued messages waiting.
// Called with s.mu held: a send claims its receiver, so no other message to
// a is being queued meanwhile.
func (s *Society) mailboxFull(a *agent) bool {
	if s.cfg.MaxQueued < 0 {
		return false
	}
	box := a.box.Load()
	return box != nil && box.Len() >= s.cfg.MaxQueued
}

func terminatedError(from, to *agent) *Error {
	a := to
	if from.info.Status == StatusTerminated {
		a = from
	}
	return &Error{Code: ErrAgentTerminated, Message: a.info.ID + " is " + string(a.info.Status) + " and takes no messages", AgentID: a.info.ID}
}

// prepareTyped does prepare's work for the message types whose acceptance
// changes the organisation.
func (s *Society) prepareTyped(p *pendingSend, f fields) *Error {
	m, by := *p.msg, p.msg.From
	switch m.Type {
	case IntroductionRequest:
		// Under the strict policy the request entitles its receiver to
		// introduce an agent to the sender, and to the agent the sender
		// asks for, if that one asked the sender.
		if s.cfg.ContactPolicy == ContactStrict {
			p.asks = append(p.asks, introAsk{key: introKey{by, m.To}})
			if r := f.text("requester_agent_id"); r != "" && r != by && r != m.To && s.intros.has(introKey{r, by}) {
				p.asks = append(p.asks, introAsk{introKey{r, m.To}, introKey{r, by}})
			}
		}
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
		if d, _ := timeoutOf(f); d > 0 { // checkPayload refused a bad one
			p.request.deadline = m.SentAt.Add(d)
		}
	case CollaborationResponse:
		id := f.text("request_id")
		r := s.requests[id]
		switch {
		case r == nil:
			return unknownRequest(id)
		case r.to != by || r.from != m.To:
			return wrongResponder(id, r.from, r.to, by)
		case r.status != StatusPending:
			return &Error{Code: ErrRequestClosed, Message: "request " + id + " is already " + string(r.status)}
		}
		// The answer carries on the requester's work on the request's
		// task, whatever task the responder is working on now.
		p.msg.TaskID = r.taskID
		p.answered, p.status = r, RequestStatus(f.text("status"))
	}
	return nil
}

// prepareIntroduction checks an introduction_response, fills in the target's
// real role and interface, and adds the target to the registry of the agent
// the introduction is for, the beneficiary: the receiver, or the original
// requester named by requester_agent_id when the receiver only forwards the
// answer along a chain of introducers.
//
// The introducer must know the target, unless the beneficiary already does:
// a forwarder passing on what was added, which adds nothing. Under
// ContactStrict an introduction that adds the target must answer a request:
// the beneficiary asked the introducer (itself, or through an agent that
// asked on its behalf naming it as requester_agent_id), or the beneficiary
// asked the receiver and the receiver asked the introducer. Accepting it
// closes those requests and the receiver's own request to the introducer,
// which it answers: one request, one introduction.
func (s *Society) prepareIntroduction(p *pendingSend, f fields, now time.Time) *Error {
	by, id := p.msg.From, f.text("target_agent_id")
	if id == "" { // no suitable agent known: the answer introduces nobody
		if s.cfg.ContactPolicy == ContactStrict {
			p.answers = append(p.answers, introKey{p.msg.To, by})
		}
		// Nor the role or interface of anyone: those are the society's
		// to fill in.
		_, role := f["target_role"]
		_, spec := f["target_interface_spec"]
		if role || spec {
			delete(f, "target_role")
			delete(f, "target_interface_spec")
			p.msg.Payload = f.encode()
		}
		return nil
	}
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
	if s.cfg.ContactPolicy == ContactStrict {
		if !known {
			used, ok := s.intros.solicited(beneficiary, p.msg.To, by)
			if !ok {
				return &Error{Code: ErrUnsolicitedIntroduction, AgentID: beneficiary, Message: beneficiary +
					" has no open introduction_request to you: introduce an agent only to one that asked you, or, naming it as requester_agent_id, to one that asked the agent you answer, which asked you." +
					" A request is closed once answered and forgotten on a restart; then the requester must ask again."}
			}
			p.answers = append(p.answers, used...)
		}
		p.answers = append(p.answers, introKey{p.msg.To, by})
	}
	f.set("target_role", target.roleName())
	if spec := target.spec(); spec != nil {
		f.set("target_interface_spec", spec)
	} else {
		delete(f, "target_interface_spec")
	}
	p.msg.Payload = f.encode()
	if !known {
		rec := p.contacts.add(beneficiary, target, SourceIntroduction, now)
		rec.IntroducedBy, rec.Note = by, f.text("advice")
	}
	return nil
}
