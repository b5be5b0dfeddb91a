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

// request is a collaboration request's state.
type request struct {
	id, from, to, taskID string
	status               string
	createdAt            time.Time
	deadline             time.Time
}

func (r *request) record() store.Request {
	return store.Request{ID: r.id, From: r.from, To: r.to, TaskID: r.taskID, Status: r.status, CreatedAt: r.createdAt, Deadline: r.deadline}
}

// Send sends a message as the agent. It returns once the message is accepted:
// checked, recorded in the store and queued for the receiver; it never waits
// for the receiver. The returned Message is what the receiver gets, with the
// society's sender, id and time, and any field the society filled in (the
// request_id of a collaboration request, the target's role in an
// introduction response).
//
// A refused message is not queued and changes no registry. Refusals:
// ErrAgentNotFound for an unknown receiver; ErrInvalidMessageFormat for a
// payload that does not fit its type; ErrUnknownContact under ContactStrict;
// for introductions and collaboration responses, the codes documented on
// their payload types.
func (x *Actor) Send(ctx context.Context, out Outgoing) (Message, error) {
	m, err := x.s.send(ctx, x.a, x.taskID, out)
	if err != nil {
		return Message{}, err
	}
	return m, nil
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
	contacts []ownedContact
	request  *request // a new request, or nil
	answered *request // the request a response closes, or nil
	status   string   // the answered request's new status
}

// changesState reports whether accepting a message of type t always changes
// the organisation (requests, or the receiver's contacts).
func changesState(t MessageType) bool {
	return t == IntroductionResponse || t == CollaborationRequest || t == CollaborationResponse
}

func (p *pendingSend) mutates() bool {
	return len(p.contacts) > 0 || p.request != nil || p.answered != nil
}

func (s *Society) send(ctx context.Context, from *agent, taskID string, out Outgoing) (Message, error) {
	by := from.info.ID
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return Message{}, newError(ErrClosed, "the society is closed")
	}
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
		return Message{}, s.refuse("send_message", by, e)
	}
	f, err := checkPayload(out.Type, payload)
	if err != nil {
		return Message{}, s.refuse("send_message", by, err.(*Error))
	}
	m := Message{From: by, To: out.To, TaskID: out.TaskID, Type: out.Type, Payload: payload}

	// Most messages go between agents that know each other and change
	// nothing but the queue: check them under the read lock, and take the
	// write lock only when accepting the message changes the organisation.
	// The types whose acceptance always changes it take the write lock at
	// once, so that prepare, which rewrites their payload, runs once.
	var p *pendingSend
	var rerr *Error
	if changesState(m.Type) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p, rerr = s.prepare(from, m, f)
	} else {
		s.mu.RLock()
		p, rerr = s.prepare(from, m, f)
		if rerr == nil && p.mutates() {
			s.mu.RUnlock()
			s.mu.Lock()
			defer s.mu.Unlock()
			p, rerr = s.prepare(from, m, f)
		} else {
			defer s.mu.RUnlock()
		}
	}
	if rerr != nil {
		return Message{}, s.refuse("send_message", by, rerr)
	}

	p.msg.ID = s.msgIDs.Next()
	p.msg.Seq = s.seq.Add(1)
	p.msg.SentAt = time.Now()
	ch := store.Change{Accepted: []store.Message{messageRecord(&p.msg)}}
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
	if err := s.store.Apply(ctx, ch); err != nil {
		return Message{}, s.refuse("send_message", by, storeError(err))
	}
	for _, e := range p.contacts {
		s.contacts.Add(e.owner, e.c)
	}
	if p.request != nil {
		s.requests[p.request.id] = p.request
	}
	if p.answered != nil {
		p.answered.status = p.status
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "message accepted",
		slog.String("msg", p.msg.ID), slog.String("from", by), slog.String("to", p.msg.To),
		slog.String("type", string(p.msg.Type)), slog.String("task", p.msg.TaskID))
	s.enqueue(p.to, p.msg)
	return p.msg, nil
}

// prepare checks m against the organisation and works out what accepting it
// changes. It only reads; called with s.mu held for reading or writing.
func (s *Society) prepare(from *agent, m Message, f fields) (*pendingSend, *Error) {
	by := from.info.ID
	to := s.agents[m.To]
	if to == nil {
		return nil, &Error{Code: ErrAgentNotFound, Message: "no agent " + strconvQuote(m.To), AgentID: m.To}
	}
	if to == from {
		return nil, &Error{Code: ErrInvalidArgument, Message: "an agent cannot send a message to itself", AgentID: m.To}
	}
	if s.cfg.ContactPolicy == ContactStrict && by != UserID && m.To != UserID && !s.contacts.IsKnown(by, m.To) {
		return nil, &Error{Code: ErrUnknownContact, Message: m.To + " is not in your contacts; ask a contact for an introduction", AgentID: m.To}
	}
	p := &pendingSend{msg: m, to: to}
	now := time.Now()
	if !s.contacts.IsKnown(m.To, by) {
		p.contacts = append(p.contacts, ownedContact{m.To, Contact{ID: by, Role: from.roleName, InterfaceSpec: from.spec, Source: SourceFirstMessage, AddedAt: now}})
	}
	switch m.Type {
	case IntroductionResponse:
		return p, s.prepareIntroduction(p, f, now)
	case CollaborationRequest:
		id := f.text("request_id")
		if id == "" {
			id = ids.Random("req")
			f.set("request_id", id)
			p.msg.Payload = f.encode()
		} else if s.requests[id] != nil {
			return nil, &Error{Code: ErrDuplicateRequest, Message: "request_id " + strconvQuote(id) + " is already in use"}
		}
		p.request = &request{id: id, from: by, to: m.To, taskID: m.TaskID, status: StatusPending, createdAt: now}
	case CollaborationResponse:
		id := f.text("request_id")
		r := s.requests[id]
		switch {
		case r == nil:
			return nil, &Error{Code: ErrUnknownRequest, Message: "no collaboration request " + strconvQuote(id)}
		case r.to != by || r.from != m.To:
			return nil, &Error{Code: ErrWrongResponder, Message: "request " + id + " was sent by " + r.from + " to " + r.to + "; only " + r.to + " answers it, to " + r.from}
		case r.status != StatusPending:
			return nil, &Error{Code: ErrRequestClosed, Message: "request " + id + " is already " + r.status}
		}
		p.answered, p.status = r, f.text("status")
	}
	return p, nil
}

// prepareIntroduction checks an introduction_response, fills in the target's
// real role and interface, and adds the target to the receiver's registry.
func (s *Society) prepareIntroduction(p *pendingSend, f fields, now time.Time) *Error {
	by, id := p.msg.From, f.text("target_agent_id")
	target := s.agents[id]
	if target == nil {
		return &Error{Code: ErrAgentNotFound, Message: "target_agent_id " + strconvQuote(id) + " does not exist", AgentID: id}
	}
	if !s.contacts.IsKnown(by, id) {
		return &Error{Code: ErrUnknownContact, Message: "you can only introduce agents in your own contacts", AgentID: id}
	}
	if id == p.msg.To {
		return &Error{Code: ErrInvalidArgument, Message: "an agent cannot be introduced to itself", AgentID: id}
	}
	f.set("target_role", target.roleName)
	if target.spec != nil {
		f.set("target_interface_spec", target.spec)
	} else {
		delete(f, "target_interface_spec")
	}
	p.msg.Payload = f.encode()
	if !s.contacts.IsKnown(p.msg.To, id) {
		p.contacts = append(p.contacts, ownedContact{p.msg.To, Contact{
			ID: id, Role: target.roleName, InterfaceSpec: target.spec, Source: SourceIntroduction,
			IntroducedBy: by, Note: f.text("advice"), AddedAt: now,
		}})
	}
	return nil
}

// enqueue queues m for a and starts a's drainer if it has none. Called with
// s.life held for reading and s.closed false, so the drainer is counted
// before Close can wait.
func (s *Society) enqueue(a *agent, m Message) {
	if a.box.Push(m) {
		s.wg.Add(1)
		go s.drain(a)
	}
}

// drain handles a's messages one at a time until its queue is empty or the
// society closes.
func (s *Society) drain(a *agent) {
	defer s.wg.Done()
	for {
		if s.isClosed() {
			a.box.Stop()
			return
		}
		m, ok := a.box.Next()
		if !ok {
			return
		}
		s.deliver(a, m)
	}
}

// deliver hands m to a's behaviour and records that its handling ended.
func (s *Society) deliver(a *agent, m Message) {
	ctx := s.runCtx
	s.log.LogAttrs(ctx, slog.LevelDebug, "message delivered",
		slog.String("msg", m.ID), slog.String("from", m.From), slog.String("to", m.To))
	err := s.handle(ctx, a, m)
	if ferr := s.store.Apply(ctx, store.Change{Finished: []string{m.ID}}); ferr != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "recording a handled message failed",
			slog.String("msg", m.ID), slog.String("agent", a.info.ID), slog.String("err", ferr.Error()))
	}
	if err != nil {
		s.reportFailure(a, m, err)
	}
}

// handle runs a's behaviour on m, turning a panic into an error.
func (s *Society) handle(ctx context.Context, a *agent, m Message) (err error) {
	b := a.behavior
	if b == nil {
		b = s.cfg.Default
	}
	if b == nil && s.cfg.Model != nil {
		b = modelBehavior{s}
	}
	if b == nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "message dropped: the agent has no behaviour",
			slog.String("msg", m.ID), slog.String("agent", a.info.ID))
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return b.HandleMessage(ctx, &Actor{s: s, a: a, taskID: m.TaskID}, m)
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
	if _, serr := s.send(s.runCtx, a, m.TaskID, Outgoing{To: parent, Type: StatusReport, Payload: report}); serr != nil {
		s.log.LogAttrs(s.runCtx, slog.LevelWarn, "reporting a failure failed",
			slog.String("agent", id), slog.String("to", parent), slog.String("err", serr.Error()))
	}
}

func messageRecord(m *Message) store.Message {
	return store.Message{ID: m.ID, Seq: m.Seq, From: m.From, To: m.To, TaskID: m.TaskID, Type: string(m.Type), Payload: m.Payload, SentAt: m.SentAt}
}
