package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Memory is a [Store] that keeps everything in the process's memory.
//
// It is safe for concurrent use. It is fit for tests and for hosts that need
// no durability: its state is lost with the process. Apply is atomic because
// a Change is validated in full before anything is mutated, under its
// lock.
//
// A Memory is [Volatile]: a society records in it the messages it routes
// only when it closes.
//
// The zero value is not usable; call [NewMemory].
type Memory struct {
	mu sync.Mutex

	// Registries replace by id yet must list in first-insertion order, so
	// each is a slice plus an index into it.
	roles      []Role
	roleIdx    map[string]int
	agents     []Agent
	agentIdx   map[string]int
	requests   []Request
	requestIdx map[string]int

	// A society may hold many idle agents with a few contacts each, so
	// contacts are a plain slice per owner scanned linearly on replace,
	// rather than a map per owner. An owner with many contacts (a parent of
	// thousands) gets an index, or each spawn would scan its whole list.
	contacts map[string][]memContact
	wide     map[string]map[string]int // owner -> contact id -> index, past wideAfter entries

	pending map[string]Message // accepted and not finished, by id

	artifacts map[string]memArtifact

	histories map[string]*memHistory           // by agent id
	states    map[string]map[string]StateEntry // by scope, then key
}

// memHistory is a history as Memory keeps it. Its messages are never
// changed once stored, only dropped from the front and appended to, so an
// append costs what it adds.
type memHistory struct {
	summary string
	msgs    []json.RawMessage
	dropped int
}

type memArtifact struct {
	meta Artifact
	data []byte
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{
		roleIdx:    make(map[string]int),
		agentIdx:   make(map[string]int),
		requestIdx: make(map[string]int),
		contacts:   make(map[string][]memContact),
		wide:       make(map[string]map[string]int),
		pending:    make(map[string]Message),
		artifacts:  make(map[string]memArtifact),
		histories:  make(map[string]*memHistory),
		states:     make(map[string]map[string]StateEntry),
	}
}

// Volatile reports true: a Memory's contents are lost with the process.
func (m *Memory) Volatile() bool { return true }

// Load returns a deep copy of the store's state, so callers may mutate it.
func (m *Memory) Load(ctx context.Context) (State, error) {
	if err := ctx.Err(); err != nil {
		return State{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()

	var s State
	if len(m.roles) > 0 {
		s.Roles = make([]Role, len(m.roles))
		for i, r := range m.roles {
			s.Roles[i] = cloneRole(r)
		}
	}
	if len(m.agents) > 0 {
		s.Agents = make([]Agent, len(m.agents))
		for i, a := range m.agents {
			s.Agents[i] = cloneAgent(a)
		}
	}
	if len(m.contacts) > 0 {
		s.Contacts = make(map[string][]Contact, len(m.contacts))
		for owner, cs := range m.contacts {
			out := make([]Contact, len(cs))
			for i, c := range cs {
				out[i] = c.contact()
			}
			s.Contacts[owner] = out
		}
	}
	if len(m.requests) > 0 {
		s.Requests = slices.Clone(m.requests) // Request holds no slices.
	}
	for id, h := range m.histories {
		s.Histories = append(s.Histories, History{AgentID: id, Summary: h.summary, Messages: appendRaws(nil, h.msgs), Dropped: h.dropped})
	}
	slices.SortFunc(s.Histories, func(a, b History) int { return strings.Compare(a.AgentID, b.AgentID) })
	for _, keys := range m.states {
		for _, e := range keys {
			e.Value = cloneRaw(e.Value)
			s.States = append(s.States, e)
		}
	}
	slices.SortFunc(s.States, func(a, b StateEntry) int {
		if c := strings.Compare(a.Scope, b.Scope); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	for _, msg := range m.pending {
		s.Pending = append(s.Pending, cloneMessage(msg))
	}
	slices.SortFunc(s.Pending, func(a, b Message) int { return cmp.Compare(a.Seq, b.Seq) })
	return s, nil
}

// Apply records c atomically, copying everything it keeps.
func (m *Memory) Apply(ctx context.Context, c Change) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()

	// Messages are the only part of a Change that can be refused, so they
	// are checked before anything is mutated.
	seen := make(map[string]bool, len(c.Accepted))
	for _, msg := range c.Accepted {
		if _, ok := m.pending[msg.ID]; ok {
			return fmt.Errorf("%w: message %q is pending", ErrExists, msg.ID)
		}
		if seen[msg.ID] {
			return fmt.Errorf("%w: message %q accepted twice in one change", ErrExists, msg.ID)
		}
		seen[msg.ID] = true
	}

	for _, r := range c.Roles {
		r = cloneRole(r)
		if i, ok := m.roleIdx[r.ID]; ok {
			m.roles[i] = r
		} else {
			m.roleIdx[r.ID] = len(m.roles)
			m.roles = append(m.roles, r)
		}
	}
	for _, a := range c.Agents {
		a = cloneAgent(a)
		if i, ok := m.agentIdx[a.ID]; ok {
			m.agents[i] = a
		} else {
			m.agentIdx[a.ID] = len(m.agents)
			m.agents = append(m.agents, a)
		}
	}
	for _, e := range c.Contacts {
		m.putContact(e.Owner, newMemContact(e.Contact))
	}
	for _, r := range c.Requests {
		if i, ok := m.requestIdx[r.ID]; ok {
			m.requests[i] = r
		} else {
			m.requestIdx[r.ID] = len(m.requests)
			m.requests = append(m.requests, r)
		}
	}
	for _, h := range c.Histories {
		m.histories[h.AgentID] = &memHistory{summary: h.Summary, msgs: appendRaws(nil, h.Messages), dropped: h.Dropped}
	}
	for _, a := range c.HistoryAppends {
		m.appendHistory(a)
	}
	for _, e := range c.States {
		m.putState(e)
	}
	for _, msg := range c.Accepted {
		m.pending[msg.ID] = cloneMessage(msg)
	}
	// Finished after Accepted, so a message accepted and finished in the
	// same Change ends up not pending.
	for _, id := range c.Finished {
		delete(m.pending, id)
	}
	return nil
}

// putContact adds c to owner's registry, replacing in place an entry with
// the same contact id so the registry keeps the order contacts were added.
func (m *Memory) putContact(owner string, c memContact) {
	cs := m.contacts[owner]
	if idx, ok := m.wide[owner]; ok {
		if i, ok := idx[c.id]; ok {
			cs[i] = c
			return
		}
		idx[c.id] = len(cs)
		m.contacts[owner] = append(cs, c)
		return
	}
	for i := range cs {
		if cs[i].id == c.id {
			cs[i] = c
			return
		}
	}
	cs = append(cs, c)
	m.contacts[owner] = cs
	if len(cs) > wideAfter {
		idx := make(map[string]int, len(cs))
		for i, c := range cs {
			idx[c.id] = i
		}
		m.wide[owner] = idx
	}
}

// appendHistory applies a to the history of a.AgentID, starting one if
// there is none.
func (m *Memory) appendHistory(a HistoryAppend) {
	h := m.histories[a.AgentID]
	if h == nil {
		h = &memHistory{}
		m.histories[a.AgentID] = h
	}
	drop := min(max(a.Drop, 0), len(h.msgs))
	clear(h.msgs[:drop]) // let the dropped messages go before append moves the rest
	h.msgs = h.msgs[drop:]
	h.dropped += drop
	if a.SetSummary {
		h.summary = a.Summary
	}
	h.msgs = appendRaws(h.msgs, a.Messages)
}

// appendRaws appends copies of src to dst, all in one new buffer, and
// returns the extended slice. An empty document is appended as nil.
func appendRaws(dst, src []json.RawMessage) []json.RawMessage {
	n := 0
	for _, b := range src {
		n += len(b)
	}
	buf := make([]byte, 0, n)
	for _, b := range src {
		if len(b) == 0 {
			dst = append(dst, nil)
			continue
		}
		start := len(buf)
		buf = append(buf, b...)
		dst = append(dst, buf[start:len(buf):len(buf)])
	}
	return dst
}

// putState sets or, for a nil Value, deletes a state entry.
func (m *Memory) putState(e StateEntry) {
	keys := m.states[e.Scope]
	if len(e.Value) == 0 {
		delete(keys, e.Key)
		if len(keys) == 0 {
			delete(m.states, e.Scope)
		}
		return
	}
	if keys == nil {
		keys = make(map[string]StateEntry)
		m.states[e.Scope] = keys
	}
	e.Value = cloneRaw(e.Value)
	keys[e.Key] = e
}

// wideAfter is the number of contacts past which an owner's are indexed.
const wideAfter = 16

// PutArtifact stores a copy of a and data; an existing id is refused so that
// artifacts stay immutable.
func (m *Memory) PutArtifact(ctx context.Context, a Artifact, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.artifacts[a.ID]; ok {
		return fmt.Errorf("%w: artifact %q", ErrExists, a.ID)
	}
	m.artifacts[a.ID] = memArtifact{meta: a, data: cloneBytes(data)}
	return nil
}

// GetArtifact returns a's metadata and a copy of its content.
func (m *Memory) GetArtifact(ctx context.Context, id string) (Artifact, []byte, error) {
	if err := ctx.Err(); err != nil {
		return Artifact{}, nil, err
	}
	m.mu.Lock()
	a, ok := m.artifacts[id]
	m.mu.Unlock()
	if !ok {
		return Artifact{}, nil, fmt.Errorf("%w: artifact %q", ErrNotFound, id)
	}
	// Stored content is never mutated, so it can be copied outside the lock.
	return a.meta, cloneBytes(a.data), nil
}

// cloneBytes returns a copy of b that shares no memory with it. Empty input
// yields nil, as the record types use nil for "none" and an empty document
// carries nothing more.
func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

func cloneRaw(b json.RawMessage) json.RawMessage { return cloneBytes(b) }

func cloneRole(r Role) Role {
	r.InterfaceSpec = cloneRaw(r.InterfaceSpec)
	return r
}

func cloneAgent(a Agent) Agent {
	a.Brief = cloneRaw(a.Brief)
	return a
}

// memContact is a Contact as Memory keeps it. A society of many idle
// agents holds two per agent, so the fields most entries leave empty live
// behind one pointer and the time as Unix nanoseconds: 64 bytes, not 128.
type memContact struct {
	id, role, source string
	more             *memContactMore // nil unless one of its fields is set
	addedAt          int64           // Unix nanoseconds, or farTime
}

type memContactMore struct {
	spec               json.RawMessage
	introducedBy, note string
	addedAt            time.Time // when memContact.addedAt is farTime
}

// farTime marks an AddedAt that Unix nanoseconds cannot hold (the zero
// time, years before 1678 or after 2261): it is kept in memContactMore.
const farTime = math.MinInt64

func newMemContact(c Contact) memContact {
	mc := memContact{id: c.ID, role: c.Role, source: c.Source, addedAt: farTime}
	far := c.AddedAt.Year() < 1678 || c.AddedAt.Year() > 2261
	if !far {
		mc.addedAt = c.AddedAt.UnixNano()
	}
	if far || len(c.InterfaceSpec) > 0 || c.IntroducedBy != "" || c.Note != "" {
		mc.more = &memContactMore{spec: cloneRaw(c.InterfaceSpec), introducedBy: c.IntroducedBy, note: c.Note}
		if far {
			mc.more.addedAt = c.AddedAt
		}
	}
	return mc
}

// contact returns a copy the caller may keep and change.
func (c memContact) contact() Contact {
	out := Contact{ID: c.id, Role: c.role, Source: c.source}
	if c.addedAt != farTime {
		out.AddedAt = time.Unix(0, c.addedAt)
	}
	if c.more != nil {
		out.InterfaceSpec = cloneRaw(c.more.spec)
		out.IntroducedBy, out.Note = c.more.introducedBy, c.more.note
		if c.addedAt == farTime {
			out.AddedAt = c.more.addedAt
		}
	}
	return out
}

func cloneMessage(msg Message) Message {
	msg.Payload = cloneRaw(msg.Payload)
	return msg
}

var (
	_ Store    = (*Memory)(nil)
	_ Volatile = (*Memory)(nil)
)
