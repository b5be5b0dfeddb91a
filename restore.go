package agentsociety

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"agentsociety/store"
)

// restore loads what the store holds into a new society and queues the
// messages that were accepted and never finished.
func (s *Society) restore(ctx context.Context) error {
	st, err := s.store.Load(ctx)
	if err != nil {
		return fmt.Errorf("agentsociety: loading the store: %w", err)
	}
	// Restoring starts drainers and timers. Handlers may start before
	// every pending message is queued, but whatever they send, and every
	// timeout, takes s.mu and so waits: no pending message is overtaken.
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range st.Roles {
		spec, err := unmarshalSpec(r.InterfaceSpec)
		if err != nil {
			return fmt.Errorf("agentsociety: role %s: %w", r.ID, err)
		}
		s.addRole(&Role{ID: r.ID, Name: r.Name, Prompt: r.Prompt, InterfaceSpec: spec, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt})
		s.roleIDs.Observe(r.ID)
	}
	// Parents come before children in creation order, which is what depth
	// needs; sort to be independent of the store's order.
	agents := append([]store.Agent(nil), st.Agents...)
	sort.SliceStable(agents, func(i, j int) bool { return agents[i].CreatedAt.Before(agents[j].CreatedAt) })
	for _, r := range agents {
		var brief TaskBrief
		if err := json.Unmarshal(r.Brief, &brief); err != nil {
			return fmt.Errorf("agentsociety: agent %s: brief: %w", r.ID, err)
		}
		role := s.roles[r.RoleID]
		parent := s.agents[r.ParentID]
		if role == nil || parent == nil {
			return fmt.Errorf("agentsociety: agent %s: role %q or parent %q is missing from the store", r.ID, r.RoleID, r.ParentID)
		}
		a := &agent{
			info:     Agent{ID: r.ID, RoleID: r.RoleID, ParentID: r.ParentID, TaskID: r.TaskID, Brief: &brief, Status: AgentStatus(r.Status), CreatedAt: r.CreatedAt},
			roleName: role.Name,
			spec:     role.InterfaceSpec,
			depth:    parent.depth + 1,
			spawnKey: r.SpawnKey,
		}
		a.ending.Store(a.info.Status != StatusActive)
		if s.cfg.RestoreBehavior != nil {
			a.behavior = s.cfg.RestoreBehavior(a.info.clone(), role.clone())
		}
		s.addAgent(a)
		s.agentIDs.Observe(r.ID)
	}
	// An agent that was terminating when the society stopped had its
	// handoff turn cut short: it ends now, and with it its descendants.
	for _, a := range s.agents {
		if a.info.Status == StatusTerminating {
			s.finishTerminationLocked(ctx, a)
		}
	}
	for owner, list := range st.Contacts {
		for _, c := range list {
			spec, err := unmarshalSpec(c.InterfaceSpec)
			if err != nil {
				return fmt.Errorf("agentsociety: contact %s of %s: %w", c.ID, owner, err)
			}
			s.contacts.Add(owner, Contact{ID: c.ID, Role: c.Role, InterfaceSpec: spec, Source: ContactSource(c.Source), IntroducedBy: c.IntroducedBy, Note: c.Note, AddedAt: c.AddedAt})
		}
	}
	for _, r := range st.Requests {
		req := &request{id: r.ID, from: r.From, to: r.To, taskID: r.TaskID, status: r.Status, createdAt: r.CreatedAt, deadline: r.Deadline}
		s.requests[r.ID] = req
		s.armTimeout(req) // a deadline that passed while the society was down fires at once
	}
	for _, h := range st.Histories {
		a := s.agents[h.AgentID]
		if a == nil {
			return fmt.Errorf("agentsociety: the history of unknown agent %q", h.AgentID)
		}
		mem, err := restoreMind(h)
		if err != nil {
			return fmt.Errorf("agentsociety: the history of %s: %w", h.AgentID, err)
		}
		a.mind = mem
	}
	for _, e := range st.States {
		s.putState(e)
	}
	for _, r := range st.Pending {
		if r.Seq > s.seq.Load() {
			s.seq.Store(r.Seq) // before any is queued: new messages come after all of them
		}
	}
	for _, r := range st.Pending {
		a := s.agents[r.To]
		if a == nil {
			return fmt.Errorf("agentsociety: pending message %s is to unknown agent %q", r.ID, r.To)
		}
		m := Message{ID: r.ID, Seq: r.Seq, From: r.From, To: r.To, TaskID: r.TaskID, Type: MessageType(r.Type), Payload: r.Payload, SentAt: r.SentAt}
		if s.volatile {
			s.restored[m.ID] = struct{}{}
		}
		s.enqueue(a, m, nil)
	}
	return nil
}

func unmarshalSpec(raw json.RawMessage) (*InterfaceSpec, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var spec InterfaceSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("interface spec: %w", err)
	}
	return &spec, nil
}

// saveQueued brings a volatile store's pending messages up to date when the
// society stops, since nothing recorded them while it ran: it records the
// messages still queued, and finishes those the society was opened with and
// has handled since. It returns err, joined with its own error if any, and
// does nothing on a durable store. Called by Close, and by a failed New,
// once every drainer has stopped.
func (s *Society) saveQueued(err error) error {
	if !s.volatile {
		return err
	}
	var ch store.Change
	s.mu.RLock()
	queued := make(map[string]bool)
	for _, a := range s.agents {
		for _, m := range a.inbox().Items() {
			if _, ok := s.restored[m.ID]; ok {
				queued[m.ID] = true // still pending in the store
				continue
			}
			ch.Accepted = append(ch.Accepted, messageRecord(&m))
		}
	}
	for id := range s.restored {
		if !queued[id] {
			ch.Finished = append(ch.Finished, id)
		}
	}
	s.mu.RUnlock()
	if serr := s.record(context.Background(), ch); serr != nil {
		return errors.Join(err, fmt.Errorf("agentsociety: recording the queued messages: %w", serr))
	}
	return err
}
