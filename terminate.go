package agentsociety

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"agentsociety/store"
)

// The statuses of an agent that is being ended and of one that ended.
const (
	// StatusTerminating: the agent has its handoff turn; messages to it are
	// refused, its own still go out.
	StatusTerminating AgentStatus = "terminating"
	// StatusTerminated: the agent and its descendants stopped; messages to
	// them are refused with ErrAgentTerminated.
	StatusTerminated AgentStatus = "terminated"
)

// HandoffText is what an agent being terminated is told in its handoff turn,
// the last message it handles (seed 002 §6.6.7), in Chinese, the default
// language: a society sends the text of its Config.Language (and
// Config.Prompts). Its payload also carries "handoff": true, for Go
// behaviours, whatever the language.
const HandoffText = "【终止通知】你即将被终止。请先完成交接：把关键状态与产出写成工件（put_artifact），用 status_report 把工件引用汇报给父级，然后结束。你的下级会随你一起终止。"

// Terminate ends agent id, which must be a descendant of this agent: id gets
// a handoff turn (see HandoffText) after the messages already queued for it,
// in which it can write its state as an artifact and report to its parent;
// then it and its descendants stop, are marked terminated in the store, and
// messages to them are refused with ErrAgentTerminated. Terminate returns
// once the termination has begun; it does not wait for the handoff.
func (x *Actor) Terminate(ctx context.Context, id string) error {
	return x.s.terminate(ctx, x.a, id)
}

// Terminate ends agent id, any agent but root and user, as [Actor.Terminate]
// does; the handoff message comes from user.
func (s *Society) Terminate(ctx context.Context, id string) error {
	return s.terminate(ctx, nil, id)
}

// terminate begins ending agent id on behalf of by (nil: the host): it
// marks id terminating and queues its handoff message last.
func (s *Society) terminate(ctx context.Context, by *agent, id string) error {
	caller, from := "host", s.user.self
	if by != nil {
		caller, from = by.info.ID, by
	}
	var handoff string
	if err := s.apply(ctx, func() (*change, *Error) {
		a := s.agents[id]
		switch {
		case a == nil:
			return nil, &Error{Code: ErrAgentNotFound, Message: "no agent " + strconvQuote(id), AgentID: id}
		case id == RootID || id == UserID:
			return nil, &Error{Code: ErrForbidden, Message: id + " cannot be terminated", AgentID: id}
		case a.info.Status != StatusActive:
			return nil, &Error{Code: ErrAgentTerminated, Message: id + " is already " + string(a.info.Status), AgentID: id}
		case by != nil && !s.isAncestor(by.info.ID, a):
			return nil, &Error{Code: ErrNotAncestor, Message: "an agent may terminate only its own descendants; " + id + " is not one of " + by.info.ID + "'s", AgentID: id}
		}
		rec := agentRecord(a, StatusTerminating)
		payload, _ := marshal(map[string]any{"text": s.lang.Strings.Handoff, "handoff": true})
		p := &pendingSend{msg: &Message{From: from.info.ID, To: id, TaskID: a.info.TaskID, Type: General, Payload: payload, SentAt: time.Now()}, to: a}
		c := s.accepting(p) // claims a, the receiver
		c.record.Agents = []store.Agent{rec}
		handoff = p.msg.ID
		c.commit = func() {
			// Before the handoff is queued, so that it is the last
			// message a gets.
			a.info.Status, s.handoffs[id] = StatusTerminating, p.msg.ID
		}
		return c, nil
	}); err != nil {
		return s.refuse("terminate_agent", caller, err)
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "agent terminating", slog.String("agent", id), slog.String("by", caller), slog.String("msg", handoff))
	return nil
}

// isHandoff reports whether m is shaped like a handoff message. To an agent
// being terminated, the last such message queued is its handoff, since
// nothing is queued to it after that.
func isHandoff(m Message) bool {
	var p struct {
		Handoff bool `json:"handoff"`
	}
	return m.Type == General && json.Unmarshal(m.Payload, &p) == nil && p.Handoff
}

// isAncestor reports whether ancestor is above a in the organisation.
// Called with s.mu held.
func (s *Society) isAncestor(ancestor string, a *agent) bool {
	for p := s.agents[a.info.ParentID]; p != nil; p = s.agents[p.info.ParentID] {
		if p.info.ID == ancestor {
			return true
		}
		if p.info.ID == RootID {
			break
		}
	}
	return false
}

// finishTermination ends a and its descendants, after a's handoff turn,
// settles the requests to them that are still pending, and stops the timers
// of those they made. If recording the
// termination fails, the agents stay terminating until the society is
// opened again.
func (s *Society) finishTermination(ctx context.Context, a *agent) *Error {
	var ended []*agent
	err := s.apply(ctx, func() (*change, *Error) {
		ended = nil
		if a.info.Status != StatusTerminating {
			return nil, nil // ended already, with an ancestor whose handoff came first
		}
		list := s.subtree(a)
		c := &change{}
		for _, e := range list {
			c.claims = append(c.claims, e.info.ID)
			c.record.Agents = append(c.record.Agents, agentRecord(e, StatusTerminated))
		}
		c.commit = func() {
			ended = list
			s.emit(Event{Kind: EventAgentTerminated, Task: a.info.TaskID, Agent: a.info.ParentID, Target: a.info.ID, Count: len(list) - 1})
			ends := map[string]bool{}
			for _, e := range list {
				ends[e.info.ID] = true
			}
			for _, r := range s.requests {
				if !ends[r.from] {
					continue
				}
				if r.waiter != nil { // blocked in Collaborate: it ends too
					r.waiter <- Message{}
					r.waiter = nil
				}
				// Nobody is left to tell that its request timed out, or
				// to report it stuck: its timers stop, so that they do
				// not keep the task running.
				s.stopTimer(r)
			}
			for _, e := range list {
				e.info.Status = StatusTerminated
				delete(s.handoffs, e.info.ID)
				s.retireAgent(e)
				s.live--
				if e.info.ParentID == RootID && s.rootKids[e.info.TaskID] == e.info.ID {
					delete(s.rootKids, e.info.TaskID) // root may start the task afresh
				}
			}
		}
		return c, nil
	})
	if err != nil {
		return err
	}
	if ended == nil {
		return nil // not a typed nil *Error: the caller tests err != nil
	}
	s.settleRequestsTo(ctx, ended)
	s.log.LogAttrs(ctx, slog.LevelInfo, "agent terminated", slog.String("agent", a.info.ID), slog.Int("with_descendants", len(ended)-1))
	return nil
}

// subtree returns a and its descendants that have not ended, found
// through each parent's registry, which names every child it spawned: a
// termination costs what it ends, not the agents the society holds.
// Called with s.mu held.
func (s *Society) subtree(a *agent) []*agent {
	out := []*agent{a}
	for i := 0; i < len(out); i++ {
		p := out[i].info.ID
		for _, id := range s.contacts.ids(p, SourceChild) {
			if c := s.agents[id]; c != nil && c.info.ParentID == p && c.info.Status != StatusTerminated {
				out = append(out, c)
			}
		}
	}
	return out
}
