package natsstore

import (
	"encoding/json"
	"fmt"
	"strconv"

	"agentsociety/store"
)

// An encoding is the JSON of the records of a change, made by Apply
// before it takes s.mu, so that concurrent Applies encode at once and the
// lock is held only to plan and send. Its slices follow the change's:
// roles[i] is c.Roles[i]'s, and so on; a state entry that deletes its key
// has none. Records that are ordered (roles, agents, contacts, requests)
// are encoded without their First, which depends on what the index knows
// when the change is planned: plan adds it (withFirst).
type encoding struct {
	roles, agents, contacts, requests, states, accepted [][]byte
	pending                                             []string // the keys of the messages accepted
}

// encode returns the encoding of c's records.
func encode(c *store.Change) (*encoding, error) {
	e := &encoding{}
	var err error
	if len(c.Roles) > 0 {
		e.roles, err = encodeAll(c.Roles, func(r *store.Role) (string, any) { return roleKey(r.ID), fromRole(*r) })
	}
	if len(c.Agents) > 0 && err == nil {
		e.agents, err = encodeAll(c.Agents, func(a *store.Agent) (string, any) { return agentKey(a.ID), fromAgent(*a) })
	}
	if len(c.Contacts) > 0 && err == nil {
		e.contacts, err = encodeAll(c.Contacts, func(ce *store.ContactEntry) (string, any) {
			return contactKey(ce.Owner, ce.Contact.ID), fromContact(*ce)
		})
	}
	if len(c.Requests) > 0 && err == nil {
		e.requests, err = encodeAll(c.Requests, func(r *store.Request) (string, any) { return requestKey(r.ID), fromRequest(*r) })
	}
	if len(c.States) > 0 && err == nil {
		e.states, err = encodeAll(c.States, func(st *store.StateEntry) (string, any) {
			if len(st.Value) == 0 {
				return "", nil // deletes its key
			}
			return stateKey(st.Scope, st.Key), fromState(*st)
		})
	}
	if len(c.Accepted) > 0 && err == nil {
		e.accepted, e.pending = make([][]byte, len(c.Accepted)), make([]string, len(c.Accepted))
		for i := range c.Accepted {
			e.pending[i] = pendingKey(c.Accepted[i].ID)
			if e.accepted[i], err = json.Marshal(fromMessage(c.Accepted[i])); err != nil {
				return nil, fmt.Errorf("natsstore: encoding %q: %w", e.pending[i], err)
			}
		}
	}
	return e, err
}

// encodeAll returns the JSON of the records rec makes of each of list's
// entries, with its key; nil for an entry for which it makes none.
func encodeAll[T any](list []T, rec func(*T) (string, any)) ([][]byte, error) {
	out := make([][]byte, len(list))
	for i := range list {
		key, v := rec(&list[i])
		if v == nil {
			continue
		}
		data, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("natsstore: encoding %q: %w", key, err)
		}
		out[i] = data
	}
	return out, nil
}

// withFirst returns the JSON object data, an ordered record encoded
// without its First, with First set to first if it is not zero: as
// json.Marshal writes the record, whose last field First is.
func withFirst(data []byte, first uint64) []byte {
	if first == 0 {
		return data
	}
	out := make([]byte, 0, len(data)+32)
	out = append(out, data[:len(data)-1]...)
	out = append(out, `,"first":`...)
	out = strconv.AppendUint(out, first, 10)
	return append(out, '}')
}
