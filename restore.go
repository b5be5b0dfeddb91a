package agentsociety

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"agentsociety/store"
)

// restore loads what the store holds into a new society, settles the
// terminations the last run left unfinished, and delivers the messages that
// were accepted and never finished.
func (s *Society) restore(ctx context.Context) error {
	st, err := s.store.Load(ctx)
	if err != nil {
		return fmt.Errorf("agentsociety: loading the store: %w", err)
	}
	s.mu.Lock()
	restored, waiting, err := s.load(st)
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("agentsociety: %w", err)
	}
	// Before any event is numbered, or any message handled.
	if s.events.stop != nil {
		if err := s.events.reserveAhead(ctx); err != nil {
			return fmt.Errorf("agentsociety: recording how far events are numbered: %w", err)
		}
	}
	// Host code runs with no lock held; no drainer runs yet.
	if s.cfg.RestoreBehavior != nil {
		for _, a := range restored {
			a.behavior = s.cfg.RestoreBehavior(a.view().agent(), s.roles[a.info.RoleID].clone())
		}
	}
	// An agent that was terminating when the society stopped and whose
	// handoff turn is not pending any more (it was handled, or cut short
	// by a crash) ends now, with its descendants. Requests to agents that
	// ended and are still pending are settled. The messages this sends are
	// numbered after the pending ones and queued behind them.
	var ended []*agent
	for _, a := range restored {
		switch {
		case a.info.Status == StatusTerminating && s.handoffs[a.info.ID] == "":
			if err := s.finishTermination(ctx, a); err != nil {
				return fmt.Errorf("agentsociety: ending %s, whose termination was under way: %w", a.info.ID, err)
			}
		case a.info.Status == StatusTerminated:
			ended = append(ended, a)
		}
	}
	s.settleRequestsTo(ctx, ended)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchRestored()
	for _, a := range waiting {
		s.goFunc(func() { s.drain(a) })
	}
	for _, r := range s.requests {
		if a := s.agents[r.from]; a == nil || a.info.Status == StatusTerminated {
			continue // nobody is left to tell (see finishTermination)
		}
		s.armTimeout(r) // a deadline that passed while the society was down fires at once
	}
	for key := range s.ledgers {
		if task, ok := strings.CutPrefix(key, "task:"); ok && !s.hasAgents(task) {
			if t := s.tasks[task]; t == nil || t.busy == 0 {
				s.retireTask(task) // ended before the restart (see prune.go)
			}
		}
	}
	return nil
}

// load builds the society's memory from st and queues its pending
// messages, in order, without starting their drainers. It returns the
// agents it restored and those that have messages waiting. Called with s.mu
// held, on a new society.
func (s *Society) load(st store.State) (restored, waiting []*agent, err error) {
	for _, r := range st.Roles {
		role, err := roleFromRecord(r)
		if err != nil {
			return nil, nil, err
		}
		s.addRole(role)
		s.roleIDs.Observe(r.ID)
	}
	agents, err := parentsFirst(st.Agents)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range agents {
		role := s.roles[r.RoleID]
		switch {
		case role != nil:
		case r.Status == string(StatusTerminated):
			// Its role may have been removed before it, when the removal
			// of the agent failed (see prune.go): a role of its own,
			// which the society does not list, shows its id.
			role = &Role{ID: r.RoleID, Name: r.RoleID}
		default:
			return nil, nil, fmt.Errorf("agent %s: role %q is missing from the store", r.ID, r.RoleID)
		}
		a, err := agentFromRecord(r, role, s.agents[r.ParentID])
		if err != nil {
			return nil, nil, err
		}
		s.addAgent(a)
		s.agentIDs.Observe(r.ID)
		restored = append(restored, a)
	}
	for owner, list := range st.Contacts {
		adds := contactAdds{recs: make([]store.ContactEntry, len(list)), roles: make([]*Role, len(list))}
		for i, rec := range list {
			role, err := contactRole(owner, rec, s.agents)
			if err != nil {
				return nil, nil, err
			}
			adds.recs[i], adds.roles[i] = store.ContactEntry{Owner: owner, Contact: rec}, role
		}
		s.contacts.addAll(adds)
	}
	for _, rec := range st.Requests {
		r := requestFromRecord(rec)
		s.requests[r.id] = r
		if r.status != StatusPending || s.agents[r.from] == nil {
			// Forgotten Config.Retention after opening: settled, or
			// made by an agent removed from the store before it (see
			// prune.go), which nobody is left to tell.
			s.retireRequest(r)
		}
	}
	for _, h := range st.Histories {
		a := s.agents[h.AgentID]
		if a == nil {
			return nil, nil, fmt.Errorf("the history of unknown agent %q", h.AgentID)
		}
		if a.mind, err = restoreMind(h); err != nil {
			return nil, nil, fmt.Errorf("the history of %s: %w", h.AgentID, err)
		}
	}
	for _, e := range st.States {
		if !s.restoreLedger(e) && !s.restoreStuck(e) && !s.restoreAwaiting(e) && !s.restoreIDs(e) && !s.restoreEvents(e) {
			s.putState(stateFromRecord(e))
		}
	}
	for _, r := range st.Pending {
		s.seq = max(s.seq, r.Seq) // new messages come after all of them
	}
	for _, r := range st.Pending {
		a := s.agents[r.To]
		if a == nil {
			return nil, nil, fmt.Errorf("pending message %s is to unknown agent %q", r.ID, r.To)
		}
		if len(r.Payload) > 0 && !json.Valid(r.Payload) {
			// The bus accepts only JSON, which what reads a message
			// (an agent, the event log) counts on; none is null.
			return nil, nil, fmt.Errorf("pending message %s has a payload that is not JSON: %.40q", r.ID, r.Payload)
		}
		if s.volatile {
			s.restored[r.ID] = struct{}{}
		}
		m := messageFromRecord(r)
		if a.info.Status == StatusTerminating && isHandoff(m) {
			s.handoffs[a.info.ID] = m.ID // its termination goes on after it
		}
		if s.queue(a, &m) {
			waiting = append(waiting, a)
		}
	}
	return restored, waiting, nil
}

// parentsFirst orders agent records so that each comes after its parent,
// by walking ParentID, whatever their CreatedAt says (a store written
// across a backwards step of the clock still opens). Root's children and
// their subtrees keep the store's order. A record whose parent is neither
// root nor in the store is an error, unless the agent is terminated; so is
// a cycle.
func parentsFirst(recs []store.Agent) ([]store.Agent, error) {
	byID := make(map[string]int, len(recs))
	for i, r := range recs {
		byID[r.ID] = i
	}
	const (
		unseen = iota
		visiting
		placed
	)
	mark := make([]int, len(recs))
	out := make([]store.Agent, 0, len(recs))
	var place func(i int) error
	place = func(i int) error {
		switch mark[i] {
		case placed:
			return nil
		case visiting:
			return fmt.Errorf("agent %s is its own ancestor", recs[i].ID)
		}
		mark[i] = visiting
		if p := recs[i].ParentID; p != RootID {
			j, ok := byID[p]
			switch {
			case ok:
				if err := place(j); err != nil {
					return err
				}
			case recs[i].Status != string(StatusTerminated):
				return fmt.Errorf("agent %s: parent %q is missing from the store", recs[i].ID, p)
			}
			// A terminated agent's parent may have been forgotten and
			// removed before it (see prune.go).
		}
		mark[i] = placed
		out = append(out, recs[i])
		return nil
	}
	for i := range recs {
		if err := place(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// saveQueued brings a volatile store's pending messages up to date when the
// society stops, since nothing recorded them while it ran: it records the
// messages still queued (for user, those the host has not taken), and
// finishes those the society was opened with and has handled since. It
// returns err, joined with its own error if any, which it also logs, and
// does nothing on a durable store. Called by Close, and by a failed New,
// once every drainer has stopped.
func (s *Society) saveQueued(err error) error {
	if !s.volatile {
		return err
	}
	var ch store.Change
	queued := make(map[string]bool)
	keep := func(m Message) {
		if _, ok := s.restored[m.ID]; ok {
			queued[m.ID] = true // still pending in the store
			return
		}
		ch.Accepted = append(ch.Accepted, messageRecord(&m))
	}
	s.mu.Lock()
	for _, a := range s.agents {
		if box := a.box.Load(); box != nil {
			for _, m := range box.Items() {
				keep(*m)
			}
		}
	}
	s.mu.Unlock()
	for _, m := range s.user.unclaimed() {
		keep(m)
	}
	for id := range s.restored {
		if !queued[id] {
			ch.Finished = append(ch.Finished, id)
		}
	}
	if serr := s.record(context.Background(), ch); serr != nil {
		serr = fmt.Errorf("agentsociety: recording the queued messages: %w", serr)
		s.log.LogAttrs(context.Background(), slog.LevelError, "closing the society failed", slog.String("err", serr.Error()))
		return errors.Join(err, serr)
	}
	return err
}
