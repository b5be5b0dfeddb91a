package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unique"

	"agentsociety/internal/index"
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
// A Memory keeps the raw JSON of roles and agents by reference and
// returns those very slices from Load, as [Store] allows: they are
// immutable. Everything else it copies; the roles, interface specs and
// sources of contacts it keeps once each, for as long as a contact has
// them.
//
// The zero value is not usable; call [NewMemory].
type Memory struct {
	mu sync.Mutex

	// Registries replace by id yet list in first-insertion order. A list
	// of a million agents grows in chunks, never copying the others.
	roles    index.List[memRole]
	agents   index.List[memAgent]
	requests index.List[memRequest]
	// contacts holds the registries of owners that have no agent record
	// (root, user, or an agent whose record comes later); an agent's own
	// registry is kept in its record, which saves a map entry per agent.
	contacts map[string]*index.List[memContact]

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

// memAgent is an agent's record with the agent's contact registry.
type memAgent struct {
	Agent
	contacts index.List[memContact]
}

// Key returns the agent's id, by which Memory.agents finds it.
func (a memAgent) Key() string { return a.ID }

// memRole and memRequest are records as index.List keeps them.
type (
	memRole    struct{ Role }
	memRequest struct{ Request }
)

func (r memRole) Key() string    { return r.ID }
func (r memRequest) Key() string { return r.ID }

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{
		contacts:  make(map[string]*index.List[memContact]),
		pending:   make(map[string]Message),
		artifacts: make(map[string]memArtifact),
		histories: make(map[string]*memHistory),
		states:    make(map[string]map[string]StateEntry),
	}
}

// Volatile reports true: a Memory's contents are lost with the process.
func (m *Memory) Volatile() bool { return true }

// Load returns a copy of the store's state that callers may mutate, save
// for the raw JSON of roles, agents and contacts, which is shared (see
// [Store]).
func (m *Memory) Load(ctx context.Context) (State, error) {
	if err := ctx.Err(); err != nil {
		return State{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()

	var s State
	s.Roles = list(&m.roles, func(r *memRole) Role { return r.Role })
	s.Agents = list(&m.agents, func(a *memAgent) Agent { return a.Agent })
	s.Requests = list(&m.requests, func(r *memRequest) Request { return r.Request })
	addContacts := func(owner string, l *index.List[memContact]) {
		if cs := list(l, (*memContact).contact); cs != nil {
			if s.Contacts == nil {
				s.Contacts = make(map[string][]Contact)
			}
			s.Contacts[owner] = cs
		}
	}
	for a := range m.agents.All {
		addContacts(a.ID, &a.contacts)
	}
	for owner, l := range m.contacts {
		addContacts(owner, l)
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

// Apply records c atomically, copying everything it keeps except the raw
// JSON of roles, agents and contacts (see [Store]). It refuses a role, an
// agent, a request or a contact entry whose id (or owner) is empty.
func (m *Memory) Apply(ctx context.Context, c Change) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()

	// Messages and records without an id are the only parts of a Change
	// that can be refused, so they are checked before anything is mutated.
	if err := noEmptyIDs(&c); err != nil {
		return err
	}
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
		put(&m.roles, memRole{r})
	}
	for _, a := range c.Agents {
		if i := m.agents.Find(a.ID); i >= 0 {
			m.agents.At(i).Agent = a
			continue
		}
		rec := memAgent{Agent: a}
		if l := m.contacts[a.ID]; l != nil { // contacts came first
			rec.contacts = *l
			delete(m.contacts, a.ID)
		}
		m.agents.Append(rec)
	}
	for _, e := range c.Contacts {
		m.putContact(e.Owner, newMemContact(e.Contact))
	}
	for _, r := range c.Requests {
		put(&m.requests, memRequest{r})
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
	m.remove(&c.Remove)
	return nil
}

// noEmptyIDs refuses a change with a record whose id is empty: Memory's
// lists find records by id, and a removed record's id is empty.
func noEmptyIDs(c *Change) error {
	for _, r := range c.Roles {
		if r.ID == "" {
			return errors.New("store: a role with no id")
		}
	}
	for _, a := range c.Agents {
		if a.ID == "" {
			return errors.New("store: an agent with no id")
		}
	}
	for _, r := range c.Requests {
		if r.ID == "" {
			return errors.New("store: a request with no id")
		}
	}
	for _, e := range c.Contacts {
		if e.Owner == "" || e.Contact.ID == "" {
			return fmt.Errorf("store: a contact entry with no owner or no id (%q, %q)", e.Owner, e.Contact.ID)
		}
	}
	return nil
}

// remove removes what r names, after the rest of a change.
func (m *Memory) remove(r *Removal) {
	for _, k := range r.Contacts {
		if l := m.registry(k.Owner); l != nil {
			l.Delete(k.ID)
		}
	}
	for _, id := range r.Agents {
		m.agents.Delete(id)
		delete(m.contacts, id)
		delete(m.histories, id)
	}
	for _, id := range r.Roles {
		m.roles.Delete(id)
	}
	for _, id := range r.Requests {
		m.requests.Delete(id)
	}
}

// putContact adds c to owner's registry, replacing in place an entry with
// the same contact id so the registry keeps the order contacts were added.
func (m *Memory) putContact(owner string, c memContact) {
	l := m.registry(owner)
	if l == nil {
		l = new(index.List[memContact])
		m.contacts[owner] = l
	}
	put(l, c)
}

// registry returns owner's registry, or nil if it has none.
func (m *Memory) registry(owner string) *index.List[memContact] {
	if i := m.agents.Find(owner); i >= 0 {
		return &m.agents.At(i).contacts
	}
	return m.contacts[owner]
}

// put replaces the record in l with v's key, or appends v.
func put[T index.Keyed](l *index.List[T], v T) {
	if i := l.Find(v.Key()); i >= 0 {
		*l.At(i) = v
		return
	}
	l.Append(v)
}

// list returns l's records in order, as out makes each; nil if none.
func list[T index.Keyed, U any](l *index.List[T], out func(*T) U) []U {
	if l.Len() == 0 {
		return nil
	}
	s := make([]U, 0, l.Len())
	for r := range l.All {
		s = append(s, out(r))
	}
	return s
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

// memContact is a Contact as Memory keeps it. A society of many idle
// agents holds two per agent, so what many entries have in common is
// shared, the fields most entries leave empty live behind one pointer, and
// the time is Unix nanoseconds: 40 bytes, not 128.
type memContact struct {
	id      string
	kind    unique.Handle[memKind]
	more    *memContactMore // nil unless one of its fields is set
	addedAt int64           // Unix nanoseconds, or farTime
}

// memKind is the contact's role and interface spec and the entry's
// source, held once for all the entries that have them, and only while
// one does.
type memKind struct {
	role, source, spec string
}

type memContactMore struct {
	introducedBy, note string
	addedAt            time.Time // when memContact.addedAt is farTime
}

// farTime marks an AddedAt that Unix nanoseconds cannot hold (the zero
// time, years before 1678 or after 2261): it is kept in memContactMore.
const farTime = math.MinInt64

func newMemContact(c Contact) memContact {
	mc := memContact{id: c.ID, addedAt: farTime}
	mc.kind = unique.Make(memKind{role: c.Role, source: c.Source, spec: string(c.InterfaceSpec)})
	far := c.AddedAt.Year() < 1678 || c.AddedAt.Year() > 2261
	if !far {
		mc.addedAt = c.AddedAt.UnixNano()
	}
	if far || c.IntroducedBy != "" || c.Note != "" {
		mc.more = &memContactMore{introducedBy: c.IntroducedBy, note: c.Note}
		if far {
			mc.more.addedAt = c.AddedAt
		}
	}
	return mc
}

// Key returns the contact's id, by which its owner's registry finds it.
func (c memContact) Key() string { return c.id }

// contact returns c as a record.
func (c *memContact) contact() Contact {
	k := c.kind.Value()
	out := Contact{ID: c.id, Role: k.role, Source: k.source}
	if k.spec != "" {
		out.InterfaceSpec = json.RawMessage(k.spec)
	}
	if c.addedAt != farTime {
		out.AddedAt = time.Unix(0, c.addedAt)
	}
	if c.more != nil {
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
