package agentsociety

import (
	"context"
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
// the last message it handles (seed 002 §6.6.7). Its payload also carries
// "handoff": true, for Go behaviours.
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

// terminate begins ending agent id on behalf of by (nil: the host).
func (s *Society) terminate(ctx context.Context, by *agent, id string) error {
	caller := "host"
	if by != nil {
		caller = by.info.ID
	}
	refuse := func(e *Error) error { return s.refuse("terminate_agent", caller, e) }
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return newError(ErrClosed, "the society is closed")
	}
	a := s.agents[id]
	switch {
	case a == nil:
		return refuse(&Error{Code: ErrAgentNotFound, Message: "no agent " + strconvQuote(id), AgentID: id})
	case id == RootID || id == UserID:
		return refuse(&Error{Code: ErrForbidden, Message: id + " cannot be terminated", AgentID: id})
	case a.info.Status != StatusActive:
		return refuse(&Error{Code: ErrAgentTerminated, Message: id + " is already " + string(a.info.Status), AgentID: id})
	case by != nil && !s.isAncestor(by.info.ID, a):
		return refuse(&Error{Code: ErrNotAncestor, Message: "an agent may terminate only its own descendants; " + id + " is not one of " + by.info.ID + "'s", AgentID: id})
	}
	from := s.user.self
	if by != nil {
		from = by
	}
	rec, err := s.statusRecord(a, StatusTerminating)
	if err != nil {
		return refuse(err)
	}
	payload, _ := marshal(map[string]any{"text": HandoffText, "handoff": true})
	p := pendingSend{msg: Message{From: from.info.ID, To: id, TaskID: a.info.TaskID, Type: General, Payload: payload, SentAt: time.Now()}, to: a}
	// The handoff is queued last: set the status and the handoff id first,
	// and undo them if the store refuses.
	a.info.Status = StatusTerminating
	a.ending.Store(true)
	if err := s.acceptLocked(ctx, &p, []store.Agent{rec}); err != nil {
		a.info.Status = StatusActive
		a.ending.Store(false)
		return refuse(err)
	}
	a.handoff = p.msg.ID
	s.log.LogAttrs(ctx, slog.LevelInfo, "agent terminating", slog.String("agent", id), slog.String("by", caller), slog.String("msg", p.msg.ID))
	return nil
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

// finishTermination ends a and its descendants, after a's handoff turn.
func (s *Society) finishTermination(ctx context.Context, a *agent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finishTerminationLocked(ctx, a)
}

func (s *Society) finishTerminationLocked(ctx context.Context, a *agent) {
	if a.info.Status != StatusTerminating {
		return // ended already, with an ancestor whose handoff came first
	}
	ended := s.subtree(a)
	var ch store.Change
	for _, e := range ended {
		rec, err := s.statusRecord(e, StatusTerminated)
		if err != nil {
			continue // an agent whose brief encoded when it was spawned encodes now
		}
		ch.Agents = append(ch.Agents, rec)
	}
	if err := s.store.Apply(ctx, ch); err != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "recording a termination failed; the agents stay terminating",
			slog.String("agent", a.info.ID), slog.String("err", err.Error()))
		return
	}
	for _, e := range ended {
		e.info.Status = StatusTerminated
		e.ending.Store(true)
		s.live--
		if e.info.ParentID == RootID && s.rootKids[e.info.TaskID] == e.info.ID {
			delete(s.rootKids, e.info.TaskID) // root may start the task afresh
		}
	}
	s.settleRequestsTo(ctx, ended)
	s.log.LogAttrs(ctx, slog.LevelInfo, "agent terminated", slog.String("agent", a.info.ID), slog.Int("with_descendants", len(ended)-1))
}

// subtree returns a and its descendants that have not ended. Called with
// s.mu held.
func (s *Society) subtree(a *agent) []*agent {
	children := map[string][]*agent{}
	for _, c := range s.agents {
		if c.info.Status != StatusTerminated {
			children[c.info.ParentID] = append(children[c.info.ParentID], c)
		}
	}
	out := []*agent{a}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i].info.ID]...)
	}
	return out
}

func (s *Society) statusRecord(a *agent, status AgentStatus) (store.Agent, *Error) {
	rec, err := agentRecord(a, status)
	if err != nil {
		return store.Agent{}, &Error{Code: ErrStore, Message: "the agent's record does not encode", Err: err}
	}
	return rec, nil
}
