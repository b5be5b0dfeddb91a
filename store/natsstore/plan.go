package natsstore

import (
	"encoding/json"
	"fmt"
	"slices"

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
	// headOf is the agent whose history head the write is, if it is one;
	// msg the message whose end the write records, if it deletes a
	// pending key for that.
	headOf, msg string
	skip        bool // left out: a later part of the change undid it
	// removal marks, in a plan's garbage, the deletions of the messages
	// of the histories the change's Removal removes, which its journal
	// names, if it has one (see journalOf).
	removal bool
	// ends are, for a record of ends, the pending keys it ends (see
	// ends.go).
	ends []keyRev
}

// A plan is the writes that record a change.
type plan struct {
	writes  []write
	at      map[string]int     // index in writes, by key, once they are many (see put)
	garbage []write            // deletions of dropped history messages
	heads   map[string]headRec // the new heads of the histories the change touches
	gone    []string           // the agents whose histories the change removes
	retired []histRange        // the messages of those histories, in garbage
}

// planIndexed is how many writes a plan holds before it indexes them by
// key (p.at): below, a search is cheaper than a map.
const planIndexed = 16

// index returns the place in p.writes of the write to key, if any.
func (p *plan) index(key string) (int, bool) {
	if p.at != nil {
		i, ok := p.at[key]
		return i, ok
	}
	for i := range p.writes {
		if p.writes[i].key == key {
			return i, true
		}
	}
	return 0, false
}

// put adds w to p, replacing an earlier write of the same key in its
// place, so that records new in the change are ordered by their first
// write.
func (p *plan) put(w write) {
	if i, ok := p.index(w.key); ok {
		p.writes[i] = w
		return
	}
	if p.at == nil && len(p.writes) == planIndexed {
		p.at = make(map[string]int, 2*planIndexed)
		for i := range p.writes {
			p.at[p.writes[i].key] = i
		}
	}
	if p.at != nil {
		p.at[w.key] = len(p.writes)
	}
	p.writes = append(p.writes, w)
}

// value adds the write of data, the JSON of a record, to key, whose
// revision revs knows. An ordered record that replaces a live one gets
// its First. Not inlined, as plan calls it from many places: plan runs
// deep in a drainer's stack, which its frame would grow.
//
//go:noinline
func (p *plan) value(revs map[string]rev, key string, data []byte, ordered bool) {
	r := revs[key]
	w := write{key: key, data: data, cas: true, expect: r.seq, ordered: ordered}
	if ordered && r.live {
		w.first = r.first
		w.data = withFirst(data, r.first)
	}
	p.put(w)
}

// remove deletes key: it leaves out a write the change made, and
// deletes what the bucket holds.
//
//go:noinline
func (p *plan) remove(revs map[string]rev, key string) {
	if i, ok := p.index(key); ok {
		p.writes[i].skip = true
	}
	if r := revs[key]; r.live {
		w := write{key: key, del: true, cas: true, expect: r.seq}
		if i, ok := p.index(key); ok {
			p.writes[i] = w
		} else {
			p.put(w)
		}
	}
}

// removal is remove for a record that c.Remove names, or that goes with
// one (a registry's entry, a history's head). headOf is the agent whose
// head key is, if it is one.
//
//go:noinline
func (p *plan) removal(revs map[string]rev, key, headOf string) {
	p.remove(revs, key)
	if i, ok := p.index(key); ok && p.writes[i].del {
		p.writes[i].headOf = headOf
	}
}

// plan works out the writes that record c against what the index says
// the bucket holds, with the JSON of c's records from enc. It refuses,
// wrapping store.ErrExists, a change that accepts a message that is
// pending or that it accepts twice. Called with s.mu held.
func (s *Store) plan(c *store.Change, enc *encoding) (*plan, error) {
	n := len(c.Roles) + len(c.Agents) + len(c.Contacts) + len(c.Requests) + len(c.States) + len(c.Accepted) + len(c.Finished) +
		2*len(c.Remove.Agents) + len(c.Remove.Roles) + len(c.Remove.Requests) + len(c.Remove.Contacts)
	p := &plan{writes: make([]write, 0, n)}
	if err := s.checkAccepted(c.Accepted, enc.pending); err != nil {
		return nil, err
	}

	// By index: a copy of each record would grow plan's frame.
	for i := range c.Roles {
		p.value(s.revs, roleKey(c.Roles[i].ID), enc.roles[i], true)
	}
	for i := range c.Agents {
		p.value(s.revs, agentKey(c.Agents[i].ID), enc.agents[i], true)
	}
	for i := range c.Contacts {
		e := &c.Contacts[i]
		p.value(s.revs, contactKey(e.Owner, e.Contact.ID), enc.contacts[i], true)
	}
	for i := range c.Requests {
		p.value(s.revs, requestKey(c.Requests[i].ID), enc.requests[i], true)
	}
	for i := range c.States {
		e := &c.States[i]
		if len(e.Value) == 0 {
			p.remove(s.revs, stateKey(e.Scope, e.Key))
			continue
		}
		p.value(s.revs, stateKey(e.Scope, e.Key), enc.states[i], false)
	}
	for i := range c.Accepted {
		p.value(s.revs, enc.pending[i], enc.accepted[i], false)
	}
	for _, id := range c.Finished {
		key := pendingKey(id)
		p.remove(s.revs, key)
		if i, ok := p.index(key); ok && p.writes[i].del {
			p.writes[i].msg = id
		}
	}
	if len(c.Histories)+len(c.HistoryAppends) > 0 {
		if err := s.planHistories(p, c); err != nil {
			return nil, err
		}
	}
	if !c.Remove.Empty() {
		s.planRemoval(p, c)
	}

	kept := p.writes[:0]
	for i := range p.writes {
		if !p.writes[i].skip {
			kept = append(kept, p.writes[i])
		}
	}
	p.writes = kept
	return p, nil
}

// checkAccepted refuses, wrapping store.ErrExists, messages of which one
// is pending or accepted twice; keys are their pending keys.
func (s *Store) checkAccepted(accepted []store.Message, keys []string) error {
	var seen map[string]bool // past a few messages
	if len(accepted) > 8 {
		seen = make(map[string]bool, len(accepted))
	}
	for i := range accepted {
		id := accepted[i].ID
		if s.revs[keys[i]].live {
			return fmt.Errorf("%w: message %q is pending", store.ErrExists, id)
		}
		twice := seen[id]
		if seen != nil {
			seen[id] = true
		} else {
			twice = slices.ContainsFunc(accepted[:i], func(o store.Message) bool { return o.ID == id })
		}
		if twice {
			return fmt.Errorf("%w: message %q accepted twice in one change", store.ErrExists, id)
		}
	}
	return nil
}

// planHistories adds to p the writes of c's histories: for each agent, the
// messages the change leaves in its history and did not hold before, and
// its new head; and the deletions of the messages it held and dropped.
// Each message is its own key, so a turn costs what it adds.
func (s *Store) planHistories(p *plan, c *store.Change) error {
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
				// Past every index a history of the agent had before,
				// whose messages may still be being deleted.
				h = headRec{AgentID: id, Lo: s.top, Hi: s.top}
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
	for id, h := range p.heads {
		data, err := json.Marshal(h)
		if err != nil {
			return fmt.Errorf("natsstore: encoding %q: %w", headKey(id), err)
		}
		p.value(s.revs, headKey(id), data, false)
		i, _ := p.index(headKey(id))
		p.writes[i].headOf = id
	}
	return nil
}

// planRemoval adds to p the deletions of what c.Remove names, after the
// rest of c: a record c writes is left out, and what the bucket holds is
// deleted, expecting its revision as any write of the change does. An
// agent goes with its registry (the entries the index lists under it, and
// those c adds) and its history: its head is deleted with the change, and
// its messages, which Load reads from the head's range only, as the
// messages a history drops are (see batchOf). The cost follows what is
// removed: a registry is found in the index by its owner.
func (s *Store) planRemoval(p *plan, c *store.Change) {
	r := &c.Remove
	for _, id := range r.Roles {
		p.removal(s.revs, roleKey(id), "")
	}
	for _, id := range r.Requests {
		p.removal(s.revs, requestKey(id), "")
	}
	for _, k := range r.Contacts {
		p.removal(s.revs, contactKey(k.Owner, k.ID), "")
	}
	if len(r.Agents) == 0 {
		return
	}
	gone := make(map[string]bool, len(r.Agents))
	for _, id := range r.Agents {
		if gone[id] {
			continue
		}
		gone[id] = true
		p.removal(s.revs, agentKey(id), "")
		if reg := s.registries[tok(id)]; reg != nil {
			for _, key := range reg.keys {
				p.removal(s.revs, key, "")
			}
		}
		s.planRemoveHistory(p, id)
	}
	for i := range c.Contacts {
		if e := &c.Contacts[i]; gone[e.Owner] {
			p.removal(s.revs, contactKey(e.Owner, e.Contact.ID), "")
		}
	}
}

// planRemoveHistory adds to p the removal of agent id's history: its head
// is deleted, the messages the change adds to it are left out, and those
// the bucket holds are deleted after (p.garbage).
func (s *Store) planRemoveHistory(p *plan, id string) {
	old, had := s.heads[id]
	if h, ok := p.heads[id]; ok {
		// The change wrote messages from the head's Hi as the bucket had it.
		from := h.Lo
		if had {
			p.retire(id, h.Lo, old.Hi)
			from = max(h.Lo, old.Hi)
		}
		for n := from; n < h.Hi; n++ {
			if i, ok := p.index(histMsgKey(id, n)); ok {
				p.writes[i].skip = true
			}
		}
		delete(p.heads, id)
	} else if had {
		p.retire(id, old.Lo, old.Hi)
	}
	if had {
		p.gone = append(p.gone, id)
	}
	p.removal(s.revs, headKey(id), id)
}

// retire adds to p.garbage the deletions of messages [lo, hi) of agent
// id's history, which the removal of the history leaves behind.
func (p *plan) retire(id string, lo, hi uint64) {
	if lo < hi {
		p.retired = append(p.retired, histRange{id, lo, hi})
	}
	for n := lo; n < hi; n++ {
		p.garbage = append(p.garbage, write{key: histMsgKey(id, n), del: true, removal: true})
	}
}
