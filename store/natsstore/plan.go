package natsstore

import (
	"encoding/json"
	"fmt"

	"agentsociety/store"
)

// A write is one message of a batch: a value for a key, or the marker
// that deletes it.
type write struct {
	key  string
	data []byte
	del  bool
	// cas says whether the write carries the key's revision as this Store
	// knows it (zero for a key it knows no write of), so that the server
	// refuses the batch if another writer wrote the key since.
	cas    bool
	expect uint64
	// ordered marks roles, agents, contacts and requests; first is the
	// revision that orders such a record when it replaces an earlier one,
	// zero when it is new.
	ordered bool
	first   uint64
	// headOf is the agent whose history head the write is, if it is one.
	headOf string
	skip   bool // left out: a later part of the change undid it
}

// A plan is the writes that record a change.
type plan struct {
	writes  []write
	at      map[string]int     // index in writes, by key
	garbage []write            // deletions of dropped history messages
	heads   map[string]headRec // the new heads of the histories the change touches
}

// put adds w to p, replacing an earlier write of the same key in its
// place, so that records new in the change are ordered by their first
// write.
func (p *plan) put(w write) {
	if i, ok := p.at[w.key]; ok {
		p.writes[i] = w
		return
	}
	p.at[w.key] = len(p.writes)
	p.writes = append(p.writes, w)
}

// plan works out the writes that record c against what the index says
// the bucket holds. It refuses, wrapping store.ErrExists, a change that
// accepts a message that is pending or that it accepts twice. Called with
// s.mu held.
func (s *Store) plan(c *store.Change) (*plan, error) {
	p := &plan{at: make(map[string]int)}
	seen := make(map[string]bool, len(c.Accepted))
	for _, m := range c.Accepted {
		if s.revs[pendingKey(m.ID)].live {
			return nil, fmt.Errorf("%w: message %q is pending", store.ErrExists, m.ID)
		}
		if seen[m.ID] {
			return nil, fmt.Errorf("%w: message %q accepted twice in one change", store.ErrExists, m.ID)
		}
		seen[m.ID] = true
	}

	var err error
	value := func(key string, v any, ordered bool) {
		if err != nil {
			return
		}
		var data []byte
		if data, err = json.Marshal(v); err != nil {
			err = fmt.Errorf("natsstore: encoding %q: %w", key, err)
			return
		}
		r := s.revs[key]
		w := write{key: key, data: data, cas: true, expect: r.seq, ordered: ordered}
		if ordered && r.live {
			w.first = r.first
		}
		p.put(w)
	}
	// remove deletes key: it leaves out a write the change made, and
	// deletes what the bucket holds.
	remove := func(key string) {
		if i, ok := p.at[key]; ok {
			p.writes[i].skip = true
		}
		if r := s.revs[key]; r.live {
			w := write{key: key, del: true, cas: true, expect: r.seq}
			if i, ok := p.at[key]; ok {
				p.writes[i] = w
			} else {
				p.put(w)
			}
		}
	}

	for _, r := range c.Roles {
		rec := fromRole(r)
		rec.First = s.first(roleKey(r.ID))
		value(roleKey(r.ID), rec, true)
	}
	for _, a := range c.Agents {
		rec := fromAgent(a)
		rec.First = s.first(agentKey(a.ID))
		value(agentKey(a.ID), rec, true)
	}
	for _, e := range c.Contacts {
		rec := fromContact(e)
		rec.First = s.first(contactKey(e.Owner, e.Contact.ID))
		value(contactKey(e.Owner, e.Contact.ID), rec, true)
	}
	for _, r := range c.Requests {
		rec := fromRequest(r)
		rec.First = s.first(requestKey(r.ID))
		value(requestKey(r.ID), rec, true)
	}
	for _, e := range c.States {
		if len(e.Value) == 0 {
			remove(stateKey(e.Scope, e.Key))
			continue
		}
		value(stateKey(e.Scope, e.Key), fromState(e), false)
	}
	for _, m := range c.Accepted {
		value(pendingKey(m.ID), fromMessage(m), false)
	}
	for _, id := range c.Finished {
		remove(pendingKey(id))
	}
	if err != nil {
		return nil, err
	}
	s.planHistories(p, c)
	for id, h := range p.heads {
		value(headKey(id), h, false)
		p.writes[p.at[headKey(id)]].headOf = id
	}
	if err != nil {
		return nil, err
	}

	kept := p.writes[:0]
	for _, w := range p.writes {
		if !w.skip {
			kept = append(kept, w)
		}
	}
	p.writes = kept
	return p, nil
}

// first returns the revision that orders the record at key if the bucket
// holds one, else zero.
func (s *Store) first(key string) uint64 {
	if r := s.revs[key]; r.live {
		return r.first
	}
	return 0
}

// planHistories adds to p the writes of c's histories: for each agent, the
// messages the change leaves in its history and did not hold before, and
// its new head; and the deletions of the messages it held and dropped.
// Each message is its own key, so a turn costs what it adds.
func (s *Store) planHistories(p *plan, c *store.Change) {
	if len(c.Histories)+len(c.HistoryAppends) == 0 {
		return
	}
	type work struct {
		head  headRec
		oldHi uint64            // messages below it were in the bucket before
		added map[uint64][]byte // messages the change wrote, by index
	}
	hs := make(map[string]*work)
	get := func(id string) *work {
		w := hs[id]
		if w == nil {
			h, ok := s.heads[id]
			if !ok {
				h = headRec{AgentID: id}
			}
			w = &work{head: h, oldHi: h.Hi, added: make(map[uint64][]byte)}
			hs[id] = w
		}
		return w
	}
	// retire removes messages [lo, hi) of w's history.
	retire := func(w *work, lo, hi uint64) {
		for n := lo; n < hi; n++ {
			if n < w.oldHi {
				p.garbage = append(p.garbage, write{key: histMsgKey(w.head.AgentID, n), del: true})
			} else {
				delete(w.added, n)
			}
		}
	}
	add := func(w *work, msgs []json.RawMessage) {
		for _, m := range msgs {
			w.added[w.head.Hi] = append([]byte(nil), m...)
			w.head.Hi++
		}
	}
	for _, h := range c.Histories {
		w := get(h.AgentID)
		retire(w, w.head.Lo, w.head.Hi)
		w.head.Lo = w.head.Hi
		w.head.Summary, w.head.Dropped = h.Summary, h.Dropped
		add(w, h.Messages)
	}
	for _, a := range c.HistoryAppends {
		w := get(a.AgentID)
		drop := uint64(min(max(a.Drop, 0), int(w.head.Hi-w.head.Lo)))
		retire(w, w.head.Lo, w.head.Lo+drop)
		w.head.Lo += drop
		w.head.Dropped += int(drop)
		if a.SetSummary {
			w.head.Summary = a.Summary
		}
		add(w, a.Messages)
	}
	p.heads = make(map[string]headRec, len(hs))
	for id, w := range hs {
		for n := max(w.head.Lo, w.oldHi); n < w.head.Hi; n++ {
			p.put(write{key: histMsgKey(id, n), data: w.added[n]})
		}
		p.heads[id] = w.head
	}
}
